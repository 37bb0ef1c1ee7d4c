"""What to do about a failing run: the lines that end the terminal report (issue 29.4).

For each failing row, one ``next:`` line: an ``eager`` row that drifted from the golden set gets the
``golden approve`` command that adopts new weights after review (``--dry-run`` first); an artifact row
the settings that would change its verdict (its gate family's, ``gates.GateFamily.fix_hint``), since
approving a new golden set does not change an artifact's drift from eager. Then the inputs whose top-1
changed, by their golden names, and the documentation pages that say more.

>>> approve_command("m.pth", "models/net.py:Net", "golden", read_settings=True)
'export-check golden approve m.pth --dry-run'
>>> approve_command("m.pth", "models/net.py:Net", "my golden", read_settings=False)
"export-check golden approve m.pth --arch models/net.py:Net --golden 'my golden' --dry-run"
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ..gates import changed_name
from ..results import FAIL, Report, Row
from ..sentences import SHORTFALL

EAGER = "eager"
SHOWN_INPUTS = 8  # the changed inputs named on a line; the rest are counted
DOCS_APPROVE = 'docs/tutorials/your-own-model.md ("When the model changes")'
DOCS_GATES = "docs/reference/gates.md"
DOCS_LANGUAGE = 'docs/how-to/your-own-language-model.md ("Setting the gates")'


def input_names(report: Report) -> list[str]:
    """The golden inputs' names in manifest order (what ``top1_changed`` indexes), or none when the set cannot be read."""
    from ..errors import ExportCheckError
    from ..golden.manifest import read_manifest

    try:
        return [item.name for item in read_manifest(Path(report.golden.path)).inputs]
    except (ExportCheckError, OSError):
        return []


def changed_inputs(row: Row, names: list[str]) -> str | None:
    """``a.png, b.png, … 12 in all``: the inputs whose top-1 class changed on ``row``, or None when none did."""
    changed = row.metrics.top1_changed if row.metrics is not None else ()
    if not changed:
        return None
    shown = ", ".join(names[i] if i < len(names) else f"#{i}" for i in changed[:SHOWN_INPUTS])
    return shown + (f", … {len(changed)} in all" if len(changed) > SHOWN_INPUTS else "")


def approve_command(checkpoint: str, arch: str, golden: str, read_settings: bool) -> str:
    """The command that shows (and, without ``--dry-run``, adopts) the new outputs: with the run's arch and
    golden set spelt out when no settings file supplied them."""
    words = ["export-check", "golden", "approve", checkpoint]
    if not read_settings:
        words += ["--arch", arch, "--golden", golden]
    return " ".join(shlex.quote(w) for w in [*words, "--dry-run"])


def _setting_hint(row: Row) -> str:
    from ..gates import FAMILIES, Thresholds

    keys = Thresholds().with_gates(**{row.family: row.gate}).loosen_keys(row.family) if row.family in FAMILIES else ["max-mae"]
    settings = " / ".join(keys)
    flags = " / ".join(f"--{k}" for k in keys)
    return (f"next: {row.name} drifts from eager beyond its {row.family} gate ({row.gate.describe()}); approving a new golden set does "
            f"not change that: fix the export, or after review loosen {settings} in [tool.export-check] ({flags})")


def _decode_hint(row: Row, record: dict) -> str:
    """A language model's row (its ``decode_judge`` record): its own gate's options, or, for a float row, the decode path."""
    from ..decode.gates import OPTIONS

    family, gate = str(record.get("family", "")), dict(row.details).get("decode_gate", "")
    keys = [name for name, (of, _) in OPTIONS.items() if of == family]
    if keys:
        return (f"next: {row.name} drifts from eager beyond its {family} gate ({gate}); fix the export, or after review loosen "
                f"{' / '.join(keys)} in [tool.export-check] ({' / '.join(f'--{k}' for k in keys)})")
    return (f"next: {row.name} does not generate or score eager's tokens within its {family or 'float'} gate ({gate}); its reasons "
            "name the prompt, the step and the suspect: fix the export's decode path")


def _decode_record(row: Row) -> dict | None:
    from ..decode.names import JUDGE_RECORD

    raw = dict(row.details).get(JUDGE_RECORD)
    try:
        record = json.loads(raw) if raw else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def next_steps(report: Report, names: list[str] | None = None) -> list[str]:
    """The lines that end a failing run's report (none for a passing one); ``names``: the golden inputs' names."""
    failing = [row for row in report.rows if row.status == FAIL]
    if not failing:
        return []
    if names is None:
        names = input_names(report) if any(row.metrics is not None and row.metrics.top1_changed for row in failing) else []
    arch = dict(report.settings).get("arch", "")
    lines, docs = [], []
    for row in failing:
        if row.family == EAGER:
            command = approve_command(report.checkpoint.path, str(arch), report.golden.path, bool(report.settings_files))
            lines.append(f"next: {row.name} differs from the approved golden set: if the new weights are intended, review "
                         f"the diff with `{command}`, then run it without --dry-run to adopt them")
            docs.append(DOCS_APPROVE)
        else:
            if any(reason.startswith(SHORTFALL) for reason in row.reasons):  # --strict and too few weights in int8
                lines.append(f"next: {row.name} keeps most of its weights float (its reason names them): quantize those layers "
                             "(another int8 kind or recipe), or check without --strict, where the row says so in a note")
            record = _decode_record(row)
            if record is not None:  # a language model's row: its positions are no golden inputs to name
                lines.append(_decode_hint(row, record))
                docs.append(DOCS_LANGUAGE)
                continue
            if not row.reasons or not all(reason.startswith(SHORTFALL) for reason in row.reasons):
                lines.append(_setting_hint(row))
            docs.append(DOCS_GATES)
        changed = changed_inputs(row, names)
        if changed:
            lines.append(f"{changed_name(row.metrics) if row.metrics else 'top-1 changed'} on {row.name}: {changed}")
    lines.append("docs: " + "; ".join(dict.fromkeys(docs)))
    return lines
