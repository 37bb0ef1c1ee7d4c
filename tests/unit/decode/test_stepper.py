"""The stepper's one pass for teacher-forced logits and the greedy continuation (decode/stepper.py), on a toy decode step
whose logits depend on every token in its cache: the same logits and tokens as the two separate loops, in fewer steps."""

from __future__ import annotations

import numpy as np
import pytest

from export_check.decode import stepper

VOCAB, SHAPE = 7, (1, 1, 16, 1)


class ToyStep:
    """``(token, position, key, value) -> (logits, key, value)``: the token written into the cache at ``position``, the
    logits a function of the whole cache; the outputs land in the same buffers each call, as a runtime's planned memory may."""

    def __init__(self) -> None:
        self.calls = 0
        self.key, self.value = np.zeros(SHAPE, np.float32), np.zeros(SHAPE, np.float32)
        self.logits = np.zeros((1, VOCAB), np.float32)

    def __call__(self, token, position, key, value):
        self.calls += 1
        self.key[...] = key
        self.key[0, 0, int(position[0]), 0] = float(token[0]) + 1
        self.value[...] = value
        weights = np.arange(1, SHAPE[2] + 1, dtype=np.float32)
        history = float(self.key[0, 0, :, 0] @ weights)
        self.logits[0] = np.cos(history * np.arange(1, VOCAB + 1))
        return self.logits, self.key, self.value


def two_loops(prompt: np.ndarray, approved: np.ndarray) -> tuple[np.ndarray, list[int], int]:
    step = ToyStep()
    forced = stepper._loop_step(step, SHAPE, np.concatenate([prompt, approved]), 0)[0]
    greedy = stepper._loop_step(step, SHAPE, prompt, len(approved) - 1)[1][len(prompt) - 1:]
    return forced, greedy, step.calls


PROMPT = np.array([3, 1, 4], np.int64)
GREEDY = np.asarray(two_loops(PROMPT, np.zeros(8, np.int64))[1], np.int64)  # the toy's own greedy continuation of 8


@pytest.mark.parametrize("off_at", [None, 0, 3, 7])  # approved = greedy, or greedy with one token changed there
def test_one_pass_equals_the_two_loops_in_fewer_steps(off_at: int | None) -> None:
    approved = GREEDY.copy()
    if off_at is not None:
        approved[off_at] = (approved[off_at] + 1) % VOCAB
    forced, greedy, calls = two_loops(PROMPT, approved)
    step = ToyStep()
    got_forced, got_greedy = stepper._forced_and_greedy(step, SHAPE, PROMPT, approved, len(approved))
    np.testing.assert_array_equal(got_forced, forced)
    assert got_greedy == greedy == list(GREEDY)  # greedy never reads the approved tokens
    # shared steps: prompt + approved once, then greedy alone from the first token off the approved ones
    alone = 0 if off_at is None else len(approved) - off_at - 1
    assert (calls, step.calls) == (2 * len(PROMPT) + 2 * len(approved) - 1, len(PROMPT) + len(approved) + alone)


def test_a_cache_that_cannot_be_copied_reruns_the_greedy_loop() -> None:
    approved = GREEDY.copy()
    approved[2] = (approved[2] + 1) % VOCAB
    steps: list[ToyStep] = []

    def fresh() -> ToyStep:
        steps.append(ToyStep())
        return steps[-1]

    forced, greedy, _ = two_loops(PROMPT, approved)
    got_forced, got_greedy = stepper._forced_and_greedy(fresh(), SHAPE, PROMPT, approved, len(approved), fresh)
    np.testing.assert_array_equal(got_forced, forced)
    assert got_greedy == greedy and [s.calls for s in steps] == [len(PROMPT) + len(approved), len(PROMPT) + len(approved) - 1]


def test_a_host_steps_each_file_in_a_child_kills_one_past_its_time_and_serves_the_next(tmp_path) -> None:
    """decode/stepping.StepHosts: a runtime's host forks a child per file. A child that blocks (its request a FIFO no one
    writes) is killed at its time limit, and the same host then serves the next file; a child's failure is its exit code
    and its own last line; a host that died is this file's error, and the next file gets a new host."""
    import os
    import signal
    import subprocess
    import threading

    import onnx
    from onnx import TensorProto, helper

    from export_check.decode.stepping import StepHosts

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    loads = tmp_path / "loads.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), loads)
    fifo = tmp_path / "never-written.npz"
    os.mkfifo(fifo)
    folder = tmp_path / "work"
    folder.mkdir()
    missing = ["onnxruntime", str(tmp_path / "missing.onnx"), str(fifo), str(tmp_path / "r.npz"), "", ""]
    with StepHosts() as hosts:
        code, output = hosts.run(missing, folder, 60)  # the host starts, imports onnxruntime, forks a child that fails
        assert code == 1 and "missing.onnx" in output.strip().splitlines()[-1]
        host = hosts._hosts[("onnxruntime", "")]
        with pytest.raises(subprocess.TimeoutExpired):
            hosts.run(["onnxruntime", str(loads), str(fifo), str(tmp_path / "r.npz"), "", ""], folder, timeout=3)
        code, output = hosts.run(missing, folder, 60)
        assert code == 1 and "missing.onnx" in output.strip().splitlines()[-1]
        assert hosts._hosts[("onnxruntime", "")] is host and host.poll() is None  # the same host served it
        # the host dies while its child steps (blocked on the FIFO): this file's error, in words
        threading.Timer(1.0, os.killpg, (host.pid, signal.SIGKILL)).start()
        code, output = hosts.run(["onnxruntime", str(loads), str(fifo), str(tmp_path / "r.npz"), "", ""], folder, 60)
        assert code == -1 and output.startswith("the onnxruntime stepping host ended")
        code, output = hosts.run(missing, folder, 60)
        assert code == 1 and hosts._hosts[("onnxruntime", "")] is not host  # the next file: a new host
        started = hosts._hosts[("onnxruntime", "")]
    assert started.poll() is not None  # closed with the run
