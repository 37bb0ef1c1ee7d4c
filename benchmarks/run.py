"""Benchmark runner: ``export-check`` (the real CLI, in a subprocess) against the straight-line baseline.

For every bundled architecture at golden-set sizes 32 and 256 it runs, alternating the order on each
repeat, the baseline (``benchmarks/baseline.py``), a cold ``export-check --no-cache`` (default ``--jobs``),
the same with ``--jobs 1`` (what overlapping builds and replays gains) and a warm ``export-check``
whose cache holds this exact run; it reports medians, the ratios to the baseline, the
stage breakdown (from the JSON report's ``timings``/``build_seconds``/``replay_seconds``) and each child's
the process tree's peak PSS (``harness.measured``). It also times ``export-check --help`` and an argument error (and checks they
import no torch), and the peak memory of 32 against 1000 images. It writes BENCHMARKS.md.
Run from anywhere, in an environment with export-check and its test extra (scikit-learn) installed, or
with `./dev test -e bench -- ARGS` on a fresh clone::

    python benchmarks/run.py                      # every arch at 32 and 256 images, 3 repeats
    python benchmarks/run.py --repeats 5 --archs resnet --sizes 32

Golden sets are recorded from scikit-learn's digits (the test split, then the train split) with
``export-check golden record`` into ``benchmarks/out/`` (git-ignored), once, then reused.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import OUT, REPO, Run, export_check_cmd, measured, timed  # noqa: E402  (the runner both benchmark scripts share)

sys.path.insert(0, str(REPO))

ARCHS = {  # name in models.ARCHITECTURES -> architecture spec export-check takes
    "simple_cnn": "models/simple_cnn.py:SimpleCNN",
    "resnet": "models/resnet.py:ResNet",
    "mobilenet_v2": "models/mobilenet.py:MobileNetV2",
    "vit": "models/vit.py:VisionTransformer",
}
ARCH_KWARGS = {"num_classes": 10, "in_channels": 3, "image_size": 32}
KINDS = ("torchscript-trace", "torchscript-script", "onnx", "onnx-simplified", "torch-int8-dynamic", "onnx-int8-dynamic")
TARGET_COLD, TARGET_WARM, TARGET_CLI_SECONDS, TARGET_MEMORY_MB = 1.10, 0.25, 0.3, 100
JOBS_MIN_GAIN = 1.05  # --jobs 2 stays the default only if it is at least this much faster than --jobs 1
HEAVY = ("torch", "numpy", "onnx", "onnxruntime")


# -- golden sets --------------------------------------------------------------------------------


def digit_images(count: int) -> Path:
    """``count`` digits as PNG files plus labels.json: the test split, then the train split, cycled.

    Written by a child process: peak RSS is measured per child (``wait4``), and Linux carries a
    forked child's high-water mark across ``exec``, so this process stays small (no numpy, no
    scikit-learn here) lest its own size become every measured run's floor.
    """
    folder = OUT / "images" / str(count)
    if (folder / "labels.json").is_file() and len(list(folder.glob("*.png"))) == count:
        return folder
    subprocess.run([sys.executable, __file__, "--write-digits", str(count), str(folder)], cwd=REPO, check=True)
    return folder


def _write_digits(count: int, folder: Path) -> None:
    import numpy as np

    from models.digits import digit_to_image, digits_split, load_digits_arrays

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    images, labels = load_digits_arrays()
    train_idx, test_idx = digits_split(labels)
    order = np.resize(np.concatenate([test_idx, train_idx]), count)
    names = {}
    for position, index in enumerate(order):
        name = f"{position:04d}_label{labels[index]}.png"
        digit_to_image(images[index]).save(folder / name)
        names[name] = int(labels[index])
    (folder / "labels.json").write_text(json.dumps(names, indent=1))


def model_args(arch: str) -> list[str]:
    return [str(REPO / "models" / "checkpoints" / f"{arch}_digits.pth"), "--arch", ARCHS[arch], "--arch-kwargs", json.dumps(ARCH_KWARGS)]


def golden_set(arch: str, count: int) -> Path:
    from export_check.files import sha256_file

    golden = OUT / "golden" / f"{arch}-{count}"
    manifest = golden / "manifest.json"
    checkpoint = REPO / "models" / "checkpoints" / f"{arch}_digits.pth"
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        if len(data["inputs"]) == count and data["model"].get("checkpoint_sha256") == sha256_file(checkpoint):
            return golden
    inputs = digit_images(count)
    cmd = [*export_check_cmd(), "golden", "record", *model_args(arch), "--inputs", str(inputs), "--golden", str(golden),
           "--size", "32", "--mode", "RGB", "--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5"]
    if "--force" in subprocess.run([*export_check_cmd(), "golden", "record", "--help"], capture_output=True, text=True).stdout:
        cmd.append("--force")
    timed(cmd)
    return golden


# -- the runs -----------------------------------------------------------------------------------


def baseline_cmd(arch: str, golden: Path, out: Path) -> list[str]:
    return [sys.executable, str(REPO / "benchmarks" / "baseline.py"), "--arch", arch, "--golden", str(golden), "--out", str(out),
            "--checkpoint", str(REPO / "models" / "checkpoints" / f"{arch}_digits.pth"), "--json"]


def check_cmd(arch: str, golden: Path, out: Path, report: Path, cache: Path | None, extra: list[str] = ()) -> list[str]:
    cmd = [*export_check_cmd(), "check", *model_args(arch), "--golden", str(golden), "--out", str(out), "--json", str(report), "-q"]
    cmd += ["--no-cache"] if cache is None else ["--cache-dir", str(cache)]
    return [*cmd, *extra]


def baseline_run(arch: str, golden: Path, out: Path) -> Run:
    # The baseline prints its JSON to stdout, after any library warnings on stderr.
    proc_out = out / "baseline.json"
    out.mkdir(parents=True, exist_ok=True)
    cmd = baseline_cmd(arch, golden, out)
    with open(proc_out, "wb") as sink, open(out / "baseline.stderr", "wb") as err:
        code, wall, cpu, peak = measured(cmd, stdout=sink, stderr=err)
    if code != 0:
        sys.exit(f"baseline failed: {shlex.join(cmd)}\n{(out / 'baseline.stderr').read_text()[-3000:]}")
    return Run(wall=wall, pss_mb=peak, code=0, report=json.loads(proc_out.read_text()), cpu=cpu)


def warm_run(arch: str, golden: Path, work: Path, cache: Path) -> Run:
    """A re-run served by the cache. The key covers export-check's own source, so an edit to
    exporter/ between the priming run and this one (a shared working tree) makes it a miss: then
    prime again and re-time, rather than report a cold run as a warm one."""
    for _ in range(3):
        run = timed(check_cmd(arch, golden, work / "warm", work / "warm.json", cache), work / "warm.json", (0, 1))
        if all(row.get("cache") == "hit" for row in run.report["rows"]):
            return run
        print(f"  {arch}: warm run was not a full hit (exporter/ changed?); priming again", flush=True)
    return run


def bench_config(arch: str, count: int, repeats: int) -> dict[str, Any]:
    golden = golden_set(arch, count)
    work = OUT / "run" / f"{arch}-{count}"
    cache = OUT / "cache" / f"{arch}-{count}"
    shutil.rmtree(cache, ignore_errors=True)
    prime = timed(check_cmd(arch, golden, work / "warm", work / "prime.json", cache), work / "prime.json", (0, 1))
    runs: dict[str, list[Run]] = {"baseline": [], "cold": [], "cold_jobs1": [], "warm": []}
    order = list(runs)
    for rep in range(repeats):
        for name in order[rep % len(order):] + order[: rep % len(order)]:  # rotate who goes first
            if name == "baseline":
                runs[name].append(baseline_run(arch, golden, work / "baseline"))
            elif name == "cold":
                runs[name].append(timed(check_cmd(arch, golden, work / "cold", work / "cold.json", None), work / "cold.json", (0, 1)))
            elif name == "cold_jobs1":  # one thing at a time: what overlapping builds and replays (--jobs 2) gains
                runs[name].append(timed(check_cmd(arch, golden, work / "jobs1", work / "jobs1.json", None, ["--jobs", "1"]),
                                        work / "jobs1.json", (0, 1)))
            else:
                runs[name].append(warm_run(arch, golden, work, cache))
    warm_states = {row["cache"] for run in runs["warm"] for row in run.report["rows"]}
    cold_states = {row.get("cache") for run in runs["cold"] for row in run.report["rows"]}
    result = {
        "arch": arch,
        "images": count,
        "prime": {"wall": prime.wall, "pss_mb": prime.pss_mb},
        "warm_cache_states": sorted(warm_states),
        "cold_cache_states": sorted(map(str, cold_states)),
        "verdicts": {row["name"]: row["status"] for row in runs["cold"][0].report["rows"]},
    }
    for name, series in runs.items():
        result[name] = {
            "walls": [r.wall for r in series],
            "wall": statistics.median(r.wall for r in series),
            "pss_mb": statistics.median(r.pss_mb for r in series),
            "stages": stage_breakdown(name, series),
        }
    return result


def stage_breakdown(name: str, series: list[Run]) -> dict[str, float]:
    """Median seconds per stage; ``startup+imports`` is the wall time the process spent outside its own clock."""
    per_run = []
    for run in series:
        stages: dict[str, float] = {}
        if name == "baseline":
            seconds = run.report["seconds"]
            stages["startup+imports"] = run.wall - run.report["total_seconds"]
            stages["load model"] = seconds["load"]
            stages["golden set + eager"] = seconds["golden"] + seconds["eager"]
            for kind in KINDS:
                stages[f"export {kind}"] = seconds[f"export/{kind}"]
            stages["replay (all)"] = sum(seconds[f"replay/{kind}"] for kind in KINDS)
        else:
            report = run.report
            timings = report.get("timings", {})
            stages["startup+imports"] = run.wall - report["seconds"]
            stages["verify inputs + cache lookup"] = timings.get("verify_inputs", 0.0) + timings.get("cache_lookup", 0.0)
            stages["load model"] = timings.get("load_model", 0.0)
            rows = {row["name"]: row for row in report["rows"]}
            for kind in KINDS:
                stages[f"export {kind}"] = (rows.get(kind, {}).get("build_seconds") or 0.0)
            stages["waiting for builds"] = timings.get("build", 0.0)
            # Rows served from the cache carry the diagnostics' seconds of the run that measured them.
            diagnostics = sum((row.get("diagnostics") or {}).get("seconds") or 0.0 for row in report["rows"] if row.get("cache") != "hit")
            stages["replay (all)"] = timings.get("replay", 0.0) - diagnostics
            stages["diagnostics"] = diagnostics
            stages["cache store"] = timings.get("cache_store", 0.0)
        stages["total (wall)"] = run.wall
        per_run.append(stages)
    return {key: statistics.median(stages[key] for stages in per_run) for key in per_run[0]}


# -- the CLI's own cost and memory ----------------------------------------------------------------


def cli_costs(repeats: int) -> dict[str, Any]:
    cmd = export_check_cmd()
    help_runs = [timed([*cmd, "--help"]).wall for _ in range(max(repeats, 5))]
    error_runs = [timed([*cmd, "check", "models/checkpoints/resnet_digits.pth", "--batch-size", "0"], expect=(2,)).wall
                  for _ in range(max(repeats, 5))]
    missing_runs = [timed([*cmd, "missing.pth"], expect=(2,)).wall for _ in range(max(repeats, 5))]
    imported: dict[str, list[str]] = {}
    script = cmd[-1] if len(cmd) == 1 else None
    for label, argv in (("--help", ["--help"]), ("argument error", ["check", "models/checkpoints/resnet_digits.pth", "--batch-size", "0"])):
        probe = [sys.executable, "-X", "importtime", *([script] if script else ["-m", "export_check"]), *argv]
        proc = subprocess.run(probe, cwd=REPO, capture_output=True, text=True)
        modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        imported[label] = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    return {
        "help": statistics.median(help_runs),
        "argument_error": statistics.median(error_runs),
        "missing_checkpoint": statistics.median(missing_runs),
        "heavy_imports": imported,
    }


def memory_growth(arch: str, small: int, large: int, repeats: int) -> dict[str, Any]:
    result: dict[str, Any] = {"arch": arch}
    for count in (small, large):
        golden = golden_set(arch, count)
        work = OUT / "run" / f"memory-{arch}-{count}"
        ec = [timed(check_cmd(arch, golden, work / "ec", work / "report.json", None), work / "report.json", (0, 1)) for _ in range(repeats)]
        bl = [baseline_run(arch, golden, work / "baseline") for _ in range(repeats)]
        result[str(count)] = {
            "export_check_mb": statistics.median(r.pss_mb for r in ec),
            "baseline_mb": statistics.median(r.pss_mb for r in bl),
            "export_check_wall": statistics.median(r.wall for r in ec),
        }
    result["delta_mb"] = result[str(large)]["export_check_mb"] - result[str(small)]["export_check_mb"]
    return result


# -- BENCHMARKS.md --------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    from export_check.versions import library_versions

    cpu = "unknown"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal"):
                mem_kb = int(line.split()[1])
    return {
        "cpu": cpu,
        "cores": str(len(os.sched_getaffinity(0))),
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "os": platform.platform(),
        **{k: v for k, v in library_versions().items() if k not in ("platform",)},
    }


def mark(ok: bool) -> str:
    return "holds" if ok else "**misses**"


def render(results: dict[str, Any], command: str) -> str:
    configs = results["configs"]
    lines = [
        "# Benchmarks",
        "",
        "`export-check` (the real CLI, one subprocess per run) against the straight-line baseline",
        "`benchmarks/baseline.py` (the same work in bare library calls, see its docstring). Generated by",
        "`benchmarks/run.py`; medians of the repeats, runs alternating in order. Times are wall seconds of",
        "the whole process (interpreter start and imports included); memory is the whole process tree's peak PSS (sampled).",
        "",
        f"Reproduce on a fresh clone: `./dev test -e bench -- {command.removeprefix('python benchmarks/run.py').strip()}` (tox creates "
        "the environment: export-check and its test extra, torch pinned by constraints.txt); or, where export-check and "
        f"scikit-learn are installed, `{command}`.",
        "",
        "## Machine and settings",
        "",
        "| what | value |",
        "| --- | --- |",
    ]
    lines += [f"| {k} | {v} |" for k, v in results["machine"].items()]
    lines += [
        f"| repeats | {results['repeats']} |",
        "| threads | export-check defaults: torch 1 intra-op + 1 inter-op thread; onnxruntime 1 intra-op, 1 inter-op, "
        "sequential, all graph optimisations; batch size 16 (the baseline pins the same) |",
        "",
        "## Cold and warm runs against the baseline",
        "",
        "cold = `export-check --no-cache` (default `--jobs 2` on 2 cores: builds in the build server overlap the",
        "replay and diagnostics here); cold `--jobs 1` = the same, one thing at a time; warm = a re-run with an",
        "unchanged checkpoint, golden set, settings and libraries, served by the artifact cache; first = the",
        "first run with the cache on (builds and stores).",
        "",
        "| arch | images | baseline s | cold s | cold ratio | cold `--jobs 1` s (ratio) | `--jobs 2` speed-up | first (store) s | warm s"
        " | warm ratio | peak MB baseline / cold / warm |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in configs:
        b, cold, warm, seq = c["baseline"]["wall"], c["cold"]["wall"], c["warm"]["wall"], c["cold_jobs1"]["wall"]
        lines.append(
            f"| {c['arch']} | {c['images']} | {b:.2f} | {cold:.2f} | {cold / b:.2f} | {seq:.2f} ({seq / b:.2f}) | {seq / cold:.2f}x | "
            f"{c['prime']['wall']:.2f} | {warm:.2f} | {warm / b:.3f} | "
            f"{c['baseline']['pss_mb']:.0f} / {c['cold']['pss_mb']:.0f} / {c['warm']['pss_mb']:.0f} |"
        )
    cold_ratios = [c["cold"]["wall"] / c["baseline"]["wall"] for c in configs]
    seq_ratios = [c["cold_jobs1"]["wall"] / c["baseline"]["wall"] for c in configs]
    gains = [c["cold_jobs1"]["wall"] / c["cold"]["wall"] for c in configs]
    warm_ratios = [c["warm"]["wall"] / c["baseline"]["wall"] for c in configs]
    cli, mem = results["cli"], results["memory"]
    jobs_kept = statistics.median(gains) >= JOBS_MIN_GAIN and min(gains) > 1.0
    lines += [
        "",
        "Every warm run had every row from the cache: "
        + ("yes" if all(c["warm_cache_states"] == ["hit"] for c in configs) else "**no**")
        + "; verdicts were the same as the cold runs' (checked by tests/integration/test_cache.py).",
        "",
        "## Targets",
        "",
        "| target | measured | verdict |",
        "| --- | --- | --- |",
        f"| cold run <= {TARGET_COLD:.2f}x the baseline | worst {max(cold_ratios):.2f}x, median {statistics.median(cold_ratios):.2f}x | "
        f"{mark(max(cold_ratios) <= TARGET_COLD)} |",
        f"| (the same with `--jobs 1`, for comparison) | worst {max(seq_ratios):.2f}x, median {statistics.median(seq_ratios):.2f}x | "
        "not a target |",
        f"| warm re-run <= {TARGET_WARM:.2f}x the baseline | worst {max(warm_ratios):.3f}x, median {statistics.median(warm_ratios):.3f}x | "
        f"{mark(max(warm_ratios) <= TARGET_WARM)} |",
        f"| `--help` < {TARGET_CLI_SECONDS} s, no torch | {cli['help']:.3f} s; "
        f"heavy modules imported: {cli['heavy_imports']['--help'] or 'none'} | "
        f"{mark(cli['help'] < TARGET_CLI_SECONDS and not cli['heavy_imports']['--help'])} |",
        f"| argument error < {TARGET_CLI_SECONDS} s, no torch | `--batch-size 0`: {cli['argument_error']:.3f} s, missing checkpoint: "
        f"{cli['missing_checkpoint']:.3f} s; heavy modules: {cli['heavy_imports']['argument error'] or 'none'} | "
        f"{mark(max(cli['argument_error'], cli['missing_checkpoint']) < TARGET_CLI_SECONDS and not cli['heavy_imports']['argument error'])}"
        " |",
    ]
    if mem:
        small, large = sorted((k for k in mem if k.isdigit()), key=int)
        lines.append(
            f"| {large} images cost <= {TARGET_MEMORY_MB} MB more than {small} | {mem['arch']}: {mem[small]['export_check_mb']:.0f} MB -> "
            f"{mem[large]['export_check_mb']:.0f} MB (+{mem['delta_mb']:.1f} MB; baseline {mem[small]['baseline_mb']:.0f} -> "
            f"{mem[large]['baseline_mb']:.0f} MB) | {mark(mem['delta_mb'] <= TARGET_MEMORY_MB)} |"
        )
    lines.append(f"| `--jobs 2` kept only if it gains (median speed-up >= {JOBS_MIN_GAIN}x over `--jobs 1`, "
                 "faster in every configuration) | "
                 f"speed-up median {statistics.median(gains):.2f}x, range {min(gains):.2f}-{max(gains):.2f}x | "
                 f"{'gain: `--jobs 2` is the default' if jobs_kept else '**no gain**: make `--jobs 1` the default'} |")
    lines += ["", "## Stage breakdown (median seconds)", ""]
    for c in configs:
        stages = sorted(set(c["baseline"]["stages"]) | set(c["cold"]["stages"]), key=_stage_order)
        lines += [f"### {c['arch']}, {c['images']} images", "", "| stage | baseline | cold | cold `--jobs 1` | warm |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for stage in stages:
            cells = [c[name]["stages"].get(stage) if name in c else None for name in ("baseline", "cold", "cold_jobs1", "warm")]
            lines.append(f"| {stage} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in cells) + " |")
        lines.append("")
    if results.get("large"):
        import large

        lines += large_section(large.render(results["large"])).splitlines() + [""]
    elif results.get("large_kept"):  # --large none: the section an earlier run wrote stays
        lines += results["large_kept"].splitlines() + [""]
    extra = results.get("notes") or []
    if extra:
        lines += ["## Notes", "", *extra, ""]
    return "\n".join(lines).rstrip() + "\n"


LARGE_BEGIN, LARGE_END = "<!-- real-size models: benchmarks/large.py -->", "<!-- end of real-size models -->"


def large_section(text: str) -> str:
    return f"{LARGE_BEGIN}\n{text.rstrip()}\n{LARGE_END}\n"


def _split_large(text: str) -> tuple[str, str, str] | None:
    """An earlier BENCHMARKS.md as (before, its real-size section with the markers, after); None without one."""
    if LARGE_BEGIN not in text or LARGE_END not in text:
        return None
    head, rest = text.split(LARGE_BEGIN, 1)
    inside, tail = rest.split(LARGE_END, 1)
    return head, LARGE_BEGIN + inside + LARGE_END + "\n", tail.lstrip("\n")


def kept_large_section(text: str) -> str:
    """The real-size section of an earlier BENCHMARKS.md, markers included ("" when it has none)."""
    parts = _split_large(text)
    return "" if parts is None else parts[1]


def large_only(args: argparse.Namespace) -> int:
    """``--large only``: run the real-size models and replace their section of ``--output`` (or append it)."""
    import large

    results = large.run_all(list(large.MODELS), [int(s) for s in args.large_sizes.split(",") if s.strip()], 1)
    section = large_section(large.render(results))
    old = args.output.read_text() if args.output.is_file() else "# Benchmarks\n"
    parts = _split_large(old)
    new = old.rstrip() + "\n\n" + section if parts is None else parts[0] + section + parts[2]
    args.output.write_text(new)
    print(f"wrote the real-size models' section of {args.output}")
    return 0


def _stage_order(stage: str) -> tuple[int, str]:
    order = ["startup+imports", "verify inputs + cache lookup", "load model", "golden set + eager", *(f"export {k}" for k in KINDS),
             "waiting for builds", "replay (all)", "diagnostics", "cache store", "total (wall)"]
    return (order.index(stage) if stage in order else len(order), stage)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each kind per configuration (default 3)")
    parser.add_argument("--archs", default=",".join(ARCHS), help=f"comma-separated, from {', '.join(ARCHS)} (default: all)")
    parser.add_argument("--sizes", default="32,256", help="golden-set sizes (default 32,256)")
    parser.add_argument("--memory-sizes", default="32,1000", help="the two sizes of the memory check (default 32,1000; empty: skip)")
    parser.add_argument("--output", type=Path, default=REPO / "BENCHMARKS.md", help="the Markdown file to write (default BENCHMARKS.md)")
    parser.add_argument("--notes", type=Path, default=REPO / "benchmarks" / "NOTES.md",
                        help="a Markdown file appended under 'Notes' (default: benchmarks/NOTES.md)")
    parser.add_argument("--render", type=Path, metavar="RESULTS_JSON", help="only rewrite --output from an earlier run's results.json")
    parser.add_argument("--large", choices=("also", "only", "none"), default="also",
                        help="the real-size models of benchmarks/large.py (ResNet-50, token transformer): also (default), only "
                             "(rewrite just their section of --output), none (keep the section --output has)")
    parser.add_argument("--large-sizes", default="32,256", help="golden-set sizes of the real-size models (default 32,256)")
    parser.add_argument("--write-digits", nargs=2, metavar=("COUNT", "DIR"), help=argparse.SUPPRESS)  # digit_images' child
    args = parser.parse_args(argv)
    if args.write_digits:
        _write_digits(int(args.write_digits[0]), Path(args.write_digits[1]))
        return 0
    if args.render is not None:
        results = json.loads(args.render.read_text())
        if args.notes is not None and args.notes.is_file():
            results["notes"] = args.notes.read_text().splitlines()
        args.output.write_text(render(results, results.get("command", "python benchmarks/run.py")))
        print(f"wrote {args.output}")
        return 0
    if args.large == "only":
        return large_only(args)
    if importlib.util.find_spec("sklearn") is None:
        sys.exit("benchmarks/run.py: scikit-learn is not installed (it supplies the digit images); "
                 "run `./dev test -e bench -- ARGS`, or install export-check with its test extra")
    archs = [a.strip() for a in args.archs.split(",") if a.strip()]
    unknown = [a for a in archs if a not in ARCHS]
    if unknown or args.repeats < 1:
        parser.error(f"unknown arch(s) {unknown}" if unknown else "--repeats must be >= 1")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    OUT.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "benchmarks/run.py", *(sys.argv[1:] if argv is None else argv)])

    results: dict[str, Any] = {"machine": machine(), "repeats": args.repeats, "command": command, "configs": []}
    results["cli"] = cli_costs(args.repeats)
    print(f"cli: {results['cli']}", flush=True)
    for arch in archs:
        for count in sizes:
            config = bench_config(arch, count, args.repeats)
            results["configs"].append(config)
            b = config["baseline"]["wall"]
            print(f"{arch} x {count}: baseline {b:.2f}s cold {config['cold']['wall']:.2f}s ({config['cold']['wall'] / b:.2f}x) "
                  f"warm {config['warm']['wall']:.2f}s ({config['warm']['wall'] / b:.3f}x)", flush=True)
    results["memory"] = {}
    memory_sizes = [int(s) for s in args.memory_sizes.split(",") if s.strip()]
    if len(memory_sizes) == 2:
        results["memory"] = memory_growth("resnet" if "resnet" in archs else archs[0], *memory_sizes, repeats=1)
        print(f"memory: {results['memory']}", flush=True)
    if args.large == "also":
        import large

        # what is measured so far is kept first: the real-size runs take the better part of an hour
        (OUT / "results.json").write_text(json.dumps(results, indent=1))
        results["large"] = large.run_all(list(large.MODELS), [int(s) for s in args.large_sizes.split(",") if s.strip()], 1)
    elif args.output.is_file():
        results["large_kept"] = kept_large_section(args.output.read_text())
    if args.notes is not None and args.notes.is_file():
        results["notes"] = args.notes.read_text().splitlines()
    (OUT / "results.json").write_text(json.dumps(results, indent=1))
    args.output.write_text(render(results, command))
    print(f"wrote {args.output} (raw numbers in {OUT / 'results.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
