"""``export-check``: argv -> options -> command -> report views -> exit code.

Every option's flag, help, default and settings key is a row of ``exporter/options.py``; this module
builds the parser from that table and hands the parsed flags to the same overlay the pytest plugin uses.
It runs ``check`` and ``merge`` itself; the golden, history and cache commands are
``exporter/cli_commands.py``, and writing the report flags (and the error reports after a user
error) is ``exporter/cli_reports.py``.

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
from .cli_commands import EXIT_FAIL, EXIT_PASS, EXIT_USAGE, add_bisect, cmd_bisect, cmd_cache, cmd_golden, cmd_history
from .cli_reports import REPORT_FLAGS, appends_markdown, error_reports, refuse_folders, refuse_writing_over, table_stream, write_views, written
from .errors import ExportCheckError, UsageError, error_message, one_line
from .options import CACHE_CLEAR, CACHE_INFO, CACHE_PRUNE, CHECK, HISTORY, JUDGE, KEYGEN, MERGE, REPLAY, add_arguments, for_command, from_namespace
from .paths import check_outputs, escaped
from .settings import check_config

SUBCOMMANDS = ("check", "golden", "history", "merge", "cache", "replay", "judge", "keygen", "bisect")
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
    sub = parser.add_subparsers(dest="command", metavar="{check,golden,history,merge,cache,replay,judge,keygen,bisect}", parser_class=_Parser)

    check = sub.add_parser("check", help="export, replay and gate (the default command)",
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog="artifact kinds:\n" + _kinds_help())
    add_arguments(check, CHECK)
    for action in check._actions:
        if action.dest == "checkpoint":  # check takes several checkpoints (or none, with --fleet)
            action.nargs, action.default = "*", []
    _ray_address_optional(check)

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
    replay = sub.add_parser("replay", help="judge a bundle (check --bundle) on this machine: its artifacts, reloaded by the runtimes "
                            "installed here, against the check's golden inputs and references (no torch needed)")
    add_arguments(replay, REPLAY)
    _ray_address_optional(replay)
    judge = sub.add_parser("judge", help="judge a stored JSON report again with other gates: nothing is built or replayed, torch is not "
                           "imported; the same views and exit codes as a check with those gates")
    add_arguments(judge, JUDGE)
    add_arguments(sub.add_parser("keygen", help="make an Ed25519 key pair for --sign-key (the private key, kept on the build machine) "
                                 "and --verify-key (KEY.pem.pub, for the machines that check)"), KEYGEN)
    add_bisect(sub)
    history = sub.add_parser("history", help="show MAE and latency per artifact across the runs in a --history file")
    add_arguments(history, HISTORY)
    cache = sub.add_parser("cache", help="show, prune or clear the artifact cache")
    csub = cache.add_subparsers(dest="cache_command", metavar="{info,prune,clear}", parser_class=_Parser)
    for command, help_text in ((CACHE_INFO, "where the cache is, its entries, their size and the limit"),
                               (CACHE_PRUNE, "evict least recently used entries until the cache is under its limit"),
                               (CACHE_CLEAR, "remove every entry (entries a running check is using stay)")):
        add_arguments(csub.add_parser(command.split()[1], help=help_text), command)
    return parser


def _ray_address_optional(parser: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]``: alone, a local cluster."""
    for action in parser._actions:
        if action.dest == "ray":
            action.nargs, action.const = "?", RAY_LOCAL


def _show_fleet(report: Any, args: argparse.Namespace, tracebacks: bool = True) -> int:
    """A fleet report (several models, a merge, several targets) in the terminal and every view asked for;
    after the table, the traceback of any model this run checked that hit a bug in export-check."""
    from .fleet import views

    print(views.render_text(report), file=table_stream(args))
    for model in report.models if tracebacks else ():
        if model.traceback:
            print(f"export-check: internal error checking {model.name} (a bug; please report it):\n{model.traceback}", file=sys.stderr)
    written(args).extend(("--json", "--junit", "--markdown"))
    for note in views.write(report, args.json, args.junit, args.markdown, markdown_append=appends_markdown(args, {})):
        print(note, file=sys.stderr)
    return report.exit_code


def _show(report: Any, args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """One model's report in the terminal table and every view asked for."""
    from .report import text

    stream = table_stream(args)
    print(text.render(report, text.style_for(stream, args.color, args.verbose)), file=stream)
    write_views(report, args, appends_markdown(args, settings))
    return report.exit_code


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

    refuse_folders(args)
    for flag in ("html", "history", "sign_key"):
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} takes one model's report; with several models write --json, --junit or --markdown")
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
    return _show_fleet(report, args)


def _cmd_merge(args: argparse.Namespace) -> int:
    from .fleet.merge import merge

    refuse_folders(args)
    refuse_writing_over({f"--{flag}": getattr(args, flag, None) for flag in ("json", "junit", "markdown")}, args.reports,
                        "a report this merge reads")
    return _show_fleet(merge(args.reports, _public_keys(args)), args, tracebacks=False)  # the shards' own runs printed theirs


def _public_keys(args: argparse.Namespace) -> Any:
    """``--verify-key``'s public keys, read before anything else is (report/signing.py), or None."""
    from .report.signing import load_public_keys

    return None if getattr(args, "verify_key", None) is None else load_public_keys(args.verify_key)


def _signer(args: argparse.Namespace) -> Any:
    """``--sign-key``'s private key, read before the run starts (report/signing.py), or None; kept on ``args`` for write_views."""
    from .report.signing import load_signer

    if getattr(args, "sign_key", None) is not None and getattr(args, "json", None) is None and getattr(args, "bundle", None) is None:
        raise UsageError(f"--sign-key {args.sign_key}: signs the JSON report (--json) and the bundle (--bundle); pass one of them")
    args.signer = None if getattr(args, "sign_key", None) is None else load_signer(args.sign_key)
    return args.signer


def _cmd_keygen(args: argparse.Namespace) -> int:
    from .report.signing import keygen

    public, key_id = keygen(args.key_file)
    print(f"export-check: private key {args.key_file} (mode 0600: keep it on the build machine, pass it to --sign-key); "
          f"public key {public} (key {key_id}: give it to the machines that check, for --verify-key)")
    return EXIT_PASS


def _cmd_replay(args: argparse.Namespace) -> int:
    from .replay import replay_bundle

    refuse_folders(args)
    if (args.bundle_file is None) == (args.targets is None):
        raise UsageError("replay: name one bundle, or a targets file with --targets FILE (see export-check replay --help)")
    if args.targets is not None:
        if args.sign_key is not None or args.verify_key is not None:
            raise UsageError("--sign-key and --verify-key take one bundle's replay; a targets file's replays are sealed with the shared key")
        return _cmd_replay_targets(args)
    if args.ray is not None:
        raise UsageError("--ray runs the targets of a targets file (--targets FILE), each a Ray task; one bundle replays here")
    refuse_writing_over({f"--{flag}": getattr(args, flag, None) for flag in (*REPORT_FLAGS, "history")}, [args.bundle_file],
                        "the bundle this replay reads")
    progress = _progress(args.quiet)
    try:
        public, _ = _public_keys(args), _signer(args)
        report = escaped(replay_bundle(args.bundle_file, args.out, args.target, args.threads, progress, public, args.cache_dir))
    finally:
        progress.close()
    return _show(report, args, {})


def _cmd_judge(args: argparse.Namespace) -> int:
    from .rejudge import judge_report
    from .results import Report

    refuse_folders(args)
    refuse_writing_over({f"--{flag}": getattr(args, flag, None) for flag in REPORT_FLAGS}, [args.report_file], "the report this judge reads")
    from .decode.gates import OPTIONS as DECODE

    values = {o.gate.name if o.gate else o.name: getattr(args, o.python) for o in for_command(JUDGE) if o.gate is not None or o.name in DECODE}
    report = escaped(judge_report(args.report_file, values, strict=True if args.strict else None))
    if isinstance(report, Report):
        return _show(report, args, {})
    if args.html is not None:
        raise UsageError("--html takes one model's report; a fleet's report is written with --json, --junit or --markdown")
    return _show_fleet(report, args, tracebacks=False)


def _cmd_replay_targets(args: argparse.Namespace) -> int:
    from .fleet.replays import parse_targets, run_replays

    for flag in ("html", "history"):
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag} takes one target's report; with --targets write --json, --junit or --markdown")
    jobs = parse_targets(args.targets, args.out)
    refuse_writing_over({f"--{flag}": getattr(args, flag, None) for flag in REPORT_FLAGS}, [job.bundle for job in jobs], "a bundle a target replays")

    def progress(result: Any) -> None:
        if not args.quiet:
            print(f"{result.name}: {result.status.upper()} ({result.seconds:.1f} s)", file=sys.stderr, flush=True)

    return _show_fleet(run_replays(jobs, args.ray, progress), args)


def _cmd_check(args: argparse.Namespace, one_run: bool = False) -> int:
    if args.bundle is not None and (len(args.checkpoint) != 1 or args.fleet is not None or args.shard is not None or args.ray is not None):
        raise UsageError(f"--bundle {args.bundle}: a bundle holds one model's artifacts; check one checkpoint")
    if _several(args):
        return _cmd_fleet(args)
    config, settings = check_config(from_namespace(CHECK, args))
    args.checked_config = config  # what the error reports of a run that stops later are checked against
    check_outputs(config, {f"--{flag}": getattr(args, flag) for flag in (*REPORT_FLAGS, "history", "bundle")})
    refuse_folders(args)
    signer = _signer(args)  # a missing or wrong key fails before the run
    from .run.pipeline import run_check

    progress = _progress(args.quiet)
    try:
        # a name that is not UTF-8 is shown escaped in every view
        report = escaped(run_check(config, progress=progress, keep_helpers=not one_run))
    finally:
        progress.close()
    code = _show(report, args, settings)
    if args.bundle is not None:
        from .bundle import bundle_check

        progress = _progress(args.quiet)
        try:
            count, size = bundle_check(config, report, args.bundle, progress, signer)
        finally:
            progress.close()
        print(f"export-check: bundle of {count} artifact{'s' if count != 1 else ''} ({size / 1e6:.1f} MB) written to {args.bundle}; "
              f"judge it where it is deployed with: export-check replay {args.bundle}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None, one_run: bool = False) -> int:
    """The CLI on ``argv`` (default: this process's); ``one_run``: this process runs nothing after it (the console
    script), so a check's helper processes end as soon as its builds and replays are done."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(_normalise(args_list))
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        if args.command == "check":
            return _cmd_check(args, one_run)
        if args.command == "history":
            return cmd_history(args)
        if args.command == "merge":
            return _cmd_merge(args)
        if args.command == "replay":
            return _cmd_replay(args)
        if args.command == "judge":
            return _cmd_judge(args)
        if args.command == "cache":
            return cmd_cache(args)
        if args.command == "keygen":
            return _cmd_keygen(args)
        if args.command == "bisect":
            return cmd_bisect(args)
        return cmd_golden(args)
    except ExportCheckError as exc:
        print(error_line(exc), file=sys.stderr)
        for note in error_reports(args if args is not None else _scanned(args_list), exc):
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
    except SystemExit as exc:
        if args is None:
            raise  # argparse's own exit: --help, --version, a usage error it printed
        # sys.exit() called by the model's code or a library it called, in this process (its factory, its eager
        # forward): the run stopped before it judged anything, and must not end with that code (0 would pass it)
        print(f"export-check: error: the run stopped before it judged anything: code it ran (the model's factory or forward, or a library "
              f"it called) called sys.exit({exc.code!r}); run the model alone to find where", file=sys.stderr)
        return EXIT_FAIL


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
        code = main(one_run=True)
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


__all__ = ["EXIT_FAIL", "EXIT_PASS", "EXIT_USAGE", "RAY_LOCAL", "REPORT_FLAGS", "SUBCOMMANDS", "build_config", "build_parser", "entry",
           "error_line", "main"]
