"""Ed25519 evidence: bundles and JSON reports signed with a private key that stays on the build machine,
checked anywhere with the public key alone (``--sign-key``, ``--verify-key``, ``export-check keygen``).

The shared-key seal (seal.py) is an HMAC: every machine that can check one can make one. A signature
splits the two: a device lab holding the public key can check a bundle and a build's report, and can
make neither. It takes the seal's place, over the same bytes (the domain, then the JSON text without
the seal)::

    {"export_check_seal": "ed25519:<key id, 16 hex>:<signature, 128 hex>", "schema": ...}

The key id is a digest of the public key, so a refusal can say "another key" rather than "edited".
A ``--verify-key`` file holds one or more PEM public keys (concatenated: the build's and each lab's).
Needs the ``cryptography`` package (the ``sign`` extra), imported only when a key option is used.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import files
from ..errors import UsageError

SIGNED_HEAD = b'{"export_check_seal": "ed25519:'
_SIGNATURE = re.compile(rb"([0-9a-f]{16}):([0-9a-f]{128})\",")
_SIGNATURE_LENGTH = 16 + 1 + 128 + 2
KEY_MAX_BYTES = 64 << 10  # a PEM Ed25519 key is about 120 bytes; a file of a few hundred keys fits
_PUBLIC_PEM = re.compile(rb"-----BEGIN PUBLIC KEY-----\r?\n.*?-----END PUBLIC KEY-----", re.S)
EXTRA = "install the sign extra: pip install 'export-check[sign]'"


def _crypto(flag: str) -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise UsageError(f"{flag} needs the cryptography package, which is not installed here; {EXTRA}") from None
    return serialization, ed25519


def _read_key(path: Path, flag: str) -> bytes:
    try:
        return files.read_fd(files.open_regular(path, follow=True), KEY_MAX_BYTES, path)
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such key file; make a key pair with `export-check keygen KEY.pem`") from None
    except OSError as exc:  # a FIFO, a device, a directory, too large, unreadable
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}; pass a PEM key file (`export-check keygen` writes them)") from None


def key_id(public_key: Any) -> str:
    """A name for an Ed25519 public key: 16 hex digits of a digest of its raw 32 bytes."""
    serialization, _ = _crypto("a signature")
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(b"export-check ed25519 key id\0" + raw).hexdigest()[:16]


@dataclass(frozen=True)
class Signer:
    """An Ed25519 private key, loaded (``--sign-key``): signs a report's or a bundle manifest's JSON text."""

    key: Any
    id: str

    def sign(self, text: str, domain: bytes) -> str:
        if not text.startswith("{") or text.lstrip("{").lstrip().startswith("}"):
            raise ValueError("only a JSON object with members can be signed")
        body = text.encode("utf-8")
        signature = self.key.sign(domain + body).hex()
        return (SIGNED_HEAD + f"{self.id}:{signature}\",".encode() + body[1:]).decode("utf-8")


@dataclass(frozen=True)
class PublicKeys:
    """The public keys of a ``--verify-key`` file, by key id."""

    path: Path
    by_id: dict[str, Any]


def load_signer(path: Path) -> Signer:
    """The Ed25519 private key of the PEM file ``path``, or one UsageError line."""
    serialization, ed25519 = _crypto("--sign-key")
    data = _read_key(path, "--sign-key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # a password-protected key
        raise UsageError(f"--sign-key {path}: the key is encrypted; keep it unencrypted in a file of mode 0600 (or a CI secret)") from None
    except Exception as exc:  # not PEM, or an algorithm cryptography does not support
        raise UsageError(f"--sign-key {path}: not a PEM private key ({type(exc).__name__}); pass the file `export-check keygen` wrote") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise UsageError(f"--sign-key {path}: a {type(key).__name__.removeprefix('_')}, not an Ed25519 key; make one with `export-check keygen`")
    return Signer(key, key_id(key.public_key()))


def load_public_keys(path: Path, flag: str = "--verify-key") -> PublicKeys:
    """Every PEM public key of the file ``path`` (one or more, each Ed25519), or one UsageError line."""
    serialization, ed25519 = _crypto(flag)
    data = _read_key(path, flag)
    if b"PRIVATE KEY-----" in data:
        raise UsageError(f"{flag} {path}: holds a private key; a checking machine needs the public key alone ({path}.pub from "
                         "`export-check keygen`): keep the private key on the build machine")
    blocks = _PUBLIC_PEM.findall(data)
    if not blocks:
        raise UsageError(f"{flag} {path}: holds no PEM public key (-----BEGIN PUBLIC KEY-----); pass the .pub file `export-check keygen` wrote")
    keys = {}
    for i, block in enumerate(blocks):
        try:
            key = serialization.load_pem_public_key(block)
        except Exception as exc:  # a damaged block, an unsupported algorithm
            raise UsageError(f"{flag} {path}: public key {i + 1} cannot be read ({type(exc).__name__}); pass the .pub files keygen wrote") from None
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise UsageError(f"{flag} {path}: public key {i + 1} is not an Ed25519 key; make key pairs with `export-check keygen`")
        keys[key_id(key)] = key
    return PublicKeys(path, keys)


def verify_signed(path: Path, data: bytes, keys: PublicKeys | None, domain: bytes, wrote: str) -> bytes:
    """The JSON text of ``data`` (which begins with :data:`SIGNED_HEAD`) if its signature is one of ``keys``'
    over the rest of it; else one UsageError line naming ``path``: no key given, another key, or edited."""
    found = _SIGNATURE.match(data, len(SIGNED_HEAD))
    if found is None:
        raise UsageError(f"{path}: its export-check signature is damaged; {wrote}")
    signer, signature = found.group(1).decode(), bytes.fromhex(found.group(2).decode())
    if keys is None:
        raise UsageError(f"{path}: signed with Ed25519 key {signer}; check it with --verify-key PUBLIC.pem, the signer's public key")
    key = keys.by_id.get(signer)
    if key is None:
        raise UsageError(f"{path}: signed by another key (key {signer}; --verify-key {keys.path} holds {', '.join(sorted(keys.by_id))}); "
                         "pass the public key of the machine that signed it, or sign it again with the right key")
    body = b"{" + data[len(SIGNED_HEAD) + _SIGNATURE_LENGTH:]
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(signature, domain + body)
    except InvalidSignature:
        raise UsageError(f"{path}: edited since export-check signed it (its signature does not match its content); {wrote}") from None
    return body


def keygen(out: Path) -> tuple[Path, str]:
    """A new Ed25519 key pair: the private key at ``out`` (PEM, mode 0600), the public key at ``out.pub``;
    returns the public key's path and its key id. Refuses to replace either file."""
    serialization, ed25519 = _crypto("keygen")
    public_path = out.with_name(out.name + ".pub")
    for path in (out, public_path):
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path}: exists; keygen never replaces a key (a bundle signed by it could no longer be checked): "
                             "choose another path")
    if not out.parent.is_dir():
        raise UsageError(f"{out}: its folder {out.parent} does not exist; create it first")
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with files.replacing(out, mode=0o600) as tmp:  # written at 0600 from the start (mkstemp), never readable by others
        tmp.write_bytes(private)
    with files.replacing(public_path, mode=0o644) as tmp:
        tmp.write_bytes(public)
    return public_path, key_id(key.public_key())


__all__ = ["EXTRA", "SIGNED_HEAD", "PublicKeys", "Signer", "keygen", "load_public_keys", "load_signer", "verify_signed"]
