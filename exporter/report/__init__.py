"""Writers of a :class:`~export_check.results.Report`: each is a pure view of the same object.

Every view is written through :func:`write_text_atomic` (exporter/report/destination.py says how:
``-`` and ``/dev/stdout`` are standard output, a FIFO or device is written through, a symbolic link's
target is replaced atomically, ``append`` adds to the end).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import OutputError
from . import destination


def write_text_atomic(path: Path, text: str, append: bool = False, inside: Path | str | None = None) -> None:
    """Write a report: readers of a regular file see the old file or the complete new one, never half.
    ``inside``: the run's ``--out``, where no link is followed (a planted one is refused in one line)."""
    from ..nofollow import Refused, within

    try:
        if str(path) != destination.STDOUT_NAME and within(Path(path), inside) is None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        destination.write(Path(path), text.encode("utf-8"), append=append, inside=inside)
    except Refused as exc:
        raise OutputError(str(exc)) from None
    except OSError as exc:
        raise OutputError(f"{destination.describe(path)}: cannot write the report ({exc.strerror or exc}); "
                          "choose a writable path") from None
