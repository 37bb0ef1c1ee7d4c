"""Warnings, log records and native stderr are captured per thread, and two threads capturing at once
leave the process as it was (the observe stage diagnoses one row on a thread while the next replays).

With ``warnings.catch_warnings`` per block, two blocks on two threads that close in the order they
opened leave the first block's recorder installed for good: every later warning is appended to a
list nobody reads. The interleavings below are forced with events, not left to timing.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings

from export_check.artifacts._common import captured_warnings, native_warnings


def _interleaved(first_body, second_body) -> tuple[list[str], list[str]]:
    """Thread A opens a block, thread B opens one, A closes, then B closes; each runs its body inside."""
    a_notes: list[str] = []
    b_notes: list[str] = []
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def a() -> None:
        try:
            with captured_warnings(a_notes):
                a_open.set()
                assert b_open.wait(30)
                first_body()
            a_closed.set()
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
            a_closed.set()

    def b() -> None:
        try:
            assert a_open.wait(30)
            with captured_warnings(b_notes):
                b_open.set()
                assert a_closed.wait(30)
                second_body()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    return a_notes, b_notes


def test_each_thread_gets_its_own_warnings_and_the_process_is_restored_after_an_interleaved_close() -> None:
    showwarning, filters = warnings.showwarning, list(warnings.filters)
    root_handlers = list(logging.getLogger().handlers)
    def in_b() -> None:
        warnings.warn("from B", DeprecationWarning, stacklevel=1)
        logging.getLogger("somelib").warning("B's log")

    a_notes, b_notes = _interleaved(lambda: warnings.warn("from A", UserWarning, stacklevel=1), in_b)
    assert a_notes == ["UserWarning: from A"]
    assert b_notes == ["DeprecationWarning: from B", "log somelib: B's log"]
    assert warnings.showwarning is showwarning
    assert warnings.filters == filters
    assert logging.getLogger().handlers == root_handlers
    # a warning after both blocks closed reaches the normal path, not a closed block's list
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.warn("after", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["after"]
    assert a_notes == ["UserWarning: from A"] and len(b_notes) == 2


def test_nested_blocks_on_one_thread_fill_the_innermost() -> None:
    outer: list[str] = []
    inner: list[str] = []
    with captured_warnings(outer):
        warnings.warn("one", UserWarning, stacklevel=1)
        with captured_warnings(inner):
            warnings.warn("two", UserWarning, stacklevel=1)
        warnings.warn("three", UserWarning, stacklevel=1)
    assert outer == ["UserWarning: one", "UserWarning: three"] and inner == ["UserWarning: two"]


def test_muted_library_handlers_get_their_level_back_after_an_interleaved_close() -> None:
    torch_logger = logging.getLogger("torch")
    handler = logging.StreamHandler()
    handler.setLevel(logging.INFO)
    saved_propagate = torch_logger.propagate
    handlers_before = [(h, h.level) for h in torch_logger.handlers]  # torch's own, once torch is imported
    torch_logger.addHandler(handler)
    torch_logger.propagate = False
    try:
        a_notes, b_notes = _interleaved(lambda: torch_logger.warning("A's torch warning"), lambda: torch_logger.warning("B's torch warning"))
        assert a_notes == ["log torch: A's torch warning"] and b_notes == ["log torch: B's torch warning"]
        assert handler.level == logging.INFO  # not left muted
        assert [(h, h.level) for h in torch_logger.handlers] == [*handlers_before, (handler, logging.INFO)]
    finally:
        torch_logger.removeHandler(handler)
        torch_logger.propagate = saved_propagate


def test_a_library_thread_without_a_block_of_its_own_reports_into_the_block_opened_last() -> None:
    """As one block caught every thread's warnings before: a torch log record from a library's worker
    thread (its own handler muted while a block is open) must land in a row's notes, not nowhere."""
    torch_logger = logging.getLogger("torch")
    handler = logging.StreamHandler()
    saved_propagate = torch_logger.propagate
    torch_logger.addHandler(handler)
    torch_logger.propagate = False
    first: list[str] = []
    last: list[str] = []

    def library_worker() -> None:
        warnings.warn("from a worker thread", UserWarning, stacklevel=1)
        torch_logger.warning("torch, from a worker thread")

    try:
        with captured_warnings(first), captured_warnings(last):
            worker = threading.Thread(target=library_worker)
            worker.start()
            worker.join(30)
        assert first == []
        assert last == ["UserWarning: from a worker thread", "log torch: torch, from a worker thread"]
    finally:
        torch_logger.removeHandler(handler)
        torch_logger.propagate = saved_propagate


def _fd2() -> tuple[int, int]:
    st = os.fstat(2)
    return st.st_dev, st.st_ino


def test_two_threads_redirecting_stderr_leave_fd_2_where_it_was() -> None:
    """Without the redirect lock B saves A's temporary file as "the" stderr and restores fd 2 to it."""
    before = _fd2()
    a_in, a_release = threading.Event(), threading.Event()
    b_done = threading.Event()
    failures: list[BaseException] = []

    def a() -> None:
        try:
            with native_warnings():
                a_in.set()
                a_release.wait(30)
        except BaseException as exc:
            failures.append(exc)

    def b() -> None:
        try:
            assert a_in.wait(30)
            with native_warnings():
                pass
            b_done.set()
        except BaseException as exc:
            failures.append(exc)

    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    ta.start()
    tb.start()
    assert a_in.wait(30)
    assert not b_done.wait(0.3)  # B waits for A's redirect to end (the lock); it never nests inside it
    a_release.set()
    ta.join(30)
    tb.join(30)
    assert not failures, failures
    assert b_done.is_set()
    assert _fd2() == before


def test_what_native_code_prints_to_stdout_becomes_one_note_also_when_the_block_fails(capfd) -> None:
    import pytest

    from export_check.artifacts._native import ExporterOutput, stdout_into_notes

    before = os.fstat(1).st_ino
    printed = r"^the exporter printed 2 lines \(kept out of the terminal\): line one \| line two$"
    with pytest.warns(ExporterOutput, match=printed), stdout_into_notes("the exporter"):
        os.write(1, b"line one\n\nline two\n")
    with pytest.warns(ExporterOutput, match="printed 1 lines"), pytest.raises(RuntimeError), stdout_into_notes("the exporter"):
        os.write(1, b"a dump before the error\n")
        raise RuntimeError("export failed")
    assert capfd.readouterr().out == ""
    assert os.fstat(1).st_ino == before
