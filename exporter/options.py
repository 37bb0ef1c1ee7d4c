"""Every option of export-check in one table, ``OPTIONS``: flag and settings key, python name, type,
default, help, metavar or choices, the commands taking it, and whether a settings file may set it.

From the table: each subcommand's argparse arguments (:func:`add_arguments`), the validation of a
``[tool.export-check]`` table (``export_check.settings.parse_settings`` reads :data:`SETTINGS` and
``export_check.option_values.coerce``, where each kind of value is read and checked), and the
overlay *explicit value > settings file > default* (:func:`overlay`) that builds the
:class:`~export_check.config.RunConfig` of ``check`` (:func:`to_run_config`;
``export_check.settings.check_config`` reads the settings file and overlays) and the parameters of
``golden record``/``approve`` (``export_check.settings.golden_params``). The CLI's explicit values are
its parsed flags (:func:`from_namespace`); the pytest plugin's are its keyword options, python
names, checked here (:func:`from_keywords`): both then go through the same ``check_config``.

Imports nothing heavy: ``export-check --help`` builds its parser from this table.

>>> OPTION["batch-size"].python, OPTION["batch-size"].default, OPTION["batch-size"].commands
('batch_size', 16, ('check', 'golden record', 'golden approve'))
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from .config import (
    BUILD_TIMEOUT,
    COLOR_CHOICES,
    JOBS,
    ONNX_EXPORTERS,
    RunConfig,
    check_cache_gb,
    default_cache_dir,
)
from .errors import UsageError
from .gates import GATE_OPTIONS, GateOption, Thresholds
from .option_values import JSON_MAX_BYTES, JSON_MAX_DEPTH, bounded_int, coerce, comma_list, json_data, known_kinds
from .paths import NUL_REFUSAL
from .pinned import ORT_LEVEL_NAMES
from .signature import SignatureSettings, parse_signature_settings

CHECK, RECORD, VERIFY, APPROVE, HISTORY, MERGE = "check", "golden record", "golden verify", "golden approve", "history", "merge"
REPLAY, JUDGE, KEYGEN = "replay", "judge", "keygen"
COMMANDS: tuple[str, ...] = (CHECK, RECORD, VERIFY, APPROVE, HISTORY, MERGE, REPLAY, JUDGE, KEYGEN)
CACHE_INFO, CACHE_PRUNE, CACHE_CLEAR = "cache info", "cache prune", "cache clear"  # `export-check cache` (exporter/cache/prune.py)
BISECT = "bisect"  # a bundle replayed over a runtime's releases (exporter/bisect.py)
COMMANDS += (CACHE_INFO, CACHE_PRUNE, CACHE_CLEAR, BISECT)
MODEL = (CHECK, RECORD, APPROVE)  # the commands that load a checkpoint and its settings
DEFAULT_GOLDEN = Path("golden")
DEFAULT_OUT = Path("export-check-out")


def _path_argument(text: str) -> Path:
    """A path flag's text as a Path; a NUL byte (which no file name holds, and which os calls refuse
    with a ValueError) is argparse's one-line error naming the flag."""
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r} {NUL_REFUSAL}")
    return Path(text)


# How a value is read and checked, by kind: the type argparse converts a flag's text with (None: kept
# as text; artifacts and arch-kwargs text is read by the overlay, which names the flag), and the rules
# a settings file's (or a plugin keyword's) value must meet (coerce).
KINDS: dict[str, Callable[[str], Any] | None] = {
    "str": None, "path": _path_argument, "int": int, "jobs": int, "float": float, "strlist": None, "table": None, "switch": None,
}


def _run_default(name: str) -> Any:
    """RunConfig's own default for a field: one place for it, config.py."""
    f = {f.name: f for f in fields(RunConfig)}[name]
    return f.default_factory if f.default is MISSING else f.default  # a factory is called by the overlay


@dataclass(frozen=True)
class Option:
    """One option. ``help`` may hold ``{default}``, replaced by the default as ``--help`` shows it."""

    name: str  # "batch-size": --batch-size on the command line, batch-size in [tool.export-check]
    python: str  # "batch_size": the argparse dest and the pytest plugin's keyword
    kind: str  # a key of KINDS
    help: str
    commands: tuple[str, ...]  # the subcommands taking it; () for a settings-only key
    default: Any = None  # when neither the command line nor a settings file says; a callable is called
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    settings: bool = False  # may appear in a settings file
    field: str | None = None  # the RunConfig field it sets
    gate: GateOption | None = None  # the gate option it is (gates.GATE_OPTIONS): sets RunConfig.thresholds
    short: str | None = None  # "-q"
    positional: bool = False
    nargs: str | None = None
    check: Callable[[Any, str], object] | None = None  # a settings value's further validation: check(value, source) raises UsageError

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        if self.kind == "switch" and self.default is None:
            object.__setattr__(self, "default", False)

    def help_text(self) -> str:
        shown = f"{self.default:g}" if isinstance(self.default, float) else str(self.default)
        return self.help.replace("{default}", shown)

    def keyword(self, value: Any) -> Any:
        """A pytest plugin keyword's value, checked: a string is read as the flag's text would be;
        any other value must have the type a settings file gives it (paths may be ``os.PathLike``)."""
        where = f"option {self.python}"
        if self.kind == "switch":
            if value is not True:
                raise UsageError(f"{where} is a switch: pass True or leave it out, got {value!r}")
            return True
        if isinstance(value, str):
            value = _from_text(self, value, where)
        elif self.kind == "path" and isinstance(value, os.PathLike):
            value = Path(value)
        elif self.kind == "strlist" and isinstance(value, tuple):
            value = tuple(coerce(list(value), self.kind, None, where))
        else:
            value = coerce(value, self.kind, None, where)
        if self.kind == "table" and not isinstance(value, str):
            try:  # what --arch-kwargs JSON would give: the cache, golden manifest and report record it as JSON
                value = json.loads(json.dumps(value))
            except (TypeError, ValueError) as exc:
                raise UsageError(f"{where} must hold JSON data only (numbers, strings, lists, dicts): {exc}") from None
        if self.choices is not None and value not in self.choices:
            raise UsageError(f"{where} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        return value


def _from_text(option: Option, text: str, where: str) -> Any:
    convert = KINDS[option.kind]
    if convert is None:
        return text
    try:
        return convert(text)
    except ValueError:
        raise UsageError(f"{where} must be {'an integer' if convert is int else 'a number'}, got {text!r}") from None


def _gate_row(o: GateOption) -> Option:
    return Option(o.name, o.name.replace("-", "_"), "float", o.help, (CHECK, JUDGE), metavar=o.metavar, settings=True, gate=o)


def _known_artifacts(names: tuple[str, ...], where: str) -> None:
    """A settings file's ``artifacts``: kinds or groups, or a language model's kinds (RunConfig holds each to its golden set)."""
    from .decode.names import KIND_NAMES as DECODE_KINDS

    rest = tuple(n for n in names if n not in DECODE_KINDS)
    if rest or not names:
        known_kinds(rest, where)


def _decode_gate_rows() -> tuple[Option, ...]:
    """A language model's weight-only gate bounds (decode/gates.py OPTIONS; RunConfig.decode_gates): check and judge."""
    from .decode.gates import GATES, OPTION_HELP
    from .decode.gates import OPTIONS as DECODE

    return tuple(Option(name, name.replace("-", "_"), "float", OPTION_HELP[bound].format(family=family, default=getattr(GATES[family], bound)),
                        (CHECK, JUDGE), metavar="X", settings=True) for name, (family, bound) in DECODE.items())


OPTIONS: tuple[Option, ...] = (
    # every command that loads a checkpoint
    Option("checkpoint", "checkpoint", "path", "trained state_dict (.pth/.pt/.safetensors)", MODEL, positional=True, field="checkpoint"),
    Option("arch", "arch", "str", "architecture: package.module:Factory or path/to/file.py:Factory", MODEL, default="",
           settings=True, field="arch"),
    Option("arch-kwargs", "arch_kwargs", "table", 'constructor arguments as a JSON object, e.g. \'{"num_classes": 10}\'', MODEL,
           default=_run_default("arch_kwargs"), metavar="JSON", settings=True, field="arch_kwargs",
           check=lambda value, source: json_data(value, f"{source}: arch-kwargs")),
    Option("golden", "golden", "path", "golden set directory (default: {default})", MODEL, default=DEFAULT_GOLDEN, metavar="DIR",
           settings=True, field="golden"),
    Option("config", "config", "path", "settings file (default: export-check.toml, else [tool.export-check] of pyproject.toml, in "
           "the current directory or its parents up to the project root, the first folder holding .git)", MODEL,
           metavar="TOML"),
    Option("threads", "threads", "int", "intra-op threads for torch and onnxruntime (default: {default})", MODEL,
           default=_run_default("threads"), settings=True, field="threads"),
    Option("batch-size", "batch_size", "int", "inputs per replay batch (default: {default})", MODEL, default=_run_default("batch_size"),
           settings=True, field="batch_size"),
    Option("quiet", "quiet", "switch", "no progress lines on stderr", MODEL, short="-q"),
    # check
    Option("out", "out", "path", "where artifacts are written (default: {default})", (CHECK,), default=DEFAULT_OUT, metavar="DIR",
           settings=True, field="out_dir"),
    Option("artifacts", "artifacts", "strlist", "comma-separated kinds or groups to build: default, modern, edge, all, "
           "or kind names (default: default; docs/reference/artifact-kinds.md)", (CHECK,), default=_run_default("kinds"),
           metavar="KINDS", settings=True, field="kinds", check=lambda value, source: _known_artifacts(value, f"{source}: artifacts")),
    *(_gate_row(o) for o in GATE_OPTIONS),
    *_decode_gate_rows(),
    Option("opset", "opset", "int", "ONNX opset (default: {default})", (CHECK,), default=_run_default("opset"), settings=True, field="opset"),
    Option("onnx-exporter", "onnx_exporter", "str", "torch.onnx exporter (default: {default}; dynamo needs onnxscript)", (CHECK,),
           default=_run_default("onnx_exporter"), choices=ONNX_EXPORTERS, settings=True, field="onnx_exporter"),
    Option("onnx-fp16-optimization", "fp16_optimization", "str", "onnxruntime graph optimisation level the onnx-fp16 row is "
           "loaded and run at (default: {default}; basic where an fp16 graph crashes onnxruntime at all)", (CHECK,),
           default=_run_default("fp16_optimization"), choices=ORT_LEVEL_NAMES, settings=True, field="fp16_optimization"),
    Option("json", "json", "path", "write the full report as JSON", (CHECK, REPLAY, JUDGE), metavar="PATH"),
    Option("junit", "junit", "path", "write JUnit XML, one test case per row (Jenkins, GitLab, Azure)", (CHECK, REPLAY, JUDGE), metavar="PATH"),
    Option("markdown", "markdown", "path", "write a Markdown summary, e.g. --markdown \"$GITHUB_STEP_SUMMARY\"", (CHECK, REPLAY, JUDGE),
           metavar="PATH"),
    Option("markdown-append", "markdown_append", "switch", "add the Markdown summary to the end of --markdown's file instead of "
           "replacing it, so that several checks in one job each add theirs (always so for the file $GITHUB_STEP_SUMMARY names)",
           (CHECK, MERGE), settings=True),
    Option("html", "html", "path", "write one self-contained HTML report with plots", (CHECK, REPLAY, JUDGE), metavar="PATH"),
    Option("bundle", "bundle", "path", "after the check, write one file holding every judged artifact, the golden inputs and the "
           "outputs each is compared with, sealed with the cache key: judge it on the deployment machine with `export-check replay`",
           (CHECK,), metavar="PATH"),
    Option("history", "history", "path", "append this run's summary as one JSON line (see `export-check history`)", (CHECK, REPLAY), metavar="PATH"),
    Option("cache-dir", "cache_dir", "path", "artifact cache (default: $XDG_CACHE_HOME/export-check, else ~/.cache/export-check)", (CHECK,),
           default=default_cache_dir, metavar="DIR", settings=True, field="cache_dir"),
    Option("no-cache", "no_cache", "switch", "build and replay everything; neither read nor write the artifact cache", (CHECK,)),
    # the cache's bound and `export-check cache info|prune|clear` (exporter/cache/prune.py)
    Option("cache-max-size", "cache_max_size", "float", "keep the artifact cache under this many GB (10^9 bytes): after a run stores, "
           "the least recently used entries no run is using are evicted (default: {default}; 0: no limit; at most 1e9)", (CHECK,),
           default=_run_default("cache_max_size"), metavar="GB", settings=True, field="cache_max_size",
           check=lambda value, source: check_cache_gb(value, f"{source}: cache-max-size")),
    Option("cache-dir", "cache_dir", "path", "the artifact cache (default: cache-dir in [tool.export-check] of ./pyproject.toml, else "
           "$XDG_CACHE_HOME/export-check, else ~/.cache/export-check)", (CACHE_INFO, CACHE_PRUNE, CACHE_CLEAR, BISECT, REPLAY), metavar="DIR"),
    Option("max-size", "max_size", "float", "evict least recently used entries until the cache holds at most this many GB "
           "(default: cache-max-size in [tool.export-check] of ./pyproject.toml, else 5; 0: every entry not in use; at most 1e9)", (CACHE_PRUNE,),
           metavar="GB"),
    Option("jobs", "jobs", "jobs", "2: replay each artifact while the next ones build, and diagnose it while the next one replays, on the "
           "other core; 1: one artifact at a time (default: 2 when the process may use 2 or more cores)", (CHECK,),
           default=_run_default("jobs"), metavar="{1,2}", choices=JOBS, settings=True, field="jobs"),
    Option("build-timeout", "build_timeout", "float", "kill an artifact's build still running after this long; its row becomes an error "
           "(default: {default}; 0: no limit)", (CHECK,), default=BUILD_TIMEOUT, metavar="SECONDS", settings=True, field="build_timeout"),
    Option("diagnose", "diagnose", "switch", "also build the per-layer error tables of passing int8 rows (failing rows always get them)",
           (CHECK,), field="diagnose"),
    # diagnostics' cost (issue 15, docs/explanation/reports-and-diagnostics.md "Bounded cost"): raise for a thorough run
    Option("diagnostics-budget", "diagnostics_budget", "float", "share of a row's replay its batch-size, determinism and latency "
           "runs may cost, priced by eager's own time per image (default: {default}; a model at most 10 ms per image runs them all; 100: "
           "every check at full size, as before issue 15)", (CHECK,), default=_run_default("diagnostics_budget"), metavar="SHARE", settings=True,
           field="diagnostics_budget"),
    Option("strict", "strict", "switch", "a kind that does not apply to the model (e.g. dynamic int8 without Linear or recurrent "
           "layers) fails the run instead of being shown as not applicable, and so does an int8 row with under half of its weight "
           "parameters in int8 (instead of a note)", (CHECK, JUDGE), settings=True, field="strict"),
    Option("judge-only", "judge_only", "switch", "judge this check's cached observations with the gates given now: nothing is built "
           "or replayed and torch is not imported; a check never run (or changed since) is refused, and a per-layer table or a "
           "measurement the cache lacks is said, not measured", (CHECK,), field="judge_only"),
    # the terminal table (exporter/report/text.py): colour and detail; not settings, they are the terminal's
    Option("color", "color", "str", "colour the verdicts: auto (on a terminal, unless NO_COLOR is set; FORCE_COLOR forces it), "
           "always or never; the flag overrides NO_COLOR and FORCE_COLOR (default: {default})", (CHECK, REPLAY, JUDGE), default="auto",
           choices=COLOR_CHOICES, metavar="{auto,always,never}"),
    Option("verbose", "verbose", "switch", "every column of the table (wrapped under each row when the terminal is narrow), "
           "the notes, the checks and the stage timings", (CHECK, REPLAY, JUDGE), short="-v"),
    # check, several models (exporter/fleet/): a fleet file, CI shards, a process pool or a Ray cluster
    Option("fleet", "fleet", "path", "check every model of a fleet file (TOML: [models.NAME] with checkpoint, arch, golden, "
           "settings); one report over all of them", (CHECK,), metavar="FILE"),
    Option("shard", "shard", "str", "check only shard I of N of the models (stable: by the sha256 of each model's name), for CI "
           "matrices; join the shards' --json reports with `export-check merge`", (CHECK,), metavar="I/N"),
    Option("workers", "workers", "int", "models checked at once on this machine, each in its own process with --jobs 1 "
           "(default: the usable cores; 1: one after another)", (CHECK,), metavar="N"),
    Option("ray", "ray", "str", "check each model as a task on a Ray cluster: ADDRESS of an existing one (auto, ray://host:10001), "
           "or none for a local cluster (needs export-check[ray])", (CHECK, REPLAY), metavar="ADDRESS"),
    # golden record
    Option("inputs", "inputs", "path", "folder of .png/.jpg/.npy inputs, a labels.json there maps file name to label (default: inputs in "
           "[tool.export-check])", (RECORD,), metavar="DIR", settings=True),
    Option("force", "force", "switch", "replace an existing golden set (default: refuse; use `golden approve` to adopt new logits)", (RECORD,)),
    Option("size", "size", "str", "model input size, e.g. 224 or 224x224 (images only)", (RECORD,), metavar="HxW"),
    Option("resize", "resize", "int", "resize the shorter side to this before a center crop (default: resize straight to --size)", (RECORD,)),
    Option("mode", "mode", "str", "colour mode the model takes (default: RGB)", (RECORD,), choices=("RGB", "L")),
    Option("mean", "mean", "str", "per-channel mean after scaling to [0,1] (default: 0.5 each)", (RECORD,), metavar="M,M,M"),
    Option("std", "std", "str", "per-channel std (default: 0.5 each)", (RECORD,), metavar="S,S,S"),
    Option("calibration-samples", "calibration_samples", "int", "golden samples the static int8 kinds calibrate on, the K of smallest "
           "content sha256; they are judged on the rest (record default: half the set, at most 32; approve: keep the recorded split)",
           (RECORD, APPROVE), metavar="K"),
    Option("preprocess", "preprocess", "table", "how `golden record` (and a pytest regen) turns images into tensors", (), settings=True),
    Option("model-inputs", "model_inputs", "table", "per model input, [tool.export-check.model-inputs.NAME]: dtype, batch-axis, "
           "dynamic-axes, keyword (a format-2 golden set records them)", (), settings=True,
           check=lambda value, source: parse_signature_settings(value, None, source)),
    Option("outputs", "outputs", "table", "per model output, [tool.export-check.outputs.NAME]: batch-axis, kind, class-axis, "
           "dynamic-axes, compare (a format-2 golden set records them), and any gate setting for that output alone "
           "(max-mae, int8-max-relative-mae, ...)", (), settings=True,
           check=lambda value, source: parse_signature_settings(None, split_output_gates(value, source)[0], source)),
    # golden verify
    Option("golden_dir", "golden_dir", "path", "golden set (default: golden in [tool.export-check] of ./pyproject.toml, else {default})",
           (VERIFY,), default=DEFAULT_GOLDEN, metavar="DIR", positional=True, nargs="?"),
    # golden approve
    Option("dry-run", "dry_run", "switch", "show the diff, change nothing", (APPROVE,)),
    Option("max-accuracy-drop", "max_accuracy_drop", "float", "refuse new outputs whose top-1 accuracy on the golden labels is more than "
           "this many points below the old ones' (default: max-accuracy-drop in [tool.export-check], else no limit)", (APPROVE,),
           metavar="POINTS"),
    Option("accept-accuracy-drop", "accept_accuracy_drop", "switch", "approve even when the accuracy on the golden labels drops more "
           "than max-accuracy-drop", (APPROVE,)),
    # history
    Option("history_file", "history_file", "path", "the file written by check --history", (HISTORY,), metavar="PATH", positional=True),
    Option("last", "last", "int", "show the last N runs (default: {default}; 0: all)", (HISTORY,), default=10, metavar="N"),
    Option("artifact", "artifact", "str", "show one row only, e.g. onnx", (HISTORY,), metavar="NAME"),
    Option("json", "json", "switch", "print the runs as JSON instead of tables", (HISTORY,)),
    Option("html", "html", "path", "also write the trend as one self-contained HTML page: an inline SVG plot of MAE and latency per "
           "artifact across the runs", (HISTORY,), metavar="PATH"),
    # replay (exporter/replay.py): a bundle judged on the machine it is deployed on
    Option("bundle_file", "bundle_file", "path", "a bundle written by `export-check check --bundle PATH`", (REPLAY, BISECT), metavar="BUNDLE",
           positional=True, nargs="?"),
    Option("targets", "targets", "path", "replay several targets instead: a TOML file of [targets.NAME] tables, each with bundle = "
           "\"...\" and what a Ray task of it needs (num-cpus, resources = { macos = 1 }); one report over all of them", (REPLAY,),
           metavar="FILE"),
    Option("target", "target", "str", "this machine's name in the report (default: host name); node|browser: ONNX in JS", (REPLAY,), metavar="NAME"),
    Option("out", "out", "path", "where the bundle's artifacts are written for their runtimes to load (default: {default})", (REPLAY,),
           default=Path("export-check-replay"), metavar="DIR"),
    Option("threads", "threads", "int", "intra-op threads of the runtimes (default: the check's)", (REPLAY,)),
    Option("quiet", "quiet", "switch", "no progress lines on stderr", (REPLAY, BISECT), short="-q"),
    Option("runtime", "runtime", "str", "the runtime whose releases to replay", (BISECT,), choices=("onnxruntime", "openvino", "ai-edge-litert")),
    Option("from", "from_release", "str", "the oldest release to replay (default: the oldest the index offers)", (BISECT,), metavar="V"),
    Option("to", "to_release", "str", "the newest release to replay (default: the newest the index offers)", (BISECT,), metavar="V"),
    Option("all", "all_releases", "switch", "replay every release of the range, not a bisection, and name every boundary", (BISECT,)),
    Option("newest", "newest", "switch", "replay the newest release of each runtime of the bundle; exit 1 if upgrading changes a verdict", (BISECT,)),
    Option("max-mae-change", "max_mae_change", "float", "releases differ when a verdict changes or an MAE moves by more than this share "
           "of the larger (default: {default})", (BISECT,), default=0.1, metavar="SHARE"),
    Option("json", "json", "path", "also write the releases, rows and boundary as JSON", (BISECT,), metavar="PATH"),
    Option("html", "html", "path", "also write one HTML page with the MAE per release drawn", (BISECT,), metavar="PATH"),
    # judge (exporter/rejudge.py): a stored report judged again with other gates
    Option("report_file", "report_file", "path", "a JSON report written by `export-check check --json` (one model's or a fleet's; "
           "a replay's too)", (JUDGE,), metavar="REPORT.json", positional=True),
    # merge
    Option("reports", "reports", "path", "JSON reports written by `export-check ... --json` (one model's or a fleet's)", (MERGE,),
           metavar="REPORT.json", positional=True, nargs="+"),
    Option("json", "json", "path", "write the merged report as JSON", (MERGE,), metavar="PATH"),
    Option("junit", "junit", "path", "write the merged report as JUnit XML, one test suite per model", (MERGE,), metavar="PATH"),
    Option("markdown", "markdown", "path", "write the merged report as Markdown", (MERGE,), metavar="PATH"),
    # signed evidence (exporter/report/signing.py, needs export-check[sign]): the private key stays on the machine that writes
    Option("sign-key", "sign_key", "path", "sign the bundle (--bundle) and the JSON report (--json) with this Ed25519 private key (PEM, "
           "from `export-check keygen`) instead of sealing them with the shared cache key: a machine holding the public key alone can "
           "check them and cannot make them", (CHECK, REPLAY), metavar="KEY.pem"),
    Option("verify-key", "verify_key", "path", "replay only a bundle signed by a private key whose public key is in this PEM file "
           "(one or more public keys; `export-check keygen KEY.pem` writes KEY.pem.pub)", (REPLAY,), metavar="PUBLIC.pem"),
    Option("verify-key", "verify_key", "path", "check signed reports against the public keys in this PEM file (one or more, "
           "concatenated: the build's and each lab's); a report sealed with the shared key is checked with it, as without", (MERGE,),
           metavar="PUBLIC.pem"),
    Option("key_file", "key_file", "path", "where the new Ed25519 private key is written (PEM, mode 0600; keep it on the build "
           "machine); its public key goes beside it as KEY.pem.pub", (KEYGEN,), metavar="KEY.pem", positional=True),
)
OPTION: dict[str, Option] = {o.name: o for o in reversed(OPTIONS)}  # by name; of two rows named alike (json), the first
SETTINGS: dict[str, Option] = {o.name: o for o in OPTIONS if o.settings}  # the keys a settings file may hold


def for_command(command: str) -> tuple[Option, ...]:
    """The options ``command`` takes, in table order (the order of its ``--help``)."""
    return tuple(o for o in OPTIONS if command in o.commands)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """``command``'s arguments, from the table. A settings key's flag defaults to None, so that the
    overlay can tell "not given" from a value; a switch defaults to False."""
    for o in for_command(command):
        kw: dict[str, Any] = {"help": o.help_text()}
        if o.kind == "switch":
            kw.update(action="store_true")
        else:
            kw.update(type=KINDS[o.kind], metavar=o.metavar, choices=o.choices)
            kw = {k: v for k, v in kw.items() if v is not None}
            if o.positional and o.nargs is not None:
                kw.update(nargs=o.nargs, default=None)
            elif not o.positional:
                kw.update(default=None if o.settings or callable(o.default) else o.default)
        if o.positional:
            parser.add_argument(o.python, **kw)
        else:
            parser.add_argument(*([o.short] if o.short else []), f"--{o.name}", dest=o.python, **kw)


# --- explicit values: the CLI's parsed flags, or the plugin's keywords --------------------------


def from_namespace(command: str, args: argparse.Namespace) -> dict[str, Any]:
    """The flags given on the command line (a switch counts when set), by python name."""
    given = {o.python: getattr(args, o.python, None) for o in for_command(command)}
    return {k: v for k, v in given.items() if v is not None and v is not False}


def from_keywords(command: str, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """The pytest plugin's keyword options for ``command``, by python name, checked (:meth:`Option.keyword`).
    None and False mean "not given"; a name the command's flags do not have is refused as the
    command line refuses an unknown flag."""
    taken = {o.python: o for o in for_command(command) if not o.positional}
    given = {k: v for k, v in keywords.items() if v is not None and v is not False}
    unknown = [f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in given.items() if k not in taken]
    if unknown:
        raise UsageError(f"export-check: unrecognized arguments: {' '.join(unknown)} (see export-check --help)")
    return {k: taken[k].keyword(v) for k, v in given.items()}


def _explicit_value(o: Option, value: Any) -> Any:
    """An explicit artifacts list or arch-kwargs object from its text (or, from the plugin, a list or dict)."""
    if o.kind == "strlist":
        kinds = tuple(comma_list(value) if isinstance(value, str) else [p for item in value for p in comma_list(item)])
        if not kinds:
            raise UsageError(f"--{o.name} is empty; list kinds separated by commas")
        return kinds
    if o.kind == "table" and isinstance(value, str):
        if len(value) > JSON_MAX_BYTES:
            raise UsageError(f"--{o.name} is {len(value):,} characters long; at most {JSON_MAX_BYTES:,}: pass plain constructor arguments")
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--{o.name} is not valid JSON ({exc.msg}); pass an object like '{{\"num_classes\": 10}}'") from None
        except RecursionError:
            raise UsageError(f"--{o.name} is nested too deep to read; at most {JSON_MAX_DEPTH} levels: pass plain constructor arguments") from None
        except ValueError:  # json's limit on the digits of an integer
            raise UsageError(f"--{o.name} holds an integer of thousands of digits; at most 64-bit integers") from None
        if not isinstance(value, dict):
            raise UsageError(f"--{o.name} must be a JSON object, got {type(value).__name__}")
    if o.kind == "int" and isinstance(value, int):
        bounded_int(value, f"--{o.name}")
    if o.python == "arch_kwargs":
        json_data(value, f"--{o.name}")
    return value


# --- the overlay: explicit > settings file > default ----------------------------------------------


def overlay(command: str, explicit: Mapping[str, Any], settings: Mapping[str, Any],
            defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every option ``command`` takes, by python name: its explicit value, else the settings file's,
    else ``defaults``' (the plugin's private out folder), else the table's. Plus ``arch_root``, which
    goes with ``arch``: the folder of the settings file that named it; None for an explicit arch."""
    values: dict[str, Any] = {}
    for o in for_command(command):
        if o.python in explicit:
            value = _explicit_value(o, explicit[o.python])
        elif o.settings and o.python in settings:
            value = settings[o.python]
        else:
            value = (defaults or {}).get(o.python, o.default)
            value = value() if callable(value) else value
        values[o.python] = value
    values["arch_root"] = None if "arch" in explicit else settings.get("arch_root")
    return values


def split_output_gates(outputs: Any, source: str) -> tuple[Any, dict[str, dict[str, float]]]:
    """A settings file's ``outputs`` tables split in two: what the signature reads (``signature.parse_signature_settings``)
    and the gate settings given for one output (``[tool.export-check.outputs.boxes] max-mae = 1e-4``), checked as the
    same keys are in ``[tool.export-check]``; each problem is one line naming the file and the key.

    >>> split_output_gates({"boxes": {"kind": "values", "max-mae": 1e-4}}, "p.toml")
    ({'boxes': {'kind': 'values'}}, {'boxes': {'max-mae': 0.0001}})
    """
    if not isinstance(outputs, Mapping):
        return outputs, {}  # not a table of tables: the signature's parser says so
    rows = {o.name: o for o in OPTIONS if o.gate is not None}
    rest: dict[str, Any] = {}
    gates: dict[str, dict[str, float]] = {}
    for name, table in outputs.items():
        if not isinstance(table, Mapping):
            rest[name] = table
            continue
        rest[name] = {k: v for k, v in table.items() if k not in rows}
        own = {k: coerce(v, rows[k].kind, None, f"{source}: outputs.{name}.{k}") for k, v in table.items() if k in rows}
        for key, value in own.items():
            try:
                Thresholds.from_options({key: value})
            except UsageError as exc:
                raise UsageError(f"{source}: outputs.{name}.{key}: {exc}") from None
        if own:
            gates[str(name)] = own
    return rest, gates


def to_run_config(values: Mapping[str, Any]) -> RunConfig:
    """The RunConfig of overlaid ``check`` values: each row with a ``field`` sets it; the gate rows
    set the thresholds; ``no-cache`` drops the cache."""
    rows = for_command(CHECK)
    config = {o.field: values[o.python] for o in rows if o.field}
    if values.get("no_cache"):
        config["cache_dir"] = None
    thresholds = Thresholds.from_options({o.gate.name: values[o.python] for o in rows if o.gate}, values.get("output_gates"))
    from .decode.gates import OPTIONS as DECODE

    decode_gates = tuple((o.name, values[o.python]) for o in rows if o.name in DECODE and values[o.python] is not None)
    return RunConfig(**config, arch_root=values["arch_root"], thresholds=thresholds, decode_gates=decode_gates,
                     signature_settings=values.get("signature_settings") or SignatureSettings(),
                     settings_files=tuple(values.get("settings_files", ())), settings_ignored=tuple(values.get("settings_ignored", ())))
