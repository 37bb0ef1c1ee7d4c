"""What the build server (and its load host) import ahead of time, so that every child it forks inherits them: one
module at a time, what it prints kept off the user's terminal, each import bounded by the run's build timeout
(SIGALRM), a warm-up (``module:function``) run once, and the helper threads a warm-up leaves ended so that the
server stays single-threaded and safe to fork.

Its own module since issue 25 (it was the largest part of server.py): the server decides *when* to import
(``BuildServer._preload_until_readable``, between requests and while a child builds); this module is *how*.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import pickle
import sys
import warnings
from typing import Any

from ..artifacts._common import captured_fd
from ..timelimit import time_limit

WARMED: set[str] = set()
ABANDONED: set[str] = set()  # preloads that ran past the import time limit: not tried again here (the child imports them)


def import_ahead(name: str, seconds: float | None = None, abandon: bool = True) -> bool:
    """Import the module ``name``; ``module:function``: import it and call the function (a warm-up), once. What the
    import prints is dropped: this server's stderr is the user's terminal, and a build child that imported the module
    itself had its output captured (torchao's optional kernels that fail to load, torch's deprecation log lines).
    ``seconds``: given up after that long: True, and (``abandon``: the import limit, ``BuildServer.import_seconds``,
    ran out) never tried again here."""
    module, _, function = name.partition(":")
    if name in ABANDONED:
        return True
    if name in WARMED or (not function and module in sys.modules):
        return False
    limit = _Limit(seconds)
    # a preload only saves time: a module that fails here (or takes too long) fails where it is needed, in the child,
    # which says why
    with (captured_fd(2, 0), contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings(), contextlib.suppress(Exception),
          _time_limit(limit)):
        warnings.simplefilter("ignore")
        found = importlib.import_module(module)
        if function:
            WARMED.add(name)
            getattr(found, function)()
            end_helper_threads()
    if limit.expired and abandon:
        ABANDONED.add(name)
    return limit.expired


class _TookTooLong(Exception):
    """An import here ran past its time limit."""


@dataclasses.dataclass
class _Limit:
    seconds: float | None  # None or 0: no limit
    expired: bool = False


def _time_limit(limit: _Limit) -> Any:
    """Raise :class:`_TookTooLong` in the block once ``limit.seconds`` have passed, and say so in ``limit.expired``
    (this server's main thread, which is its only one: exporter/timelimit.py)."""

    def expired() -> BaseException:
        limit.expired = True
        return _TookTooLong(f"still importing after {limit.seconds:g} s")

    return time_limit(limit.seconds, expired)


def end_helper_threads() -> None:
    """End the threads a warm-up left behind, so that this server stays single-threaded and safe to fork (a child
    forked while another thread holds a lock waits on it forever). torch.fx's ``Interpreter`` (torch.export's
    decompositions, XNNPACK's passes) opens a tqdm bar, disabled, whose first use starts tqdm's monitor thread;
    a child that opens a bar starts its own."""
    tqdm: Any = getattr(sys.modules.get("tqdm.std"), "tqdm", None)
    monitor = getattr(tqdm, "monitor", None)
    if monitor is not None:
        monitor.exit()
        tqdm.monitor = None


def warm_up() -> None:
    """Unpickling the first module and tensor imports a tail of torch modules lazily; do it once in
    the server rather than in every child (it is most of a child's start-up cost)."""
    from ..artifacts import KINDS

    for kind in KINDS:  # the builders' own modules are light: their heavy imports are inside build()
        kind.impl()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        pickle.loads(pickle.dumps(torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1), torch.nn.BatchNorm2d(1), torch.nn.Linear(1, 1))))
