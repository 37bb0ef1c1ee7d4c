"""A check on a generative golden set: eager, then every decode kind built, stepped from its file and judged.

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
from ..files import file_info, locked_out_dir, prepare_out_dir
from ..model import load_model, pinned_threads
from ..results import ERROR, PASS, GoldenSummary, Report, Row
from ..versions import library_versions
from . import goldenset, reference
from .gates import DecodePath, GenerationGate, gates_for
from .kinds import KINDS, DecodeKind
from .rows import ROW_GATES, judged_row, not_applicable_row, row_family
from .stepping import SteppingFailed, step_file
from .steps import cache_shape
from .verdicts import token_verdict


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


def eager_reference(model, golden: goldenset.GenerativeSet) -> Reference:
    prompts, approved = list(golden.prompts), list(golden.continuations)
    generated = [reference.greedy(model, p, golden.new_tokens) for p in prompts]
    logits = [reference.forced_logits(model, p, c) for p, c in zip(prompts, approved, strict=True)]
    return Reference(list(golden.names), prompts, approved, logits, generated)


def _kind_row(kind: DecodeKind, model, golden: goldenset.GenerativeSet, eager: Reference, out_dir: Path, plant: Plant,
              single_forward_passed: bool | None, decode: Callable, gate: GenerationGate, strict: bool = False) -> Row:
    missing = [m for m in kind.needs if importlib.util.find_spec(m) is None]
    family = row_family(kind.family)
    if missing:
        return not_applicable_row(kind.name, kind.family, f"needs {', '.join(missing)}, not installed", strict)
    needed = max(len(p) for p in eager.prompts) + golden.new_tokens
    is_step = kind.name != "full-forward"
    length = (plant.cache_length or needed) if is_step else None
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
    shape = cache_shape(model, length) if length else ()
    runner_reads = kind.runtime == "executorch-runner" and golden.tokenizer is not None and None not in golden.texts
    try:
        stepped = step_file(kind, path, eager.prompts, eager.approved, golden.new_tokens, shape,
                            texts=list(golden.texts) if runner_reads else None, tokenizer=golden.tokenizer)  # type: ignore[arg-type]
    except SteppingFailed as exc:
        return Row(kind.name, family, "eager", ERROR, ROW_GATES[family], None, (str(exc),), artifact=file_info(path), build_seconds=built)
    verdict = token_verdict(eager.names, eager.prompts, eager.approved, eager.logits, eager.generated, stepped.forced, stepped.generated, decode)
    decode_path = DecodePath(is_step, length, single_forward_passed, needed)
    notes = tuple(dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught))
    if kind.runtime == "executorch-runner" and not runner_reads:
        notes += ("ExecuTorch's runner reads text prompts with a tokenizer; this set's prompts are token ids: only the stepped loop is judged",)
    disagree = runner_disagreement(eager.names, stepped, decode, model.config.eos_token_id)
    extra: tuple[tuple[str, str], ...] = ()
    if stepped.runner is not None:
        raised = [(n, t[1:]) for n, t in zip(eager.names, stepped.runner, strict=True) if t.startswith("\0")]
        compared = len(eager.names) - len(raised)
        extra = (("runner_agrees", "no: see the reasons" if disagree else f"{compared}/{compared} prompts"),)
        # the runner's own failure (not the file's): a visible note, the prompt not compared there
        notes += tuple(f"ExecuTorch's runner raised on prompt {n}, not compared there: {why}" for n, why in raised)
    return judged_row(kind.name, kind.family, verdict, gate, decode_path, "eager", disagree, extra, artifact=file_info(path),
                      build_seconds=built, replay_seconds=stepped.seconds, notes=notes)


def runner_disagreement(names: list[str], stepped, decode: Callable, eos: int | None) -> tuple[str, ...]:
    """Where the runtime's own runner generated other text than the stepped loop (each prompt named; the stepped tokens up to EOS)."""
    if stepped.runner is None:
        return ()
    differing = []
    for name, text, tokens in zip(names, stepped.runner, stepped.generated, strict=True):
        if text.startswith("\0"):  # the runner raised there: a note of the row (_kind_row)
            continue
        ids = [int(t) for t in tokens]
        stepped_text = decode(ids[:ids.index(eos)] if eos in ids else ids)
        if text != stepped_text:
            differing.append(f"prompt {name}: runner {text!r}, stepped {stepped_text!r}")
    if not differing:
        return ()
    return (f"ExecuTorch's runner (TextLLMRunner) and the stepped loop disagree on {len(differing)} of {len(names)} prompts; first: "
            f"{differing[0]}",)


def run_generation(config: RunConfig, progress: Callable[[str], None] = lambda _: None, plant: Plant | None = None) -> Report:
    """The check of ``config`` on its generative golden set; ``plant`` (tests only) plants decode-path bugs."""
    started = time.perf_counter()
    plant = plant or Plant()
    golden = goldenset.load_set(config.golden)
    out_dir = prepare_out_dir(config.out_dir)
    checkpoint = file_info(config.checkpoint)
    chosen = config.selected_kinds  # --artifacts: RunConfig refused any name not a decode kind's; none: every one
    decode = golden.decoder()
    gates = gates_for(dict(config.decode_gates, **{"max-mae": config.thresholds.gate_for("float").max_mae}))
    with pinned_threads(config.threads), locked_out_dir(out_dir):
        progress("loading checkpoint")
        model = load_model(config.checkpoint, config.arch, config.arch_kwargs, config.arch_root)
        progress("eager over the golden prompts")
        eager = eager_reference(model, golden)
        verdict = token_verdict(eager.names, eager.prompts, eager.approved, list(golden.logits), list(golden.continuations),
                                tuple(eager.logits), tuple(eager.generated), decode)
        rows = [judged_row("eager", "eager", verdict, gates["eager"], DecodePath(False, None, None), "golden")]
        single_forward: bool | None = None
        for kind in KINDS:
            if kind.name not in chosen:
                continue
            progress(f"{kind.name}: build, step, judge")
            row = _kind_row(kind, model, golden, eager, out_dir, plant, single_forward, decode, gates[kind.family], config.strict)
            if kind.name == "full-forward":
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
