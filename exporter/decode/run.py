"""A check on a generative golden set: eager, then every decode kind built and stepped from its file, then every row judged.

Observing (builds, the stepping children, the token verdicts: numbers only; a kind whose packages are missing noted
as not applicable) comes first; the judge (rows.judge, pure) then decides the rows in their order, the full forward's
before the decode steps' whose cause reads it, as ``export-check judge`` decides them again from a stored report
(rows.judged_again).

``run_generation`` is what ``run_check`` calls when ``config.golden`` is a generative set; it returns
the same :class:`~export_check.results.Report` every view reads, one ``Row`` per kind: the numbers of
the teacher-forced pass in ``metrics`` (per-position agreement), the token verdicts in ``details``,
and every missed bound with its cause in ``reasons``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from .. import __version__
from ..config import RunConfig
from ..errors import GoldenError
from ..files import file_info, locked_out_dir, prepare_out_dir
from ..model import load_model, pinned_threads
from ..results import PASS, GoldenSummary, Report, Row
from ..versions import library_versions
from . import goldenset, reference
from .kinds import KINDS
from .reference import Reference
from .rows import ROW_GATES, DecodePath, NotApplicable, judge, judged_row, not_applicable_row
from .stepping import Observed, StepHosts, observe
from .verdicts import token_verdict


@dataclass(frozen=True)
class Plant:
    """Decode-path bugs planted in every decode step built (the tests'): see steps.CachedStep."""

    write_offset: int = 0
    rope_offset: bool = True
    cache_length: int | None = None  # None: exactly the longest prompt + continuation


def run_generation(config: RunConfig, progress: Callable[[str], None] = lambda _: None, plant: Plant | None = None) -> Report:
    """The check of ``config`` on its generative golden set; ``plant`` (tests only) plants decode-path bugs."""
    started = time.perf_counter()
    plant = plant or Plant()
    bugs = {"write_offset": plant.write_offset, "rope_offset": plant.rope_offset}  # planted in every decode step built
    gates = config.generation_gates  # every bound checked when the config was made, before any work
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
        unlike = next(((n, r.shape, e.shape) for n, r, e in zip(golden.names, golden.logits, logits, strict=True) if r.shape != e.shape), None)
        if unlike is not None:  # another vocabulary than the set's: one line before any build, never a traceback after them
            raise GoldenError(f"{config.golden}: prompt {unlike[0]}'s recorded logits have shape {unlike[1]}, the model's {unlike[2]}: the "
                              "set was recorded with another vocabulary; pass the checkpoint and --arch it was recorded with, or record "
                              "it again with export-check golden record")
        eager = Reference(list(golden.names), prompts, approved, logits, generated)
        shape = reference.cache_shape(model, plant.cache_length or max(len(p) for p in prompts) + golden.new_tokens)  # every decode step's cache
        observed: list[Observed | Row | NotApplicable] = []
        with StepHosts() as hosts:  # a host per runtime, its import paid once: each file stepped in a child it forks
            for kind in (k for k in KINDS if k.name in chosen):
                missing = [m for m in kind.needs if importlib.util.find_spec(m) is None]
                if missing:
                    observed.append(NotApplicable(kind.name, kind.family, f"needs {', '.join(missing)}, not installed"))
                    continue
                progress(f"{kind.name}: build, step")
                observed.append(observe(kind, model, golden, eager, out_dir, bugs, shape, decode, hosts))
        # eager against the set's recording (its shapes checked above), taken beside the kinds' verdicts: the first row
        verdict = token_verdict(eager.names, prompts, approved, list(golden.logits), approved, tuple(logits), tuple(generated), decode)
    rows: list[Row] = []
    single_forward: bool | None = None  # the full-forward row's status: while it passes, a decode step's divergence blames the decode path
    for seen in (Observed("eager", "eager", "golden", verdict, DecodePath(False, None, None)), *observed):
        if isinstance(seen, Row):  # a build or stepping error: decided where it happened
            row = seen
        elif isinstance(seen, NotApplicable):  # under --strict a failure
            row = not_applicable_row(seen.name, seen.family, seen.why, config.strict)
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
