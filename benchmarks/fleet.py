"""Fleet benchmarks (issue 14): many small models on 2 cores, parallel against one after another.

1. A fleet of 8 models (tests/fleet_project.py: the user's DigitsMLP at 8 widths, 12-input golden
   sets, TorchScript-trace and ONNX; one model retrained so it fails) checked by one
   ``export-check --fleet fleet.toml`` run, against the baseline a user had before: 8
   ``export-check MODEL`` runs one after another. Both cold (``--no-cache``). Target >= 1.6x. Also
   one ``--fleet --workers 1`` run: the models one after another in one process, which shows what
   the pool of workers adds beyond paying the start-up once.
2. ``pytest -n 2`` on a project declaring 4 models against a serial ``pytest``, each with a fresh,
   empty artifact cache, every artifact kind of the default group:
   - ``zoo``: the four bundled digit models (SimpleCNN, ResNet, MobileNetV2, ViT; models/) with
     their 64 golden digits: a model zoo's checks, each longer than a worker's start-up.
   - ``zoo-modern``: the zoo with ``artifacts = "modern"`` (torch.export, dynamo ONNX, fp16, torchao,
     static int8: builds of 5-17 s), where the models' own work dominates start-up.
   - ``smallnet``: the user's conv ``SmallNet`` (tests/user_project.py) at 4 widths, golden sets of
     8 photos. Each model's check (~2.5 s) is about what a second worker costs to start, import torch,
     start its build server and exit (~3 s of the 2 cores): it shows the fixed cost.

3. ``--only pool``: each of ``--projects`` as one fleet file, ``--fleet --workers 2`` (a worker per
   core, ``--jobs 1`` each) against ``--workers 1`` (one process, ``--jobs 2`` per model), cold.

Both pytest runs pass ``-p no:hypothesispytest``: the bench environment has the test extra, whose
hypothesis plugin imports hypothesis in each process's terminal summary (1.5-2 s; once serially, in
each worker and then the controller under xdist). A model project need not have it.

Every run's verdicts are compared (per model and row; per pytest item) and must be equal. Run from
the repo in an environment with export-check and its test extra (pytest-xdist) installed::

    python benchmarks/fleet.py              # models in a temp folder, deleted after
    python benchmarks/fleet.py --repeats 2  # the median of 2 of each
    python benchmarks/fleet.py --only pytest --projects zoo
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from fleet_project import make_zoo  # noqa: E402  (tests/ on the path first)
from user_project import PREPROCESS, write_netdef, write_photos  # noqa: E402

EXE = str(Path(sys.executable).with_name("export-check"))


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    return time.perf_counter() - started, done


def _rows(report: dict) -> dict[str, str]:
    return {row["name"]: row["status"] for row in report["rows"]}


def bench_fleet(folder: Path, env: dict[str, str], names: tuple[str, ...]) -> tuple[float, float, float]:
    """Seconds for one after another, for one fleet run, and for one fleet run with ``--workers 1``
    (the models one after another in one process: what the pool adds beyond paying start-up once);
    asserts the same verdicts."""
    serial: dict[str, dict[str, str]] = {}
    started = time.perf_counter()
    for name in names:
        _, done = _run([EXE, f"{name}/model.pth", "--no-cache", "-q", "--out", "out-serial", "--json", f"{name}.json"], folder, env)
        assert done.returncode in (0, 1), done.stderr
        serial[name] = _rows(json.loads((folder / f"{name}.json").read_text()))
    one_by_one = time.perf_counter() - started
    fleet_seconds, fleet = _fleet(folder, env, None, (1,))
    assert fleet == serial, (fleet, serial)
    one_process, fleet1 = _fleet(folder, env, 1, (1,))
    assert fleet1 == serial, (fleet1, serial)
    return one_by_one, fleet_seconds, one_process


def _fleet(folder: Path, env: dict[str, str], workers: int | None, codes: tuple[int, ...]) -> tuple[float, dict[str, dict[str, str]]]:
    """One cold ``export-check --fleet fleet.toml`` run (``--workers``, else the default): its
    seconds and each model's verdicts by row; asserts its exit code is one of ``codes``."""
    tag = "" if workers is None else f"-w{workers}"
    took, done = _run([EXE, "--fleet", "fleet.toml", *([] if workers is None else ["--workers", str(workers)]), "--no-cache", "-q",
                       "--out", f"out-fleet{tag}", "--json", f"fleet{tag}.json"], folder, env)
    assert done.returncode in codes, done.stderr
    return took, {m["name"]: _rows(m["report"]) for m in json.loads((folder / f"fleet{tag}.json").read_text())["models"]}


ITEM = re.compile(r"(\w+\d)/model\.pth::(\S+) (PASSED|FAILED)|(PASSED|FAILED) (\w+\d)/model\.pth::(\S+)")


def _items(text: str) -> dict[tuple[str, str], str]:
    found = {}
    for m in ITEM.finditer(text):
        model, row, verdict = (m.group(1), m.group(2), m.group(3)) if m.group(1) else (m.group(5), m.group(6), m.group(4))
        found[(model, row)] = verdict
    return found


def bench_pytest(folder: Path, env: dict[str, str], workers: int) -> tuple[float, dict[tuple[str, str], str]]:
    cache = tempfile.mkdtemp(prefix="fleet-bench-cache-")  # cold: nothing built by an earlier run
    # -p no:hypothesispytest: not export-check's cost (the module docstring says why)
    args = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
            *(["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"])]
    seconds, done = _run(args, folder, {**env, "XDG_CACHE_HOME": cache})
    items = _items(done.stdout)
    assert items and len(items) % 4 == 0, done.stdout[-2000:]
    return seconds, items


def conv_project(folder: Path, count: int) -> Path:
    """``count`` SmallNet models (seeded, widths 8, 12, ...), each with its settings and golden set of 8 photos."""
    import torch

    from export_check.checkpoint import resolve_factory
    from export_check.cli import main as cli

    folder.mkdir(parents=True)
    (folder / ".git").mkdir()  # a project: its models' settings may name its netdef.py (issue 24)
    netdef = write_netdef(folder)
    write_photos(folder / "photos")
    preprocess = ", ".join(f"{k} = {json.dumps(v)}" for k, v in PREPROCESS.items())
    names = []
    for i in range(count):
        model = folder / f"net{i}"
        model.mkdir()
        torch.manual_seed(i)
        torch.save(resolve_factory(f"{netdef}:SmallNet")(width=8 + 4 * i).state_dict(), model / "model.pth")
        (model / "export-check.toml").write_text(f'arch = "{netdef}:SmallNet"\narch-kwargs = {{ width = {8 + 4 * i} }}\ngolden = "golden"\n'
                                                  f'inputs = "../photos"\npreprocess = {{ {preprocess} }}\n')
        assert cli(["golden", "record", str(model / "model.pth"), "--config", str(model / "export-check.toml"), "-q"]) == 0
        names.append(f'"net{i}/model.pth"')
    (folder / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\nexport_check_models = [{', '.join(names)}]\n")
    return folder


ZOO = {  # the bundled digit models: checkpoint -> architecture (benchmarks/run.py's MODELS)
    "simple_cnn_digits.pth": "models/simple_cnn.py:SimpleCNN",
    "resnet_digits.pth": "models/resnet.py:ResNet",
    "mobilenet_v2_digits.pth": "models/mobilenet.py:MobileNetV2",
    "vit_digits.pth": "models/vit.py:VisionTransformer",
}


def zoo_project(folder: Path, count: int = 64, artifacts: str = "") -> Path:
    """The four bundled digit models, each in a folder of its own with its settings and a golden
    set recorded from ``count`` digits (64: the bundled golden digits), declared to the pytest plugin;
    ``artifacts``: a group or kinds for every model (default: the default group)."""
    import shutil

    from export_check.cli import main as cli
    from models.digits import DIGITS_PREPROCESS
    from models.make_golden_images import write_golden_images

    folder.mkdir(parents=True)
    (folder / ".git").mkdir()  # a project: its models' settings may name its architectures (issue 24)
    write_golden_images(folder / "digits", count)
    preprocess = ", ".join(f"{k} = {json.dumps(v)}" for k, v in DIGITS_PREPROCESS.to_json().items() if v is not None)
    names = []
    for i, (checkpoint, arch) in enumerate(ZOO.items()):
        model = folder / f"net{i}"
        model.mkdir()
        shutil.copyfile(REPO / "models" / "checkpoints" / checkpoint, model / "model.pth")
        source, _, factory = arch.partition(":")  # the architecture copied into the project: a settings file's arch lies inside it
        (folder / "models").mkdir(exist_ok=True)
        shutil.copyfile(REPO / source, folder / source)
        (model / "export-check.toml").write_text(f'arch = "../{source}:{factory}"\narch-kwargs = {{ image_size = 32 }}\ngolden = "golden"\n'
                                                  f'inputs = "../digits"\npreprocess = {{ {preprocess} }}\n'
                                                  + (f'artifacts = ["{artifacts}"]\n' if artifacts else ""))
        assert cli(["golden", "record", str(model / "model.pth"), "--config", str(model / "export-check.toml"), "-q"]) == 0
        names.append(f'"net{i}/model.pth"')
    (folder / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\nexport_check_models = [{', '.join(names)}]\n")
    return folder


def bench_fleet_pool(folder: Path, env: dict[str, str]) -> tuple[float, float]:
    """A pytest project's four models as one fleet file: seconds for ``--workers 1`` (one process,
    each model with ``--jobs 2``) and ``--workers 2`` (a worker per core, ``--jobs 1`` each), cold;
    asserts the same verdicts."""
    names = sorted(p.name for p in folder.glob("net*"))
    (folder / "fleet.toml").write_text("".join(f'[models.{n}]\ncheckpoint = "{n}/model.pth"\nconfig = "{n}/export-check.toml"\n' for n in names))
    (one, one_verdicts), (two, two_verdicts) = (_fleet(folder, env, workers, (0, 1)) for workers in (1, 2))
    assert one_verdicts == two_verdicts, (one_verdicts, two_verdicts)
    return one, two


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", choices=("fleet", "pytest", "pool"),
                        help="run one benchmark: fleet (8 small models), pytest (-n 2), pool (--fleet --workers 2 against "
                        "--workers 1 on the --projects, as fleet files)")
    parser.add_argument("--projects", default="zoo,zoo256,smallnet",
                        help="pytest projects, comma-separated: zoo, zoo256, smallnet, zoo-modern (the zoo with the modern "
                        "group: builds of 5-17 s each, so the models' checks, not start-up, dominate)")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        if args.only in (None, "fleet"):
            zoo = make_zoo(Path(tmp) / "fleet", 8, broken=(3,))
            pairs = [bench_fleet(zoo.folder, env, zoo.names) for _ in range(args.repeats)]
            serial = statistics.median(p[0] for p in pairs)
            fleet = statistics.median(p[1] for p in pairs)
            one_process = statistics.median(p[2] for p in pairs)
            print(f"fleet of {len(zoo.names)} models, cold, {os.cpu_count()} cores: one after another {serial:.1f} s, one "
                  f"`export-check --fleet` run {fleet:.1f} s: {serial / fleet:.2f}x faster, same verdicts; `--fleet --workers 1` "
                  f"{one_process:.1f} s ({one_process / fleet:.2f}x the parallel run)", flush=True)
        if args.only == "fleet":
            return 0
        makers = {"zoo": zoo_project, "zoo256": lambda folder: zoo_project(folder, 256), "smallnet": lambda folder: conv_project(folder, 4),
                  "zoo-modern": lambda folder: zoo_project(folder, 64, "modern")}
        for name in args.projects.split(","):
            project = makers[name](Path(tmp) / name)
            if args.only == "pool":
                pool = [bench_fleet_pool(project, env) for _ in range(args.repeats)]
                one, two = statistics.median(r[0] for r in pool), statistics.median(r[1] for r in pool)
                print(f"fleet file of project {name!r} (4 models), cold: --workers 1 {one:.1f} s, --workers 2 {two:.1f} s: "
                      f"{one / two:.2f}x faster, same verdicts", flush=True)
                continue
            runs = []
            for _ in range(args.repeats):
                s_seconds, s_items = bench_pytest(project, env, 1)
                p_seconds, p_items = bench_pytest(project, env, 2)
                assert s_items == p_items, (s_items, p_items)
                runs.append((s_seconds, p_seconds))
            s, p = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            failed = sum(v == "FAILED" for v in s_items.values())
            print(f"pytest, project {name!r}: 4 models ({len(s_items)} items, {failed} failing), cold cache: serial {s:.1f} s, "
                  f"-n 2 {p:.1f} s: {s / p:.2f}x faster, same verdicts", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
