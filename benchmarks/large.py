"""Real-size benchmarks: a ResNet-50 (25.6 M parameters, 224x224 RGB) and a token transformer (13.9 M
parameters, 128 tokens, dynamic sequence axis), defined in benchmarks/large_models.py with seeded weights.

For each model and golden-set size it runs ``benchmarks/baseline_large.py`` (bare library calls) and a
cold ``export-check`` (``--no-cache``; with ``--warm``, the first run into an empty cache, which also
stores, and then a warm re-run served by it), one subprocess each, and reports wall time,
the process tree's peak PSS and the time of every stage: load, each build, each replay, and each diagnostic (batch sizes,
determinism + latency reruns, per-layer tables), from the JSON report. Everything it needs is
generated into ``benchmarks/out/large/`` (git-ignored) from seeded data and scikit-image's bundled
sample photographs; nothing is downloaded::

    python benchmarks/large.py                         # both models at 32 and 256 images
    python benchmarks/large.py --models resnet50 --sizes 32 --output /tmp/large.md

``benchmarks/run.py --large only`` runs this and writes its section into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import OUT, REPO, Run, export_check_cmd, measured, timed  # noqa: E402

LARGE = OUT / "large"
KINDS = ("torchscript-trace", "torchscript-script", "onnx", "onnx-simplified", "torch-int8-dynamic", "onnx-int8-dynamic")
MODELS = {  # name -> (factory in large_models.py, kwargs, input kind)
    "resnet50": ("ResNet50", {}, "image"),
    "transformer": ("TokenTransformer", {}, "tokens"),
}
SEQUENCE = 128
DIAGNOSTIC_SHARE_TARGET = 0.15


def arch_spec(model: str) -> str:
    return f"{HERE / 'large_models.py'}:{MODELS[model][0]}"


def prepare(model: str, count: int) -> tuple[Path, Path]:
    """The seeded checkpoint and a golden set of ``count`` inputs (generated once, in a child process)."""
    folder = LARGE / model
    checkpoint = folder / f"{model}.pth"
    golden = folder / f"golden-{count}"
    if not (golden / "manifest.json").is_file():
        subprocess.run([sys.executable, __file__, "--write-inputs", model, str(count)], cwd=REPO, check=True)
        cmd = [*export_check_cmd(), "golden", "record", str(checkpoint), "--arch", arch_spec(model), "--arch-kwargs",
               json.dumps(MODELS[model][1]), "--inputs", str(folder / f"inputs-{count}"), "--golden", str(golden), "--force", "-q"]
        if MODELS[model][2] == "image":
            cmd += ["--size", "224", "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225"]
        timed(cmd)
    return checkpoint, golden


def _write_inputs(model: str, count: int) -> None:
    import large_models
    import numpy as np
    import torch

    folder = LARGE / model
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint = folder / f"{model}.pth"
    if not checkpoint.is_file():
        factory, kwargs, _ = MODELS[model]
        torch.save(large_models.seeded_state(getattr(large_models, factory)(**kwargs)), checkpoint)
    if MODELS[model][2] == "tokens":  # the dynamic sequence axis, and int64 token ids, from settings beside the checkpoint
        (folder / "export-check.toml").write_text(
            '[model-inputs.tokens]\ndtype = "int64"\ndynamic-axes = { 1 = "sequence" }\n')
    inputs = folder / f"inputs-{count}"
    shutil.rmtree(inputs, ignore_errors=True)
    inputs.mkdir()
    rng = np.random.default_rng(count)
    if MODELS[model][2] == "tokens":
        for index in range(count):
            np.savez(inputs / f"{index:04d}.npz", tokens=rng.integers(0, 8000, SEQUENCE, dtype=np.int64))
        return
    from PIL import Image
    from skimage import data

    photos = [np.asarray(getattr(data, name)()) for name in ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field")]
    for index in range(count):
        photo = photos[index % len(photos)]
        side = int(rng.integers(160, min(photo.shape[:2]) + 1))
        top, left = (int(rng.integers(0, photo.shape[i] - side + 1)) for i in (0, 1))
        crop = Image.fromarray(photo[top : top + side, left : left + side]).resize((256, 256))
        crop.save(inputs / f"{index:04d}.png")


def baseline(model: str, checkpoint: Path, golden: Path, work: Path, kinds: tuple[str, ...] = KINDS) -> Run:
    work.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE / "baseline_large.py"), "--arch", arch_spec(model), "--arch-kwargs", json.dumps(MODELS[model][1]),
           "--checkpoint", str(checkpoint), "--golden", str(golden), "--out", str(work / "baseline"), "--json", "--kinds", ",".join(kinds)]
    sink = work / "baseline.json"
    with open(sink, "wb") as out, open(work / "baseline.stderr", "wb") as err:
        code, wall, cpu, peak = measured(cmd, stdout=out, stderr=err)
    if code != 0:
        sys.exit(f"baseline failed: {shlex.join(cmd)}\n{(work / 'baseline.stderr').read_text()[-3000:]}")
    return Run(wall=wall, pss_mb=peak, code=0, report=json.loads(sink.read_text()), cpu=cpu)


def check(model: str, checkpoint: Path, golden: Path, work: Path, cache: Path | None, extra: tuple[str, ...] = (),
          name: str | None = None, kinds: tuple[str, ...] = KINDS) -> Run:
    report = work / f"report-{name or ('cold' if cache is None else 'warm')}.json"
    cmd = [*export_check_cmd(), "check", str(checkpoint), "--arch", arch_spec(model), "--arch-kwargs", json.dumps(MODELS[model][1]),
           "--golden", str(golden), "--out", str(work / "ec"), "--json", str(report), "-q", *extra]
    if kinds != KINDS:
        cmd += ["--artifacts", ",".join(kinds)]
    cmd += ["--no-cache"] if cache is None else ["--cache-dir", str(cache)]
    return timed(cmd, report, (0, 1))


def baseline_stages(run: Run) -> dict[str, float]:
    seconds = run.report["seconds"]
    stages = {"startup+imports": run.wall - run.report["total_seconds"], "load model": seconds["load"],
              "golden set + eager": seconds["golden"] + seconds["eager"]}
    ran = [kind for kind in KINDS if f"replay/{kind}" in seconds]  # --kinds may have run only some
    stages.update({f"build {kind}": seconds[f"export/{kind}"] for kind in ran})
    stages.update({f"replay {kind}": seconds[f"replay/{kind}"] for kind in ran})
    stages["total (wall)"] = run.wall
    return stages


def check_stages(run: Run) -> dict[str, float]:
    """Stages of one export-check run from its JSON report. With ``--jobs 2`` builds overlap the
    replay and the diagnostics: the build rows are each build's own time in its child process."""
    report = run.report
    timings = report.get("timings", {})
    stages = {"startup+imports": run.wall - report["seconds"],
              "verify inputs + cache lookup": timings.get("verify_inputs", 0.0) + timings.get("cache_lookup", 0.0),
              "load model (+ eager, eager's batch sizes)": timings.get("load_model", 0.0)}
    if "load_model/eager_pass" in timings:  # the parts, recorded since issue 15
        stages["  of which eager over the golden set"] = timings["load_model/eager_pass"]
    rows = {row["name"]: row for row in report["rows"]}
    ran = [kind for kind in KINDS if kind in rows]  # --kinds may have run only some
    for kind in ran:
        stages[f"build {kind}"] = rows.get(kind, {}).get("build_seconds") or 0.0
    stages["waiting for builds"] = timings.get("build", 0.0)
    for kind in ran:
        stages[f"replay {kind}"] = rows.get(kind, {}).get("replay_seconds") or 0.0
    parts = {"eager self-check (in load model)": timings.get("load_model/eager_self_check", 0.0),
             "eager at the other batch sizes (in load model)": timings.get("load_model/eager_batch_sizes", 0.0),
             "batch sizes": 0.0, "determinism + latency reruns": 0.0, "per-layer tables": 0.0, "other": 0.0}
    total = parts["eager self-check (in load model)"] + parts["eager at the other batch sizes (in load model)"]
    for row in report["rows"]:
        diag = row.get("diagnostics") or {}
        if row.get("cache") == "hit" or not diag:
            continue
        seconds = diag.get("seconds") or 0.0
        total += seconds
        sizes = sum(r.get("seconds") or 0.0 for r in ((diag.get("shapes") or {}).get("runs") or ()))
        reruns = (diag.get("latency") or {}).get("seconds") or 0.0
        layers = (diag.get("layers") or {}).get("seconds") or 0.0
        parts["batch sizes"] += sizes
        parts["determinism + latency reruns"] += reruns
        parts["per-layer tables"] += layers
        parts["other"] += max(seconds - sizes - reruns - layers, 0.0)
    for name, seconds in parts.items():
        stages[f"diagnostics: {name}"] = seconds
    stages["diagnostics (all)"] = total
    if "replay/diagnostics_waited" in timings:  # since the background diagnosis (diagnostics.run.RowDiagnosis)
        eager = parts["eager self-check (in load model)"] + parts["eager at the other batch sizes (in load model)"]
        stages["diagnostics on the critical path"] = eager + timings.get("replay/diagnostics_inline", 0.0) + timings["replay/diagnostics_waited"]
    stages["replay + diagnostics (this process)"] = timings.get("replay", 0.0)
    stages["cache store"] = timings.get("cache_store", 0.0)
    stages["total (wall)"] = run.wall
    return stages


def bench(model: str, count: int, repeats: int, warm: bool, kinds: tuple[str, ...] = KINDS, jobs: str | None = None) -> dict[str, Any]:
    checkpoint, golden = prepare(model, count)
    work = LARGE / model / f"run-{count}"
    cache = work / "cache"
    runs: dict[str, list[Run]] = {"baseline": [], "cold": []}
    extra = ("--jobs", jobs) if jobs else ()
    if warm:
        runs["warm"] = []
    for rep in range(repeats):
        for name in ("baseline", "cold") if rep % 2 == 0 else ("cold", "baseline"):
            if name == "baseline":
                runs[name].append(baseline(model, checkpoint, golden, work, kinds))
            elif warm:  # cold: the first run into an empty cache (it builds, replays, diagnoses and stores), then warm
                shutil.rmtree(cache, ignore_errors=True)
                runs["cold"].append(check(model, checkpoint, golden, work, cache, extra, name="first", kinds=kinds))
                runs["warm"].append(check(model, checkpoint, golden, work, cache, extra, kinds=kinds))
                print(f"  {model} x {count} warm: {runs['warm'][-1].wall:.1f}s {runs['warm'][-1].pss_mb:.0f} MB", flush=True)
            else:
                runs["cold"].append(check(model, checkpoint, golden, work, None, extra, kinds=kinds))
            print(f"  {model} x {count} {name}: {runs[name][-1].wall:.1f}s {runs[name][-1].pss_mb:.0f} MB", flush=True)
    result: dict[str, Any] = {"model": model, "images": count}
    for name, series in runs.items():
        per = [baseline_stages(r) if name == "baseline" else check_stages(r) for r in series]
        result[name] = {"walls": [r.wall for r in series], "wall": statistics.median(r.wall for r in series),
                        "pss_mb": statistics.median(r.pss_mb for r in series),
                        "stages": {k: statistics.median(p[k] for p in per) for k in per[0]}}
        if name != "baseline":
            result[name]["verdicts"] = {row["name"]: row["status"] for row in series[0].report["rows"]}
    return result


def run_all(models: list[str], sizes: list[int], repeats: int, warm: bool = True, kinds: tuple[str, ...] = KINDS,
            jobs: str | None = None) -> list[dict[str, Any]]:
    LARGE.mkdir(parents=True, exist_ok=True)
    results = []
    for model in models:
        for size in sizes:
            results.append(bench(model, size, repeats, warm, kinds, jobs))
            (LARGE / "results.json").write_text(json.dumps(results, indent=1))
    return results


def _critical(result: dict[str, Any]) -> float:
    """The cold run's diagnostics on its critical path (all of them, for a run from before the background diagnosis)."""
    stages = result["cold"]["stages"]
    return stages.get("diagnostics on the critical path", stages["diagnostics (all)"])


def render(results: list[dict[str, Any]], title: str = "## Real-size models") -> str:
    lines = [title, "",
             "`benchmarks/large.py` (`python benchmarks/run.py --large only` rewrites just this section): a ResNet-50 and a token "
             "transformer against `benchmarks/baseline_large.py`, one run of each kind per configuration (cold = the first run "
             "into an empty cache, so it includes storing; warm = the re-run it serves). Configurations run: "
             + ", ".join(f"{r['model']} x {r['images']}" for r in results) + ".", "",
             "Diagnostics, all = their seconds on either thread; on the critical path = what this process waited for them (eager's "
             "share in load model, the rows diagnosed on the main thread, and the waits for the rows diagnosed in the background "
             "while the next row replays, `diagnostics.run.RowDiagnosis`): the share the target counts. The background thread shares the "
             "two cores with the replay, so what it slows the replay down by is in the cold ratio, not in the share.", "",
             "| model | images | baseline s | cold s | cold ratio | diagnostics s, all (share of cold) | on the critical path s (share) "
             "| warm s (ratio) | peak MB baseline / cold (ratio) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        b, c = r["baseline"], r["cold"]
        diag = c["stages"]["diagnostics (all)"]
        path = _critical(r)
        warm = f"{r['warm']['wall']:.2f} ({r['warm']['wall'] / b['wall']:.3f})" if "warm" in r else "-"
        lines.append(f"| {r['model']} | {r['images']} | {b['wall']:.2f} | {c['wall']:.2f} | {c['wall'] / b['wall']:.2f} | "
                     f"{diag:.2f} ({diag / c['wall']:.1%}) | {path:.2f} ({path / c['wall']:.1%}) | {warm} | "
                     f"{b['pss_mb']:.0f} / {c['pss_mb']:.0f} ({c['pss_mb'] / b['pss_mb']:.2f}) |")
    lines += ["", "| target | measured | verdict |", "| --- | --- | --- |"]
    cold = [(r["cold"]["wall"] / r["baseline"]["wall"], f"{r['model']} x {r['images']}") for r in results]
    share = [(_critical(r) / r["cold"]["wall"], f"{r['model']} x {r['images']}") for r in results]
    warm = [(r["warm"]["wall"] / r["baseline"]["wall"], f"{r['model']} x {r['images']}") for r in results if "warm" in r]
    cnn = [(r["cold"]["pss_mb"] / r["baseline"]["pss_mb"], f"{r['model']} x {r['images']}") for r in results if r["model"] == "resnet50"]
    for label, values, limit, fmt in (("cold run <= 1.10x the baseline", cold, 1.10, "{:.2f}x"),
                                      ("diagnostics on the critical path <= 15% of the cold run", share, DIAGNOSTIC_SHARE_TARGET, "{:.1%}"),
                                      ("warm re-run <= 0.25x the baseline", warm, 0.25, "{:.3f}x"),
                                      ("large CNN peak memory <= 1.5x the baseline's", cnn, 1.5, "{:.2f}x")):
        if values:
            worst = max(values)
            lines.append(f"| {label} | worst {fmt.format(worst[0])} ({worst[1]}); "
                         + ", ".join(f"{name} {fmt.format(v)}" for v, name in values)
                         + f" | {'holds' if worst[0] <= limit else '**misses**'} |")
    for r in results:
        runs = [name for name in ("baseline", "cold", "warm") if name in r]
        lines += ["", f"### {r['model']}, {r['images']} images (median seconds)", "", "| stage | " + " | ".join(runs) + " |",
                  "| --- |" + " ---: |" * len(runs)]
        names = list(r["baseline"]["stages"]) + [k for k in r["cold"]["stages"] if k not in r["baseline"]["stages"]]
        order = sorted(names, key=lambda k: (k == "total (wall)", _rank(k)))
        for stage in order:
            cells = [r[name]["stages"].get(stage) for name in runs]
            lines.append(f"| {stage} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in cells) + " |")
        lines.append(f"| verdicts (cold) | | {', '.join(f'{k} {v}' for k, v in r['cold']['verdicts'].items())} |" + " |" * (len(runs) - 2))
    return "\n".join(lines) + "\n"


def _rank(stage: str) -> int:
    for rank, prefix in enumerate(("startup", "verify", "load", "  of which", "golden", "build", "waiting", "replay ", "diagnostics:",
                                   "diagnostics (", "diagnostics on",
                                   "replay +", "cache")):
        if stage.startswith(prefix):
            return rank
    return 99


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--sizes", default="32,256", help="golden-set sizes (default 32,256)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each kind (default 1: a ResNet-50 run at 256 takes minutes)")
    parser.add_argument("--warm", action="store_true", help="cold = the first run into an empty cache, then time a warm re-run")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, from the six default kinds (default: all six)")
    parser.add_argument("--jobs", choices=("1", "2"), help="export-check's --jobs (default: its own default)")
    parser.add_argument("--output", type=Path, help="write the Markdown section here")
    parser.add_argument("--results", type=Path, default=LARGE / "results.json", help="raw numbers (default benchmarks/out/large/results.json)")
    parser.add_argument("--write-inputs", nargs=2, metavar=("MODEL", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_inputs:
        _write_inputs(args.write_inputs[0], int(args.write_inputs[1]))
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if any(m not in MODELS for m in models) or args.repeats < 1 or not kinds or any(k not in KINDS for k in kinds):
        parser.error(f"--models from {', '.join(MODELS)}; --kinds from {', '.join(KINDS)}; --repeats >= 1")
    results = run_all(models, [int(s) for s in args.sizes.split(",") if s.strip()], args.repeats, args.warm, kinds, args.jobs)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1))
    text = render(results)
    if args.output:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
