"""The ``export-check`` commands besides ``check`` and ``merge``: ``golden record|verify|approve``,
``history`` and ``cache info|prune|clear``, each from its parsed command line to what it prints and
its exit code (:data:`EXIT_PASS`, :data:`EXIT_FAIL`; ``export_check.cli`` dispatches to them and
re-exports the exit codes). Their parameters come through the same options table and settings
overlay as ``check``'s. Imports nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .cli_reports import refuse_writing_over
from .errors import UsageError
from .options import DEFAULT_GOLDEN, from_namespace
from .settings import golden_params, settings_files, settings_ignored, settings_line

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def cmd_history(args: argparse.Namespace) -> int:
    from .history import load, render_json, render_trend

    if args.last < 0:
        raise UsageError(f"--last must be >= 0, got {args.last}")
    if args.html is not None and args.html.is_dir():
        raise UsageError(f"{args.html}: is a directory; --html takes a file path")
    refuse_writing_over({"--html": args.html}, (args.history_file,), "the history file this command reads")
    runs = load(args.history_file)
    print(render_json(runs, args.last) if args.json else render_trend(runs, args.last, args.artifact), end="\n" if not args.json else "")
    if args.html is not None:
        from .report import trend

        trend.write(runs, args.html, args.last, args.artifact)
    return EXIT_PASS


def cmd_cache(args: argparse.Namespace) -> int:
    """``export-check cache info|prune|clear``: the cache folder and its limit from the flags, else the
    settings of the current directory, else the defaults."""
    if args.cache_command is None:
        raise UsageError("export-check cache: choose info, prune or clear (see export-check cache --help)")
    try:
        return _cache_command(args)
    except OSError as exc:
        doing = "read" if args.cache_command == "info" else args.cache_command
        raise UsageError(f"{exc.filename or 'the cache'}: cannot {doing} the cache ({exc.strerror or exc}); "
                         "check its permissions, or pass another --cache-dir") from None


def _cache_command(args: argparse.Namespace) -> int:
    from .cache import prune as cache
    from .config import check_cache_gb, default_cache_dir
    from .option_values import coerce
    from .options import OPTION
    from .settings import find_settings

    settings = find_settings()
    root = args.cache_dir or settings.get("cache_dir") or default_cache_dir()
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root}: is not a folder; pass the artifact cache's folder with --cache-dir")
    configured = settings.get("cache_max_size", OPTION["cache-max-size"].default)
    if args.cache_command == "info":
        found = cache.usage(root)
        bound = cache.parse_gb(configured)
        print(f"cache: {root}{'' if root.exists() else ' (not made yet)'}")
        print(f"entries: {len(found.entries)}")
        print(f"size: {cache.shown_size(found.size)} ({found.size} bytes)")
        print(f"limit: {'none (cache-max-size = 0)' if bound is None else cache.shown_size(bound)}")
        if found.entries:
            print(f"least recently used: {_when(found.entries[0].last_used)}; most recently: {_when(found.entries[-1].last_used)}")
        _runtime_envs_info(root)
        print(settings_line(settings_files(settings)))
        return EXIT_PASS
    if args.cache_command == "clear":
        limit: int | None = 0
    else:
        gb = configured if args.max_size is None else check_cache_gb(coerce(args.max_size, "float", None, "--max-size"), "--max-size")
        limit = cache.parse_gb(gb)
    pruned = cache.prune(root, limit, wait=60.0)
    if pruned is None:
        raise UsageError(f"{root}: another export-check kept evicting from the cache for 60 s; try again when it is done")
    _prune_runtime_envs(root, limit)
    print(f"removed {pruned.removed} entries ({cache.shown_size(pruned.freed)}) from {root}; it holds {len(pruned.left.entries)} "
          f"entries, {cache.shown_size(pruned.left.size)}" + ("" if limit is None else f" (limit {cache.shown_size(limit)})"))
    if limit is None:
        print("no limit (cache-max-size = 0): nothing to prune; pass --max-size GB")
    if pruned.in_use:
        print(f"{pruned.in_use} entries are in use by a running check and were kept")
    return EXIT_PASS


def _runtime_envs_info(root: Any) -> None:
    from .cache.prune import shown_size
    from .runtime_envs import env_usage

    envs = env_usage(root)
    print(f"runtime environments (bisect): {len(envs)}, {shown_size(sum(e.size for e in envs))} (files hard-linked into uv's cache counted)")


def _prune_runtime_envs(root: Any, limit: int | None) -> None:
    """``bisect``'s environments held under the same limit as the artifacts, least recently used first."""
    from .cache.prune import shown_size
    from .runtime_envs import prune_envs

    removed, freed, in_use = prune_envs(root, limit)
    if removed or in_use:
        print(f"removed {removed} runtime environments ({shown_size(freed)})" + (f"; {in_use} in use by a bisect were kept" if in_use else ""))


def add_bisect(sub: Any) -> None:
    """The ``bisect`` subcommand's parser (its options: the table's rows for ``bisect``)."""
    from .options import BISECT, add_arguments

    add_arguments(sub.add_parser(BISECT, help="replay a bundle over a runtime's releases, each in a cached environment of its own, "
                                 "and name the first release that judges it differently"), BISECT)


def cmd_bisect(args: argparse.Namespace) -> int:
    """``export-check bisect BUNDLE --runtime NAME [--from V --to V] [--all] | --newest``: the views, then exit 0
    (a bisection is an answer, whatever it finds); with ``--newest`` exit 1 when upgrading changes a verdict."""
    from .bisect import bundle_runtimes, run_bisect, run_newest, verdict_changed
    from .bundle import open_bundle
    from .config import default_cache_dir
    from .report import bisect_view
    from .runtime_envs import find_uv, prune_envs
    from .settings import find_settings

    if args.bundle_file is None:
        raise UsageError("bisect: name the bundle to replay (written by `export-check check --bundle PATH`)")
    if not args.newest and args.runtime is None:
        raise UsageError("bisect: choose the runtime whose releases to replay: --runtime onnxruntime|openvino|ai-edge-litert (or --newest)")
    if args.newest and (args.all_releases or args.from_release or args.to_release):
        raise UsageError("bisect --newest replays the newest release only: drop --all, --from and --to")
    if not (0 <= args.max_mae_change < 1e9):
        raise UsageError(f"--max-mae-change must be a share >= 0, got {args.max_mae_change}")
    refuse_writing_over({"--json": args.json, "--html": args.html}, (args.bundle_file,), "the bundle this bisect reads")
    bundle = open_bundle(args.bundle_file)  # a bundle that is not one, or sealed under another key: one line, before any install
    manifest = bundle.manifest
    bundle.close()
    find_uv()
    settings = find_settings()
    root = args.cache_dir or settings.get("cache_dir") or default_cache_dir()
    progress = (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    if args.newest:
        searches = run_newest(args.bundle_file, manifest, root, args.runtime, args.max_mae_change, progress)
    else:
        if args.runtime not in bundle_runtimes(manifest):
            raise UsageError(f"{args.bundle_file}: holds no row the {args.runtime} runtime replays; bisect a runtime the bundle has a row of")
        searches = [run_bisect(args.bundle_file, args.runtime, root, args.from_release, args.to_release, args.all_releases,
                               args.max_mae_change, progress)]
    print(bisect_view.render_text(searches), end="")
    bisect_view.write(searches, args.json, args.html)
    from .cache.prune import parse_gb
    from .options import OPTION

    prune_envs(root, parse_gb(float(settings.get("cache_max_size", OPTION["cache-max-size"].default))))
    newest = [(s.results["build"], s.results[s.releases[0]]) for s in searches if s.mode == "newest"]
    # a newest release that cannot be judged here fails the guard too: nothing says upgrading is safe
    return EXIT_FAIL if any(not new.tested or verdict_changed(build, new) for build, new in newest) else EXIT_PASS


def _when(timestamp: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def _golden_params(args: argparse.Namespace) -> Any:
    """``golden record``/``approve``'s parameters: their flags over the settings over the defaults."""
    command = f"golden {args.golden_command}"
    return golden_params(command, from_namespace(command, args))


def cmd_golden(args: argparse.Namespace) -> int:
    from .golden import lifecycle

    if args.golden_command == "verify":
        golden_dir = args.golden_dir
        if golden_dir is None:
            from .settings import find_settings

            # no checkpoint here: the golden folder named by the settings of the current directory
            found = find_settings()
            golden_dir = found.get("golden", DEFAULT_GOLDEN)
        from .decode import commands as generative  # a generative golden set (issue 45)

        intact, lines = generative.verify(golden_dir) if generative.goldenset.is_generative(golden_dir) else lifecycle.verify(golden_dir)
        if args.golden_dir is None:  # the golden folder came from the settings (or their absence): say which
            print(settings_line(settings_files(found)))
        print("\n".join(lines))
        return EXIT_PASS if intact else EXIT_FAIL
    if args.golden_command is None:
        raise UsageError("export-check golden: choose record, verify or approve (see export-check golden --help)")
    params = _golden_params(args)
    common = params.common
    golden_dir = common["golden_dir"]
    from .decode.commands import golden_command  # prompts, or a generative golden set (issue 45)

    code = golden_command(args.golden_command, common, params.inputs, getattr(args, "force", False), getattr(args, "dry_run", False))
    if code is not None:
        return code
    if args.golden_command == "record":
        from .golden.preprocess import preprocess_from_args

        preprocess = preprocess_from_args(args.size, args.resize, args.mode, args.mean, args.std, params.settings.get("preprocess"))
        inputs = params.inputs
        if inputs is None:
            raise UsageError("no inputs given: pass --inputs DIR (a folder of images or .npy files), or set inputs in [tool.export-check]")
        notes: list[str] = []
        recorded = lifecycle.record_golden(inputs_dir=inputs, preprocess=preprocess, force=args.force,
                                           signature_settings=params.signature, calibration=args.calibration_samples, notes=notes, **common)
        _print_settings_and_notes(params.settings, notes)
        if recorded.version == 1:
            print(f"recorded {len(recorded)} inputs and their reference logits {recorded.reference_shape} into {golden_dir}")
        else:
            print(f"recorded {len(recorded)} inputs and their reference {lifecycle.describe_outputs(recorded)} into {golden_dir}")
            print(lifecycle.describe_kinds(recorded, params.signature))
        from .gates import Thresholds, per_sample_agreement, small_set_notes
        from .options import OPTIONS

        gates = Thresholds.from_options({o.gate.name: params.settings.get(o.python) for o in OPTIONS if o.gate is not None})
        for note in small_set_notes(gates, len(recorded), per_sample_agreement(recorded.signature)):
            print(f"note: {note}")
        return EXIT_PASS
    notes = []
    limit = args.max_accuracy_drop if args.max_accuracy_drop is not None else params.settings.get("max_accuracy_drop")
    if limit is not None:
        limit = check_points(limit, "max-accuracy-drop")
    try:
        diff, written = lifecycle.approve_golden(dry_run=args.dry_run, signature_settings=params.signature,
                                                 calibration=args.calibration_samples, notes=notes,
                                                 max_accuracy_drop=None if args.accept_accuracy_drop else limit, **common)
    except lifecycle.AccuracyDropRefused as refused:  # the diff first, then the one line (exit 1)
        _print_settings_and_notes(params.settings, notes)
        print("\n".join(refused.diff.lines()))
        sys.stdout.flush()
        raise
    held = "outputs" if isinstance(diff, lifecycle.OutputsDiff) else "logits"
    _print_settings_and_notes(params.settings, notes)
    print("\n".join(diff.lines()))
    if args.dry_run:
        print("dry run: golden set unchanged")
    elif written:
        print(f"approved: {golden_dir} now holds the {held} of {args.checkpoint}")
    else:
        print(f"nothing to approve: {golden_dir} already holds exactly the {held} of {args.checkpoint}")
    sys.stdout.flush()
    return EXIT_PASS


def check_points(value: Any, where: str) -> float:
    """A number of percentage points: finite, at least 0."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UsageError(f"{where} must be a finite number of points >= 0, got {value!r}")
    return float(value)


def _print_settings_and_notes(settings: dict[str, Any], notes: list[str]) -> None:
    """What ``golden record`` and ``approve`` print first: the settings file they read, then their notes."""
    print(settings_line(settings_files(settings)))
    for note in (*settings_ignored(settings), *notes):
        print(f"note: {note}")
