"""Update signing keys: generate them, load the ones this device trusts, rotate to the next one.

A key is an ed25519 key pair. The private half stays with whoever builds releases (PEM, PKCS#8,
mode 0600); the public half (``<name>.pub``, PEM SubjectPublicKeyInfo) is what a device trusts.
A key's id is the first 16 hex digits of the SHA-256 of its 32 raw public bytes; manifests name
the key that signed them by this id.

Trust comes from two directories, read at every use:

- the image's trust dir (``MAXY_OTA_TRUST_DIR``, default ``/etc/maxy/ota/trust``): the roots the
  image was built with, read-only on the device;
- the rotated keys dir (``<data_dir>/keys/ota``): keys introduced later by a bundle's
  ``next_key`` — signed by a key already trusted — added only after that bundle's trial boot
  was committed, so a failed update cannot leave a new key behind.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from appliance.core.fsio import sha256_hex, write_atomic, write_secret
from appliance.ota.errors import SignatureError

log = logging.getLogger(__name__)

PUBLIC_SUFFIX = ".pub"


def raw_public(key: Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of a public key."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """The id manifests use for a public key."""
    return sha256_hex(raw_public(key))[:16]


def public_pem(key: Ed25519PublicKey) -> str:
    """A public key as PEM text."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def parse_public_pem(text: str | bytes, origin: str) -> Ed25519PublicKey:
    """Parse a PEM public key; :class:`SignatureError` naming ``origin`` if it is not ed25519."""
    data = text.encode("ascii", "replace") if isinstance(text, str) else text
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as err:
        raise SignatureError(f"{origin} is not a PEM public key ({err}).") from err
    if not isinstance(key, Ed25519PublicKey):
        raise SignatureError(f"{origin} is not an ed25519 public key.")
    return key


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """Read a PEM ed25519 private key (as written by :func:`generate_key`)."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise SignatureError(
            f"{path} is not a readable unencrypted PEM private key ({err}). "
            "Make one with `maxy ota keygen PATH`."
        ) from err
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError(f"{path} is not an ed25519 private key; use `maxy ota keygen`.")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """Read a public key from a ``.pub`` PEM file, or derive it from a private key file."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise SignatureError(f"cannot read the key {path} ({err.strerror}).") from err
    if b"PRIVATE KEY" in data:
        return load_private_key(path).public_key()
    return parse_public_pem(data, str(path))


def generate_key(private_out: Path) -> Path:
    """Write a new PEM private key (mode 0600) and its ``.pub`` next to it; return the .pub."""
    private = Ed25519PrivateKey.generate()
    private_out.parent.mkdir(parents=True, exist_ok=True)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    if not write_secret(private_out, pem, exclusive=True, private_dir=False):
        raise FileExistsError(errno.EEXIST, "a key already exists there", str(private_out))
    stem = private_out.with_suffix("") if private_out.suffix in (".pem", ".key") else private_out
    public_out = stem.with_name(stem.name + PUBLIC_SUFFIX)
    write_atomic(public_out, public_pem(private.public_key()))
    log.info("[ota] op=keygen key_id=%s public=%s", key_id(private.public_key()), public_out)
    return public_out


@dataclass
class TrustStore:
    """The public keys a device accepts update signatures from, by key id."""

    keys: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)
    dirs: tuple[Path, ...] = ()

    @classmethod
    def load(cls, dirs: Path | Iterable[Path]) -> TrustStore:
        """Read every ``*.pub`` in ``dirs`` (a missing directory holds no keys)."""
        store = cls(dirs=(dirs,) if isinstance(dirs, Path) else tuple(dirs))
        for directory in store.dirs:
            for path in sorted(directory.glob("*" + PUBLIC_SUFFIX)) if directory.is_dir() else ():
                try:
                    key = parse_public_pem(path.read_bytes(), str(path))
                except (OSError, SignatureError) as err:
                    log.warning("[ota] op=trust-load skipped=%s reason=%r", path, str(err))
                    continue
                store.add(key, path)
        return store

    def add(self, key: Ed25519PublicKey, source: Path) -> str:
        """Trust ``key`` (read from ``source``); return its id."""
        ident = key_id(key)
        self.keys.setdefault(ident, key)
        self.sources.setdefault(ident, source)
        return ident

    def __contains__(self, ident: object) -> bool:
        return ident in self.keys

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys)

    def describe_dirs(self) -> str:
        """The directories keys were read from, for messages."""
        return ", ".join(str(d) for d in self.dirs) or "no directory"

    def signer_of(self, signature: bytes, data: bytes) -> str | None:
        """The id of the trusted key whose signature over ``data`` this is, if any."""
        for ident, key in self.keys.items():
            try:
                key.verify(signature, data)
            except InvalidSignature:
                continue
            return ident
        return None

    def verify(self, ident: str, signature: bytes, data: bytes, what: str) -> None:
        """Check ``signature`` over ``data`` by the trusted key ``ident``, or raise."""
        key = self.keys.get(ident)
        if key is None:
            raise SignatureError(
                f"{what} is signed by key {ident}, which this device does not trust (from "
                f"{self.describe_dirs()}). Install that key's .pub in MAXY_OTA_TRUST_DIR."
            )
        try:
            key.verify(signature, data)
        except InvalidSignature as err:
            raise SignatureError(
                f"{what} has an invalid signature for key {ident}: it was changed after "
                "signing or is damaged. Download the bundle again."
            ) from err


def install_rotated_key(keys_dir: Path, public_key_pem: str) -> Path:
    """Add a committed bundle's next key to the rotated keys dir (atomically); return its path."""
    key = parse_public_pem(public_key_pem, "the next key")
    keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = keys_dir / f"{key_id(key)}{PUBLIC_SUFFIX}"
    if target.is_file() and target.read_text() == public_pem(key):
        return target
    write_atomic(target, public_pem(key))
    log.info("[ota] op=key-rotated key_id=%s path=%s", key_id(key), target)
    return target
