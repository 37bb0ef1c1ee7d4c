"""Big models (issue 43, item 5): the default check against the straight-line script on TokenTransformer at ~14 M,
~92 M and ~700 M parameters (seeded weights, 32 token inputs of 128, ``dynamic-axes = { 1 = "sequence" }``).

Each size runs ``export-check check --no-cache`` (every default kind) and ``benchmarks/baseline_large.py`` (the same
six kinds in one process), interleaved (script, check, check, script, ...), one subprocess each, and reports per
side: wall, the tree's CPU (user+sys, ``wait4``), the tree's peak PSS (sampled, ``harness.measured``) and the disk
its output folder holds afterwards, each as export-check / script. Not a timed test: the 700 M model's fp32
weights are 2.9 GB, so run it only with the memory for it (``--sizes 700m``). Inputs go under
``benchmarks/out/big-models/`` (git-ignored)::

    python benchmarks/big_models.py --sizes 14m 92m --repeats 2
    python benchmarks/big_models.py --sizes 700m --write BENCHMARKS.md    # the section, between its markers

The targets (issue 43): CPU and peak memory at most 1.05x the script's, wall at most the script's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness import OUT, REPO, export_check_cmd, measured  # noqa: E402

WORK = OUT / "big-models"
ARCH = f"{HERE / 'large_models.py'}:TokenTransformer"
SIZES = {  # name -> TokenTransformer kwargs (vocab 8000, max_len 512, 10 classes)
    "14m": {"dim": 384, "depth": 6, "heads": 6},
    "92m": {"dim": 768, "depth": 12, "heads": 12},
    "700m": {"dim": 1536, "depth": 24, "heads": 16},
}
INPUTS, SEQUENCE = 32, 128
SETTINGS = '[model-inputs.tokens]\ndtype = "int64"\ndynamic-axes = { 1 = "sequence" }\n'
BEGIN, END = "<!-- big-models:begin -->", "<!-- big-models:end -->"


def prepare(size: str) -> tuple[Path, Path, Path]:
    """The seeded checkpoint, the settings file and a recorded golden set of ``size`` (made once)."""
    folder = WORK / size
    checkpoint, settings, golden = folder / "model.pth", folder / "settings.toml", folder / "golden"
    if not (golden / "manifest.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        settings.write_text(SETTINGS)
        subprocess.run([sys.executable, __file__, "--write-inputs", size], cwd=REPO, check=True)
        subprocess.run([*export_check_cmd(), "golden", "record", str(checkpoint), "--arch", ARCH, "--arch-kwargs",
                        json.dumps(SIZES[size]), "--inputs", str(folder / "inputs"), "--golden", str(golden), "--config",
                        str(settings), "--force", "-q"], cwd=REPO, check=True)
    return checkpoint, settings, golden


def _write_inputs(size: str) -> None:
    import large_models
    import numpy as np
    import torch

    folder = WORK / size
    model = large_models.TokenTransformer(**SIZES[size])
    torch.save(large_models.seeded_state(model), folder / "model.pth")
    inputs = folder / "inputs"
    shutil.rmtree(inputs, ignore_errors=True)
    inputs.mkdir()
    rng = np.random.default_rng(INPUTS)
    for index in range(INPUTS):
        np.savez(inputs / f"{index:04d}.npz", tokens=rng.integers(0, 8000, SEQUENCE, dtype=np.int64))


def disk_mb(folder: Path) -> float:
    """What ``folder`` holds on disk (allocated blocks; a hard link counted once)."""
    seen, total = set(), 0
    for path in folder.rglob("*"):
        info = path.lstat()
        if path.is_file() and (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
    return total / 2**20


def one_run(side: str, size: str) -> dict[str, Any]:
    checkpoint, settings, golden = prepare(size)
    out = WORK / size / f"out-{side}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    report = WORK / size / f"report-{side}.json"
    report.unlink(missing_ok=True)  # never read an earlier run's report as this one's
    if side == "script":
        cmd = [sys.executable, str(HERE / "baseline_large.py"), "--arch", ARCH, "--arch-kwargs", json.dumps(SIZES[size]),
               "--checkpoint", str(checkpoint), "--golden", str(golden), "--out", str(out), "--json"]
    else:
        cmd = [*export_check_cmd(), "check", str(checkpoint), "--arch", ARCH, "--arch-kwargs", json.dumps(SIZES[size]),
               "--golden", str(golden), "--config", str(settings), "--out", str(out), "--json", str(report), "--no-cache", "-q"]
    log = WORK / size / f"{side}.log"
    at_peak: list[tuple[str, int, float]] = []
    with open(log, "wb") as sink:
        if side == "script":  # it prints its JSON
            with open(report, "wb") as printed:
                code, wall, cpu, peak = measured(cmd, stdout=printed, stderr=sink, at_peak=at_peak)
        else:
            code, wall, cpu, peak = measured(cmd, stdout=sink, at_peak=at_peak)
    if code not in (0, 1):
        raise SystemExit(f"{side} on {size} failed ({code}): {log.read_text()[-3000:]}")
    found = json.loads(report.read_text())
    rows = ({row["name"]: row["status"] for row in found["rows"]} if side == "check"
            else {name: "built" for name in found["artifacts"]})
    return {"wall": wall, "cpu": cpu, "pss_mb": peak, "disk_mb": disk_mb(out), "code": code, "rows": rows,
            "stages": found.get("timings") if side == "check" else found.get("seconds"),
            "at_peak": sorted(((role, round(pss)) for role, _, pss in at_peak), key=lambda p: -p[1])}


def bench(size: str, repeats: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"script": [], "check": []}
    for repeat in range(repeats):
        for side in (("script", "check") if repeat % 2 == 0 else ("check", "script")):  # interleaved
            runs[side].append(one_run(side, size))
            last = runs[side][-1]
            print(f"  {size} {side}: wall {last['wall']:.1f} s, CPU {last['cpu']:.1f} s, peak PSS {last['pss_mb']:.0f} MB, "
                  f"disk {last['disk_mb']:.0f} MB; at the peak: " + ", ".join(f"{role} {pss}" for role, pss in last["at_peak"]),
                  flush=True)
    median = {side: {key: statistics.median(r[key] for r in series) for key in ("wall", "cpu", "pss_mb", "disk_mb")}
              for side, series in runs.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"size": size, "kwargs": SIZES[size], "repeats": repeats, "median": median, "rows": runs["check"][0]["rows"],
            "measured": f"{time.strftime('%Y-%m-%d')}, {commit or '?'}",
            "stages": {side: series[0]["stages"] for side, series in runs.items()},
            "at_peak": {side: series[0]["at_peak"] for side, series in runs.items()}}


def parameters(size: str) -> float:
    d, depth = SIZES[size]["dim"], SIZES[size]["depth"]
    return (8000 * d + 512 * d + depth * (12 * d * d + 13 * d) + 2 * d + 10 * d + 10) / 1e6


def render(results: list[dict[str, Any]]) -> str:
    lines = [BEGIN, "## Big models (issue 43)", "",
             "`benchmarks/big_models.py`: the default check (`--no-cache`, every default kind) against "
             "`benchmarks/baseline_large.py` (the same six kinds in one process) on `large_models.py:TokenTransformer` "
             f"with seeded weights, {INPUTS} token inputs of {SEQUENCE}, the sequence axis dynamic; interleaved, medians. "
             "Memory is the whole process tree's peak PSS (sampled every 50 ms), CPU the tree's user+sys, disk what the "
             "output folder holds afterwards. Each cell: export-check / script (ratio).", "",
             "| model | parameters | runs | wall s | tree CPU s | tree peak PSS MB | disk MB | rows |",
             "| --- | ---: | ---: | --- | --- | --- | --- | --- |"]
    for r in results:
        c, s = r["median"]["check"], r["median"]["script"]
        cells = [f"{c[k]:.{0 if k != 'wall' and k != 'cpu' else 1}f} / {s[k]:.{0 if k != 'wall' and k != 'cpu' else 1}f} "
                 f"({c[k] / s[k]:.2f}x)" for k in ("wall", "cpu", "pss_mb", "disk_mb")]
        statuses = ", ".join(f"{name} {status}" for name, status in r["rows"].items())
        lines.append(f"| {r['size']} | {parameters(r['size']):.0f} M | {r['repeats']} | {' | '.join(cells)} | {statuses} |")
    lines += ["", "Each process's PSS (MB) at the tree's peak, the first check of each size (processes name themselves: "
              "`xc server`, `xc load host`, `xc host <runtime>`, and `xc b`/`l`/`r <kind>` for a build, load-probe and replay "
              "child; `/proc/<pid>/comm` keeps 15 bytes), and when and at which commit each size was measured:", ""]
    for r in results:
        procs = ", ".join(f"{role} {pss}" for role, pss in r.get("at_peak", {}).get("check", []))
        lines.append(f"- {r['size']} ({r.get('measured', 'an earlier commit, before the per-process breakdown')}): {procs or 'not recorded'}")
    lines += ["", "Targets: CPU and peak memory at most 1.05x the script's, wall at most the script's. Reproduce:", "",
              "    python benchmarks/big_models.py --sizes 14m 92m --repeats 2 --write BENCHMARKS.md",
              "    python benchmarks/big_models.py --sizes 700m --write BENCHMARKS.md   # 2.9 GB of fp32 weights", "", END]
    return "\n".join(lines)


def write_section(path: Path, results: list[dict[str, Any]]) -> None:
    """Put the section between its markers in ``path`` (appended the first time), keeping rows of sizes not rerun."""
    text = path.read_text()
    store = WORK / "results.json"
    kept = {r["size"]: r for r in (json.loads(store.read_text()) if store.is_file() else [])}
    kept.update({r["size"]: r for r in results})
    store.write_text(json.dumps(list(kept.values()), indent=1))
    section = render([kept[size] for size in SIZES if size in kept])
    if BEGIN in text and END in text:
        old = text[text.index(BEGIN): text.index(END)]
        for size in (s for s in SIZES if s not in kept):  # measured elsewhere (another clone): its lines kept, never dropped
            for prefix, before in ((f"| {size} |", "\n\nEach process's PSS"), (f"- {size} (", "\n\nTargets:")):
                line = next((ln for ln in old.splitlines() if ln.startswith(prefix)), None)
                if line is not None:
                    at = section.index(before)
                    section = section[:at] + "\n" + line + section[at:]
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=tuple(SIZES), default=["14m", "92m"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--write", type=Path, help="a Markdown file to put the section in (BENCHMARKS.md)")
    parser.add_argument("--write-inputs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_inputs:
        _write_inputs(args.write_inputs)
        return 0
    results = [bench(size, args.repeats) for size in args.sizes]
    print(json.dumps([{k: r[k] for k in ("size", "median", "rows")} for r in results], indent=1))
    if args.write:
        write_section(args.write, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
