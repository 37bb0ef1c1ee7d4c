"""``export-check``: argv -> options -> command -> report views -> exit code.

Every option's flag, help, default and settings key is a row of ``exporter/options.py``; this module
builds the parser from that table and hands the parsed flags to the same overlay the pytest plugin uses.

Imports nothing heavy at module level, so ``--help`` and argument errors return at once.
Exit codes: 0 every row passed; 1 any drift or artifact error; 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__
from .errors import ExportCheckError, UsageError, error_message, one_line
from .options import CACHE_CLEAR, CACHE_INFO, CACHE_PRUNE, CHECK, DEFAULT_GOLDEN, DEFAULT_OUT, HISTORY, MERGE, add_arguments, from_namespace
from .paths import check_outputs, escaped
from .settings import check_config, golden_params, settings_files, settings_line

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
SUBCOMMANDS = ("check", "golden", "history", "merge", "cache")
RAY_LOCAL = "local"  # `--ray` without an address: a local cluster


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other user error
        command = self.prog.removeprefix("export-check").strip()  # main() prints the "export-check: error:" prefix
        raise UsageError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


def _kinds_help() -> str:
    from .artifacts import KINDS

    return "\n".join(f"  {k.name:<20} [{k.family}] {k.description}" for k in KINDS)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="export-check",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Export a trained PyTorch model to every deployable artifact, reload each from disk, "
        "replay the golden set through it and gate its logits.",
        epilog="exit codes: 0 all rows pass, 1 any drift or artifact error, 2 bad usage or bad input\n\n"
        "artifact kinds:\n" + _kinds_help() + "\n\n`export-check CHECKPOINT...` is short for `export-check check CHECKPOINT...`; "
        "several checkpoints (or --fleet FILE) give one report over all of them.",
    )
    parser.add_argument("--version", action="version", version=f"export-check {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{check,golden,history,merge,cache}", parser_class=_Parser)

    check = sub.add_parser("check", help="export, replay and gate (the default command)",
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog="artifact kinds:\n" + _kinds_help())
    add_arguments(check, CHECK)
    for action in check._actions:
        if action.dest == "checkpoint":  # check takes several checkpoints (or none, with --fleet)
            action.nargs, action.default = "*", []
        elif action.dest == "ray":  # --ray [ADDRESS]: alone, a local cluster
            action.nargs, action.const = "?", RAY_LOCAL

    golden = sub.add_parser("golden", help="record, verify or approve a golden set")
    gsub = golden.add_subparsers(dest="golden_command", metavar="{record,verify,approve}", parser_class=_Parser)
    for name, help_text in (
        ("record", "write a new golden set from a folder of images or .npy tensors"),
        ("verify", "check a golden set's integrity and say exactly what changed"),
        ("approve", "adopt a new checkpoint's logits as the reference, showing the diff first"),
    ):
        add_arguments(gsub.add_parser(name, help=help_text), f"golden {name}")
    merge = sub.add_parser("merge", help="join the JSON reports of several runs (CI shards) into one report, with their verdicts")
    add_arguments(merge, MERGE)
    history = sub.add_parser("history", help="show MAE and latency per artifact across the runs in a --history file")
    add_arguments(history, HISTORY)
    cache = sub.add_parser("cache", help="show, prune or clear the artifact cache")
    csub = cache.add_subparsers(dest="cache_command", metavar="{info,prune,clear}", parser_class=_Parser)
    for command, help_text in ((CACHE_INFO, "where the cache is, its entries, their size and the limit"),
                               (CACHE_PRUNE, "evict least recently used entries until the cache is under its limit"),
                               (CACHE_CLEAR, "remove every entry (entries a running check is using stay)")):
        add_arguments(csub.add_parser(command.split()[1], help=help_text), command)
    return parser


def _normalise(argv: list[str]) -> list[str]:
    # `export-check model.pth` means `export-check check model.pth`.
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version"):
        return ["check", *argv]
    return argv


def build_config(args: argparse.Namespace) -> Any:
    """The RunConfig of a parsed ``check`` command line of one checkpoint: its flags over the settings over the defaults."""
    if isinstance(args.checkpoint, list) and len(args.checkpoint) == 1:
        args.checkpoint = args.checkpoint[0]
    return check_config(from_namespace(CHECK, args))[0]


def _progress(quiet: bool):
    from .progress import ProgressLine

    return ProgressLine(sys.stderr, quiet=quiet)


def _several(args: argparse.Namespace) -> bool:
    """Whether this check is a fleet run: several checkpoints, a fleet file, a shard or a cluster."""
    if not args.checkpoint and args.fleet is None:
        raise UsageError("export-check check: the following arguments are required: checkpoint (one or more), or --fleet FILE "
                         "(see export-check check --help)")
    if args.checkpoint and args.fleet is not None:
        raise UsageError(f"pass checkpoints or --fleet {args.fleet}, not both")
    several = len(args.checkpoint) != 1 or args.fleet is not None or args.shard is not None or args.ray is not None
    if not several:
        if args.workers is not None:
            raise UsageError("--workers is for several models; one model's builds use --jobs")
        args.checkpoint = args.checkpoint[0]
    return several


def _cmd_fleet(args: argparse.Namespace) -> int:
    from .fleet import spec
    from .fleet.run import run_fleet
    from .report import fleet as views

    _refuse_folders(args)
    for flag in ("html", "history"):
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag} takes one model's report; with several models write --json, --junit or --markdown")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.ray is not None and args.ray != RAY_LOCAL and Path(args.ray).suffix in (".pth", ".pt", ".safetensors", ".toml"):
        raise UsageError(f"--ray took {args.ray} as the cluster's address; write --ray=ADDRESS, or put --ray after the checkpoints")
    shard = None if args.shard is None else spec.parse_shard(args.shard)
    fleet = spec.parse_fleet(args.fleet) if args.fleet is not None else spec.from_checkpoints(args.checkpoint)
    common = from_namespace(CHECK, args)
    for name in ("checkpoint", "fleet", "shard", "workers", "ray", "json", "junit", "markdown", "markdown_append", "html", "history", "quiet",
                 "color", "verbose"):
        common.pop(name, None)

    def progress(result: Any, done: int, total: int) -> None:
        if not args.quiet:
            print(f"[{done}/{total}] {result.name}: {result.status.upper()} ({result.seconds:.1f} s)", file=sys.stderr, flush=True)

    report = run_fleet(fleet, common, shard=shard, workers=args.workers, ray_address=args.ray, on_result=progress,
                       reports={f"--{flag}": getattr(args, flag) for flag in ("json", "junit", "markdown")})
    print(views.render_text(report), file=_table_stream(args))
    for model in report.models:
        if model.traceback:
            print(f"export-check: internal error checking {model.name} (a bug; please report it):\n{model.traceback}", file=sys.stderr)
    _written(args).extend(("--json", "--junit", "--markdown"))
    for note in views.write(report, args.json, args.junit, args.markdown, markdown_append=_markdown_append(args, {})):
        print(note, file=sys.stderr)
    return report.exit_code


def _refuse_writing_over(outputs: dict[str, Any], read: Any, what: str) -> None:
    """One line when an output path (by flag) is a file this command reads (``what`` names it)."""
    inputs = {os.path.realpath(p) for p in read}
    for flag, path in outputs.items():
        if path is not None and os.path.realpath(path) in inputs:
            raise UsageError(f"{flag} {path}: is {what}; writing there would overwrite it: choose another path")


def _print_settings_and_notes(settings: dict[str, Any], notes: list[str]) -> None:
    """What ``golden record`` and ``approve`` print first: the settings file they read, then their notes."""
    print(settings_line(settings_files(settings)))
    for note in notes:
        print(f"note: {note}")


def _cmd_merge(args: argparse.Namespace) -> int:
    from .fleet.merge import merge
    from .report import fleet as views

    _refuse_folders(args)
    _refuse_writing_over({f"--{flag}": getattr(args, flag, None) for flag in ("json", "junit", "markdown")}, args.reports,
                         "a report this merge reads")
    report = merge(args.reports)
    print(views.render_text(report), file=_table_stream(args))
    _written(args).extend(("--json", "--junit", "--markdown"))
    for note in views.write(report, args.json, args.junit, args.markdown, markdown_append=_markdown_append(args, {})):
        print(note, file=sys.stderr)
    return report.exit_code


def _refuse_folders(args: argparse.Namespace) -> None:
    for flag in ("json", "junit", "markdown", "html", "history"):
        path = getattr(args, flag, None)
        if path is not None and path.is_dir():
            raise UsageError(f"{path}: is a directory; --{flag} takes a file path")


REPORT_FLAGS = ("json", "junit", "markdown", "html")


def _cmd_check(args: argparse.Namespace) -> int:
    if _several(args):
        return _cmd_fleet(args)
    config, settings = check_config(from_namespace(CHECK, args))
    args.checked_config = config  # what the error reports of a run that stops later are checked against
    check_outputs(config, {f"--{flag}": getattr(args, flag) for flag in (*REPORT_FLAGS, "history")})
    _refuse_folders(args)
    from .pipeline import run_check
    from .report import text

    progress = _progress(args.quiet)
    try:
        report = escaped(run_check(config, progress=progress))  # a name that is not UTF-8 is shown escaped in every view
    finally:
        progress.close()
    stream = _table_stream(args)
    print(text.render(report, text.style_for(stream, args.color, args.verbose)), file=stream)
    _write_views(report, args, _markdown_append(args, settings))
    return report.exit_code


def _write_views(report: Any, args: argparse.Namespace, markdown_append: bool = False) -> None:
    """Every view of the same report: JSON, JUnit, Markdown (replaced, or appended), HTML, the history line."""
    from .report import html, json_report, junit, markdown, write_text_atomic
    from .report.seal import sealed

    for flag, render in (("json", json_report.render), ("junit", junit.render), ("markdown", markdown.render), ("html", html.render)):
        path = getattr(args, flag)
        if path is not None:
            _written(args).append(f"--{flag}")  # a failure from here on never overwrites it with an error report
            text = render(report)
            if flag == "json":  # sealed with the cache key: `export-check merge` takes only what export-check wrote
                config = getattr(args, "checked_config", None)
                text, note = sealed(text, None if config is None else config.cache_dir)
                if note is not None:
                    print(note, file=sys.stderr)
            write_text_atomic(path, text, append=markdown_append and flag == "markdown")
    if args.history is not None:
        from .history import append

        append(report, args.history)


def _written(args: argparse.Namespace) -> list[str]:
    """The report flags this run has written (or begun to write) its report to."""
    if not hasattr(args, "written_reports"):
        args.written_reports = []
    written: list[str] = args.written_reports
    return written


def _table_stream(args: argparse.Namespace) -> Any:
    """stdout for the table, unless a report goes there (``--json -``): then stderr, so stdout holds the report alone."""
    from .report.destination import is_stdout

    to_stdout = any(getattr(args, flag, None) is not None and is_stdout(getattr(args, flag)) for flag in REPORT_FLAGS)
    return sys.stderr if to_stdout else sys.stdout


def _markdown_append(args: argparse.Namespace, settings: dict[str, Any]) -> bool:
    """Whether ``--markdown`` appends: ``--markdown-append``, the settings key, or the file is $GITHUB_STEP_SUMMARY
    (GitHub's job summary, which every step adds to)."""
    if getattr(args, "markdown_append", False) or settings.get("markdown_append"):
        return True
    summary, path = os.environ.get("GITHUB_STEP_SUMMARY"), getattr(args, "markdown", None)
    return summary is not None and summary != "" and path is not None and os.path.realpath(summary) == os.path.realpath(path)


def _error_reports(args: argparse.Namespace | None, exc: ExportCheckError) -> list[str]:
    """After a user error (exit 2), every report the command line asked for, carrying the error; the
    lines to print for the ones that could not be written."""
    if args is None or getattr(args, "command", None) not in ("check", "merge"):
        return []
    done = set(_written(args))
    message = error_message(exc)
    # not over a report this run wrote, nor to the report the error is about ("--html takes one model's
    # report", "--json PATH: is the checkpoint", "PATH: cannot write the report")
    given = {f"--{flag}": getattr(args, flag, None) for flag in REPORT_FLAGS}
    reports = {flag: path for flag, path in given.items() if path is not None
               and flag not in done and not message.startswith((f"{flag} ", f"{path}: "))}
    if not any(reports.values()):
        return []
    # only now: the writers import the report model (and numpy); a usage error that asked for no report stays light
    from .paths import error_report_paths
    from .report import failure, write_text_atomic

    raw = getattr(args, "checkpoint", None) or []
    checkpoints = tuple(Path(c) for c in ([raw] if isinstance(raw, (str, Path)) else raw))
    config = getattr(args, "checked_config", None)
    golden = config.golden if config is not None else getattr(args, "golden", None) or DEFAULT_GOLDEN
    arch = config.arch if config is not None else getattr(args, "arch", None) or ""
    out = config.out_dir if config is not None else getattr(args, "out", None) or DEFAULT_OUT
    read = tuple(p for p in (getattr(args, "config", None), getattr(args, "fleet", None)) if isinstance(p, (str, Path)))
    read += config.settings_files if config is not None else ()
    safe = {flag: path for flag, path in error_report_paths(given, checkpoints, golden, arch, out, read).items() if flag in reports}
    if getattr(args, "scanned", False):  # a command line the parser refused: only where a report may plainly go
        append = _markdown_append(args, {})
        safe = {flag: path for flag, path in safe.items() if _fresh_or_report(flag, path, append and flag == "--markdown")}
    stopped = failure.Stopped(command=args.command, message=message, kind=type(exc).__name__,
                              checkpoints=tuple(str(c) for c in checkpoints),
                              settings_files=None if config is None else config.settings_files)
    notes = []
    for flag, path in safe.items():
        try:
            write_text_atomic(path, failure.RENDER[flag[2:]](stopped), append=flag == "--markdown" and _markdown_append(args, {}))
        except ExportCheckError as error:
            notes.append(f"export-check: the error report was not written either: {error}")
    return notes


def _cmd_history(args: argparse.Namespace) -> int:
    from .history import load, render_json, render_trend

    if args.last < 0:
        raise UsageError(f"--last must be >= 0, got {args.last}")
    if args.html is not None and args.html.is_dir():
        raise UsageError(f"{args.html}: is a directory; --html takes a file path")
    _refuse_writing_over({"--html": args.html}, (args.history_file,), "the history file this command reads")
    runs = load(args.history_file)
    print(render_json(runs, args.last) if args.json else render_trend(runs, args.last, args.artifact), end="\n" if not args.json else "")
    if args.html is not None:
        from .report import trend

        trend.write(runs, args.html, args.last, args.artifact)
    return EXIT_PASS


def _cmd_cache(args: argparse.Namespace) -> int:
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
    print(f"removed {pruned.removed} entries ({cache.shown_size(pruned.freed)}) from {root}; it holds {len(pruned.left.entries)} "
          f"entries, {cache.shown_size(pruned.left.size)}" + ("" if limit is None else f" (limit {cache.shown_size(limit)})"))
    if limit is None:
        print("no limit (cache-max-size = 0): nothing to prune; pass --max-size GB")
    if pruned.in_use:
        print(f"{pruned.in_use} entries are in use by a running check and were kept")
    return EXIT_PASS


def _when(timestamp: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def _golden_params(args: argparse.Namespace) -> Any:
    """``golden record``/``approve``'s parameters: their flags over the settings over the defaults."""
    command = f"golden {args.golden_command}"
    return golden_params(command, from_namespace(command, args))


def _cmd_golden(args: argparse.Namespace) -> int:
    from .golden import lifecycle

    if args.golden_command == "verify":
        golden_dir = args.golden_dir
        if golden_dir is None:
            from .settings import find_settings

            # no checkpoint here: the golden folder named by the settings of the current directory
            found = find_settings()
            golden_dir = found.get("golden", DEFAULT_GOLDEN)
        intact, lines = lifecycle.verify(golden_dir)
        if args.golden_dir is None:  # the golden folder came from the settings (or their absence): say which
            print(settings_line(settings_files(found)))
        print("\n".join(lines))
        return EXIT_PASS if intact else EXIT_FAIL
    if args.golden_command is None:
        raise UsageError("export-check golden: choose record, verify or approve (see export-check golden --help)")
    params = _golden_params(args)
    common = params.common
    golden_dir = common["golden_dir"]
    if args.golden_command == "record":
        from .golden.inputs import preprocess_from_args

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
        return EXIT_PASS
    notes = []
    diff, written = lifecycle.approve_golden(dry_run=args.dry_run, signature_settings=params.signature,
                                             calibration=args.calibration_samples, notes=notes, **common)
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


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(_normalise(args_list))
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        if args.command == "check":
            return _cmd_check(args)
        if args.command == "history":
            return _cmd_history(args)
        if args.command == "merge":
            return _cmd_merge(args)
        if args.command == "cache":
            return _cmd_cache(args)
        return _cmd_golden(args)
    except ExportCheckError as exc:
        print(error_line(exc), file=sys.stderr)
        for note in _error_reports(args if args is not None else _scanned(args_list), exc):
            print(note, file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        # a path the up-front checks (exporter/paths.py) did not see, e.g. one built from a long input name
        name = one_line(os.fsdecode(exc.filename or ""))
        print(f"export-check: error: {name[:120] + '...' if len(name) > 120 else name}: a file name is too long for the filesystem "
              "(at most 255 bytes per path component); shorten it", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return _interrupted()


_SCANNED = ("json", "junit", "markdown", "html", "golden", "arch", "out")


def _scanned(argv: list[str]) -> argparse.Namespace | None:
    """The report paths of a ``check``/``merge`` command line the parser refused (a mistyped flag), read
    token by token: ``--json PATH`` or ``--json=PATH``. Every other word is protected as if it were a
    checkpoint."""
    argv = _normalise(list(argv))
    if not argv or argv[0] not in ("check", "merge"):
        return None
    found: dict[str, Any] = dict.fromkeys(_SCANNED)
    words = []
    tokens = iter(argv[1:])
    for token in tokens:
        name, eq, value = token.partition("=")
        flag = name.removeprefix("--")
        if name.startswith("--") and flag in found:
            found[flag] = value if eq else next(tokens, None)
        elif not token.startswith("-"):
            words.append(Path(token))
    reports = {flag: Path(found[flag]) if found[flag] else None for flag in REPORT_FLAGS}
    return argparse.Namespace(command=argv[0], checkpoint=words, golden=Path(found["golden"]) if found["golden"] else None,
                              arch=found["arch"], out=Path(found["out"]) if found["out"] else None,
                              markdown_append="--markdown-append" in argv, scanned=True, **reports)


_SUFFIXES = {"--json": (".json",), "--junit": (".xml",), "--markdown": (".md", ".markdown"), "--html": (".html", ".htm")}


def _fresh_or_report(flag: str, path: Path, append: bool) -> bool:
    """Whether an error report may go to ``path`` of a refused command line: standard output, a FIFO or
    device, a new file named like the report (``r.json``: a word after a mistyped flag is no report
    path), a text file appended to, or one holding an earlier export-check report."""
    from .report.destination import resolve

    if str(path).startswith("-") and str(path) != "-":
        return False
    try:
        where = resolve(path)
        if where.fd is not None or where.through:
            return True
        if where.path is None or not where.path.exists():
            return Path(path).suffix.lower() in _SUFFIXES[flag]
        with open(where.path, "rb") as fh:
            head = fh.read(4096)
        # appended to: a text file (a step summary has no suffix), never a binary one such as the checkpoint
        # a refused command line named after --markdown
        return b"\0" not in head if append else b"export-check" in head
    except OSError:
        return False


def error_line(exc: BaseException) -> str:
    """``export-check: error: MESSAGE``, with the prefix once however the message began."""
    return f"export-check: error: {error_message(exc)}"


def _interrupted() -> int:
    """Ctrl-C: stop the build server and the build under way, say so in one line, exit 130."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the cleanup with a traceback
    isolation = sys.modules.get("export_check.builder.isolation")
    if isolation is not None:
        with contextlib.suppress(Exception):
            isolation.SERVICE.stop()
    with contextlib.suppress(OSError, ValueError):
        print("export-check: interrupted", file=sys.stderr)
    return 130


def _installed_libraries_first() -> None:
    """``python -m export_check`` puts the current directory first on ``sys.path``, ahead of the installed
    libraries, so an ``onnxruntime.py`` or ``torch.py`` there would run instead of the real one. Move
    it to the end: the user's model modules there still import (exporter/checkpoint.py)."""
    if sys.path and not sys.flags.safe_path and sys.path[0] in ("", os.getcwd()):
        sys.path.append(sys.path.pop(0))


def entry() -> None:
    try:
        _installed_libraries_first()
        for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 is printed escaped, never a traceback
            with contextlib.suppress(AttributeError, ValueError):
                stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        code = main()
    except KeyboardInterrupt:  # Ctrl-C outside main's own handler: while starting, or while reporting
        code = _interrupted()
    try:
        _exit(code)
    except KeyboardInterrupt:
        os._exit(_interrupted())


def _exit(code: int) -> None:
    """Leave the process. After a run that loaded torch and onnxruntime, skip the interpreter's module
    teardown (measured: 0.4 s, a tenth of a small model's whole check) once the exit handlers have run
    and the streams are flushed: nothing is left for it to do but free memory the OS frees anyway.

    An interrupted run (130) always leaves this way: a Ctrl-C landing at some moments of the start-up
    imports leaves CPython's ``_Py_UnhandledKeyboardInterrupt`` flag set although the CLI caught the
    KeyboardInterrupt (measured: 1 in 6 of the runs interrupted 6-16 ms after ``export_check.settings``
    was imported), and after ``sys.exit`` the interpreter then kills itself with SIGINT: status -2,
    not 130. ``os._exit`` never reaches that check."""
    if "torch" not in sys.modules and code != 130:
        sys.exit(code)
    import atexit

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run is over: Ctrl-C now would only interrupt the exit handlers
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
