"""Text from exceptions, exporters and runtimes becomes plain text before it is a reason or a note:
no terminal escape sequences reach a report (issue 25)."""

from __future__ import annotations

import logging
import warnings

import pytest

from export_check.artifacts._common import captured_warnings
from export_check.builder.crash import last_words
from export_check.diagnostics.runtime_errors import runtime_error
from export_check.errors import describe_exception, plain_text


@pytest.mark.parametrize("coloured, plain", [
    ("\x1b[96mtorch._dynamo\x1b[0m: graph break", "torch._dynamo: graph break"),
    ("\x1b[1;31mred\x1b[m and \x1b[38;5;208morange\x1b[39m", "red and orange"),
    ("\x1b]8;;https://example.org\x07a link\x1b]8;;\x1b\\", "a link"),
    ("\x1b(Bcharset \x1b7saved\x1b8", "charset saved"),
    ("[not an escape] 100%", "[not an escape] 100%"),
])
def test_plain_text_drops_terminal_escapes_only(coloured: str, plain: str) -> None:
    assert plain_text(coloured) == plain


def test_every_builder_of_a_reason_or_note_drops_them() -> None:
    assert describe_exception(RuntimeError("\x1b[91mboom\x1b[0m here")) == "RuntimeError: boom here"
    assert runtime_error(RuntimeError("The following operation failed in the TorchScript interpreter.\n"
                                      "\x1b[91mRuntimeError: bad shape\x1b[0m")) == "RuntimeError: bad shape"
    assert last_words("frame #0 x\nterminate called\n  what():  \x1b[31mbad_alloc\x1b[0m\n") == "bad_alloc"
    notes: list[str] = []
    with captured_warnings(notes):
        warnings.warn("\x1b[93mcareful\x1b[0m: deprecated", DeprecationWarning, stacklevel=1)
        logging.getLogger("some.exporter").warning("\x1b[96mlogged\x1b[0m in colour")
    assert notes == ["DeprecationWarning: careful: deprecated", "log some.exporter: logged in colour"]
