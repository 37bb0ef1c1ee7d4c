"""JSON reports sealed with the cache key, so that ``export-check merge`` accepts only reports the tool wrote.

Every JSON report export-check writes (``check --json``, a fleet's, a merge's, the pytest plugin's
session report) begins with an HMAC-SHA256 over the rest of its bytes, under the key that
authenticates the artifact cache (``exporter/cache/secret.py``: ``$EXPORT_CHECK_CACHE_KEY_FILE``, else
``~/.config/export-check/cache.key``)::

    {"export_check_seal": "hmac-sha256:<key id, 16 hex>:<mac, 64 hex>",
      "schema": "export-check-report", ...}

The MAC is taken over the report as it would be written unsealed (``{`` and the rest of the text),
under a domain of its own (a cache ``meta.json`` can never pass for a report, nor a report for one).
``merge`` checks it on the bytes, before any JSON is parsed: a report edited by one byte, written by
hand, or sealed under another key is refused with one line naming the file. The key id (a digest of
the key, which tells nothing about it) lets that line say "another key" rather than "edited".

CI jobs that merge their shards' reports share the key as the cache's sharers do: each job writes the
same secret to a file of mode 0600 and points ``EXPORT_CHECK_CACHE_KEY_FILE`` at it. Whoever holds the
key can write reports merge accepts; without a key (an unwritable home), the report is written
unsealed and the run says so in one line.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cache.secret import KEY_ENV, CacheKey, CacheKeyError, key_file_path, load_key
from ..errors import ExportCheckError, UsageError

FIELD = "export_check_seal"
_DOMAIN = b"export-check JSON report\0"
_HEAD = b'{"' + FIELD.encode() + b'": "hmac-sha256:'
_SEAL = re.compile(rb"([0-9a-f]{16}):([0-9a-f]{64})\",")
_SEAL_LENGTH = 16 + 1 + 64 + 2


def key_id(key: CacheKey) -> str:
    """A name for the key that tells nothing about it: 16 hex digits of a digest of it."""
    return hashlib.sha256(_DOMAIN + b"key id\0" + key.secret).hexdigest()[:16]


def _mac(key: CacheKey, body: bytes, domain: bytes = _DOMAIN) -> str:
    return key.mac(domain + body)  # the cache's HMAC-SHA256, under its own domain


def seal(text: str, key: CacheKey) -> str:
    """``text`` (a JSON object as the report views render it) with the seal as its first member."""
    return sealed_with(text, key, _DOMAIN)


def sealed_with(text: str, key: CacheKey, domain: bytes) -> str:
    """``text`` (a JSON object) sealed under ``domain``: a report's, or a bundle's manifest (exporter/bundle.py)."""
    if not text.startswith("{") or text.lstrip("{").lstrip().startswith("}"):
        raise ValueError("only a JSON object with members can be sealed")
    body = text.encode("utf-8")
    return (_HEAD + f"{key_id(key)}:{_mac(key, body, domain)}\",".encode() + body[1:]).decode("utf-8")


def writer_key(cache_root: Path | None = None) -> tuple[CacheKey | None, str | None]:
    """The key reports are sealed with (made on first use, as the cache's), or None and the one line
    saying why the report goes unsealed."""
    from ..config import default_cache_dir

    try:
        return load_key(cache_root if cache_root is not None else default_cache_dir()), None
    except CacheKeyError as exc:
        return None, f"export-check: the JSON report is not sealed ({exc}); `export-check merge` will refuse it"


def sealed(text: str, cache_root: Path | None = None, signer: Any = None) -> tuple[str, str | None]:
    """``text`` sealed with this user's key, and None; or ``text`` as it is and the note to print. Signed
    instead with ``signer`` (signing.Signer, ``--sign-key``) when there is one."""
    if signer is not None:
        return signer.sign(text, _DOMAIN), None
    key, note = writer_key(cache_root)
    return (text, note) if key is None else (seal(text, key), None)


def reader_key() -> CacheKey:
    """The key merge checks seals with: the existing key file (never a new one, which could prove nothing)."""
    from ..config import default_cache_dir

    path = key_file_path()
    if not path.exists():
        raise UsageError(f"no cache key at {path}; merge where the runs' key file is, or set {KEY_ENV} to it "
                         "(docs/how-to/fleets.md, \"CI matrices\")")
    return load_key(default_cache_dir())


def verified(path: Path, data: bytes, key: Callable[[], CacheKey] = reader_key, domain: bytes = _DOMAIN,
             wrote: str = "pass the --json files export-check wrote, unedited", public: Any = None, signed_only: bool = False) -> bytes:
    """The report's JSON text if ``data`` carries a seal made with ``key()`` over the rest of it; else one
    UsageError line naming ``path``: unsealed (hand-made, or another tool's), another key, or edited.
    ``key`` is asked for only once a seal is found: an unsealed file is refused without one. ``domain``
    and ``wrote`` (the fix the lines end with): those of a bundle's manifest, for a bundle. A file signed with
    an Ed25519 key (signing.py) is checked against ``public`` (signing.PublicKeys, ``--verify-key``) instead;
    ``signed_only``: a shared-key seal is refused (a replay given ``--verify-key`` trusts the signature alone)."""
    from .signing import SIGNED_HEAD, verify_signed

    if data.startswith(SIGNED_HEAD):
        return verify_signed(path, data, public, domain, wrote)
    if signed_only and data.startswith(_HEAD):
        raise UsageError(f"{path}: sealed with the shared cache key, not signed; --verify-key {public.path} takes what "
                         "`export-check check --sign-key` wrote: sign it on the build machine, or replay it without --verify-key")
    if not data.startswith(_HEAD):
        what = "a report" if domain == _DOMAIN else "a bundle manifest"
        raise UsageError(f"{path}: not {what} export-check wrote (it carries no seal); {wrote}")
    found = _SEAL.match(data, len(_HEAD))
    if found is None:
        raise UsageError(f"{path}: its export-check seal is damaged; {wrote}")
    body = b"{" + data[len(_HEAD) + _SEAL_LENGTH:]
    try:
        mine = key()
    except ExportCheckError as exc:
        raise UsageError(f"{path}: cannot check its seal: {exc}") from None
    writer, mac = found.group(1).decode(), found.group(2).decode()
    if writer != key_id(mine):
        verb = "merge" if domain == _DOMAIN else "replay"
        raise UsageError(f"{path}: sealed with another key (key {writer}, this machine's is {key_id(mine)}); {verb} where the key "
                         f"file the runs used is, e.g. set {KEY_ENV} to the CI secret's file in every job")
    if not hmac.compare_digest(mac, _mac(mine, body, domain)):
        raise UsageError(f"{path}: edited since export-check wrote it (its seal does not match its content); {wrote}")
    return body
