"""A check on a generative golden set: eager, then every decode kind built and stepped from its file, then every row judged.

Observing (builds, the stepping children, the token verdicts: numbers only) comes first; the judge (gates.judge, pure)
then decides the rows in their order, the full forward's before the decode steps' whose cause reads it, as
``export-check judge`` decides them again from a stored report (rows.judged_again).

``run_generation`` is what ``run_check`` calls when ``config.golden`` is a generative set; it returns
the same :class:`~export_check.results.Report` every view reads, one ``Row`` per kind: the numbers of
the teacher-forced pass in ``metrics`` (per-position agreement), the token verdicts in ``details``,
and every missed bound with its cause in ``reasons``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from .. import __version__
from ..config import RunConfig
from ..files import FileInfo, file_info, locked_out_dir, prepare_out_dir
from ..model import load_model, pinned_threads
from ..results import ERROR, PASS, GoldenSummary, Report, Row
from ..versions import library_versions
from . import goldenset, reference
from .gates import DecodePath, gates_for, judge
from .kinds import KINDS, DecodeKind
from .rows import ROW_GATES, judged_row, not_applicable_row, row_family
from .stepping import SteppingFailed, step_file
from .steps import cache_shape
from .verdicts import TokenVerdict, runner_disagreement, token_verdict


@dataclass(frozen=True)
class Plant:
    """Decode-path bugs planted in every decode step built (the tests'): see steps.CachedStep."""

    write_offset: int = 0
    rope_offset: bool = True
    cache_length: int | None = None  # None: exactly the longest prompt + continuation


@dataclass(frozen=True)
class Reference:
    names: list[str]
    prompts: list[np.ndarray]
    approved: list[np.ndarray]
    logits: list[np.ndarray]
    generated: list[np.ndarray]


@dataclass(frozen=True)
class Observed:
    """A row's numbers before its judge: the verdict, and what the judge reads beside it."""

    name: str
    family: str  # the decode gate family (gates.GATES)
    against: str
    verdict: TokenVerdict
    path: DecodePath  # its single_forward_passed is the full-forward row's status, set when the rows are judged in order
    standing: tuple[str, ...] = ()  # reasons no gate decides: the runtime's own runner disagreeing
    extra: tuple[tuple[str, str], ...] = ()
    artifact: FileInfo | None = None
    build_seconds: float | None = None
    replay_seconds: float | None = None
    notes: tuple[str, ...] = ()


def _observed(kind: DecodeKind, model, golden: goldenset.GenerativeSet, eager: Reference, out_dir: Path, plant: Plant,
              shape: tuple[int, ...], decode: Callable) -> Observed | Row:
    """A kind built and stepped from its file, and its verdict; a Row (an error) when it could not be built or stepped."""
    family = row_family(kind.family)
    needed = max(len(p) for p in eager.prompts) + golden.new_tokens
    is_step = kind.name != "full-forward"
    length = shape[2] if is_step else None  # the steps' static cache: the longest prompt + continuation, or the plant's
    bugs = {"write_offset": plant.write_offset, "rope_offset": plant.rope_offset} if is_step else {}
    path = out_dir / f"{kind.name}{kind.suffix}"
    began = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:  # an exporter's warnings are the row's notes, never its failure
            warnings.simplefilter("always")
            kind.build(model, length or needed, path, bugs)
    except Exception as exc:
        return Row(kind.name, family, "eager", ERROR, ROW_GATES[family], None, (f"build failed: {type(exc).__name__}: {str(exc).splitlines()[0]}",))
    built = time.perf_counter() - began
    runner_reads = kind.runtime == "executorch-runner" and golden.tokenizer is not None and None not in golden.texts
    try:
        stepped = step_file(kind, path, eager.prompts, eager.approved, golden.new_tokens, shape if is_step else (),
                            texts=list(golden.texts) if runner_reads else None, tokenizer=golden.tokenizer)  # type: ignore[arg-type]
    except SteppingFailed as exc:
        return Row(kind.name, family, "eager", ERROR, ROW_GATES[family], None, (str(exc),), artifact=file_info(path), build_seconds=built)
    verdict = token_verdict(eager.names, eager.prompts, eager.approved, eager.logits, eager.generated, stepped.forced, stepped.generated, decode)
    disagree = runner_disagreement(eager.names, stepped.runner, stepped.generated, decode, model.config.eos_token_id)
    notes = tuple(dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught))
    if kind.runtime == "executorch-runner" and not runner_reads:
        notes += ("ExecuTorch's runner reads text prompts with a tokenizer; this set's prompts are token ids: only the stepped loop is judged",)
    extra: tuple[tuple[str, str], ...] = ()
    if stepped.runner is not None:
        raised = [(n, t[1:]) for n, t in zip(eager.names, stepped.runner, strict=True) if t.startswith("\0")]
        compared = len(eager.names) - len(raised)
        extra = (("runner_agrees", "no: see the reasons" if disagree else f"{compared}/{compared} prompts"),)
        # the runner's own failure (not the file's): a visible note, the prompt not compared there
        notes += tuple(f"ExecuTorch's runner raised on prompt {n}, not compared there: {why}" for n, why in raised)
    return Observed(kind.name, kind.family, "eager", verdict, DecodePath(is_step, length, None, needed), disagree, extra,
                    artifact=file_info(path), build_seconds=built, replay_seconds=stepped.seconds, notes=notes)


def run_generation(config: RunConfig, progress: Callable[[str], None] = lambda _: None, plant: Plant | None = None) -> Report:
    """The check of ``config`` on its generative golden set; ``plant`` (tests only) plants decode-path bugs."""
    started = time.perf_counter()
    plant = plant or Plant()
    gates = gates_for(dict(config.decode_gates, **{"max-mae": config.thresholds.gate_for("float").max_mae}))  # a bad bound: before any work
    golden = goldenset.load_set(config.golden)
    out_dir = prepare_out_dir(config.out_dir)
    checkpoint = file_info(config.checkpoint)
    chosen = config.selected_kinds  # --artifacts: RunConfig refused any name not a decode kind's; none: every one
    decode = golden.decoder()
    with locked_out_dir(out_dir), pinned_threads(config.threads):
        progress("loading checkpoint")
        model = load_model(config.checkpoint, config.arch, config.arch_kwargs, config.arch_root)
        progress("eager over the golden prompts")
        prompts, approved = list(golden.prompts), list(golden.continuations)
        generated, logits = reference.eager_reference(model, prompts, golden.new_tokens, approved)
        eager = Reference(list(golden.names), prompts, approved, logits, generated)
        shape = cache_shape(model, plant.cache_length or max(len(p) for p in prompts) + golden.new_tokens)  # every decode step's cache
        verdict = token_verdict(eager.names, prompts, approved, list(golden.logits), approved, tuple(logits), tuple(generated), decode)
        observed: list[Observed | Row] = [Observed("eager", "eager", "golden", verdict, DecodePath(False, None, None))]
        for kind in (k for k in KINDS if k.name in chosen):
            missing = [m for m in kind.needs if importlib.util.find_spec(m) is None]
            if missing:
                observed.append(not_applicable_row(kind.name, kind.family, f"needs {', '.join(missing)}, not installed", config.strict))
                continue
            progress(f"{kind.name}: build, step")
            observed.append(_observed(kind, model, golden, eager, out_dir, plant, shape, decode))
    rows: list[Row] = []
    single_forward: bool | None = None  # the full-forward row's status: while it passes, a decode step's divergence blames the decode path
    for seen in observed:
        if isinstance(seen, Row):  # a build or stepping error, or a kind that does not apply: decided where it happened
            row = seen
        else:
            path = dataclasses.replace(seen.path, single_forward_passed=single_forward)
            judged = judge(seen.name, seen.verdict, gates[seen.family], path, seen.against, seen.standing)
            row = judged_row(seen.name, seen.family, seen.verdict, judged, seen.extra, artifact=seen.artifact,
                             build_seconds=seen.build_seconds, replay_seconds=seen.replay_seconds, notes=seen.notes)
        if row.name == "full-forward":
            single_forward = row.status == PASS
        rows.append(row)
    return Report(
        tool_version=__version__, created=datetime.now(UTC).isoformat(timespec="seconds"), checkpoint=checkpoint,
        golden=GoldenSummary(path=str(config.golden), inputs=len(golden), manifest_sha256=golden.manifest_sha256,
                             created=str(golden.manifest.get("created", "")),
                             recorded_checkpoint_sha256=golden.manifest["model"].get("checkpoint_sha256"),
                             recorded_with=tuple(sorted(golden.manifest.get("recorded_with", {}).items())), label_accuracy=None),
        # every family's gate, as a report holds them (judge reads them back); the weight-only rows shown as the views' int8
        thresholds=dataclasses.replace(config.thresholds, gates=tuple((f, ROW_GATES["int8"] if f == "int8" else g)
                                                                      for f, g in config.thresholds.gates)),
        settings=tuple(sorted(config.settings_json().items())),
        versions=tuple(sorted(library_versions(()).items())), rows=tuple(rows), seconds=time.perf_counter() - started,
        out_dir=str(out_dir), run_notes=(f"generative golden set: {len(golden)} prompts x {golden.new_tokens} new tokens, "
                                         f"each decode kind stepped token by token from its file",
                                         "decode gates: " + "; ".join(f"{f} {g.describe()}" for f, g in gates.items())))
