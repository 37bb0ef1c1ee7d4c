"""Content-addressed cache of built artifacts and their replay metrics, trusted only when sealed.

A run's key is the sha256 of everything that can change an artifact or its numbers: the checkpoint's
sha256, the golden manifest's sha256 (which pins every input and the reference logits), the
architecture spec, its kwargs and its source file's sha256, the export and inference settings, the
base library versions, export-check's version and the sha256 of its own source. Each artifact kind
(and the eager model) has one entry under ``sha256(run key, kind, versions of the kind's packages)``::

    <cache-dir>/v3/<2 hex>/<entry key>/meta.json             sealed (HMAC), committed last, atomically
    <cache-dir>/v3/<2 hex>/<entry key>/<sha256[:16]><suffix>  the artifact file, named by content, and its
                                                              row's reduced subgraph (``extras``), restored
                                                              into each run's own --out

Thresholds are not in the key: an entry holds what was observed (``measurements.Observation``:
metrics, diagnostics, notes), never a row or a verdict, and ``judge`` applies today's gates to it on
every run, as it does on a cold run; the cache never asks it. ``cached_run`` finds a run's entries,
the pipeline asks the judge whether today's gates can be judged on them (a verdict may want a
per-layer table an entry lacks, or holds at another threshold: then the files are reused and the
rows replayed), and ``restore_run`` puts the files in ``--out``. An entry records the hashes of
the local source files imported when it was built and is a miss when one changed.

Trust (docs/explanation/trust-model.md, "The artifact cache"): an entry is used only if its ``meta.json`` is
sealed with this user's cache key (``secret``, ``sealed``), which binds the artifact's sha256 and
size, the observation and the key inputs; anything else is "not written by this user's
export-check" and rebuilt. A hit's artifact is copied into ``--out`` and the copy's bytes re-hashed
against the sealed sha256 before its observation is used. Nothing below the cache root is reached
through a link (``nofollow``); storing removes only the file the entry's previous sealed
``meta.json`` named. A damaged or untrusted entry is left where it is (never deleted), rebuilt, and
the rebuild is noted in the report. The cache is best effort: failing to write it only adds a
note, it never fails a check. See docs/explanation/performance.md.

Bounded (``prune``): a run holds a shared ``flock`` on every entry folder it looks up or stores until
it is done, each hit touches its folder's mtime, and after a run stores, the least recently used
entries no run holds are evicted until the cache is under ``--cache-max-size`` (5 GB by default).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..artifacts import KINDS_BY_NAME
from ..artifacts.parts import companion_names, companions
from ..files import fsync_dir
from ..nofollow import Folder, Refused, sha256_regular, write_inside
from ..records import Observation
from ..versions import package_version
from .key import FORMAT, local_module_sources
from .linked import Mismatch, restore_file, store_file
from .prune import hold, touch
from .sealed import MAX_META_BYTES, NotSealed, Stored, from_meta, from_plain, seal, unseal
from .secret import CacheKey

if TYPE_CHECKING:
    pass


LAYOUT = f"v{FORMAT}"
META = "meta.json"
EAGER = "eager"
_ARTIFACT_NAME = re.compile(r"[0-9a-f]{16}\.[A-Za-z0-9]{1,16}")
_EXTRA_AS = re.compile(r"reduced/[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.(?:onnx|npz)")  # where an extra goes in --out

# Per-row cache states, as the report shows them.
HIT = "hit"  # artifact and metrics from the cache: nothing was built or replayed
RESTORED = "artifact"  # artifact file from the cache, replayed afresh
MISS = "miss"  # built and replayed, then stored
REBUILT = "rebuilt"  # the entry was damaged or not written by this user's export-check: built again, then stored

UNTRUSTED_NOTE = "cache entry not written by this user's export-check: rebuilt"


def kind_versions(name: str) -> dict[str, str]:
    """The versions of the packages the kind ``name`` declares (none for the eager row)."""
    kind = KINDS_BY_NAME.get(name)
    return {} if kind is None else {p: package_version(p) for p in kind.packages}


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Entry:
    """One sealed cache entry: an artifact file (none for the eager row) and what was measured."""

    name: str
    file: Path | None  # where the artifact is in the cache (shown; reached only through ``nofollow``)
    sha256: str | None
    size: int | None
    details: dict[str, str]
    notes: tuple[str, ...]
    build_seconds: float | None
    observation: Observation | None  # None for a source built only for a derived kind
    label_accuracy: float | None = None
    # files written beside the artifact in --out (the reduced subgraph): (name in --out, file in the entry, sha256, size)
    extras: tuple[tuple[str, str, str, int], ...] = ()
    # every file of the artifact (artifacts/parts.py: an ONNX graph's .data first, the file itself last), as cache/linked.py restores them
    files: tuple[Stored, ...] = ()


@dataclass(frozen=True)
class Restored:
    """An artifact put in ``--out`` from the cache instead of being built, with what its build recorded."""

    path: Path
    details: dict[str, str]
    notes: tuple[str, ...]


class Damaged(Exception):
    pass


class ArtifactCache:
    """The entries of one run key under ``root``, sealed with ``key``. Lookups verify; stores are
    atomic and best effort."""

    def __init__(self, root: Path, key_inputs: dict[str, Any], key: CacheKey, max_bytes: int | None = None) -> None:
        self.root = root
        self.max_bytes = max_bytes  # evict to this after storing (prune); None: no limit
        self.key_inputs = key_inputs
        self.key = key
        self.run_key = hashlib.sha256(_canonical(key_inputs).encode()).hexdigest()
        self.damaged: dict[str, str] = {}  # name -> why its sealed entry could not be used
        self.untrusted: dict[str, str] = {}  # name -> why its entry is not one this user's export-check wrote
        self.stale: dict[str, str] = {}  # name -> which local source changed since it was stored
        self._source_hashes: dict[str, str] = {}
        self._local_sources: dict[str, str] | None = None
        self.problems: dict[str, str] = {}  # name -> why storing it failed
        self._kind_versions: dict[str, dict[str, str]] = {}  # name -> its packages' versions, read once per run
        # name -> (device, inode, descriptor) of the entry folder this run holds (prune.hold) until release()
        self._held: dict[str, tuple[int, int, int]] = {}
        self._finalizer = weakref.finalize(self, _release, self._held)
        self.restored: dict[str, list[tuple[str, str]]] = {}  # name -> how each file was put in --out (cache/linked.py)

    def _hold(self, name: str, folder: Folder) -> bool:
        """Hold the entry folder ``name`` for this run (eviction skips it); ``False`` when the folder
        was evicted (unlinked) before the hold, so it holds nothing."""
        st = os.fstat(folder.fd)
        held = self._held.get(name)
        if held is not None and held[:2] == (st.st_dev, st.st_ino):
            return True
        if held is not None:
            os.close(self._held.pop(name)[2])
        with contextlib.suppress(OSError):  # best effort, as the cache
            folder.sweep_partials()  # what a killed run left half written in this entry, once: when this run first holds it
        fd = os.dup(folder.fd)
        try:
            hold(fd)
        except OSError:  # a filesystem without flock: best effort, as the cache itself
            os.close(fd)
            return os.fstat(folder.fd).st_nlink > 0
        self._held[name] = (st.st_dev, st.st_ino, fd)
        return os.fstat(fd).st_nlink > 0

    def release(self) -> None:
        """Let go of every entry this run held: from now on eviction may remove them."""
        _release(self._held)

    def entry_key(self, name: str) -> str:
        """The entry of ``name`` (a kind, or the eager row) under this run's key and the versions of the
        packages the kind's row declares: upgrading onnxscript, torchao or openvino misses its kinds only."""
        if name not in self._kind_versions:
            self._kind_versions[name] = kind_versions(name)
        return hashlib.sha256(f"{self.run_key}\0{name}\0{_canonical(self._kind_versions[name])}".encode()).hexdigest()

    def entry_dir(self, name: str) -> Path:
        key = self.entry_key(name)
        return self.root / LAYOUT / key[:2] / key

    @contextmanager
    def _folder(self, name: str, *, create: bool) -> Iterator[Folder | None]:
        key = self.entry_key(name)
        with Folder.walk(self.root, (LAYOUT, key[:2], key), create=create) as folder:
            yield folder

    # -- reading ------------------------------------------------------------------------------

    def lookup(self, name: str) -> Entry | None:
        """The sealed, intact entry of ``name``, or ``None``. An entry that is damaged or not
        sealed with this user's key is remembered (the report says why) and left in place."""
        if name in self.damaged or name in self.untrusted:
            return None
        try:
            with self._folder(name, create=False) as folder:
                if folder is None or not self._hold(name, folder) or folder.lstat(META) is None:
                    return None  # not stored, or evicted meanwhile
                entry, sources = self._read(name, folder)
                touch(folder.fd)  # its last use: eviction removes the least recently used first
        except (Refused, NotSealed) as exc:
            self.untrusted[name] = str(exc)
            return None
        except Damaged as exc:
            self.damaged[name] = str(exc)
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.damaged[name] = f"unreadable entry ({type(exc).__name__}: {exc})"
            return None
        changed = self._changed_source(sources)
        if changed is None:
            return entry
        self.stale[name] = changed
        return None  # not damaged: built from other code; the rebuild overwrites it

    def _changed_source(self, sources: dict[str, str]) -> str | None:
        for path, expected in sources.items():
            if path not in self._source_hashes:
                try:
                    self._source_hashes[path] = sha256_regular(Path(path))
                except (OSError, Refused):
                    self._source_hashes[path] = "missing"
            if self._source_hashes[path] != expected:
                return path
        return None

    def _meta(self, name: str, folder: Folder) -> dict[str, Any]:
        meta = unseal(self.key, folder.path.name, folder.read(META, MAX_META_BYTES))  # the folder is named by the entry key
        if meta.get("format") != FORMAT or meta.get("name") != name or meta.get("run_key") != self.run_key:
            raise Damaged("meta.json does not describe this entry")
        return meta

    def _read(self, name: str, folder: Folder) -> tuple[Entry, dict[str, str]]:
        meta = self._meta(name, folder)
        file = sha = size = None
        files: tuple[Stored, ...] = ()
        artifact = meta.get("artifact")
        if artifact is not None:
            main = from_meta({"as": KINDS_BY_NAME[name].filename() if name in KINDS_BY_NAME else name, **artifact}, name)
            files = (*(from_meta(p, name) for p in artifact.get("parts") or ()), main)
        observation = meta.get("observation")  # the description read back whole (its files, its observation), then checked
        observation = None if observation is None else from_plain(Observation, observation)
        if artifact is not None:
            allowed = {main.shown, *companion_names(main.shown)}
            for stored in files:
                self._check_file(folder, stored, allowed)
            file, sha, size = folder.path / main.file, main.sha256, main.size
        extras = tuple(self._extra(folder, e) for e in meta.get("extras") or ())
        sources = meta.get("sources") or {}
        if not isinstance(sources, dict):
            raise Damaged("meta.json has no valid source list")
        return Entry(
            name=name,
            file=file,
            sha256=sha,
            size=size,
            details={str(k): str(v) for k, v in dict(meta.get("details") or {}).items()},
            notes=tuple(str(n) for n in meta.get("notes") or ()),
            build_seconds=meta.get("build_seconds"),
            observation=observation,
            label_accuracy=meta.get("label_accuracy"),
            extras=extras,
            files=files,
        ), {str(k): str(v) for k, v in sources.items()}

    @staticmethod
    def _check_file(folder: Folder, stored: Stored, allowed: set[str]) -> None:
        """A file of the artifact is named as one, is there, a regular file, of its sealed size."""
        if not _ARTIFACT_NAME.fullmatch(stored.file) or stored.shown not in allowed:
            raise Damaged(f"meta.json names no artifact file ({stored.file!r} as {stored.shown!r})")
        st = folder.lstat(stored.file)
        if st is None:
            raise Damaged(f"{stored.file} is missing")
        if not stat.S_ISREG(st.st_mode):
            raise Damaged(f"{stored.file} is {folder.what(stored.file)}, not a regular file; not followed")
        if st.st_size != stored.size:
            raise Damaged(f"{stored.file} is truncated or grew ({st.st_size} bytes, expected {stored.size})")

    @staticmethod
    def _extra(folder: Folder, extra: Any) -> tuple[str, str, str, int]:
        shown, file_name, sha, size = (str(extra["as"]), str(extra["file"]), str(extra["sha256"]), extra["size"])
        if not _EXTRA_AS.fullmatch(shown) or not _ARTIFACT_NAME.fullmatch(file_name) or not isinstance(size, int):
            raise Damaged(f"meta.json names no file to put beside the artifact ({shown!r}, {file_name!r})")
        if folder.lstat(file_name) is None:
            raise Damaged(f"{file_name} is missing")
        return shown, file_name, sha, size

    def restore_files(self, dests: dict[str, Path]) -> dict[str, Restored]:
        """Each artifact of ``dests`` (a kind's name -> where it goes in ``--out``) the cache holds, put there instead of
        being built (:meth:`restore`); one it does not hold, or cannot put there intact, is left out (it is built)."""
        restored: dict[str, Restored] = {}
        for name, dest in dests.items():
            entry = self.lookup(name)
            try:
                if entry is None or entry.file is None or not self.restore(entry, dest):
                    continue
            except OSError:
                continue
            restored[name] = Restored(dest, entry.details, entry.notes)
        return restored

    def restore(self, entry: Entry, dest: Path, extras: tuple[str, ...] = ()) -> bool:
        """Put every file of the entry's artifact at ``dest`` (a companion beside it), each atomically, without
        writing or hashing bytes that are already the sealed ones (cache/linked.py), then each of ``extras`` (its
        name in ``--out``: the reduced subgraph) inside ``dest.parent``, checked against its sealed sha256 and
        written as ``nofollow.write_inside`` writes. ``False`` (and the entry is damaged) when the artifact's bytes
        put there are not the sealed ones. ``Damaged`` when an extra is not in the entry or changed (it was stored
        without them: the row is observed again), ``Refused`` when a link planted in ``--out`` stands where one goes
        (the artifact is in place), ``OSError`` when ``--out`` cannot take them."""
        assert entry.file is not None and entry.sha256 is not None and entry.size is not None
        files = entry.files or (Stored(dest.name, entry.file.name, entry.sha256, entry.size),)
        self.restored[entry.name] = []
        try:
            with self._folder(entry.name, create=False) as folder:
                if folder is None:
                    raise Damaged("the entry folder disappeared")
                kept = {stored.shown for stored in files}
                for name in companion_names(dest.name):
                    if name not in kept:  # an earlier run's .data beside the file must not pass for this one's
                        with contextlib.suppress(FileNotFoundError):
                            (dest.parent / name).unlink()
                for stored in files:
                    try:
                        how = restore_file(folder, stored, dest.with_name(stored.shown), linkable=stored.shown == dest.name)
                    except OSError as exc:
                        if exc.filename is not None and Path(str(exc.filename)).parent == dest.parent:
                            raise  # --out cannot take it
                        raise Damaged(f"{stored.file} cannot be read ({exc.strerror or exc})") from None
                    self.restored[entry.name].append((stored.shown, how))
        except (Damaged, Refused, Mismatch) as exc:
            self.damaged[entry.name] = str(exc)
            return False
        fsync_dir(dest.parent)
        held = {extra[0]: extra for extra in entry.extras}
        if any(name not in held for name in extras):
            raise Damaged(f"the entry holds no {', '.join(n for n in extras if n not in held)}")
        if extras:
            with self._folder(entry.name, create=False) as folder:
                if folder is None:
                    raise Damaged("the entry folder disappeared")
                for name in extras:
                    _, file_name, sha, size = held[name]
                    data = folder.read(file_name, size)
                    if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
                        raise Damaged(f"{file_name} changed since it was stored")
                    write_inside(dest.parent, name, data)
        return True

    # -- writing ------------------------------------------------------------------------------

    def local_sources(self) -> dict[str, str]:
        if self._local_sources is None:
            self._local_sources = local_module_sources()
        return self._local_sources

    def store(
        self,
        name: str,
        *,
        artifact: Path | None,
        expected_sha256: str | None = None,
        details: dict[str, str] | None = None,
        notes: tuple[str, ...] = (),
        build_seconds: float | None = None,
        observation: Observation | None = None,
        label_accuracy: float | None = None,
        extras: dict[str, Path] | None = None,
        expected_parts: dict[str, str] | None = None,
    ) -> None:
        """Write one entry: the artifact file by content name (and ``extras``: name in ``--out`` -> file, the
        reduced subgraph), then the sealed ``meta.json``, then remove the files the previous sealed
        ``meta.json`` named that this one does not; nothing else."""
        try:
            with self._folder(name, create=True) as folder:
                assert folder is not None
                if not self._hold(name, folder):  # evicted between opening and holding it (a rare race): the next run stores it
                    raise _Changed(f"the entry folder {folder.path.name} was evicted while being stored")
                previous = self._previous_files(name, folder)
                artifact_meta = None
                if artifact is not None:
                    artifact_meta = store_file(folder, artifact, expected_sha256)
                    artifact_meta["parts"] = [{"as": p.name, **store_file(folder, p, (expected_parts or {}).get(p.name))}
                                              for p in companions(artifact)]
                extra_meta = [{"as": shown, **store_file(folder, file, None)} for shown, file in (extras or {}).items()]
                meta = {
                    "format": FORMAT,
                    "name": name,
                    "run_key": self.run_key,
                    "key_inputs": self.key_inputs,
                    "artifact": artifact_meta,
                    "details": details or {},
                    "notes": list(notes),
                    "build_seconds": build_seconds,
                    "observation": None if observation is None else asdict(observation),
                    "label_accuracy": label_accuracy,
                    "sources": self.local_sources(),
                    "extras": extra_meta,
                }
                sealed = seal(self.key, folder.path.name, meta)
                folder.write_atomic(META, sealed)
                kept = {m["file"] for m in (artifact_meta, *extra_meta, *(artifact_meta or {}).get("parts", ())) if m is not None}
                for old in previous - kept:
                    folder.remove_file(old)
                if previous - kept:
                    folder.fsync()
        except (OSError, Refused, _Changed, Mismatch, TypeError, ValueError) as exc:  # TypeError/ValueError: not JSON-able
            self.problems[name] = f"cache: could not store the entry in {self.root} ({exc}); the next run rebuilds it"

    def _previous_files(self, name: str, folder: Folder) -> set[str]:
        """The file names (artifact, extras) the entry's current sealed meta.json gives, if it is sealed."""
        if folder.lstat(META) is None:
            return set()
        try:
            meta = self._meta(name, folder)
        except (Refused, NotSealed, Damaged, OSError, ValueError):
            return set()
        named = [meta.get("artifact"), *(meta.get("extras") or []), *((meta.get("artifact") or {}).get("parts") or [])]
        files = [m.get("file") for m in named if isinstance(m, dict)]
        return {f for f in files if isinstance(f, str) and _ARTIFACT_NAME.fullmatch(f)}


def _release(held: dict[str, tuple[int, int, int]]) -> None:
    for _, _, fd in held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    held.clear()


class _Changed(Exception):
    pass
