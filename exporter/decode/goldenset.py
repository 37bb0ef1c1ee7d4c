"""The generative golden set: prompts and, for each, the approved continuation and teacher-forced logits.

A folder like any golden set, with its own manifest format (``export-check-golden-generative``,
version 1)::

    manifest.json                 new_tokens, every prompt (name, text or null, token count), every
                                  file's sha256, the checkpoint's hash and arch, library versions
    prompts-<sha12>.npz           prompt_<i>: int64 token ids
    reference-<sha12>.npz         continuation_<i>: (new_tokens,) greedy tokens;
                                  logits_<i>: (P + new_tokens, vocab) float32, teacher-forced
    tokenizer-<sha12>.json        the tokenizer the prompts were encoded with (when they were text)

Recorded from an inputs folder holding ``prompts.txt`` (one prompt a line, encoded with the folder's
``tokenizer.json`` by the ``tokenizers`` library, never a download) or ``prompts.npz`` (token ids,
one int array per prompt, named by its key), and optionally ``generation.json``
(``{"new_tokens": 32}``). Data files are content-addressed and written before the manifest, which is
replaced atomically last: a writer killed at any point leaves the previous set intact.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GoldenError, UsageError
from ..files import replacing, sha256_file, write_bytes

FORMAT, VERSION = "export-check-golden-generative", 1
MANIFEST = "manifest.json"
DEFAULT_NEW_TOKENS = 32


def is_generative(golden_dir: Path) -> bool:
    """Whether ``golden_dir`` holds a generative set. Read as any golden manifest is, within bounds (a regular file, its
    first 64 KiB, JSON of bounded depth: a FIFO, a device or a hostile manifest is the loader's to name, never a hang or
    a traceback here); any problem reads as "not generative"."""
    import os
    import stat

    from ..golden.reading import load_json

    try:
        fd = os.open(Path(golden_dir) / MANIFEST, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return False
            head = handle.read(1 << 16)
        if FORMAT.encode() not in head:
            return False
        return load_json(head.decode("utf-8"), Path(golden_dir) / MANIFEST).get("format") == FORMAT
    except (OSError, ValueError, AttributeError, GoldenError):
        return False


def is_prompt_folder(inputs_dir: Path) -> bool:
    return (Path(inputs_dir) / "prompts.txt").is_file() or (Path(inputs_dir) / "prompts.npz").is_file()


@dataclass(frozen=True)
class GenerativeSet:
    root: Path
    names: tuple[str, ...]
    texts: tuple[str | None, ...]
    prompts: tuple[np.ndarray, ...]
    continuations: tuple[np.ndarray, ...]
    logits: tuple[np.ndarray, ...]
    new_tokens: int
    tokenizer: Path | None
    manifest: dict[str, Any]
    manifest_sha256: str

    def __len__(self) -> int:
        return len(self.names)

    def decoder(self):
        """``decode(ids) -> str``: the set's tokenizer, or the ids as text when the prompts came as ids."""
        if self.tokenizer is None:
            return lambda ids: " ".join(f"<{i}>" for i in ids)
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.tokenizer))
        return lambda ids: tokenizer.decode([int(i) for i in ids])


def read_prompts(inputs_dir: Path) -> tuple[list[str], list[str | None], list[np.ndarray], Path | None, int]:
    """``(names, texts, token ids, tokenizer file, new_tokens)`` from an inputs folder; a ``UsageError`` naming the file otherwise."""
    inputs_dir = Path(inputs_dir)
    settings = inputs_dir / "generation.json"
    new_tokens = DEFAULT_NEW_TOKENS
    if settings.is_file():
        try:
            new_tokens = json.loads(settings.read_text())["new_tokens"]
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{settings}: not JSON of the form {{\"new_tokens\": 32}}; fix it") from None
        if not isinstance(new_tokens, int) or isinstance(new_tokens, bool) or not 1 <= new_tokens <= 4096:
            raise UsageError(f"{settings}: new_tokens must be an integer from 1 to 4096, got {new_tokens!r}; fix it")
    if (inputs_dir / "prompts.npz").is_file():
        path = inputs_dir / "prompts.npz"
        try:
            with np.load(path, allow_pickle=False) as loaded:
                items: list[tuple[str, np.ndarray]] = [(name, np.asarray(loaded[name])) for name in loaded.files]
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: not a readable .npz of token id arrays ({exc}); write it with numpy.savez") from None
        for name, ids in items:
            if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu" or ids.min() < 0:
                raise UsageError(f"{path}: prompt {name} must be a non-empty 1-D array of non-negative integer token ids, "
                                 f"got {ids.dtype} of shape {ids.shape}; fix it")
        return [n for n, _ in items], [None] * len(items), [i.astype(np.int64) for _, i in items], None, new_tokens
    path, tokenizer_path = inputs_dir / "prompts.txt", inputs_dir / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise UsageError(f"{path}: text prompts need the tokenizer beside them: put its tokenizer.json in {inputs_dir}")
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:
        raise UsageError(f"{tokenizer_path}: not a tokenizers tokenizer.json ({str(exc).splitlines()[0]}); save it with Tokenizer.save") from None
    texts = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise UsageError(f"{path}: holds no prompt (one prompt a line); add some")
    encoded = [np.asarray(tokenizer.encode(text).ids, np.int64) for text in texts]
    empty = [t for t, i in zip(texts, encoded, strict=True) if i.size == 0]
    if empty:
        raise UsageError(f"{path}: the prompt {empty[0]!r} encodes to no tokens; remove it")
    return [f"prompt-{i:03d}" for i in range(len(texts))], list(texts), encoded, tokenizer_path, new_tokens


def _npz(arrays: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _store(root: Path, stem: str, suffix: str, data: bytes) -> dict[str, str]:
    digest = hashlib.sha256(data).hexdigest()
    name = f"{stem}-{digest[:12]}{suffix}"
    if not (root / name).is_file():
        write_bytes(root / name, data)
    return {"file": name, "sha256": digest}


def write_set(root: Path, names: list[str], texts: list[str | None], prompts: list[np.ndarray], continuations: list[np.ndarray],
              logits: list[np.ndarray], new_tokens: int, tokenizer: Path | None, model: dict[str, Any], versions: dict[str, str]) -> None:
    """Content-addressed data first, the manifest last and atomically; the previous set's unused files removed after."""
    root.mkdir(parents=True, exist_ok=True)
    previous = {e["file"] for e in _read_manifest(root)["files"].values() if e} if is_generative(root) else set()
    files = {
        "prompts": _store(root, "prompts", ".npz", _npz({f"prompt_{i}": p for i, p in enumerate(prompts)})),
        "reference": _store(root, "reference", ".npz", _npz({**{f"continuation_{i}": c for i, c in enumerate(continuations)},
                                                             **{f"logits_{i}": x for i, x in enumerate(logits)}})),
        "tokenizer": None if tokenizer is None else _store(root, "tokenizer", ".json", Path(tokenizer).read_bytes()),
    }
    manifest = {"format": FORMAT, "version": VERSION, "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "new_tokens": new_tokens, "prompts": [{"name": n, "text": t, "tokens": int(p.size)}
                                                      for n, t, p in zip(names, texts, prompts, strict=True)],
                "files": files, "model": model, "recorded_with": versions}
    with replacing(root / MANIFEST) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    for stale in previous - {e["file"] for e in files.values() if e}:
        (root / stale).unlink(missing_ok=True)


def _read_manifest(root: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise GoldenError(f"{root / MANIFEST}: unreadable ({exc}); re-record the set with export-check golden record") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise GoldenError(f"{root / MANIFEST}: not a generative golden set of version {VERSION}; re-record it")
    return manifest


def verify_lines(root: Path) -> tuple[bool, list[str]]:
    """One line per file that changed (``CHANGED``, ``MISSING``), as ``golden verify`` prints them."""
    manifest = _read_manifest(Path(root))
    lines = []
    for role, entry in manifest["files"].items():
        if not entry:
            continue
        path = Path(root) / entry["file"]
        if not path.is_file():
            lines.append(f"MISSING  {entry['file']} ({role})")
        elif sha256_file(path) != entry["sha256"]:
            lines.append(f"CHANGED  {entry['file']} ({role}): sha256 differs from the manifest")
    if lines:
        return False, lines
    return True, [f"intact: {len(manifest['prompts'])} prompts x {manifest['new_tokens']} new tokens, every file's sha256 matches"]


def load_set(root: Path) -> GenerativeSet:
    root = Path(root)
    intact, lines = verify_lines(root)
    if not intact:
        raise GoldenError(f"{root}: {lines[0]}; run export-check golden verify {root}, then restore or re-record it")
    manifest = _read_manifest(root)
    count = len(manifest["prompts"])
    with np.load(root / manifest["files"]["prompts"]["file"]) as p, np.load(root / manifest["files"]["reference"]["file"]) as r:
        prompts = tuple(p[f"prompt_{i}"] for i in range(count))
        continuations = tuple(r[f"continuation_{i}"] for i in range(count))
        logits = tuple(r[f"logits_{i}"] for i in range(count))
    tokenizer = manifest["files"].get("tokenizer")
    return GenerativeSet(root, tuple(e["name"] for e in manifest["prompts"]), tuple(e["text"] for e in manifest["prompts"]), prompts,
                         continuations, logits, int(manifest["new_tokens"]), None if not tokenizer else root / tokenizer["file"],
                         manifest, sha256_file(root / MANIFEST))


def copy_tokenizer(source: GenerativeSet, into: Path) -> Path | None:
    """The tokenizer of ``source`` as a file outside the set (approve rewrites the set it came from)."""
    if source.tokenizer is None:
        return None
    target = into / "tokenizer.json"
    shutil.copyfile(source.tokenizer, target)
    return target
