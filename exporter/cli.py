"""``export-check``: argv -> config -> pipeline -> report views -> exit code.

Imports nothing heavy at module level, so ``--help`` and argument errors return at once.
Exit codes: 0 every row passed; 1 any drift or artifact error; 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .errors import ExportCheckError, UsageError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
SUBCOMMANDS = ("check", "golden", "history")
DEFAULT_GOLDEN = Path("golden")
DEFAULT_OUT = Path("export-check-out")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _kinds_help() -> str:
    from .artifacts import KINDS

    return "\n".join(f"  {k.name:<20} [{k.family}] {k.description}" for k in KINDS)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", type=Path, help="trained state_dict (.pth/.pt/.safetensors)")
    p.add_argument("--arch", help="architecture: package.module:Factory or path/to/file.py:Factory")
    p.add_argument("--arch-kwargs", metavar="JSON", help='constructor arguments as a JSON object, e.g. \'{"num_classes": 10}\'')
    p.add_argument("--golden", type=Path, metavar="DIR", help=f"golden set directory (default: {DEFAULT_GOLDEN})")
    p.add_argument("--config", type=Path, metavar="TOML", help="settings file (default: export-check.toml beside the checkpoint, else pyproject.toml)")
    p.add_argument("--threads", type=int, help="intra-op threads for torch and onnxruntime (default: 1)")
    p.add_argument("--batch-size", type=int, help="inputs per replay batch (default: 16)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="export-check",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Export a trained PyTorch model to every deployable artifact, reload each from disk, "
        "replay the golden set through it and gate its logits.",
        epilog="exit codes: 0 all rows pass, 1 any drift or artifact error, 2 bad usage or bad input\n\n"
        "artifact kinds:\n" + _kinds_help() + "\n\n`export-check CHECKPOINT` is short for `export-check check CHECKPOINT`.",
    )
    parser.add_argument("--version", action="version", version=f"export-check {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{check,golden,history}", parser_class=_Parser)

    check = sub.add_parser("check", help="export, replay and gate (the default command)", formatter_class=argparse.RawDescriptionHelpFormatter, epilog="artifact kinds:\n" + _kinds_help())
    _add_model_args(check)
    check.add_argument("--out", type=Path, metavar="DIR", help=f"where artifacts are written (default: {DEFAULT_OUT})")
    check.add_argument("--artifacts", metavar="KINDS", help="comma-separated kinds to build (default: all)")
    from .config import GATE_OPTIONS

    for option in GATE_OPTIONS:
        check.add_argument(f"--{option.name}", type=float, metavar=option.metavar, help=option.help)
    check.add_argument("--opset", type=int, help="ONNX opset (default: 17)")
    check.add_argument("--onnx-exporter", choices=("torchscript", "dynamo"), help="torch.onnx exporter (default: torchscript; dynamo needs onnxscript)")
    check.add_argument("--json", type=Path, metavar="PATH", help="write the full report as JSON")
    check.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML, one test case per row (Jenkins, GitLab, Azure)")
    check.add_argument("--markdown", type=Path, metavar="PATH", help="write a Markdown summary, e.g. --markdown \"$GITHUB_STEP_SUMMARY\"")
    check.add_argument("--html", type=Path, metavar="PATH", help="write one self-contained HTML report with plots")
    check.add_argument("--history", type=Path, metavar="PATH", help="append this run's summary as one JSON line (see `export-check history`)")
    check.add_argument("--cache-dir", type=Path, metavar="DIR", help="artifact cache (default: $XDG_CACHE_HOME/export-check, else ~/.cache/export-check)")
    check.add_argument("--no-cache", action="store_true", help="build and replay everything; neither read nor write the artifact cache")
    check.add_argument("--jobs", type=int, choices=(1, 2), metavar="{1,2}", help="2: replay and diagnose each artifact while the next ones "
                       "build on the other core; 1: one artifact at a time (default: 2 when the process may use 2 or more cores)")
    check.add_argument("--build-timeout", type=float, metavar="SECONDS", help="kill an artifact's build still running after this long; "
                       "its row becomes an error (default: 1800; 0: no limit)")
    check.add_argument("--diagnose", action="store_true", help="also build the per-layer error tables of passing int8 rows (failing rows always get them)")

    golden = sub.add_parser("golden", help="record, verify or approve a golden set")
    gsub = golden.add_subparsers(dest="golden_command", metavar="{record,verify,approve}", parser_class=_Parser)
    record = gsub.add_parser("record", help="write a new golden set from a folder of images or .npy tensors")
    _add_model_args(record)
    record.add_argument("--inputs", type=Path, metavar="DIR", help="folder of .png/.jpg/.npy inputs, a labels.json there maps file name to label (default: inputs in [tool.export-check])")
    record.add_argument("--force", action="store_true", help="replace an existing golden set (default: refuse; use `golden approve` to adopt new logits)")
    record.add_argument("--size", metavar="HxW", help="model input size, e.g. 224 or 224x224 (images only)")
    record.add_argument("--resize", type=int, help="resize the shorter side to this before a center crop (default: resize straight to --size)")
    record.add_argument("--mode", choices=("RGB", "L"), help="colour mode the model takes (default: RGB)")
    record.add_argument("--mean", metavar="M,M,M", help="per-channel mean after scaling to [0,1] (default: 0.5 each)")
    record.add_argument("--std", metavar="S,S,S", help="per-channel std (default: 0.5 each)")
    verify = gsub.add_parser("verify", help="check a golden set's integrity and say exactly what changed")
    verify.add_argument("golden_dir", type=Path, nargs="?", default=None, metavar="DIR", help=f"golden set (default: golden in [tool.export-check] of ./pyproject.toml, else {DEFAULT_GOLDEN})")
    approve = gsub.add_parser("approve", help="adopt a new checkpoint's logits as the reference, showing the diff first")
    _add_model_args(approve)
    approve.add_argument("--dry-run", action="store_true", help="show the diff, change nothing")

    history = sub.add_parser("history", help="show MAE and latency per artifact across the runs in a --history file")
    history.add_argument("history_file", type=Path, metavar="PATH", help="the file written by check --history")
    history.add_argument("--last", type=int, default=10, metavar="N", help="show the last N runs (default: 10; 0: all)")
    history.add_argument("--artifact", metavar="NAME", help="show one row only, e.g. onnx")
    history.add_argument("--json", action="store_true", help="print the runs as JSON instead of tables")
    return parser


def _normalise(argv: list[str]) -> list[str]:
    # `export-check model.pth` means `export-check check model.pth`.
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version"):
        return ["check", *argv]
    return argv


def _arch_kwargs(text: str | None, configured: dict[str, Any] | None) -> dict[str, Any]:
    if text is None:
        return dict(configured or {})
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--arch-kwargs is not valid JSON ({exc.msg}); pass an object like '{{\"num_classes\": 10}}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"--arch-kwargs must be a JSON object, got {type(value).__name__}")
    return value


def _pick(cli: Any, settings: dict[str, Any], key: str, default: Any) -> Any:
    if cli is not None:
        return cli
    return settings.get(key, default)


def _model_settings(args: argparse.Namespace) -> dict[str, Any]:
    from .files import check_readable_file
    from .settings import find_settings

    # The checkpoint is the one thing every command needs: say first when it is not there.
    check_readable_file(args.checkpoint, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    return find_settings(args.checkpoint, args.config)


def build_config(args: argparse.Namespace) -> Any:
    from .config import BUILD_TIMEOUT, GATE_OPTIONS, RunConfig, Thresholds, default_cache_dir

    settings = _model_settings(args)
    kinds: tuple[str, ...] = ()
    if args.artifacts is not None:
        kinds = tuple(k.strip() for k in args.artifacts.split(",") if k.strip())
        if not kinds:
            raise UsageError("--artifacts is empty; list kinds separated by commas")
    else:
        kinds = tuple(settings.get("artifacts", ()))
    thresholds = Thresholds.from_options(
        {o.name: _pick(getattr(args, o.name.replace("-", "_")), settings, o.name.replace("-", "_"), None) for o in GATE_OPTIONS}
    )
    return RunConfig(
        checkpoint=args.checkpoint,
        arch=_pick(args.arch, settings, "arch", ""),
        arch_kwargs=_arch_kwargs(args.arch_kwargs, settings.get("arch_kwargs")),
        arch_root=None if args.arch else settings.get("arch_root"),
        golden=_pick(args.golden, settings, "golden", DEFAULT_GOLDEN),
        out_dir=_pick(args.out, settings, "out", DEFAULT_OUT),
        kinds=kinds,
        thresholds=thresholds,
        batch_size=_pick(args.batch_size, settings, "batch_size", 16),
        opset=_pick(args.opset, settings, "opset", 17),
        onnx_exporter=_pick(args.onnx_exporter, settings, "onnx_exporter", "torchscript"),
        threads=_pick(args.threads, settings, "threads", 1),
        cache_dir=None if args.no_cache else _pick(args.cache_dir, settings, "cache_dir", None) or default_cache_dir(),
        diagnose=args.diagnose,
        jobs=_pick(getattr(args, "jobs", None), settings, "jobs", None),
        build_timeout=_pick(args.build_timeout, settings, "build_timeout", BUILD_TIMEOUT),
    )


def _progress(quiet: bool):
    from .progress import ProgressLine

    return ProgressLine(sys.stderr, quiet=quiet)


def _cmd_check(args: argparse.Namespace) -> int:
    config = build_config(args)
    for flag in ("json", "junit", "markdown", "html", "history"):
        path = getattr(args, flag)
        if path is not None and path.is_dir():
            raise UsageError(f"{path}: is a directory; --{flag} takes a file path")
    from .pipeline import run_check
    from .report import json_report, text

    progress = _progress(args.quiet)
    try:
        report = run_check(config, progress=progress)
    finally:
        progress.close()
    print(text.render(report))
    if args.json is not None:
        json_report.write(report, args.json)
    _write_views(report, args)
    return report.exit_code


def _write_views(report: Any, args: argparse.Namespace) -> None:
    """The other views of the same report (issue 4): JUnit, Markdown, HTML, the history line."""
    from .report import html, junit, markdown

    for path, writer in ((args.junit, junit.write), (args.markdown, markdown.write), (args.html, html.write)):
        if path is not None:
            writer(report, path)
    if args.history is not None:
        from .history import append

        append(report, args.history)


def _cmd_history(args: argparse.Namespace) -> int:
    from .history import load, render_json, render_trend

    if args.last < 0:
        raise UsageError(f"--last must be >= 0, got {args.last}")
    runs = load(args.history_file)
    print(render_json(runs, args.last) if args.json else render_trend(runs, args.last, args.artifact), end="\n" if not args.json else "")
    return EXIT_PASS


def _cmd_golden(args: argparse.Namespace) -> int:
    from .golden import lifecycle

    if args.golden_command == "verify":
        golden_dir = args.golden_dir
        if golden_dir is None:
            from .settings import find_settings

            # no checkpoint here: the golden folder named by the settings of the current directory
            golden_dir = find_settings(None).get("golden", DEFAULT_GOLDEN)
        intact, lines = lifecycle.verify(golden_dir)
        print("\n".join(lines))
        return EXIT_PASS if intact else EXIT_FAIL
    if args.golden_command is None:
        raise UsageError("export-check golden: choose record, verify or approve (see export-check golden --help)")
    settings = _model_settings(args)
    arch = _pick(args.arch, settings, "arch", "")
    if not arch:
        raise UsageError("no architecture given: pass --arch module:Factory or path/to/file.py:Factory, or set arch in [tool.export-check]")
    golden_dir = _pick(args.golden, settings, "golden", DEFAULT_GOLDEN)
    common = dict(
        checkpoint=args.checkpoint,
        arch=arch,
        arch_kwargs=_arch_kwargs(args.arch_kwargs, settings.get("arch_kwargs")),
        arch_root=None if args.arch else settings.get("arch_root"),
        golden_dir=golden_dir,
        threads=_pick(args.threads, settings, "threads", 1),
        batch_size=_pick(args.batch_size, settings, "batch_size", 16),
    )
    if args.golden_command == "record":
        from .golden.inputs import preprocess_from_args

        preprocess = preprocess_from_args(args.size, args.resize, args.mode, args.mean, args.std, settings.get("preprocess"))
        inputs = _pick(args.inputs, settings, "inputs", None)
        if inputs is None:
            raise UsageError("no inputs given: pass --inputs DIR (a folder of images or .npy files), or set inputs in [tool.export-check]")
        recorded = lifecycle.record_golden(inputs_dir=inputs, preprocess=preprocess, force=args.force, **common)
        print(f"recorded {len(recorded)} inputs and their reference logits {recorded.reference_shape} into {golden_dir}")
        return EXIT_PASS
    diff, written = lifecycle.approve_golden(dry_run=args.dry_run, **common)
    print("\n".join(diff.lines()))
    if args.dry_run:
        print("dry run: golden set unchanged")
    elif written:
        print(f"approved: {golden_dir} now holds the logits of {args.checkpoint}")
    else:
        print(f"nothing to approve: {golden_dir} already holds exactly the logits of {args.checkpoint}")
    sys.stdout.flush()
    return EXIT_PASS


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(_normalise(args_list))
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        if args.command == "check":
            return _cmd_check(args)
        if args.command == "history":
            return _cmd_history(args)
        return _cmd_golden(args)
    except ExportCheckError as exc:
        print(f"export-check: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("export-check: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    _exit(main())


def _exit(code: int) -> None:
    """Leave the process. After a run that loaded torch and onnxruntime, skip the interpreter's module
    teardown (measured: 0.4 s, a tenth of a small model's whole check) once the exit handlers have run
    and the streams are flushed: nothing is left for it to do but free memory the OS frees anyway."""
    if "torch" not in sys.modules:
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
