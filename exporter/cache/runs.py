"""A run's side of the cache: open the cache for a run's key, find and restore a whole run's
entries, and store what a run built and observed (the builds ask ``ArtifactCache.restore_files``
for the files it holds instead of building them).

``store`` holds the entries (``ArtifactCache``); this module speaks the pipeline's terms (a run's
config, its observations, its builds). Neither asks the judge: the pipeline does, between
``cached_run`` and ``restore_run``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..artifacts import KINDS_BY_NAME
from ..errors import error_message
from ..files import FileInfo
from ..nofollow import Refused
from ..records import Observation, Reduced
from ..signature import SINGLE
from .key import run_key_inputs
from .prune import evict, parse_gb
from .secret import CacheKeyUnavailable, load_key
from .store import EAGER, HIT, MISS, REBUILT, RESTORED, UNTRUSTED_NOTE, ArtifactCache, Damaged, Entry

if TYPE_CHECKING:
    from ..config import RunConfig


class BuiltFile(Protocol):
    """What storing reads of a build's outcome (``builder.builds.BuildOutcome``): the cache knows files
    and observations, not how they were built."""

    path: Path | None
    details: dict[str, str]
    notes: list[str]
    seconds: float | None
    error: str | None
    cache: str | None


def open_cache(config: RunConfig, checkpoint_sha256: str, golden_manifest_sha256: str,
               signature: dict[str, Any] | None = None) -> ArtifactCache | None:
    """The cache for this run's key, or ``None`` when the run has no cache (``--no-cache``);
    ``CacheKeyError`` when this user's cache key cannot be trusted (``secret``); ``CacheUnavailable``
    when there is no key and none can be made, or no cache folder: the cache is best effort."""
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
    try:
        key = load_key(config.cache_dir)
    except CacheKeyUnavailable as exc:
        raise CacheUnavailable(error_message(exc)) from None
    try:
        config.cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheUnavailable(f"{config.cache_dir}: cannot create the cache folder ({exc.strerror or exc}); make it writable, "
                               "pass another --cache-dir, or pass --no-cache") from None
    return ArtifactCache(config.cache_dir, inputs, key, max_bytes=parse_gb(config.cache_max_size))


class CacheUnavailable(Exception):
    """This run can use no cache (no key can be made, no cache folder created): it goes on without one
    and says so in one line, the message. A key that proves nothing is a CacheKeyError instead (exit 2)."""


@dataclass(frozen=True)
class CachedRun:
    """Every row of a run found in the cache: the eager row's entry and each selected kind's."""

    eager: Entry
    entries: dict[str, Entry]

    @property
    def observations(self) -> list[Observation]:
        return [e.observation for e in (self.eager, *self.entries.values()) if e.observation is not None]


def cached_run(cache: ArtifactCache, config: RunConfig) -> CachedRun | None:
    """The eager row and every selected kind as cached, with metrics and (for a kind) its file; ``None``
    unless all are. Nothing is restored yet: the pipeline first asks the judge whether today's gates can
    be judged on them (a verdict may want a per-layer table an entry does not hold)."""
    entries = {}
    for name in (EAGER, *config.selected_kinds):
        entry = cache.lookup(name)
        if entry is None or entry.observation is None or entry.observation.metrics is None or (name != EAGER and entry.file is None):
            return None
        entries[name] = entry
    return CachedRun(entries.pop(EAGER), entries)


def restore_run(cache: ArtifactCache, run: CachedRun, out_dir: Path) -> tuple[list[Observation], float | None] | None:
    """Every row's observation from the cache, its artifact and its reduced subgraph restored into ``out_dir`` and
    named there (not in the ``--out`` of the run that stored it); ``None`` when a file cannot be put there intact
    (the build path then says why), or the entry was stored without its reduced subgraph (the row is observed again).
    A link planted in ``--out`` where the subgraph goes is refused: the reduction then says why it is not there."""
    assert run.eager.observation is not None
    observations = [replace(run.eager.observation, cache=HIT)]
    for name, entry in run.entries.items():
        obs = entry.observation
        assert obs is not None and entry.sha256 is not None and entry.size is not None
        extras = list(_reduced_files(obs) or ())
        dest = out_dir / KINDS_BY_NAME[name].filename()
        refused = None
        try:
            if not cache.restore(entry, dest, tuple(extras)):  # the bytes in --out are not the ones measured: build
                return None
        except Refused as exc:  # a link planted in --out: the reduction says why it is not there
            refused = str(exc)
        except (Damaged, OSError):
            return None  # stored without its reduced subgraph, or --out cannot take it: the build path reports why
        reduced = obs.diagnostics.reduced if obs.diagnostics is not None else None
        if extras and obs.diagnostics is not None and reduced is not None:
            moved = (replace(reduced, path=str(out_dir / extras[0]), data=str(out_dir / extras[1])) if refused is None
                     else Reduced(gate=reduced.gate, model_nodes=reduced.model_nodes, optimization=reduced.optimization, error=refused))
            obs = replace(obs, diagnostics=replace(obs.diagnostics, reduced=moved))
        parts = tuple((f.shown, f.size, f.sha256) for f in entry.files[:-1])  # the companions (an ONNX graph's .data): all but the last
        artifact = FileInfo(path=str(dest), size_bytes=entry.size + sum(size for _, size, _ in parts), sha256=entry.sha256, parts=parts)
        observations.append(replace(obs, artifact=artifact, build_seconds=None, replay_seconds=None, cache=HIT))
    cache.release()  # every file is in --out: the run needs the cache no more
    return observations, run.eager.label_accuracy


def _reduced_files(obs: Observation) -> dict[str, Path] | None:
    """The reduced subgraph's files, by their names in ``--out``, to store beside the artifact."""
    reduced = obs.diagnostics.reduced if obs.diagnostics is not None else None
    if reduced is None or reduced.path is None or reduced.data is None:
        return None
    return {f"reduced/{Path(p).name}": Path(p) for p in (reduced.path, reduced.data)}


def _storable(obs: Observation) -> bool:
    """Errors are never cached: the next run tries again."""
    return obs.error is None and obs.metrics is not None and obs.artifact is not None and not (
        obs.diagnostics is not None and obs.diagnostics.error is not None)


def _entries(observations: list[Observation], built: Mapping[str, BuiltFile], label_accuracy: float | None,
             selected: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """What a run stores, entry by entry: eager's observation, every artifact that built and ran with its
    observation, and a source built only for a derived kind (onnx for onnx-simplified) with its file alone."""
    entries: list[tuple[str, dict[str, Any]]] = []
    for obs in observations:
        if obs.name == EAGER:
            if obs.metrics is not None:
                entries.append((EAGER, {"artifact": None, "observation": obs, "label_accuracy": label_accuracy}))
        elif _storable(obs):
            assert obs.artifact is not None
            entries.append((obs.name, {"artifact": Path(obs.artifact.path), "expected_sha256": obs.artifact.sha256, "details": dict(obs.details),
                                       "notes": obs.notes, "build_seconds": obs.build_seconds, "observation": obs,
                                       "extras": _reduced_files(obs), "expected_parts": {name: sha for name, _, sha in obs.artifact.parts}}))
    for name, outcome in built.items():
        if name not in selected and outcome.cache is None and outcome.error is None and outcome.path is not None:
            entries.append((name, {"artifact": outcome.path, "details": outcome.details, "notes": tuple(outcome.notes),
                                   "build_seconds": outcome.seconds}))
    return entries


def store_observations(
    cache: ArtifactCache, config: RunConfig, observations: list[Observation], built: Mapping[str, BuiltFile], label_accuracy: float | None
) -> list[Observation]:
    """Store every artifact that built and ran with its observation (and eager's); return the
    observations marked with where they came from and what happened to their entries."""
    for name, fields in _entries(observations, built, label_accuracy, set(config.selected_kinds)):
        cache.store(name, **fields)
    marked = []
    for obs in observations:
        notes = obs.notes
        if obs.name in cache.untrusted:
            notes += (f"{UNTRUSTED_NOTE} ({cache.untrusted[obs.name]}; the key: {cache.key.path})",)
        if obs.name in cache.damaged:
            notes += (f"cache: the cached entry was damaged ({cache.damaged[obs.name]}); rebuilt and stored again",)
        if obs.name in cache.stale:
            notes += (f"cache: {cache.stale[obs.name]} changed since the cached entry was stored; rebuilt",)
        if obs.name in cache.problems:
            notes += (cache.problems[obs.name],)
        if obs.name != EAGER and built[obs.name].cache == RESTORED:
            state = RESTORED
        else:  # a damaged or untrusted entry is rebuilt; else a miss
            state = REBUILT if obs.name in cache.damaged or obs.name in cache.untrusted else MISS
        marked.append(replace(obs, cache=state, notes=notes))
    evicted = evict(cache.root, cache.max_bytes)  # while this run still holds its own entries: they are never the ones evicted
    cache.release()
    if evicted is not None and marked and marked[0].name == EAGER:
        marked[0] = replace(marked[0], notes=(*marked[0].notes, evicted))
    return marked
