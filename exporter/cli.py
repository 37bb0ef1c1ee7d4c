"""``export-check``: argv -> config -> pipeline -> report views -> exit code.

Imports nothing heavy at module level, so ``--help`` and argument errors return at once.
Exit codes: 0 every row passed; 1 any drift or artifact error; 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .errors import ExportCheckError, UsageError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
SUBCOMMANDS = ("check", "golden")
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
    sub = parser.add_subparsers(dest="command", metavar="{check,golden}", parser_class=_Parser)

    check = sub.add_parser("check", help="export, replay and gate (the default command)", formatter_class=argparse.RawDescriptionHelpFormatter, epilog="artifact kinds:\n" + _kinds_help())
    _add_model_args(check)
    check.add_argument("--out", type=Path, metavar="DIR", help=f"where artifacts are written (default: {DEFAULT_OUT})")
    check.add_argument("--artifacts", metavar="KINDS", help="comma-separated kinds to build (default: all)")
    check.add_argument("--max-mae", type=float, metavar="X", help="MAE gate of float artifacts and of eager vs golden (default: 1e-5)")
    check.add_argument("--int8-max-mae", type=float, metavar="X", help="MAE gate of int8 artifacts (default: 0.1)")
    check.add_argument("--int8-min-top1", type=float, metavar="F", help="top-1 agreement gate of int8 artifacts, a fraction (default: 0.98)")
    check.add_argument("--opset", type=int, help="ONNX opset (default: 17)")
    check.add_argument("--onnx-exporter", choices=("torchscript", "dynamo"), help="torch.onnx exporter (default: torchscript; dynamo needs onnxscript)")
    check.add_argument("--json", type=Path, metavar="PATH", help="write the full report as JSON")

    golden = sub.add_parser("golden", help="record, verify or approve a golden set")
    gsub = golden.add_subparsers(dest="golden_command", metavar="{record,verify,approve}", parser_class=_Parser)
    record = gsub.add_parser("record", help="write a new golden set from a folder of images or .npy tensors")
    _add_model_args(record)
    record.add_argument("--inputs", type=Path, required=True, metavar="DIR", help="folder of .png/.jpg/.npy inputs (a labels.json there maps file name to label)")
    record.add_argument("--size", metavar="HxW", help="model input size, e.g. 224 or 224x224 (images only)")
    record.add_argument("--resize", type=int, help="resize the shorter side to this before a center crop (default: resize straight to --size)")
    record.add_argument("--mode", choices=("RGB", "L"), help="colour mode the model takes (default: RGB)")
    record.add_argument("--mean", metavar="M,M,M", help="per-channel mean after scaling to [0,1] (default: 0.5 each)")
    record.add_argument("--std", metavar="S,S,S", help="per-channel std (default: 0.5 each)")
    verify = gsub.add_parser("verify", help="check a golden set's integrity and say exactly what changed")
    verify.add_argument("golden_dir", type=Path, nargs="?", default=None, metavar="DIR", help=f"golden set (default: {DEFAULT_GOLDEN})")
    approve = gsub.add_parser("approve", help="adopt a new checkpoint's logits as the reference, showing the diff first")
    _add_model_args(approve)
    approve.add_argument("--dry-run", action="store_true", help="show the diff, change nothing")
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
    from .checkpoint import check_readable_file
    from .settings import find_settings

    # The checkpoint is the one thing every command needs: say first when it is not there.
    check_readable_file(args.checkpoint, "checkpoint", "pass the path of a .pth/.pt/.safetensors state_dict")
    return find_settings(args.checkpoint, args.config)


def build_config(args: argparse.Namespace) -> Any:
    from .config import INT8_MAX_MAE, INT8_MIN_TOP1, FLOAT_MAX_MAE, Gate, RunConfig, Thresholds

    settings = _model_settings(args)
    kinds: tuple[str, ...] = ()
    if args.artifacts is not None:
        kinds = tuple(k.strip() for k in args.artifacts.split(",") if k.strip())
        if not kinds:
            raise UsageError("--artifacts is empty; list kinds separated by commas")
    else:
        kinds = tuple(settings.get("artifacts", ()))
    max_mae = _pick(args.max_mae, settings, "max_mae", FLOAT_MAX_MAE)
    thresholds = Thresholds(
        float_gate=Gate(max_mae=max_mae),
        int8_gate=Gate(
            max_mae=_pick(args.int8_max_mae, settings, "int8_max_mae", INT8_MAX_MAE),
            min_top1=_pick(args.int8_min_top1, settings, "int8_min_top1", INT8_MIN_TOP1),
        ),
        eager_gate=Gate(max_mae=max_mae),
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
    )


def _progress(quiet: bool):
    def emit(message: str) -> None:
        if not quiet:
            print(f"[export-check] {message}", file=sys.stderr, flush=True)

    return emit


def _cmd_check(args: argparse.Namespace) -> int:
    config = build_config(args)
    if args.json is not None and args.json.exists() and args.json.is_dir():
        raise UsageError(f"{args.json}: is a directory; --json takes a file path")
    from .pipeline import run_check
    from .report import json_report, text

    report = run_check(config, progress=_progress(args.quiet))
    print(text.render(report))
    if args.json is not None:
        json_report.write(report, args.json)
    return report.exit_code


def _cmd_golden(args: argparse.Namespace) -> int:
    from . import golden_ops

    if args.golden_command == "verify":
        return golden_ops.verify(args.golden_dir or DEFAULT_GOLDEN)
    if args.golden_command is None:
        raise UsageError("export-check golden: choose record, verify or approve (see export-check golden --help)")
    settings = _model_settings(args)
    arch = _pick(args.arch, settings, "arch", "")
    if not arch:
        raise UsageError("no architecture given: pass --arch module:Factory or path/to/file.py:Factory, or set arch in [tool.export-check]")
    common = dict(
        checkpoint=args.checkpoint,
        arch=arch,
        arch_kwargs=_arch_kwargs(args.arch_kwargs, settings.get("arch_kwargs")),
        arch_root=None if args.arch else settings.get("arch_root"),
        golden_dir=_pick(args.golden, settings, "golden", DEFAULT_GOLDEN),
        threads=_pick(args.threads, settings, "threads", 1),
        batch_size=_pick(args.batch_size, settings, "batch_size", 16),
    )
    if args.golden_command == "record":
        preprocess = golden_ops.preprocess_from_args(args.size, args.resize, args.mode, args.mean, args.std, settings.get("preprocess"))
        return golden_ops.record(inputs_dir=args.inputs, preprocess=preprocess, **common)
    return golden_ops.approve(dry_run=args.dry_run, **common)


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
        return _cmd_golden(args)
    except ExportCheckError as exc:
        print(f"export-check: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("export-check: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    sys.exit(main())
