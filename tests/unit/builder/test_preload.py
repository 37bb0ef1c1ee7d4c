"""builder/server.py: what the build server imports itself so that its build children inherit it.

The default kinds' preloads are imported while the server is idle, in every run (``PRELOAD``); a kind outside the
default group (executorch, coreml) has its own imported by the server before its first build's child is forked
(``BuildServer._import_for``), so that every later build of it starts with them: on the bundled ResNet, checking
``executorch,executorch-int8`` went from 92 s to 44 s when ExecuTorch's import and XNNPACK's pattern graphs
(``executorch_pte.warm_patterns``) moved into the server.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from export_check.artifacts import KINDS_BY_NAME, PRELOAD
from export_check.builder import ahead, server
from export_check.builder.server import BuildServer

WARM = '''
import os
import sys
import warnings

os.write(2, b"Failed to load libnative.so: a native line on file descriptor 2\\n")
sys.stderr.write("a Python line on stderr\\n")
warnings.warn("a deprecation", DeprecationWarning)
CALLS = []


def warm():
    CALLS.append(1)
'''


@pytest.fixture()
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of the test's own on the path, with a warm-up function that counts its calls."""
    name = f"preload_probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(WARM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_a_kinds_own_preload_is_imported_in_the_server_and_its_warm_up_runs_once(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kind = KINDS_BY_NAME["executorch"]
    assert not set(kind.preload) & set(PRELOAD), "an edge kind's imports are not every run's idle preload"
    fake = dataclasses.replace(kind, preload=(module, f"{module}:warm", "no_such_module_anywhere"))
    monkeypatch.setitem(server.KINDS_BY_NAME, "executorch", fake)
    build = BuildServer()
    build.pending = ["json", module]
    build._import_for({"kind": "executorch"})
    assert module in sys.modules and sys.modules[module].CALLS == [1]
    assert build.pending == ["json"], "what it imported for the kind is no longer pending"
    build._import_for({"kind": "executorch"})  # the next build of the kind: nothing imported or warmed again
    assert sys.modules[module].CALLS == [1]
    assert "no_such_module_anywhere" not in sys.modules  # a preload only saves time: its failure is the build's to say


def test_what_a_preload_prints_does_not_reach_the_terminal(module: str, capfd: pytest.CaptureFixture[str]) -> None:
    """The server's stderr is the user's terminal; a build child that imported the module itself had its output captured."""
    ahead.import_ahead(module)
    assert module in sys.modules
    assert capfd.readouterr() == ("", "")


def test_a_request_of_no_known_kind_imports_nothing(module: str) -> None:
    build = BuildServer()
    build._import_for({"kind": "no-such-kind"})
    build._import_for({})
    assert module not in sys.modules


def test_the_torch_export_warm_up_is_every_exporting_kinds_and_leaves_the_server_single_threaded() -> None:
    import threading

    warm = "export_check.artifacts._program:warm_export"
    on_export = ("torch-export", "torchao-int8-dynamic", "aoti", "onnx-dynamo", "pt2e-int8-static", "executorch",
                 "executorch-int8", "coreml", "litert")
    assert [name for name in on_export if warm not in KINDS_BY_NAME[name].preload] == []
    assert warm not in PRELOAD  # a default run (no torch.export) does not pay it
    ahead.end_helper_threads()  # a monitor an earlier test started would hide one the warm-up leaves
    before = set(threading.enumerate())
    ahead.WARMED.discard(warm)
    ahead.import_ahead(warm)  # torch.export's decompositions start tqdm's monitor thread: the server ends it
    assert set(threading.enumerate()) <= before, [t.name for t in threading.enumerate()]  # no thread left behind
    assert warm in ahead.WARMED


def test_a_run_has_the_server_import_ahead_only_what_its_kinds_need(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``prewarm(kinds)`` tells the server the run's kinds' preloads (``preload_of``), which replace the default kinds'
    idle imports: a run of TorchScript and ONNX files no longer imports onnxsim (1.1 s of CPU) beside it; an edge run
    has ExecuTorch imported while the model loads. The message gets no reply (the builds' replies stay in order)."""
    import os
    import signal

    from export_check.artifacts import preload_of
    from export_check.builder import protocol

    assert preload_of(("torchscript-trace", "onnx")) == ("torch", "torch.onnx", "onnx", "onnx.checker", "onnxruntime")
    assert "onnxsim" in PRELOAD and "onnxsim" in preload_of(("onnx-simplified",))
    assert preload_of(("executorch",))[:2] == ("torch", "executorch.runtime")
    assert set(preload_of(("executorch",))) == {"torch", *KINDS_BY_NAME["executorch"].preload}
    # the server's loop: the preload message sets what it imports while idle, then EOF ends it, with nothing replied
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    with os.fdopen(request_w, "wb") as out:
        protocol.send(out, {"preload": ["json", module]})
    previous = signal.getsignal(signal.SIGTERM)
    build = BuildServer()
    monkeypatch.setattr(server, "warm_up", lambda: None)
    try:
        build.serve(request_r, reply_w)
    finally:
        signal.signal(signal.SIGTERM, previous)  # serve installs the server's own handler
    assert build.pending == [module], "the run's list replaced the default kinds' (json is imported already)"
    with os.fdopen(reply_r, "rb") as replies:
        assert replies.read() == b""
    idle_r, idle_w = os.pipe()  # nothing to read: the server is idle, and imports what is pending
    try:
        build._preload_until_readable(idle_r)
    finally:
        os.close(idle_r)
        os.close(idle_w)
    assert module in sys.modules and build.pending == []
