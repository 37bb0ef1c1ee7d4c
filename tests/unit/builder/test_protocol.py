"""builder/protocol.py: length-prefixed messages between the parent and the build server."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from export_check.builder.protocol import receive, send


def test_messages_round_trip_in_order() -> None:
    stream = io.BytesIO()
    messages = [{"module": "export_check.artifacts.onnx_export", "path": Path("/out/onnx.onnx"), "timeout": None},
                {"status": "ok", "notes": ("a",), "seconds": 1.5}]
    for message in messages:
        send(stream, message)
    stream.seek(0)
    assert [receive(stream), receive(stream)] == messages
    with pytest.raises(EOFError, match="closed its pipe"):
        receive(stream)


def test_a_message_cut_short_is_an_eof() -> None:
    stream = io.BytesIO()
    send(stream, {"status": "ok", "stderr": "x" * 100})
    data = stream.getvalue()
    assert struct.unpack("<Q", data[:8])[0] == len(data) - 8
    with pytest.raises(EOFError, match="mid-message"):
        receive(io.BytesIO(data[:-1]))
    with pytest.raises(EOFError, match="closed its pipe"):
        receive(io.BytesIO(data[:5]))
