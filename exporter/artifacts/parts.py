"""An artifact is a set of files: its file (``onnx.onnx``) and the files beside it that belong to it.

Today that is one kind of companion: an ONNX graph whose weights are kept outside it has them in ONE
file beside it, ``<graph file>.data`` (exporter/artifacts/_external.py says when and why one file).
Everything that moves, stores or carries an artifact moves, stores and carries all of its files:
the build's commit into ``--out`` (builder/builds.py), the cache (cache/store.py, cache/linked.py),
a bundle (bundle.py) and a replay of it (replay.py); a report names their total size.

Only the artifact's own name decides its companions (``<name>.data``), never a name read from the
file, so that nothing here follows a name a file chose (a graph's ``location`` may say ``../x``).
The graph's ``location`` is checked against it where the file is written (``_external.place``) and
read (onnxruntime refuses a location outside the graph's folder).

Light: no onnx import, so the cache, the bundle and the report use it freely.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..files import FileInfo, sha256_file

DATA_SUFFIX = ".data"
HAS_COMPANIONS = (".onnx",)  # the suffixes whose files may have a companion (ONNX external data)


def data_name(name: str) -> str:
    """The one external-data file of the ONNX graph named ``name``: ``onnx.onnx`` -> ``onnx.onnx.data``."""
    return f"{name}{DATA_SUFFIX}"


def companion_names(name: str) -> tuple[str, ...]:
    """The names a file of the artifact named ``name`` may have beside it (none for a one-file kind)."""
    return (data_name(name),) if Path(name).suffix in HAS_COMPANIONS else ()


def companions(path: Path) -> list[Path]:
    """The companion files of the artifact at ``path`` that exist (regular files only, never a link)."""
    found = []
    for name in companion_names(path.name):
        candidate = path.with_name(name)
        if candidate.is_file() and not candidate.is_symlink():
            found.append(candidate)
    return found


def all_files(path: Path) -> list[Path]:
    """Every file of the artifact at ``path``: its companions first, the file itself last (the order to
    move them in, so that a graph never names data that is not there yet)."""
    return [*companions(path), path]


def remove(path: Path) -> None:
    """Remove the artifact at ``path`` and every companion it may have (an earlier run's must not pass for this one's)."""
    for name in (*companion_names(path.name), path.name):
        with contextlib.suppress(OSError):
            path.with_name(name).unlink()


def total_size(path: Path) -> int:
    return sum(p.stat().st_size for p in all_files(path))


def artifact_info(path: Path) -> FileInfo:
    """The artifact at ``path`` as the report shows it: its file's path and sha256, the total size of
    all its files, and each companion's name, size and sha256 (``FileInfo.parts``)."""
    parts = tuple((p.name, p.stat().st_size, sha256_file(p)) for p in companions(path))
    size = path.stat().st_size
    return FileInfo(path=str(path), size_bytes=size + sum(s for _, s, _ in parts), sha256=sha256_file(path), parts=parts)
