"""The process entry of ``export-check`` and ``python -m export_check``: Ctrl-C is handled from the first line.

Importing the CLI (argparse, tomllib, the option table) takes a tenth of a second or more; a Ctrl-C
then used to end in a ``KeyboardInterrupt`` traceback from inside the import, and exit status -2.
This module imports nothing but ``os`` and ``sys`` before it can catch one: an interrupted start is
the same one line, ``export-check: interrupted``, and exit 130 as an interrupted run. (Python's own
start-up, before any of export-check runs, cannot be covered by any program.)
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = 130
_pending = False  # a Ctrl-C arrived: set even where Python swallows the KeyboardInterrupt it raises


def _on_sigint(signum: int, frame: object) -> None:
    """Python's own Ctrl-C (a KeyboardInterrupt), remembered: one raised while a weakref callback runs
    (importlib's module-lock callbacks, during the CLI's imports) is printed as "Exception ignored" and
    dropped, and the run would go on as if no Ctrl-C had come."""
    global _pending
    _pending = True
    raise KeyboardInterrupt


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """A KeyboardInterrupt Python could not raise (in a weakref callback, a ``__del__``): remembered and not
    printed (no traceback on Ctrl-C); any other unraisable exception is printed as Python prints it."""
    global _pending
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _pending = True
        return
    sys.__unraisablehook__(unraisable)


def entry() -> None:
    signal.signal(signal.SIGINT, _on_sigint)
    sys.unraisablehook = _unraisable
    try:
        _installed_libraries_first()
        from .cli import entry as run
    except KeyboardInterrupt:
        _interrupted_start()
    if _pending:  # interrupted during the imports, and the interrupt was swallowed on the way
        _interrupted_start()
    run()


def _installed_libraries_first() -> None:
    """``python -m export_check`` puts the current directory first on ``sys.path``: move it to the end
    before anything is imported, so a stray ``argparse.py`` or ``torch.py`` there cannot stand in for
    the real one (the user's model modules there still import; exporter/checkpoint.py)."""
    if sys.path and not sys.flags.safe_path and sys.path[0] in ("", os.getcwd()):
        sys.path.append(sys.path.pop(0))


def _interrupted_start() -> None:
    try:
        sys.stderr.write("export-check: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError, KeyboardInterrupt):
        pass
    os._exit(INTERRUPTED)
