"""Process-level faults, each made for real in a subprocess running the real CLI.

A native crash (SIGSEGV) in one artifact's build, a disk that fills up (a tmpfs, or RLIMIT_FSIZE),
``golden record``/``approve`` killed with SIGKILL mid-write, and two runs on one output directory.
Faults are injected by a ``sitecustomize`` module put on PYTHONPATH (``EXPORT_CHECK_TEST_FAULTS``),
so they reach every process export-check starts, the build children included.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, mounted_tmpfs, process_gone
from export_check.cli import main
from export_check.golden.manifest import MANIFEST, read_manifest

HOOK = r'''
"""Fault injection for tests/test_faults.py, loaded at start-up through PYTHONPATH."""
import os

_FAULTS = os.environ.get("EXPORT_CHECK_TEST_FAULTS", "")
if _FAULTS:
    import ctypes
    import importlib
    import tempfile
    import time
    from pathlib import Path

    _FLAG = os.environ.get("EXPORT_CHECK_TEST_FLAG", "")

    def _say(text):  # the flag appears whole: a test that sees the file reads its text (written, then renamed into place)
        Path(_FLAG + ".partial").write_text(text)
        os.replace(_FLAG + ".partial", _FLAG)

    def _wait_to_be_killed(where):
        _say(str(where))
        time.sleep(600)

    def _crashing_build(how):
        def build(ctx, path, source):
            if how == "segv":
                ctypes.string_at(0)  # a real invalid read: SIGSEGV
            elif how == "abort":
                os.abort()
            elif how == "exit":
                os._exit(3)
            elif how == "sleep":  # a build that never ends: say which process it is, then wait
                _say(str(os.getpid()))
                time.sleep(600)
            elif how == "segv-mid-write":
                from export_check.artifacts._common import atomic_path

                with atomic_path(path) as tmp:
                    tmp.write_bytes(b"the first half of an artifact")
                    ctypes.string_at(0)
        return build

    def _slow_build(real):
        def build(ctx, path, source):  # say which process builds, take 4 s, then write the real artifact
            _say(str(os.getpid()))
            time.sleep(4)
            return real(ctx, path, source)
        return build

    def _hostile_load(how):
        def open_runner(path, ctx):  # an artifact that hangs or crashes when it is loaded
            if how == "hang-load":
                time.sleep(600)
            ctypes.string_at(0)
        return open_runner

    def _crashing_run(real, at=None, hang=False):
        def open_runner(path, ctx):  # it loads and runs one sample (the load probe); a batch of more (or of `at`) crashes it
            runner = real(path, ctx)
            one = runner.infer

            def infer(feeds):
                n = len(next(iter(feeds.values())))
                if ((n > 1) if at is None else (n == at)) and hang:
                    time.sleep(600)
                if (n > 1) if at is None else (n == at):
                    ctypes.string_at(0)
                return one(feeds)

            runner.infer = infer
            return runner
        return open_runner

    for _item in _FAULTS.split(","):
        _what, _, _arg = _item.partition(":")
        if _what in ("segv", "abort", "exit", "segv-mid-write", "sleep"):
            importlib.import_module("export_check.artifacts." + _arg).build = _crashing_build(_what)
        elif _what == "slow":
            _module = importlib.import_module("export_check.artifacts." + _arg)
            _module.build = _slow_build(_module.build)
        elif _what in ("segv-run", "segv-at-7", "hang-run"):
            _module = importlib.import_module("export_check.artifacts." + _arg)
            _module.open_runner = _crashing_run(_module.open_runner, 7 if _what == "segv-at-7" else None, hang=_what == "hang-run")
        elif _what in ("hang-load", "segv-load"):
            importlib.import_module("export_check.artifacts." + _arg).open_runner = _hostile_load(_what)
        elif _what == "hang-golden-write":
            import export_check.golden.store as _golden

            _real_write, _calls, _at = _golden._write_atomic, [0], int(_arg)

            def _write(path, data):
                _calls[0] += 1
                if _calls[0] == _at:  # write half the bytes to the temporary file, then wait for SIGKILL
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
                    os.write(fd, data[: len(data) // 2])
                    os.fsync(fd)
                    _wait_to_be_killed(path)
                return _real_write(path, data)

            _golden._write_atomic = _write
        elif _what == "flag-lock-wait":  # say so when the out-dir lock is found taken (filelock polls: no kernel waiter to see)
            import filelock

            _real_acquire = filelock.FileLock.acquire

            def _acquire(self, *args, **kwargs):
                try:
                    return _real_acquire(self, timeout=0)
                except filelock.Timeout:
                    _say(str(self.lock_file))
                return _real_acquire(self, *args, **kwargs)

            filelock.FileLock.acquire = _acquire
        elif _what == "hang-golden-gc":
            import export_check.golden.store as _golden

            _real_gc = _golden._collect_garbage

            def _gc(root, keep):
                _wait_to_be_killed(root)
                return _real_gc(root, keep)

            _golden._collect_garbage = _gc
'''


@pytest.fixture(scope="module")
def hook_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fault-hook")
    (folder / "sitecustomize.py").write_text(HOOK)
    return folder


def cli_env(hook_dir: Path, faults: str = "", **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook_dir), env.get("PYTHONPATH", "")) if p)
    env["EXPORT_CHECK_TEST_FAULTS"] = faults
    env.update(extra)
    return env


# The kinds of the tests whose point is one build (a slow or hung onnx-simplified, derived from onnx) among others:
# not the default group, whose other builds only make the wait for that one longer.
THREE_KINDS = "torchscript-trace,onnx,onnx-simplified"


def cli(*args: object) -> list[str]:
    return [sys.executable, "-m", "export_check", *(str(a) for a in args)]


def strict_json(path: Path) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{path} holds {constant}")

    return json.loads(path.read_text(), parse_constant=refuse)


def partial_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".partial" in p.name)


def retrained_checkpoint(folder: Path) -> Path:
    """The bundled model with one conv layer nudged: another model, its own artifacts and logits."""
    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    key = next(k for k, v in state.items() if v.dtype.is_floating_point and v.ndim == 4)
    state[key] = state[key] + 0.01 * torch.randn(state[key].shape, generator=torch.Generator().manual_seed(0))
    path = folder / "retrained.pth"
    torch.save(state, path)
    return path


# --- a native crash in one build -----------------------------------------------------------------


def test_native_crashes_in_builds_are_their_rows_errors_and_the_rest_passes(hook_dir: Path, tmp_path: Path) -> None:
    out, report_path = tmp_path / "out", tmp_path / "report.json"
    faults = "segv:torchscript_trace,segv-mid-write:onnx_simplified,abort:torch_int8"
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--json", report_path,
            "--no-cache", "-q"),
        env=cli_env(hook_dir, faults), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    rows = {row["name"]: row for row in strict_json(report_path)["rows"]}
    crashes = (("torchscript-trace", "11, SIGSEGV"), ("onnx-simplified", "11, SIGSEGV"), ("torch-int8-dynamic", "6, SIGABRT"))
    for name, signal_name in crashes:
        row = rows[name]
        assert row["status"] == "error", row
        assert row["reasons"][0].startswith(f"build crashed (signal {signal_name}) in its child process"), row["reasons"]
        assert row["artifact"] is None and not (out / f"{name}{'.onnx' if 'onnx' in name else '.pt'}").exists()
        assert f"ERROR {name}: build crashed (signal {signal_name})" in result.stdout
    for name in ("eager", "torchscript-script", "onnx", "onnx-int8-dynamic"):
        assert rows[name]["status"] == "pass", rows[name]
    assert rows["onnx"]["metrics"]["mae"] <= 1e-5 and rows["onnx-int8-dynamic"]["metrics"]["top1_agreement"] >= 0.98
    assert partial_files(out) == []  # the half-written onnx-simplified temporary was removed


def test_a_child_that_exits_without_reporting_is_an_error_too(hook_dir: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", tmp_path / "out",
            "--artifacts", "torchscript-script,onnx", "--no-cache", "-q"),
        env=cli_env(hook_dir, "exit:onnx_export"), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ERROR onnx: build crashed: its child process exited with code 3 before reporting back" in result.stdout
    assert "FAILED: 2 passed, 0 failed, 1 error" in result.stdout


ONNX_KINDS = "onnx,onnx-simplified,onnx-int8-dynamic"
ONNX_FILES = ("onnx.onnx", "onnx-simplified.onnx", "onnx-int8-dynamic.onnx")


@pytest.fixture(scope="module")
def earlier_onnx_run(hook_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An --out that a passing run of the three onnx kinds filled: the earlier run of both --jobs cases (each crashes
    its own copy of it)."""
    out = tmp_path_factory.mktemp("earlier-onnx-run") / "out"
    first = subprocess.run(cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out,
                               "--artifacts", ONNX_KINDS, "--no-cache", "-q"),
                           env=cli_env(hook_dir), capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert all((out / name).is_file() for name in ONNX_FILES)
    return out


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_crashed_onnx_build_leaves_no_derived_artifact_from_an_earlier_run(hook_dir: Path, earlier_onnx_run: Path, tmp_path: Path,
                                                                             jobs: str) -> None:
    """The derived kinds are not built from the previous run's onnx.onnx, and their previous files go."""
    out, report_path = tmp_path / "out", tmp_path / "report.json"
    onnx_files = ONNX_FILES
    shutil.copytree(earlier_onnx_run, out, symlinks=True)
    assert all((out / name).is_file() for name in onnx_files)
    args = cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--json", report_path,
               "--artifacts", ONNX_KINDS, "--no-cache", "--jobs", jobs, "-q")
    second = subprocess.run(args, env=cli_env(hook_dir, "segv:onnx_export"), capture_output=True, text=True, timeout=600)
    assert second.returncode == 1, second.stdout + second.stderr
    rows = {row["name"]: row for row in strict_json(report_path)["rows"]}
    assert rows["eager"]["status"] == "pass"
    assert rows["onnx"]["status"] == "error" and rows["onnx"]["reasons"][0].startswith("build crashed (signal 11, SIGSEGV)")
    for name in ("onnx-simplified", "onnx-int8-dynamic"):
        assert rows[name]["status"] == "error" and rows[name]["artifact"] is None and rows[name]["metrics"] is None
        assert rows[name]["reasons"][0] == "not built: it is derived from onnx, which failed", rows[name]["reasons"]
    assert [name for name in onnx_files if (out / name).exists()] == []
    assert partial_files(out) == []


def test_an_interrupted_run_stops_its_build_child_too(hook_dir: Path, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to export-check alone) while a build is still running: exit 130, no build left running.
    Three kinds, not the default group: the point is the hung onnx-simplified build (after the onnx it is derived
    from), which the other default kinds' builds only delay."""
    flag, out = tmp_path / "flag", tmp_path / "out"
    proc = subprocess.Popen(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--no-cache", "--jobs", "2", "-q",
            "--artifacts", THREE_KINDS),
        env=cli_env(hook_dir, "sleep:onnx_simplified", EXPORT_CHECK_TEST_FLAG=str(flag)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not (flag.is_file() and flag.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "the sleeping build never started"
            time.sleep(0.05)
        child = int(flag.read_text())
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    assert stderr.strip().splitlines()[-1] == "export-check: interrupted" and "Traceback" not in stderr
    assert process_gone(child, wait=10), f"build child {child} still running after export-check exited"
    assert partial_files(out) == [] and not (out / "onnx-simplified.onnx").exists()


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now, read from /proc (psutil is not a dependency)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def wait_for_flag(proc: subprocess.Popen, flag: Path, limit: float = 300) -> int:
    deadline = time.monotonic() + limit
    while not (flag.is_file() and flag.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, "the flagged build never started"
        time.sleep(0.05)
    return int(flag.read_text())


def test_sigkill_of_the_parent_alone_ends_its_builds_and_they_never_write_into_a_later_run(hook_dir: Path, tmp_path: Path) -> None:
    """SIGKILL export-check alone while a slow build (4 s, then it writes) runs: the build server and
    the child die with it (parent-death signal, lifeline pipe), and the next run's artifacts in the
    same --out are the ones its report hashed, also after the dead run's build would have finished. Both runs build
    three kinds (the slow onnx-simplified, the onnx it is derived from, and torchscript-trace), not the default group:
    what is proved is about the killed build and the files of the next run, whatever their number."""
    flag, out, report_path = tmp_path / "flag", tmp_path / "out", tmp_path / "report.json"
    argv = cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--no-cache", "--jobs", "2", "-q",
               "--artifacts", THREE_KINDS)
    proc = subprocess.Popen(argv, env=cli_env(hook_dir, "slow:onnx_simplified", EXPORT_CHECK_TEST_FLAG=str(flag)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        child = wait_for_flag(proc, flag)
        below = descendants(proc.pid)
        assert child in below and len(below) >= 2, below  # the build server and its child
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed = time.monotonic()
    survivors = [pid for pid in below if not process_gone(pid, wait=5)]
    assert survivors == [], f"build processes {survivors} outlived their SIGKILLed parent"
    result = subprocess.run([*argv, "--json", report_path], env=cli_env(hook_dir), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    time.sleep(max(0.0, killed + 6 - time.monotonic()))  # past the moment the dead run's slow build would have written
    rows = strict_json(report_path)["rows"]
    artifacts = {Path(row["artifact"]["path"]).name: row["artifact"]["sha256"] for row in rows if row["artifact"]}
    assert sorted(artifacts) == ["onnx-simplified.onnx", "onnx.onnx", "torchscript-trace.pt"]
    on_disk = {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in artifacts}
    assert on_disk == artifacts
    assert [p.name for p in out.iterdir() if p.name.startswith(".building-")] == []  # the dead run's private folder is gone
    assert partial_files(out) == []


@pytest.mark.parametrize("how", ["hang-load", "segv-load"])
def test_an_artifact_that_hangs_or_crashes_on_load_costs_its_row_not_the_run(hook_dir: Path, tmp_path: Path, how: str) -> None:
    """The load probe (the file reloaded and one sample run in a load child, forked from the clean load
    host) runs under the build timeout: a hang there is killed at the timeout, a crash is the build's
    row's, and the parent never loads it."""
    out, report_path = tmp_path / "out", tmp_path / "report.json"
    began = time.monotonic()
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--json", report_path, "--no-cache",
            "--artifacts", "torchscript-trace,onnx", "--build-timeout", "8", "-q"),
        env=cli_env(hook_dir, f"{how}:torchscript_trace"), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - began < 120
    rows = {row["name"]: row for row in strict_json(report_path)["rows"]}
    bad = rows["torchscript-trace"]
    assert bad["status"] == "error" and bad["artifact"] is None, bad
    expected = "build timed out: still running after 8 s" if how == "hang-load" else "build crashed (signal 11, SIGSEGV)"
    assert bad["reasons"][0].startswith(expected), bad["reasons"]
    assert rows["eager"]["status"] == "pass" and rows["onnx"]["status"] == "pass"
    assert not (out / "torchscript-trace.pt").exists()  # never committed into --out


def replayed_with_a_fault(hook_dir: Path, tmp_path: Path, faults: str, *extra: str) -> dict[str, dict]:
    """The rows of a torchscript-trace and onnx check of the bundled model run with ``faults``; it exits 1, no traceback."""
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", tmp_path / "out", "--json", report_path,
            "--no-cache", "--artifacts", "torchscript-trace,onnx", "-q", *extra),
        env=cli_env(hook_dir, faults), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return {row["name"]: row for row in strict_json(report_path)["rows"]}


def test_an_artifact_that_crashes_its_runtime_in_the_replay_costs_its_row_not_the_run(hook_dir: Path, tmp_path: Path) -> None:
    """The replay runs in a replay child of the load host (builder/clean.py), not in export-check's process: a file
    that loads, and runs its first sample, but crashes its runtime on a whole batch is that row's error. Replayed beside
    the architecture (before), the segfault killed the run."""
    rows = replayed_with_a_fault(hook_dir, tmp_path, "segv-run:torchscript_trace")
    bad = rows["torchscript-trace"]
    assert bad["status"] == "error" and bad["metrics"] is None, bad
    assert bad["reasons"][0].startswith("running failed at inputs 0.."), bad["reasons"]
    assert "its replay process ended while running the file, without a reply" in bad["reasons"][0], bad["reasons"]
    assert rows["eager"]["status"] == "pass" and rows["onnx"]["status"] == "pass" and rows["onnx"]["metrics"]["mae"] <= 1e-5


def test_an_artifact_that_hangs_its_runtime_in_the_replay_costs_its_row_at_the_build_timeout(hook_dir: Path, tmp_path: Path) -> None:
    """Issue 47: a replayed file that hangs had no time limit (the run waited forever on its replay child). Each call
    now waits at most --build-timeout: the child is killed, the row is an error naming the timeout, the rest pass."""
    began = time.monotonic()
    rows = replayed_with_a_fault(hook_dir, tmp_path, "hang-run:torchscript_trace", "--build-timeout", "8")
    bad = rows["torchscript-trace"]
    assert bad["status"] == "error" and bad["metrics"] is None, bad
    assert "replay timed out: still running the file after 8 s, its replay process was killed" in bad["reasons"][0], bad["reasons"]
    assert rows["eager"]["status"] == "pass" and rows["onnx"]["status"] == "pass"
    assert time.monotonic() - began < 200


def test_a_runtime_that_crashes_at_one_batch_size_fails_that_size_by_its_cause_and_the_other_sizes_run(hook_dir: Path,
                                                                                                      tmp_path: Path) -> None:
    """The replay (batches of 16) passes; the batch-size check's size 7 crashes the runtime: that size fails, named as a
    crash, and sizes 1 and 64 run in a new replay child (they agree with eager, so they add no reason)."""
    rows = replayed_with_a_fault(hook_dir, tmp_path, "segv-at-7:torchscript_trace")
    bad = rows["torchscript-trace"]
    assert bad["status"] == "fail" and bad["metrics"]["mae"] == 0.0, bad  # the replay itself ran, and agrees
    sized = [reason for reason in bad["reasons"] if reason.startswith("batch size")]
    assert len(sized) == 1 and sized[0].startswith("batch size 7 fails (ReplayProcessDied: its replay process ended while running"), sized
    assert sized[0].endswith("its runtime crashed at this batch size (a native fault in the runtime or the file at this shape; the other "
                             "sizes ran in a new replay process): reproduce it by running the file at this batch size alone"), sized
    assert rows["onnx"]["status"] == "pass"


@pytest.mark.parametrize("moment", ["importing torch", "loading checkpoint", "building", "replaying"])
def test_ctrl_c_at_any_moment_exits_130_with_one_line_and_leaves_no_process(tmp_path: Path, moment: str) -> None:
    """A real Ctrl-C (SIGINT to the whole process group, as a terminal sends it) at several moments of a run. The run
    builds three kinds (two at once, --jobs 2), not the default group: every moment comes, sooner."""
    proc = subprocess.Popen(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", tmp_path / "out", "--no-cache", "--jobs", "2",
            "--artifacts", THREE_KINDS),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    seen = b""
    below: set[int] = set()
    try:
        if moment == "importing torch":  # its shared libraries are mapped: the import is under way
            deadline = time.monotonic() + 120
            while "libtorch" not in Path(f"/proc/{proc.pid}/maps").read_text():
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.005)
        else:
            os.set_blocking(proc.stderr.fileno(), False)
            deadline = time.monotonic() + 300
            while moment.encode() not in seen:
                assert proc.poll() is None and time.monotonic() < deadline, seen.decode()
                seen += proc.stderr.read() or b""
                time.sleep(0.02)
        below = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stderr = seen + stderr
    assert proc.returncode == 130, stderr.decode()
    assert b"Traceback" not in stderr and stderr.decode().strip().splitlines()[-1] == "export-check: interrupted"
    assert [pid for pid in below if not process_gone(pid, wait=10)] == []
    assert descendants(proc.pid) == set()


def test_a_hung_build_is_killed_at_the_build_timeout_and_the_rest_passes(hook_dir: Path, tmp_path: Path) -> None:
    """The hung onnx-simplified and the onnx it is derived from, not the default group: the timeout is every build's,
    and it must be well above a real build on a loaded machine (there a TorchScript build, load probe included, has
    taken 5.5 s; the onnx build 1.8 s), while the hung one costs the whole timeout."""
    flag, out, report_path = tmp_path / "flag", tmp_path / "out", tmp_path / "report.json"
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--json", report_path,
            "--no-cache", "--build-timeout", "6", "-q", "--artifacts", "onnx,onnx-simplified"),
        env=cli_env(hook_dir, "sleep:onnx_simplified", EXPORT_CHECK_TEST_FLAG=str(flag)), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {row["name"]: row for row in strict_json(report_path)["rows"]}
    hung = rows["onnx-simplified"]
    assert hung["status"] == "error" and hung["artifact"] is None
    assert hung["reasons"][0].startswith("build timed out: still running after 6 s, its child process was killed"), hung["reasons"]
    assert 6 <= hung["build_seconds"] < 30
    assert sorted(rows) == ["eager", "onnx", "onnx-simplified"]
    assert all(row["status"] == "pass" for name, row in rows.items() if name != "onnx-simplified"), rows
    assert process_gone(int(flag.read_text()))  # killed and reaped before its row was reported
    assert not (out / "onnx-simplified.onnx").exists() and partial_files(out) == []


def test_without_isolation_the_same_crash_kills_the_whole_run(hook_dir: Path, tmp_path: Path) -> None:
    """The control: what the build children save us from."""
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", tmp_path / "out",
            "--json", tmp_path / "report.json", "--artifacts", "torchscript-trace", "--no-cache", "-q"),
        env=cli_env(hook_dir, "segv:torchscript_trace", EXPORT_CHECK_ISOLATE="0"), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == -signal.SIGSEGV
    assert not (tmp_path / "report.json").exists()


# --- the disk fills up ---------------------------------------------------------------------------


def _assert_disk_full_rows(report: dict, out: Path, limit: int | None = None) -> None:
    rows = [row for row in report["rows"] if row["name"] != "eager"]
    failed = [row for row in rows if row["status"] == "error"]
    passed = [row for row in rows if row["status"] == "pass"]
    assert failed and passed, [(row["name"], row["status"]) for row in rows]
    assert len(failed) + len(passed) == len(rows)
    for row in failed:
        reason = row["reasons"][0]
        # a write that fails raises in Python writers and aborts some native ones (torch.jit.save): both say why
        assert (reason.endswith("free space or pass --out to a larger disk")
                or reason.startswith("not built: it is derived from")), (row["name"], reason)
        assert row["artifact"] is None  # never reported as built
        assert row["metrics"] is None
    for row in passed:  # what is reported as built is on disk, whole: its size and hash match
        path = Path(row["artifact"]["path"])
        data = path.read_bytes()
        assert len(data) == row["artifact"]["size_bytes"] and hashlib.sha256(data).hexdigest() == row["artifact"]["sha256"]
        if limit is not None:
            assert len(data) <= limit
    on_disk = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert on_disk == sorted(Path(row["artifact"]["path"]).name for row in passed)
    assert partial_files(out) == []


def test_file_size_limit_mid_run_errors_those_rows_and_keeps_the_rest(hook_dir: Path, tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes every write past the limit fail (EFBIG) in this process and its children. Three kinds, not
    the default group: two TorchScript files over the limit and an ONNX file under it are what the limit splits."""
    limit = 340_000  # between the bundled model's ONNX files (~310 KB) and its TorchScript files (~370 KB)

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed; inherited across exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out, report_path = tmp_path / "out", tmp_path / "report.json"
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--json", report_path,
            "--no-cache", "-q", "--artifacts", "torchscript-trace,torchscript-script,onnx"),
        env=cli_env(hook_dir), capture_output=True, text=True, timeout=600, preexec_fn=limit_file_size,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    report = strict_json(report_path)
    _assert_disk_full_rows(report, out, limit)
    assert {row["name"] for row in report["rows"] if row["status"] == "error"} == {"torchscript-trace", "torchscript-script"}


@pytest.fixture()
def small_tmpfs(tmp_path: Path):
    with mounted_tmpfs(tmp_path / "small-disk", "size=800k", "the RLIMIT_FSIZE test covers a full disk") as mount:
        yield mount


def test_a_real_full_disk_mid_run_errors_those_rows_and_keeps_the_rest(hook_dir: Path, small_tmpfs: Path, tmp_path: Path) -> None:
    """An 800 KB tmpfs: the first artifacts fit, then writes fail with ENOSPC. Three kinds, not the default group: their
    files (two TorchScript files of ~370 KB, an ONNX file of ~310 KB) cannot all fit, and the first always does."""
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", small_tmpfs, "--json", report_path,
            "--no-cache", "-q", "--artifacts", "torchscript-trace,torchscript-script,onnx"),
        env=cli_env(hook_dir), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    _assert_disk_full_rows(strict_json(report_path), small_tmpfs)


# --- golden record / approve killed mid-write ----------------------------------------------------


def snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _run_until_flag_then_kill(argv: list[str], env: dict[str, str], flag: Path) -> str:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not flag.exists():
            assert proc.poll() is None, f"finished before the fault point: {proc.communicate()}"
            assert time.monotonic() < deadline, "never reached the fault point"
            time.sleep(0.05)
        where = flag.read_text()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return where


KILL_POINTS = {
    # name: (command, fault, what is being written when the kill lands)
    "approve-reference": ("approve", "hang-golden-write:1", "reference-"),
    "approve-manifest": ("approve", "hang-golden-write:2", MANIFEST),
    "record-first-input": ("record", "hang-golden-write:1", "inputs/"),
    "record-manifest": ("record", "hang-golden-write:26", MANIFEST),
}


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_golden_write_killed_mid_write_leaves_the_previous_set_byte_for_byte(
    point: str, hook_dir: Path, golden_copy: Path, digit_images: Path, tmp_path: Path, capsys
) -> None:
    command, fault, writing = KILL_POINTS[point]
    before = snapshot(golden_copy)
    flag = tmp_path / "reached"
    checkpoint = retrained_checkpoint(tmp_path)
    argv = cli("golden", command, checkpoint, "--arch", DEFAULT_ARCH, "--golden", golden_copy, "-q")
    if command == "record":
        argv += ["--inputs", str(digit_images), "--size", "32", "--force"]  # 24 inputs, then the reference, then the manifest
    where = _run_until_flag_then_kill(argv, cli_env(hook_dir, fault, EXPORT_CHECK_TEST_FLAG=str(flag)), flag)
    assert writing in where, where
    after = snapshot(golden_copy)
    assert {rel: after.get(rel) for rel in before} == before  # every file of the old set, byte for byte
    leftovers = set(after) - set(before)
    # only the dead writer's hidden temporary and complete content-addressed files the manifest does not name
    hidden_partial = {rel for rel in leftovers if Path(rel).name.startswith(".") and rel.endswith(".partial")}
    assert all(rel in hidden_partial or rel.startswith(("inputs/", "reference-")) for rel in leftovers), leftovers
    assert any(rel.endswith(".partial") for rel in leftovers)
    assert main(["golden", "verify", str(golden_copy)]) == 0
    assert "OK" in capsys.readouterr().out
    assert read_manifest(golden_copy).manifest_sha256 == hashlib.sha256((golden_copy / MANIFEST).read_bytes()).hexdigest()
    # the same command, uninterrupted, then succeeds
    result = subprocess.run(argv, env=cli_env(hook_dir), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert main(["golden", "verify", str(golden_copy)]) == 0
    assert read_manifest(golden_copy).model["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()


def test_golden_approve_killed_after_its_commit_leaves_the_new_set_whole(hook_dir: Path, golden_copy: Path, tmp_path: Path, capsys) -> None:
    """Killed while removing the old set's files (after the manifest was replaced): the new set is complete."""
    flag = tmp_path / "reached"
    checkpoint = retrained_checkpoint(tmp_path)
    argv = cli("golden", "approve", checkpoint, "--arch", DEFAULT_ARCH, "--golden", golden_copy, "-q")
    _run_until_flag_then_kill(argv, cli_env(hook_dir, "hang-golden-gc", EXPORT_CHECK_TEST_FLAG=str(flag)), flag)
    assert main(["golden", "verify", str(golden_copy)]) == 0
    assert read_manifest(golden_copy).model["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()


def test_golden_record_killed_as_soon_as_a_file_appears(
    hook_dir: Path, golden_copy: Path, digit_images: Path, tmp_path: Path, capsys
) -> None:
    """No hook: poll for the first new file in the golden folder and SIGKILL at once."""
    before = snapshot(golden_copy)
    argv = cli("golden", "record", DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", golden_copy, "--inputs",
               digit_images, "--size", "32", "--force", "-q")
    proc = subprocess.Popen(argv, env=cli_env(hook_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while True:
        names = {p.relative_to(golden_copy).as_posix() for p in golden_copy.rglob("*")}
        if names - set(before) - {"inputs"}:
            proc.kill()
            break
        assert proc.poll() is None and time.monotonic() < deadline, "record ended before anything was written"
        time.sleep(0.002)
    proc.wait()
    after = snapshot(golden_copy)
    assert {rel: after.get(rel) for rel in before} == before
    assert main(["golden", "verify", str(golden_copy)]) == 0


# --- two runs on one output directory ------------------------------------------------------------


def test_two_runs_at_once_on_one_out_dir_both_get_correct_verdicts(hook_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "shared-out"
    retrained = retrained_checkpoint(tmp_path)
    runs = {}
    for name, checkpoint in (("approved", DEFAULT_CHECKPOINT), ("retrained", retrained)):
        report = tmp_path / f"{name}.json"
        argv = cli(checkpoint, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--json", report,
                   "--artifacts", "torchscript-trace,onnx", "--no-cache", "-q")
        runs[name] = (subprocess.Popen(argv, env=cli_env(hook_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), report)
    reports = {}
    for name, (proc, report) in runs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == (0 if name == "approved" else 1), stdout + stderr
        reports[name] = strict_json(report)
    approved = {row["name"]: row for row in reports["approved"]["rows"]}
    retrained_rows = {row["name"]: row for row in reports["retrained"]["rows"]}
    assert all(row["status"] == "pass" for row in approved.values())
    assert retrained_rows["eager"]["status"] == "fail" and retrained_rows["eager"]["metrics"]["mae"] > 1e-3
    for name in ("torchscript-trace", "onnx"):  # each run judged its own artifacts, not the other's
        assert retrained_rows[name]["status"] == "pass" and retrained_rows[name]["metrics"]["mae"] <= 1e-5
        assert retrained_rows[name]["artifact"]["sha256"] != approved[name]["artifact"]["sha256"]
    # the files left are one run's complete set, never a mix of the two
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if not p.name.startswith(".")}
    sets = [{Path(r["artifact"]["path"]).name: r["artifact"]["sha256"] for r in rows.values() if r["artifact"]}
            for rows in (approved, retrained_rows)]
    assert on_disk in sets
    assert partial_files(out) == []


def test_the_out_dir_lock_really_makes_a_second_run_wait(hook_dir: Path, tmp_path: Path) -> None:
    out, flag = tmp_path / "out", tmp_path / "waiting"
    out.mkdir()
    with open(out / ".export-check.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # as if another run were building
        proc = subprocess.Popen(
            cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", out, "--artifacts", "onnx",
                "--no-cache", "-q"),
            env=cli_env(hook_dir, "flag-lock-wait", EXPORT_CHECK_TEST_FLAG=str(flag)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 300
        while not (flag.is_file() and flag.read_text()):  # the run tried the lock, found it taken, and went on to wait for it
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the second run never waited for the lock"
            time.sleep(0.05)
        assert flag.read_text().endswith(".export-check.lock")
        time.sleep(0.5)
        assert proc.poll() is None and not (out / "onnx.onnx").exists()  # waiting, nothing written
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stdout + stderr
    assert (out / "onnx.onnx").is_file()


UNPICKLABLE_NET = """
import os, signal, sys, time, torch
from export_check.cli import main

class Net(torch.nn.Module):
    # A model the build server can be sent in no way: a class of this __main__ script, holding a lambda. Its export
    # misbehaves as FAULT says (its eager forward does not): the run must contain it as it contains a server build.

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4, 10)
        self.scale = lambda t: t * 1.0

    def forward(self, x):
        if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
            fault = os.environ.get("FAULT", "")
            if fault == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif fault == "exit0":
                os._exit(0)
            elif fault == "sys-exit0":
                sys.exit(0)
            elif fault == "hang":
                time.sleep(3600)
        return self.fc(self.scale(self.conv(x)).mean((2, 3)))

torch.manual_seed(0)
net, golden, out = sys.argv[1:4]
torch.save(Net().state_dict(), net)
common = [net, "--arch", "__main__:Net", "--golden", golden, "-q"]
if not os.path.isdir(golden):
    assert main(["golden", "record", *common, "--inputs", sys.argv[4], "--size", "16"]) == 0
sys.exit(main([*common, "--out", out, "--artifacts", "torchscript-trace,onnx", "--no-cache", "--json", out + ".json",
               "--build-timeout", "10"]))
"""


@pytest.fixture(scope="module")
def unpicklable_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("unpicklable")
    (folder / "script.py").write_text(UNPICKLABLE_NET)
    return folder


@pytest.mark.parametrize("fault, reason", [
    ("", None),
    ("segv", "build crashed (signal 11, SIGSEGV) in its child process"),
    ("exit0", "build crashed: its child process exited with code 0 before reporting back"),
    ("sys-exit0", "build failed: the export called sys.exit(0) (SystemExit)"),
    ("hang", "build timed out: still running after 10 s, its child process was killed"),
])
def test_a_model_the_build_server_cannot_take_is_built_in_a_child_of_the_run_and_contained(
        hook_dir: Path, unpicklable_script: Path, digit_images: Path, fault: str, reason: str | None) -> None:
    """Issue 47: a model that cannot be pickled (a __main__ class holding a lambda) was built in-process: a segfault
    in its export killed the run with no report, a hang ignored --build-timeout, and os._exit(0) ended the run with
    exit 0 and no rows. Now it is built in a child forked from the run's process, with the server builds' time limit
    and crash containment: each fault is its rows' error, eager is judged, and the run exits 1 with its report."""
    folder = unpicklable_script
    out = folder / f"out-{fault or 'none'}"
    result = subprocess.run([sys.executable, str(folder / "script.py"), str(folder / "net.pth"), str(folder / "golden"), str(out),
                             str(digit_images)], env=cli_env(hook_dir, FAULT=fault), capture_output=True, text=True, timeout=600,
                            cwd=folder)
    assert result.returncode == (0 if reason is None else 1), result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    rows = {row["name"]: row for row in strict_json(Path(f"{out}.json"))["rows"]}
    assert list(rows) == ["eager", "torchscript-trace", "onnx"] and rows["eager"]["status"] == "pass"
    for name in ("torchscript-trace", "onnx"):
        assert any(note.startswith("built in a child of the run's process, not the build server: the build process cannot rebuild the model")
                   for note in rows[name]["notes"]), rows[name]["notes"]
        if reason is None:
            assert rows[name]["status"] == "pass" and rows[name]["metrics"]["mae"] <= 1e-5
        else:
            assert rows[name]["status"] == "error" and reason in rows[name]["reasons"][0], rows[name]["reasons"]
    assert partial_files(out) == []


def test_a_library_that_hangs_on_import_costs_its_rows_at_the_build_timeout_not_the_run(tmp_path: Path) -> None:
    """The build server imports a run's libraries ahead, while idle (onnxsim here); one that hangs at import (a library
    waiting on the network, say: here a module of that name on PYTHONPATH that sleeps) kept the server from ever reading
    a request, and the run waited forever. Now each import there is abandoned at the build timeout: the onnx row passes,
    and the row whose build needs the library is that build's timeout."""
    hanging = tmp_path / "hanging"
    hanging.mkdir()
    (hanging / "onnxsim.py").write_text("import time\ntime.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(hanging), os.environ.get("PYTHONPATH", "")) if p)}
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        cli(DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", DEFAULT_GOLDEN, "--out", tmp_path / "out", "--json", report_path,
            "--no-cache", "--build-timeout", "6", "-q", "--artifacts", "onnx,onnx-simplified"),
        env=env, capture_output=True, text=True, timeout=150,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {row["name"]: row for row in strict_json(report_path)["rows"]}
    assert sorted(rows) == ["eager", "onnx", "onnx-simplified"]
    assert rows["onnx"]["status"] == "pass" and rows["eager"]["status"] == "pass", (rows["onnx"]["reasons"], rows["eager"]["reasons"])
    hung = rows["onnx-simplified"]
    assert hung["status"] == "error" and hung["reasons"][0].startswith("build timed out: still running after 6 s"), hung["reasons"]


@pytest.mark.parametrize("body, code, line", [
    ("import time\n    time.sleep(3600)", 2, "building the model was still running after 10 s (--build-timeout, at least 10 s here)"),
    ("import sys\n    sys.exit(0)", 1, "the run stopped before it judged anything: code it ran (the model's factory or forward, or a library it "
                                   "called) called sys.exit(0)"),
])
def test_a_model_factory_that_hangs_or_exits_ends_the_run_in_one_line_never_with_a_pass(tmp_path: Path, body: str, code: int,
                                                                                       line: str) -> None:
    """Issue 47: the factory is the user's code and runs in the run's own process. One that hangs is cut at the build
    timeout; one that calls sys.exit(0) no longer ends the run with exit 0 and no rows."""
    (tmp_path / "factory.py").write_text(f"def make():\n    {body}\n")
    began = time.monotonic()
    result = subprocess.run(cli(DEFAULT_CHECKPOINT, "--arch", "factory.py:make", "--golden", DEFAULT_GOLDEN, "--out", tmp_path / "out",
                                "--artifacts", "onnx", "--no-cache", "--build-timeout", "3", "--json", tmp_path / "r.json", "-q"),
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == code, result.stdout + result.stderr
    assert line in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - began < 120
