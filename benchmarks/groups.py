"""The artifact groups against the baseline, and every kind's numbers on the bundled models.

For each group (``--groups``, default ``"default modern all"``): one cold ``export-check --no-cache
--artifacts GROUP`` of the bundled ResNet against ``benchmarks/baseline.py --kinds GROUP`` (the same
kinds in bare library calls; "-" where the baseline has no bare calls for a kind: onnx-ort, coreml,
litert), ``--repeats`` times each, medians; then, per group, from its run of the bundled ResNet and of
the sequence recogniser example, per kind: MAE, max error, relative MAE, size, build seconds, replay
seconds and ms/img (static int8 rows: on the samples outside the calibration split, the status saying
how many of each). Prints Markdown. Run from the repository root::

    python benchmarks/groups.py --repeats 1
    python benchmarks/groups.py --groups edge      # the on-device kinds (litert: run it in tox -e litert's environment)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [str(Path(sys.executable).with_name("export-check"))]
RESNET = ["models/checkpoints/resnet_digits.pth"]
RECOGNISER = ["models/checkpoints/sequence_recognizer.pth", "--config", "models/examples/sequence_recognizer.toml"]


def wall(cmd: list[str], required: bool = True) -> float | None:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # a failing row (exit 1) is a result; a crash or a usage error is not
        if not required:
            return None
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return seconds


def check(model: list[str], group: str, work: Path, tag: str) -> tuple[float, dict]:
    report = work / f"{tag}.json"
    seconds = wall([*CLI, *model, "--artifacts", group, "--no-cache", "-q", "--out", str(work / tag), "--json", str(report)])
    assert seconds is not None
    text = report.read_text()
    return seconds, json.loads("{" + text[text.index('"schema"'):])  # the seal is the first member


# kinds benchmarks/baseline.py has no bare calls for: a group holding one gets no baseline figure
NO_BASELINE = ("onnx-ort", "coreml", "litert")


def baseline(group: str, work: Path) -> float | None:
    """The baseline's seconds, or None where it has no bare calls for a kind of the group."""
    from export_check.artifacts import GROUPS

    kinds = [k for part in group.split(",") for k in GROUPS.get(part, (part,))]
    if any(k in NO_BASELINE for k in kinds):
        return None
    return wall([sys.executable, "benchmarks/baseline.py", "--arch", "resnet", "--checkpoint", RESNET[0], "--golden", "golden",
                 "--kinds", group, "--out", str(work / "baseline"), "--json"], required=False)


def kind_rows(report: dict) -> list[str]:
    lines = []
    for row in report["rows"]:
        if row["name"] == "eager":
            continue
        m, art, diag = row.get("metrics") or {}, row.get("artifact") or {}, row.get("diagnostics") or {}
        latency = (diag.get("latency") or {}).get("ms_per_image")
        details = row.get("details") or {}
        status = row["status"]
        if "judged_samples" in details and status in ("pass", "fail"):  # static int8: judged outside the calibration split
            status += f" ({details['judged_samples']} judged, {details['calibration_samples_excluded']} calibration)"
        cells = [row["name"], status,
                 *(f"{m[k]:.2e}" if m.get(k) is not None else "-" for k in ("mae", "max_abs", "relative_mae")),
                 f"{art['size_bytes'] / 1024:.0f} KB" if art.get("size_bytes") else "-",
                 f"{row['build_seconds']:.2f}" if row.get("build_seconds") is not None else "-",
                 f"{row['replay_seconds']:.2f}" if row.get("replay_seconds") is not None else "-",
                 f"{latency:.3f}" if latency is not None else "-"]
        lines.append("| " + " | ".join(cells) + " |")
        if row["status"] not in ("pass", "fail"):
            lines.append(f"|  | {'; '.join(row['reasons'])[:300]} |  |  |  |  |  |  |  |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--groups", default="default modern all", help="space-separated; each a group or a comma list of kinds")
    args = parser.parse_args()
    groups = args.groups.split()
    with tempfile.TemporaryDirectory(prefix="export-check-groups-") as folder:
        work = Path(folder)
        lines = ["| group | baseline s | cold s | ratio |", "|---|---|---|---|"]
        reports: dict[str, dict] = {}
        for group in groups:
            base = [baseline(group, work) for _ in range(args.repeats)]
            cold = []
            for i in range(args.repeats):
                seconds, reports[group] = check(RESNET, group, work, f"resnet-{len(reports)}-{i}")
                cold.append(seconds)
            c = statistics.median(cold)
            shown = group if len(group) < 30 else group[:27] + "..."
            if any(b is None for b in base):
                lines.append(f"| {shown} | - | {c:.2f} | - |")
            else:
                b = statistics.median([b for b in base if b is not None])
                lines.append(f"| {shown} | {b:.2f} | {c:.2f} | {c / b:.2f}x |")
        print("\n".join(lines))
        header = ["| kind | status | MAE | max err | rel. MAE | size | build s | replay s | ms/img |", "|---|---|---|---|---|---|---|---|---|"]
        for group, report in reports.items():
            if "all" in reports and group != "all" and group in ("default", "modern"):
                continue  # their kinds are in all's table
            print(f"\n### resnet_digits.pth, golden/ (64 images): {group}\n")
            print("\n".join([*header, *kind_rows(report)]))
            _, seq = check(RECOGNISER, group, work, f"recogniser-{group}")
            print(f"\n### sequence_recognizer.pth, its golden set (24 samples): {group}\n")
            print("\n".join([*header, *kind_rows(seq)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
