"""The progress line: counts get an estimate from their own pace; a terminal gets one rewritten line
cut to its width; a log gets a few plain lines per count, never one per batch."""

from __future__ import annotations

import io

from export_check.progress import ProgressLine, count_message, estimate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_count_gets_an_estimate_from_its_own_pace() -> None:
    clock, out = Clock(), io.StringIO()
    line = ProgressLine(out, interactive=False, clock=clock)
    line(count_message("replaying onnx", 16, 256))  # the count starts: no pace yet
    clock.now += 30.0
    line(count_message("replaying onnx", 64, 256))  # 48 inputs in 30 s: 192 left take 120 s
    lines = out.getvalue().splitlines()
    assert lines[0] == "[export-check   0.0s] replaying onnx: 16/256 inputs"
    assert lines[1] == "[export-check  30.0s] replaying onnx: 64/256 inputs, ~2m00s left"
    assert estimate(0.2) == "~1s left" and estimate(59.5) == "~1m00s left"


def test_plain_lines_are_few_per_count_and_the_last_always_shows() -> None:
    clock, out = Clock(), io.StringIO()
    line = ProgressLine(out, interactive=False, clock=clock)
    line("building onnx")
    for done in range(16, 257, 16):  # 16 batches in 16 s
        clock.now += 1.0
        line(count_message("replaying onnx", done, 256))
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    shown = [ln.split("] ", 1)[1] for ln in text.splitlines()]
    assert shown == ["building onnx", "replaying onnx: 16/256 inputs", "replaying onnx: 176/256 inputs, ~5s left",
                     "replaying onnx: 256/256 inputs"]


def test_a_terminal_gets_one_line_rewritten_and_cut_to_its_width() -> None:
    clock, out = Clock(), io.StringIO()
    line = ProgressLine(out, interactive=True, clock=clock)
    line.width = lambda: 40  # type: ignore[method-assign]
    line("replaying " + "x" * 100)
    clock.now += 1.0
    line(count_message("replaying onnx", 256, 256))
    line.close()
    writes = out.getvalue().split("\r\x1b[K")
    assert writes[0] == "" and writes[-1] == ""
    assert all(len(w) <= 39 for w in writes) and "\n" not in out.getvalue()
    assert writes[1] == "[export-check   0.0s] replaying xxxxxxxx"[:39]
