"""A language model's rows from their verdicts (pure: no torch): the judge, and a stored report's rows judged again.

``judge`` decides a row from its verdict and its gate (gates.py): every bound missed, then its cause when one can be
named. ``judged_row`` is the one way a verdict becomes a :class:`~export_check.results.Row`: the judge's decision (made
before), the numbers of the teacher-forced pass in ``metrics``, the token verdict and what the judge read
(``decode_judge``: its gate family, the gate, the decode path, and the reasons no gate decides, e.g. ExecuTorch's runner
disagreeing) in ``details``. A kind that does not apply (``NotApplicable``: its packages missing) is decided by the
judge too (``not_applicable_row``: under ``--strict`` a failure). ``judged_again`` reads those back from a JSON report
and judges them with the gates laid over by the options given now: ``export-check judge``.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compare import Metrics
from ..errors import UsageError
from ..files import FileInfo
from ..gates import Gate
from ..results import FAIL, NOT_APPLICABLE, PASS, Row
from .gates import FLOAT_MAX_MAE, INT8_MIN_TOP1, GenerationGate, gates_for, overlaid
from .names import JUDGE_RECORD
from .verdicts import TokenVerdict

# What the views' gate column and gates line show (exporter/gates.Gate bounds no KL and no generation): the decode gate
# itself is each row's details["decode_gate"] and the run's note. Both weight-only families are the views' "int8" rows.
ROW_GATES = {"eager": Gate(max_mae=FLOAT_MAX_MAE), "float": Gate(max_mae=FLOAT_MAX_MAE), "int8": Gate(max_relative_mae=1.0, min_top1=INT8_MIN_TOP1)}
RECORD = JUDGE_RECORD


def row_family(decode_family: str) -> str:
    """The views' family of a decode gate family: eager, float, or int8 (every weight-only family)."""
    return decode_family if decode_family in ("eager", "float") else "int8"


@dataclass(frozen=True)
class DecodePath:
    """What the judge knows of a row besides its numbers, to name a cause."""

    is_step: bool  # the row steps a decode step with a cache (not the full forward)
    cache_length: int | None
    single_forward_passed: bool | None  # the full-forward row's verdict in the same run (None: not built)
    positions_needed: int = 0  # the longest prompt + continuation


def _divergence_reasons(row: str, verdict: TokenVerdict, against: str) -> list[str]:
    diverged = verdict.diverged
    first = diverged[0]
    others = ", ".join(p.name for p in diverged[1:4]) + (", ..." if len(diverged) > 4 else "")
    more = "" if len(diverged) == 1 else f" (and {len(diverged) - 1} more: {others})"
    return [f"generation differs on {len(diverged)} of {len(verdict.prompts)} prompts; first: prompt {first.name} at step {first.first_step} "
            f"(position {first.position}): {against} {first.expected_text!r} (token {first.expected}), {row} {first.got_text!r} "
            f"(token {first.got}){more}"]


def _cause(verdict: TokenVerdict, path: DecodePath) -> list[str]:
    diverged = verdict.diverged
    if not path.is_step or not diverged:
        return []
    first = diverged[0]
    if path.cache_length is not None and all((p.position or 0) - 1 >= path.cache_length for p in diverged):
        return [f"cause: the generation stops matching only past the static cache's {path.cache_length} positions "
                f"(prompt + continuation need up to {path.positions_needed}): the cache is too short"]
    if path.single_forward_passed:
        return [f"cause: the single forward (full-forward) passes, so the decode path is the suspect (cache position, cache length, "
                f"mask), from step {first.first_step} of prompt {first.name}"]
    return []


@dataclass(frozen=True)
class Judged:
    """The judge's whole decision on a row, and what it read: a row's record (judged_row) stores the inputs to judge it again."""

    passed: bool  # every bound met and no standing reason
    reasons: tuple[str, ...]  # every bound missed, then its cause when one can be named, then the standing reasons
    gate: GenerationGate
    path: DecodePath
    against: str
    standing: tuple[str, ...]


def judge(row: str, verdict: TokenVerdict, gate: GenerationGate, path: DecodePath, against: str = "eager",
          standing: tuple[str, ...] = ()) -> Judged:
    """The row's decision: every bound it misses, then its cause when one can be named; ``standing``: reasons no gate
    decides (e.g. ExecuTorch's runner disagreeing), on which the row fails whatever its gate."""
    reasons: list[str] = []
    if gate.max_mae is not None and not verdict.mae <= gate.max_mae:
        reasons.append(f"logit MAE {verdict.mae:.3g} > {gate.max_mae:g} over {verdict.positions} teacher-forced positions")
    if gate.max_kl_mean is not None and not verdict.kl_mean <= gate.max_kl_mean:
        reasons.append(f"KL to {against} {verdict.kl_mean:.3g} nats (mean; worst {verdict.kl_worst:.3g}) > {gate.max_kl_mean:g}")
    if gate.min_top1 is not None and not verdict.top1_agreement >= gate.min_top1:
        reasons.append(f"top-1 agreement {verdict.top1_agreement:.1%} < {gate.min_top1:.0%} of positions")
    if gate.identical_generations and verdict.diverged:
        reasons += _divergence_reasons(row, verdict, against)
    if reasons and gate.identical_generations:  # int8 may move a near-tie: its divergence names no decode-path cause
        reasons += _cause(verdict, path)
    return Judged(not reasons and not standing, (*reasons, *standing), gate, path, against, standing)


def _metrics(verdict: TokenVerdict) -> Metrics:
    changed = tuple(i for i, p in enumerate(verdict.prompts) if not p.equal)
    ordered = sorted(verdict.per_prompt_mae)
    return Metrics(images=len(verdict.prompts), mae=verdict.mae, max_abs=verdict.max_abs, median_abs=float(np.median(ordered)),
                   top1_agreement=verdict.top1_agreement, top1_changed=changed, nonfinite=0, per_image_mae=verdict.per_prompt_mae,
                   agreement="per-position", position_agreement=verdict.top1_agreement)


def _details(verdict: TokenVerdict, gate_text: str, cache_length: int | None) -> list[tuple[str, str]]:
    details = [("decode_gate", gate_text), ("generations_equal", f"{verdict.generations_equal}/{len(verdict.prompts)}"),
               ("kl_mean", f"{verdict.kl_mean:.3g}"), ("kl_worst", f"{verdict.kl_worst:.3g}"),
               ("top1_agreement", f"{verdict.top1_agreement:.4f}"),
               ("perplexity", f"{verdict.perplexity:.4f} (reference {verdict.reference_perplexity:.4f}, "
                              f"{verdict.perplexity - verdict.reference_perplexity:+.4f})")]
    if cache_length is not None:
        details.append(("cache_length", str(cache_length)))
    details += [(f"diverged:{p.name}", f"step {p.first_step}: {p.expected_text!r} -> {p.got_text!r}") for p in verdict.diverged]
    details.append(("token_verdict", json.dumps(verdict.to_json())))  # every figure unrounded, for the JSON report's readers
    return details


def judged_row(name: str, decode_family: str, verdict: TokenVerdict, judged: Judged, extra: tuple[tuple[str, str], ...] = (),
               **fields: Any) -> Row:
    """The row of ``verdict`` as the judge decided it (``judge``), with what the judge read in its record."""
    record = {"family": decode_family, "against": judged.against, "gate": dataclasses.asdict(judged.gate),
              "path": dataclasses.asdict(judged.path), "standing": list(judged.standing)}
    metrics = _metrics(verdict)
    details = (*_details(verdict, judged.gate.describe(), judged.path.cache_length), *extra, (RECORD, json.dumps(record)))
    return Row(name=name, family=row_family(decode_family), compared_with=judged.against, status=PASS if judged.passed else FAIL,
               gate=ROW_GATES[row_family(decode_family)], metrics=metrics, reasons=judged.reasons, details=details, **fields)


@dataclass(frozen=True)
class NotApplicable:
    """A kind observed not to apply to this model or machine, and why: the judge decides its row (``not_applicable_row``)."""

    name: str
    family: str  # the decode gate family
    why: str


STRICT = " (--strict: a kind that does not apply fails)"
NOT_APPLICABLE_KEY = "not_applicable"  # the details key of why a kind does not apply: judge reads it under --strict or not


def not_applicable_row(name: str, decode_family: str, why: str, strict: bool, **fields: Any) -> Row:
    """A kind that does not apply to this model or machine: not applicable, or under ``--strict`` a failure saying so."""
    family = row_family(decode_family)
    return Row(name, family, "eager", FAIL if strict else NOT_APPLICABLE, ROW_GATES[family], None, (why + STRICT if strict else why,),
               details=((NOT_APPLICABLE_KEY, why),), **fields)


def _file(data: Any) -> FileInfo | None:
    return None if data is None else FileInfo(**{f.name: data[f.name] for f in dataclasses.fields(FileInfo) if f.name != "parts"})


def _again(stored: dict[str, Any], values: Mapping[str, Any], single_forward: bool | None, strict: bool) -> tuple[Row, str | None]:
    """One stored row judged again (``(row, 'family: before -> after')`` when its gate changed); a row without a verdict
    is kept as it was judged (an error), or judged under ``strict`` again (a kind that does not apply)."""
    details = {str(k): str(v) for k, v in dict(stored["details"]).items()}
    kept: dict[str, Any] = {"artifact": _file(stored.get("artifact")), "build_seconds": stored.get("build_seconds"),
            "replay_seconds": stored.get("replay_seconds"), "notes": tuple(str(n) for n in stored.get("notes") or ())}
    if NOT_APPLICABLE_KEY in details:
        return not_applicable_row(str(stored["name"]), str(stored["family"]), details[NOT_APPLICABLE_KEY], strict, **kept), None
    if RECORD not in details:
        family = str(stored["family"])
        return Row(str(stored["name"]), family, str(stored["compared_with"]), str(stored["status"]), ROW_GATES[family], None,
                   tuple(str(r) for r in stored["reasons"]), details=tuple(details.items()), **kept), None
    record = json.loads(details[RECORD])
    before = GenerationGate(**record["gate"])
    gate = overlaid(before, record["family"], values)
    path = DecodePath(**record["path"])
    if path.is_step:  # the full-forward row as judged now: the decode path is the suspect only while the single forward passes
        path = dataclasses.replace(path, single_forward_passed=single_forward)
    verdict = TokenVerdict.from_json(json.loads(details["token_verdict"]))
    own = {"decode_gate", "generations_equal", "kl_mean", "kl_worst", "top1_agreement", "perplexity", "cache_length", "token_verdict", RECORD}
    extra = tuple((k, v) for k, v in details.items() if k not in own and not k.startswith("diverged:"))
    judged = judge(str(stored["name"]), verdict, gate, path, record["against"], tuple(record["standing"]))
    row = judged_row(str(stored["name"]), record["family"], verdict, judged, extra, **kept)
    return row, None if gate == before else f"{record['family']} {before.describe()} -> {gate.describe()}"


def is_decode_report(data: Mapping[str, Any]) -> bool:
    """Whether a report's rows are a language model's (their verdicts stored in the rows, not in ``observations``)."""
    rows = data.get("rows")
    return isinstance(rows, list) and any(isinstance(r, dict) and RECORD in (r.get("details") or {}) for r in rows)


def judged_again(data: Mapping[str, Any], where: str, values: Mapping[str, Any],
                 strict: bool = False) -> tuple[tuple[Row, ...], tuple[str, ...]]:
    """A language model's stored rows judged again with ``values`` (option name -> value) laid over their gates, in
    their order, as ``run_generation`` judged them (``strict``: a kind that does not apply fails); and the notes that say
    which gates changed."""
    gates_for(values)  # every value given checked, whichever rows the report holds
    rows: list[Row] = []
    changed: list[str] = []
    single_forward: bool | None = None
    try:
        for stored in data["rows"]:
            row, change = _again(stored, values, single_forward, strict)
            if row.name == "full-forward":
                single_forward = row.status == PASS
            rows.append(row)
            changed += [change] if change else []
    except UsageError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{where}: a language model's rows cannot be read (field {exc} missing or wrong); write it again with "
                         "`export-check check --json PATH`") from None
    note = "decode gates changed: " + "; ".join(dict.fromkeys(changed)) if changed else "decode gates: as the report's"
    return tuple(rows), (note,)

