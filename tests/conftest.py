from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
DEFAULT_CHECKPOINT = REPO / "models" / "checkpoints" / "resnet_digits.pth"
DEFAULT_ARCH = f"{REPO / 'models' / 'resnet.py'}:ResNet"
DEFAULT_GOLDEN = REPO / "golden"

# Hypothesis: under CI every run draws the same examples (a landing is never failed by a new draw that
# found an old bug: that is found, and fixed, by the random draws of a developer's runs); a failure
# prints the blob that reproduces it.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
_hypothesis_settings.register_profile("dev", print_blob=True)
_hypothesis_settings.load_profile("ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev")

if str(REPO) not in sys.path:
    # models/ and tests/arches.py are data the tests point at by path; exporter itself must come
    # from the installed package (checked below), so the repo goes last on sys.path.
    sys.path.append(str(REPO))

# `python -c NO_TORCH ARGS...`: the CLI run with torch made unimportable (a finder that refuses it), and
# proven never imported: what a replay on a target without torch, or a --judge-only run, must survive.
NO_TORCH = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is not installed here")
sys.meta_path.insert(0, NoTorch())
from export_check.cli import main
code = main(sys.argv[1:])
assert "torch" not in sys.modules
sys.exit(code)
"""


def pytest_configure(config: pytest.Config) -> None:
    # Session- and module-scoped fixtures run before the per-test private_cache_dir: give them a
    # cache and a cache key of the session's own, never the real home directory's.
    import tempfile

    for variable in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        os.environ[variable] = tempfile.mkdtemp(prefix=f"export-check-tests-{variable.lower()}-")
    os.environ.pop("EXPORT_CHECK_CACHE_KEY_FILE", None)
    if os.environ.get("EXPORT_CHECK_REQUIRE_INSTALLED"):
        import export_check

        location = Path(export_check.__file__).resolve()
        assert REPO / "exporter" not in location.parents, f"tests imported exporter from the source tree: {location}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """tests/run_narrowed.py collects only the test files that apply its runs' markers (``marked_files``): a test marked
    otherwise (by a fixture, a plugin) in a file that does not would never run there. Any session that collects one fails."""
    import run_narrowed

    for _, _, selection in run_narrowed.RUNS:
        markers = run_narrowed.markers_of(selection)
        files = run_narrowed.marked_files(markers)
        if files is None:  # the narrowed run collects the whole tree
            continue
        collected = {f.resolve() for f in files}
        missed = sorted({str(i.path) for i in items if all(i.get_closest_marker(m) for m in markers) and Path(i.path).resolve() not in collected})
        if missed:
            raise pytest.UsageError(f"tests marked {selection!r} in files tests/run_narrowed.py does not collect (the files do not apply "
                                    f"{' and '.join(markers)} themselves): {', '.join(missed)}; mark them in their file")


@pytest.fixture(scope="session", autouse=True)
def no_terminal_width() -> None:
    """pytest-xdist's workers set COLUMNS=80 and LINES=24; a CLI printing into a pipe wraps its lines to COLUMNS when it
    is set (exporter/report/text.py). Every test, and every module-scoped fixture, runs as a CI log without it; the
    tests of the terminal's width set it themselves."""
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


@pytest.fixture(autouse=True)
def private_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own empty artifact cache (the CLI's default honours XDG_CACHE_HOME) and
    its own cache key (XDG_CONFIG_HOME), so no test reuses another's artifacts and none writes to
    the real home directory."""
    folder = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    monkeypatch.delenv("EXPORT_CHECK_CACHE_KEY_FILE", raising=False)
    # pytest-xdist's workers set COLUMNS=80 and LINES=24; a CLI printing into a pipe wraps its lines to COLUMNS when it is set
    # (exporter/report/text.py), so every test runs as a CI log without it, whether xdist runs it or not. The tests of the
    # terminal's width set it themselves.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    # GNU readline, once any import loads it in this process, sets both in the C environment that subprocesses inherit
    # without os.environ seeing them: a CLI run by a test then wrapped its report at 80 columns (a path 2 characters
    # longer split "replayed on lab-1" across two lines in test_replay)
    for name in ("COLUMNS", "LINES"):
        if name not in os.environ:
            os.unsetenv(name)
    return folder / "export-check"


@pytest.fixture(scope="session")
def digit_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 real handwritten digits as PNG files (scikit-learn's bundled scans), the last 16 inverted
    (dark ink on light paper) so that batch brightness varies like real scans do."""
    from PIL import ImageOps

    from models.digits import digit_to_image, digits_split, load_digits_arrays

    images, labels = load_digits_arrays()
    _, test_idx = digits_split(labels)
    folder = tmp_path_factory.mktemp("digit-images")
    names = {}
    for n, index in enumerate(test_idx[100:124]):
        img = digit_to_image(images[index])
        if n >= 8:
            img = ImageOps.invert(img)
        name = f"{n:04d}.png"
        img.save(folder / name)
        names[name] = int(labels[index])
    import json

    (folder / "labels.json").write_text(json.dumps(names))
    return folder


# How far the nudged checkpoint's logits sit from the bundled golden reference: far above any CPU's float
# drift (the bundled model reproduces its reference exactly on one CPU, at 2.8e-7 MAE on another) and
# well under the 1e-5 float gate, so a test gets a failing eager row under a tight gate on purpose.
NUDGE = 4e-6


@pytest.fixture(scope="session")
def nudged_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled ResNet with ``NUDGE`` added to its classifier's bias: every logit moves by NUDGE (give
    or take float32 rounding, under 1e-6 for these logits), whatever the CPU's kernels. Eager against
    the golden set then has an MAE of about NUDGE on every machine: a pass at the default gate, a fail
    under ``--max-mae 1e-9``."""
    import torch

    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    state["fc.bias"] = state["fc.bias"] + NUDGE
    return save_state_dict(state, tmp_path_factory.mktemp("nudged") / "resnet_digits_nudged.pth")


def docs_script(name: str, root: Path = REPO):
    """A script of docs/ (``gen_reference``, the site's hook; ``gen_maps``), loaded from its file as the hook is."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_under_test", root / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_report(path: Path) -> dict:
    """A JSON report export-check wrote, without its seal (the first member, exporter/report/seal.py): what the run
    reported, as the tests compare it."""
    text = path.read_text()
    return json.loads("{" + text[text.index('"schema"'):])


def save_state_dict(state, path: Path) -> Path:
    import torch

    torch.save(state, path)
    return path


@pytest.fixture()
def golden_copy(tmp_path: Path) -> Path:
    """A private copy of the bundled golden set that a test may tamper with."""
    dest = tmp_path / "golden"
    shutil.copytree(DEFAULT_GOLDEN, dest)
    return dest


def save_state(model, path: Path) -> Path:
    import torch

    torch.save(model.state_dict(), path)
    return path


def seeded(factory, seed: int = 0, **kwargs):
    import torch

    torch.manual_seed(seed)
    model = factory(**kwargs).eval()
    # BatchNorm running statistics away from their init, so that folding them is really tested.
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model


@pytest.fixture()
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@contextlib.contextmanager
def mounted_tmpfs(mount: Path, options: str, covered_by: str) -> Iterator[Path]:
    """Mount a tmpfs at ``mount`` (a small or read-only disk, for real fault tests) and unmount it after.

    Mounting needs root. Where it is impossible the test is skipped with ``covered_by`` as the
    reason, except under CI (root there), where a skip would hide a check: it fails instead.
    """
    mount.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True, text=True)
    if result.returncode != 0:
        message = f"cannot mount a tmpfs ({options}) here: {result.stderr.strip()}; {covered_by}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def process_gone(pid: int, wait: float = 0.0) -> bool:
    """Whether process ``pid`` has stopped running (gone, or a zombie its new parent will reap),
    polling for up to ``wait`` seconds."""
    import time

    deadline = time.monotonic() + wait
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) if the body blocks for longer than ``seconds`` (SIGALRM: main thread only)."""
    import signal

    def expired(signum, frame):
        raise AssertionError(f"still running after {seconds} s: something blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def forge_golden_file(golden: Path, rel: str, data: bytes) -> None:
    """Replace ``rel`` in a golden set and put its new hash into the manifest: a forger who can write the folder."""
    import hashlib
    import json

    (golden / rel).write_bytes(data)
    manifest = json.loads((golden / "manifest.json").read_text())
    for entry in [*manifest["inputs"], manifest["reference"]]:
        if entry["file"] == rel:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
    (golden / "manifest.json").write_text(json.dumps(manifest))


def golden_refusal(call, *args, **kwargs) -> str:
    """The one line of the GoldenError ``call(*args, **kwargs)`` must raise (a golden file refused)."""
    from export_check.errors import GoldenError

    with pytest.raises(GoldenError) as info:
        call(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


def parsed_or_refused(folder: Path, manifest: dict):
    """A fuzzed manifest parsed as the golden set in ``folder``; ``None`` when it is no JSON at all or is
    refused, as it must be, by one GoldenError line naming the folder."""
    import json

    from export_check.errors import GoldenError
    from export_check.golden.manifest import parse_manifest

    try:
        text = json.dumps(manifest)
    except (TypeError, ValueError):
        return None
    try:
        return parse_manifest(folder, text)
    except GoldenError as exc:
        assert "\n" not in str(exc) and str(folder) in str(exc)
        return None


def report_numbers(report, outputs: bool = False) -> list[tuple]:
    """Every row's verdict and numbers as plain tuples, its per-output figures with ``outputs``: two runs of one check
    compared number for number (--jobs 1 against 2, a held golden set against a spilled one)."""
    rows = []
    for row in report.rows:
        diag = row.diagnostics
        shapes = tuple((r.size, r.max_image_mae, r.error) for r in diag.shapes.runs) if diag and diag.shapes else None
        rerun = (diag.rerun.runs, diag.rerun.max_abs) if diag and diag.rerun else None
        rows.append((row.name, row.status, row.reasons, row.metrics, *((row.outputs,) if outputs else ()), shapes, rerun))
    return rows

