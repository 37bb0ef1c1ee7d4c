"""Build isolation: the hand-written fork server against a standard-library prototype, timed and checked.

    python benchmarks/isolation_probe.py                 # 5 interleaved repeats of each, then the guarantee checks
    python benchmarks/isolation_probe.py --repeats 7 --no-checks
    python benchmarks/isolation_probe.py --variants current,stdlib,stdlib-lean

It measures the exporter of the tree it is in (that tree first on PYTHONPATH), so a copy of an
older commit measures that commit. The results of 2026-12-01 and the decision they led to are in
exporter/builder/isolation.py's docstring.

``current`` is exporter/builder/isolation.py as it is; ``stdlib`` is benchmarks/isolation_stdlib.py
(multiprocessing's forkserver context, ``set_forkserver_preload(PRELOAD)``, one ``Process`` per
build receiving the pickled context), put in its place inside the CLI process this script starts;
``stdlib-lean`` the same with torch alone preloaded. concurrent.futures.ProcessPoolExecutor is only
checked (``isolation_stdlib.check_pool``): it loses the per-row guarantees, so it is not timed.
For each repeat, in alternating order, it times:

* ``run``: a full ``export-check models/checkpoints/resnet_digits.pth --no-cache -q`` (the real CLI
  in a subprocess, wall time), with what it waited for builds (the report's ``timings.build``) and
  the bytes the parent pickled for its build processes (and how many times the model went);
* ``first``: the isolation's own cost in a fresh process: server start (``prewarm``, which imports
  torch and starts the server, as the pipeline calls it) to the first build's reply
  (torchscript-trace of the bundled ResNet), the model loaded in between as the pipeline does; and
  the same steps with the build in-process (``import torch``, load, build), the floor.

Then, for each variant, the guarantees, on the real CLI with tests/test_faults.py's fault hook:
a segfault/abort in a build is that row's error with the same message; a hung build is killed at
``--build-timeout``; SIGINT stops every build child; the model is pickled once per run.
Prints one table; medians. Timings on a shared machine are noisy: read the differences, interleaved.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CHECKPOINT = REPO / "models" / "checkpoints" / "resnet_digits.pth"
VARIANTS = ("current", "stdlib")
# stdlib-lean: the fork server preloads torch alone (each child imports what else it needs)
PRELOADS = {"stdlib": None, "stdlib-lean": ("torch",)}


# --- inside the CLI process this script starts ---------------------------------------------------


def _instrument(variant: str, out: Path) -> None:
    """Install the variant, count what the parent pickles for its build processes, dump it at exit."""
    import atexit
    import pickle

    counts = {"bytes": 0, "model_sends": 0, "model_bytes": 0}
    if variant in PRELOADS:
        import multiprocessing.reduction as reduction

        import isolation_stdlib

        _install(isolation_stdlib, variant)
        real_dump = reduction.dump

        def dump(obj, file, protocol=None):  # popen_forkserver pickles the Process (its args: the model) with it
            before = file.tell()
            real_dump(obj, file, protocol)
            counts["bytes"] += file.tell() - before
            if getattr(obj, "_args", None):
                counts["model_sends"] += 1
                counts["model_bytes"] += len(obj._args[2])

        reduction.dump = dump
    else:
        from export_check.builder import protocol

        real_send = protocol.send

        def send(stream, message):
            counts["bytes"] += len(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)) + 8
            if "ctx" in message:
                counts["model_sends"] += 1
                counts["model_bytes"] += len(message["ctx"])
            return real_send(stream, message)

        protocol.send = send

    def write() -> None:
        out.write_text(json.dumps(counts))

    atexit.register(write)


def _install(isolation_stdlib, variant: str) -> None:
    preload = PRELOADS[variant]
    isolation_stdlib.install() if preload is None else isolation_stdlib.install(preload)


def _cli_main(variant: str, out: Path, args: list[str]) -> None:
    _instrument(variant, out)
    from export_check import cli

    cli._exit(cli.main(args))


def _first_main(variant: str, out: Path) -> None:
    """Server start to the first build's reply, in a fresh process, as the pipeline does it."""
    from export_check.builder import isolation as iso

    if variant in PRELOADS:
        import isolation_stdlib

        _install(isolation_stdlib, variant)
    from export_check.artifacts import KINDS_BY_NAME, BuildContext
    from export_check.checkpoint import build_model, load_state_dict
    from export_check.golden.batches import GoldenBatches
    from export_check.golden.manifest import load_golden

    began = time.perf_counter()  # the pipeline's order: prewarm (it imports torch, then starts the server), then the model
    if variant != "in-process":
        iso.prewarm()
    import torch
    state = load_state_dict(CHECKPOINT)
    model = build_model("models/resnet.py:ResNet", {}, state, CHECKPOINT, None)
    batches = GoldenBatches(load_golden(REPO / "golden"), 32)
    (first,) = batches.first.values()  # the bundled model has one input
    ctx = BuildContext(model=model, example=torch.from_numpy(first), opset=17, onnx_exporter="torchscript", threads=1)
    loaded = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        kind = KINDS_BY_NAME["torchscript-trace"]
        if variant == "in-process":
            kind.build(ctx, Path(tmp) / "t.pt", None)
            build_seconds = time.perf_counter() - loaded
        else:
            pending = iso.start(kind, ctx, Path(tmp) / "t.pt", None)
            pending.wait([])
            build_seconds = pending.seconds
        done = time.perf_counter()
    out.write_text(json.dumps({"first_reply": done - began, "model_load": loaded - began, "after_load": done - loaded,
                               "build_seconds": build_seconds}))
    os._exit(0)


# --- the driver ----------------------------------------------------------------------------------


def _env(hook: Path | None = None, faults: str = "", **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO), str(HERE)] + ([str(hook)] if hook else []) + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    # this tree's exporter (not another one installed); benchmarks/ for the fork server's preload of the warm-up module
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["EXPORT_CHECK_TEST_FAULTS"] = faults
    env.update(extra)
    return env


def _cli(variant: str, counts: Path, *args: object) -> list[str]:
    return [sys.executable, str(Path(__file__)), "_cli", variant, str(counts), *(str(a) for a in args)]


def time_run(variant: str, tmp: Path, jobs: str = "2") -> dict[str, float]:
    out, report, counts = tmp / f"out-{variant}", tmp / f"report-{variant}.json", tmp / f"counts-{variant}.json"
    began = time.perf_counter()
    result = subprocess.run(_cli(variant, counts, CHECKPOINT, "--no-cache", "-q", "--out", out, "--json", report, "--jobs", jobs),
                            env=_env(), cwd=REPO, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - began
    if result.returncode != 0 or "7 passed" not in result.stdout:
        raise SystemExit(f"{variant}: the run failed\n{result.stdout}\n{result.stderr}")
    data = json.loads(report.read_text())
    timings = dict(data["timings"])
    return {"wall": wall, "waited": timings.get("build", 0.0), "tool_seconds": data["seconds"], **json.loads(counts.read_text())}


def time_first(variant: str, tmp: Path) -> dict[str, float]:
    out = tmp / f"first-{variant}.json"
    result = subprocess.run([sys.executable, str(Path(__file__)), "_first", variant, str(out)], env=_env(), cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"{variant}: first build failed\n{result.stdout}\n{result.stderr}")
    return json.loads(out.read_text())


def _hook(tmp: Path) -> Path:
    """tests/test_faults.py's fault-injection ``sitecustomize``, taken from that file as it is."""
    tree = ast.parse((REPO / "tests" / "test_faults.py").read_text())
    text = next(node.value.value for node in tree.body if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "HOOK")
    folder = tmp / "hook"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(text)
    return folder


def _gone(pid: int, wait: float = 10.0) -> bool:
    deadline = time.monotonic() + wait
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X") or time.monotonic() >= deadline:
            return state in ("Z", "X")
        time.sleep(0.05)


def check(variant: str, tmp: Path) -> dict[str, str]:
    hook, results = _hook(tmp), {}
    base = tmp / f"check-{variant}"
    base.mkdir()

    # a native crash in three builds: those rows' errors, the same messages; the rest passes
    report, counts = base / "crash.json", base / "crash-counts.json"
    faults = "segv:torchscript_trace,segv-mid-write:onnx_simplified,abort:torch_int8"
    run = subprocess.run(_cli(variant, counts, CHECKPOINT, "--no-cache", "-q", "--out", base / "crash", "--json", report),
                         env=_env(hook, faults), cwd=REPO, capture_output=True, text=True, timeout=900)
    rows = {row["name"]: row for row in json.loads(report.read_text())["rows"]} if report.is_file() else {}
    expect = {"torchscript-trace": "11, SIGSEGV", "onnx-simplified": "11, SIGSEGV", "torch-int8-dynamic": "6, SIGABRT"}
    ok = run.returncode == 1 and rows and all(
        rows[n]["status"] == "error" and rows[n]["reasons"][0].startswith(f"build crashed (signal {s}) in its child process") for n, s in expect.items()  # noqa: E501
    ) and all(rows[n]["status"] == "pass" for n in rows if n not in expect) and not list((base / "crash").glob("*.partial*"))
    results["segfault/abort costs only its row"] = "kept" if ok else f"LOST ({run.returncode}: {[(n, r['reasons'][:1]) for n, r in rows.items()]})"

    # a hung build killed at --build-timeout 3
    flag, report = base / "hang-flag", base / "hang.json"
    run = subprocess.run(_cli(variant, counts, CHECKPOINT, "--no-cache", "-q", "--out", base / "hang", "--json", report, "--build-timeout", "3"),
                         env=_env(hook, "sleep:onnx_simplified", EXPORT_CHECK_TEST_FLAG=str(flag)), cwd=REPO, capture_output=True,
                         text=True, timeout=900)
    rows = {row["name"]: row for row in json.loads(report.read_text())["rows"]} if report.is_file() else {}
    hung = rows.get("onnx-simplified", {})
    ok = (run.returncode == 1 and hung.get("status") == "error"
          and hung["reasons"][0].startswith("build timed out: still running after 3 s, its child process was killed")
          and 3 <= hung["build_seconds"] < 30 and flag.is_file() and _gone(int(flag.read_text()), 0)
          and all(r["status"] == "pass" for n, r in rows.items() if n != "onnx-simplified"))
    results["hung build killed at the timeout"] = "kept" if ok else f"LOST ({run.returncode}: {hung.get('reasons')})"

    # SIGINT to export-check alone while a build runs: exit 130, no build child left
    flag = base / "int-flag"
    proc = subprocess.Popen(_cli(variant, counts, CHECKPOINT, "--no-cache", "-q", "--out", base / "int", "--jobs", "2"),
                            env=_env(hook, "sleep:onnx_simplified", EXPORT_CHECK_TEST_FLAG=str(flag)), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not (flag.is_file() and flag.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    child = int(flag.read_text()) if flag.is_file() and flag.read_text() else None
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    ok = child is not None and proc.returncode == 130 and _gone(child) and stderr.strip().splitlines()[-1] == "export-check: interrupted"
    results["SIGINT stops every child"] = "kept" if ok else f"LOST (exit {proc.returncode}, child {child} gone: {child and _gone(child, 0)})"
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-checks", action="store_true")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="current first; any of: current, " + ", ".join(PRELOADS))
    args = parser.parse_args(argv)
    variants = tuple(args.variants.split(","))
    assert variants[0] == "current" and all(v in PRELOADS for v in variants[1:]), variants
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    firsts: dict[str, list[dict[str, float]]] = {v: [] for v in (*variants, "in-process")}
    with tempfile.TemporaryDirectory(prefix="isolation-probe-") as name:
        tmp = Path(name)
        for repeat in range(args.repeats):
            order = variants if repeat % 2 == 0 else variants[::-1]
            for variant in order:
                runs[variant].append(time_run(variant, tmp))
                print(f"repeat {repeat + 1} {variant:8s} run {runs[variant][-1]['wall']:.2f} s", file=sys.stderr, flush=True)
            for variant in (*order, "in-process"):
                firsts[variant].append(time_first(variant, tmp))
                print(f"repeat {repeat + 1} {variant:10s} first reply {firsts[variant][-1]['first_reply']:.3f} s", file=sys.stderr, flush=True)
        checks = {} if args.no_checks else {v: check(v, tmp) for v in variants}
        if not args.no_checks:
            sys.path.insert(0, str(HERE))
            import isolation_stdlib

            checks["ProcessPoolExecutor"] = isolation_stdlib.check_pool()

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print(f"isolation probe, {time.strftime('%Y-%m-%d')}, {args.repeats} interleaved repeats, medians (min-max);"
          " 'paired': the median of each repeat's difference to current")
    print(f"{'':34s} " + " ".join(f"{v:>18s}" for v in variants) + " " + " ".join(f"{'paired ' + v:>20s}" for v in variants[1:]))

    def line(label: str, rows: dict[str, list[dict[str, float]]], key: str) -> None:
        cells = [f"{med(rows[v], key):.3f} ({min(r[key] for r in rows[v]):.2f}-{max(r[key] for r in rows[v]):.2f})" for v in variants]
        paired = [statistics.median(b[key] - a[key] for a, b in zip(rows["current"], rows[v], strict=False)) for v in variants[1:]]
        print(f"{label:34s} " + " ".join(f"{c:>18s}" for c in cells) + " " + " ".join(f"{p:>+20.3f}" for p in paired))

    line("full run, wall s", runs, "wall")
    line("full run, tool's own seconds", runs, "tool_seconds")
    line("full run, waited for builds s", runs, "waited")
    line("server start -> 1st reply s", firsts, "first_reply")
    line("  of which after model load s", firsts, "after_load")
    line("  1st build's own seconds", firsts, "build_seconds")
    print(f"{'(in-process: same build, after load)':34s} {med(firsts['in-process'], 'after_load'):>18.3f}")
    for v in variants:
        r = runs[v][-1]
        print(f"{v}: pickled for build processes per run {r['bytes'] / 1e6:.2f} MB; the model ({r['model_bytes'] / max(r['model_sends'], 1) / 1e6:.2f} MB)"  # noqa: E501
              f" sent {r['model_sends']:.0f} times")
    for v, results in checks.items():
        for what, verdict in results.items():
            print(f"{v}: {what}: {verdict}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_cli":
        _cli_main(sys.argv[2], Path(sys.argv[3]), sys.argv[4:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_first":
        _first_main(sys.argv[2], Path(sys.argv[3]))
    else:
        sys.exit(main())
