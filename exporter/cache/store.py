"""Content-addressed cache of built artifacts and their replay metrics.

A run's key is the sha256 of everything that can change an artifact or its numbers: the checkpoint's
sha256, the golden manifest's sha256 (which pins every input and the reference logits), the
architecture spec, its kwargs and its source file's sha256, the export and inference settings, the
library versions, export-check's version and the sha256 of its own source. Each artifact kind (and the eager model) has one
entry under ``sha256(run key, kind)``::

    <cache-dir>/v1/<2 hex>/<entry key>/meta.json             committed last, atomically
    <cache-dir>/v1/<2 hex>/<entry key>/<sha256[:16]><suffix>  the artifact file, named by content

Thresholds are not in the key: an entry holds what was observed (``measurements.Observation``:
metrics, diagnostics, notes), never a row or a verdict, and ``judge`` applies today's gates to it on
every run, as it does on a cold run. A run is served whole from the cache when every observation is
enough to judge with today's thresholds; one whose verdict asks for a per-layer table the entry
lacks (or holds at another threshold) reuses the files and replays. An entry records the hashes of the local source files imported when it was built
and is a miss when one changed. It is checked against the sha256 and size in its ``meta.json``
before use; a damaged one is removed, rebuilt, and the rebuild is noted in the report. The cache is
best effort: failing to write it only adds a note, it never fails a check. See docs/performance.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import files
from ..artifacts import KINDS_BY_NAME
from ..files import FileInfo, sha256_file
from ..measurements import Observation
from ..signature import SINGLE
from .key import FORMAT, local_module_sources, run_key_inputs
from .plain import from_plain

if TYPE_CHECKING:
    from ..build.builds import BuildOutcome
    from ..config import RunConfig

LAYOUT = f"v{FORMAT}"
META = "meta.json"
EAGER = "eager"

# Per-row cache states, as the report shows them.
HIT = "hit"  # artifact and metrics from the cache: nothing was built or replayed
RESTORED = "artifact"  # artifact file from the cache, replayed afresh
MISS = "miss"  # built and replayed, then stored
REBUILT = "rebuilt"  # the entry was damaged: built and replayed again, then stored


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Entry:
    """One verified cache entry: an artifact file (none for the eager row) and what was measured."""

    name: str
    file: Path | None
    sha256: str | None
    details: dict[str, str]
    notes: tuple[str, ...]
    build_seconds: float | None
    observation: Observation | None  # None for a source built only for a derived kind
    label_accuracy: float | None = None


class Damaged(Exception):
    pass


class ArtifactCache:
    """The entries of one run key under ``root``. Lookups verify; stores are atomic and best effort."""

    def __init__(self, root: Path, key_inputs: dict[str, Any]) -> None:
        self.root = root
        self.key_inputs = key_inputs
        self.run_key = hashlib.sha256(_canonical(key_inputs).encode()).hexdigest()
        self.damaged: dict[str, str] = {}  # name -> why its entry was thrown away
        self.stale: dict[str, str] = {}  # name -> which local source changed since it was stored
        self._source_hashes: dict[str, str] = {}
        self._local_sources: dict[str, str] | None = None
        self.problems: dict[str, str] = {}  # name -> why storing it failed

    def entry_dir(self, name: str) -> Path:
        key = hashlib.sha256(f"{self.run_key}\0{name}".encode()).hexdigest()
        return self.root / LAYOUT / key[:2] / key

    # -- reading ------------------------------------------------------------------------------

    def lookup(self, name: str) -> Entry | None:
        """The verified entry of ``name``, or ``None``; a damaged entry is removed and remembered."""
        folder = self.entry_dir(name)
        meta_path = folder / META
        if not meta_path.is_file():
            return None
        try:
            entry, sources = self._read(name, folder, meta_path)
            changed = self._changed_source(sources)
            if changed is None:
                return entry
            self.stale[name] = changed
            return None  # not damaged: built from other code; the rebuild overwrites it
        except Damaged as exc:
            self.damaged[name] = str(exc)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.damaged[name] = f"unreadable entry ({type(exc).__name__}: {exc})"
        with contextlib.suppress(OSError):
            shutil.rmtree(folder)
        return None

    def _changed_source(self, sources: dict[str, str]) -> str | None:
        for path, expected in sources.items():
            if path not in self._source_hashes:
                try:
                    self._source_hashes[path] = sha256_file(Path(path))
                except OSError:
                    self._source_hashes[path] = "missing"
            if self._source_hashes[path] != expected:
                return path
        return None

    def _read(self, name: str, folder: Path, meta_path: Path) -> tuple[Entry, dict[str, str]]:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("name") != name:
            raise Damaged("meta.json does not describe this entry")
        if meta.get("run_key") != self.run_key:
            raise Damaged("meta.json belongs to another key")
        file = sha = None
        artifact = meta.get("artifact")
        if artifact is not None:
            file = folder / str(artifact["file"])
            if file.parent != folder or not file.is_file():
                raise Damaged(f"{file.name} is missing")
            size = file.stat().st_size
            if size != artifact["size"]:
                raise Damaged(f"{file.name} is truncated or grew ({size} bytes, expected {artifact['size']})")
            sha = sha256_file(file)
            if sha != artifact["sha256"]:
                raise Damaged(f"{file.name} changed (sha256 {sha[:12]}… != {str(artifact['sha256'])[:12]}…)")
        observation = meta.get("observation")
        sources = meta.get("sources") or {}
        if not isinstance(sources, dict):
            raise Damaged("meta.json has no valid source list")
        return Entry(
            name=name,
            file=file,
            sha256=sha,
            details={str(k): str(v) for k, v in dict(meta.get("details") or {}).items()},
            notes=tuple(str(n) for n in meta.get("notes") or ()),
            build_seconds=meta.get("build_seconds"),
            observation=None if observation is None else from_plain(Observation, observation),
            label_accuracy=meta.get("label_accuracy"),
        ), {str(k): str(v) for k, v in sources.items()}

    def restore(self, entry: Entry, dest: Path) -> None:
        """Copy the entry's artifact to ``dest`` atomically."""
        assert entry.file is not None
        with files.replacing(dest) as tmp:
            shutil.copyfile(entry.file, tmp)

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
    ) -> None:
        """Write one entry: the artifact file by content name, then ``meta.json`` last."""
        folder = self.entry_dir(name)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            artifact_meta = None
            if artifact is not None:
                artifact_meta = self._store_file(folder, artifact, expected_sha256)
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
            }
            files.write_bytes(folder / META, json.dumps(meta, indent=1).encode("utf-8"))
        except (OSError, _Changed, TypeError, ValueError) as exc:  # TypeError/ValueError: not JSON-able
            self.problems[name] = f"cache: could not store the entry in {self.root} ({exc}); the next run rebuilds it"

    def _store_file(self, folder: Path, artifact: Path, expected_sha256: str | None) -> dict[str, Any]:
        digest = hashlib.sha256()
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".artifact.", suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as out, open(artifact, "rb") as src:
                while block := src.read(1 << 20):
                    digest.update(block)
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
            sha = digest.hexdigest()
            if expected_sha256 is not None and sha != expected_sha256:
                raise _Changed(f"{artifact.name} changed while being stored")
            target = folder / f"{sha[:16]}{artifact.suffix}"
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        # Earlier content of this entry, if any, is garbage now.
        for old in folder.iterdir():
            if old != target and old.name != META and not old.name.startswith("."):
                with contextlib.suppress(OSError):
                    old.unlink()
        return {"file": target.name, "sha256": sha, "size": target.stat().st_size}


class _Changed(Exception):
    pass


# -- the pipeline's side ----------------------------------------------------------------------


def open_cache(config: RunConfig, checkpoint_sha256: str, golden_manifest_sha256: str,
               signature: dict[str, Any] | None = None) -> ArtifactCache | None:
    """The cache for this run's key, or ``None`` when the run has no cache (``--no-cache``)."""
    if config.cache_dir is None:
        return None
    inputs = run_key_inputs(
        checkpoint_sha256=checkpoint_sha256,
        golden_manifest_sha256=golden_manifest_sha256,
        arch=config.arch,
        arch_kwargs=config.arch_kwargs,
        arch_root=config.arch_root,
        export_settings=config.export_settings(),
        inference_settings=config.inference_settings(),
    )
    # the outputs' kinds and which are compared shape the observations (a format-1 set: SINGLE)
    inputs["signature"] = signature if signature is not None else SINGLE.to_json()
    return ArtifactCache(config.cache_dir, inputs)


@dataclass(frozen=True)
class Restored:
    path: Path
    details: dict[str, str]
    notes: tuple[str, ...]


def restore_artifact(cache: ArtifactCache, name: str, dest: Path) -> Restored | None:
    """Put the cached file of ``name`` at ``dest`` instead of building it; ``None`` when not cached."""
    entry = cache.lookup(name)
    if entry is None or entry.file is None:
        return None
    try:
        cache.restore(entry, dest)
    except OSError:
        return None
    return Restored(dest, entry.details, entry.notes)


def cached_observations(cache: ArtifactCache, config: RunConfig, out_dir: Path) -> tuple[list[Observation], float | None] | None:
    """Every row's observation from the cache (artifacts restored into ``out_dir``), or ``None``
    unless the eager row and every selected kind are cached and enough to judge with today's thresholds."""
    from ..judge import layers_missing

    eager = cache.lookup(EAGER)
    if eager is None or eager.observation is None or eager.observation.metrics is None:
        return None
    entries = {}
    for name in config.selected_kinds:
        entry = cache.lookup(name)
        if entry is None or entry.observation is None or entry.observation.metrics is None or entry.file is None or entry.sha256 is None:
            return None
        entries[name] = entry
    if any(layers_missing(e.observation, config.thresholds, config.diagnose) for e in (*entries.values(), eager) if e.observation):
        return None  # the verdict wants a per-layer table the entry does not hold: reuse the files, replay
    observations = [replace(eager.observation, cache=HIT)]
    for name, entry in entries.items():
        assert entry.observation is not None
        dest = out_dir / KINDS_BY_NAME[name].filename()
        cache.restore(entry, dest)
        artifact = FileInfo(path=str(dest), size_bytes=dest.stat().st_size, sha256=str(entry.sha256))
        observations.append(replace(entry.observation, artifact=artifact, build_seconds=None, replay_seconds=None, cache=HIT))
    return observations, eager.label_accuracy


def _storable(obs: Observation) -> bool:
    """Errors are never cached: the next run tries again."""
    return obs.error is None and obs.metrics is not None and obs.artifact is not None and not (
        obs.diagnostics is not None and obs.diagnostics.error is not None)


def store_observations(
    cache: ArtifactCache, config: RunConfig, observations: list[Observation], built: dict[str, BuildOutcome], label_accuracy: float | None
) -> list[Observation]:
    """Store every artifact that built and ran with its observation (and eager's); return the
    observations marked with where they came from and what happened to their entries."""
    marked = []
    for obs in observations:
        if obs.name == EAGER:
            if obs.metrics is not None:
                cache.store(EAGER, artifact=None, observation=obs, label_accuracy=label_accuracy)
            state = REBUILT if EAGER in cache.damaged else MISS
        else:
            outcome = built[obs.name]
            state = RESTORED if outcome.cache == RESTORED else REBUILT if obs.name in cache.damaged else MISS
            if _storable(obs):
                assert obs.artifact is not None
                cache.store(obs.name, artifact=Path(obs.artifact.path), expected_sha256=obs.artifact.sha256, details=dict(obs.details),
                            notes=obs.notes, build_seconds=obs.build_seconds, observation=obs)
        notes = obs.notes
        if obs.name in cache.damaged:
            notes += (f"cache: the cached entry was damaged ({cache.damaged[obs.name]}); rebuilt and stored again",)
        if obs.name in cache.stale:
            notes += (f"cache: {cache.stale[obs.name]} changed since the cached entry was stored; rebuilt",)
        if obs.name in cache.problems:
            notes += (cache.problems[obs.name],)
        marked.append(replace(obs, cache=state, notes=notes))
    selected = set(config.selected_kinds)
    for name, outcome in built.items():  # a source built only for a derived kind (onnx for onnx-simplified)
        if name not in selected and outcome.cache is None and outcome.error is None and outcome.path is not None:
            cache.store(name, artifact=outcome.path, details=outcome.details, notes=tuple(outcome.notes), build_seconds=outcome.seconds)
    return marked
