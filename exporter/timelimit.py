"""A time limit on Python code that runs in this process's main thread (SIGALRM).

For code the run cannot move into a child of its own: the build server's ahead-of-time imports
(builder/ahead.py), and the model's factory in the run's own process (model.load_model). A Python-level wait (a
sleep, a socket, a lock, a loop of Python code) is interrupted when the limit passes; a hang inside native
code is not (the builds and replays, which can hang there, run in children the parent kills instead).
Off the main thread, or with no limit (None or 0), the block runs unlimited.

>>> with time_limit(None, lambda: TimeoutError("never")):
...     1 + 1
2
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


class _Expired(BaseException):
    """Raised by the alarm inside the block: a BaseException, so that no ``except Exception`` in the code it interrupts
    (a reader wrapping every failure as "a corrupt file", say) takes the time limit for a fault of its own."""


@contextlib.contextmanager
def time_limit(seconds: float | None, expired: Callable[[], BaseException]) -> Iterator[None]:
    """Raise ``expired()`` from the block once ``seconds`` have passed (main thread only)."""
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    done = False

    def expire(signum: int, frame: object) -> None:
        if not done:
            raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Expired:
        raise expired() from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        done = True
        signal.signal(signal.SIGALRM, previous)
