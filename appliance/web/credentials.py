"""Admin credentials: the LAN PIN and the remote password, stored as scrypt hashes.

Both live in ``keys_dir`` (mode 0600 files in a 0700 directory, written atomically):

    admin-pin          the PIN (4 to 12 digits) that opens the admin UI on the home network
    remote-password    the password (10 characters or more) for the tunnel's admin hostname

Each file holds one line ``scrypt$<n>$<r>$<p>$<salt>$<hash>`` (base64url): the parameters travel
with the hash, so they can be raised later without invalidating what is stored. Checks compare
with :func:`hmac.compare_digest`.

Errors::

    CredentialError
    ├── InvalidCredential   (the PIN or password does not meet the rules; ``code`` says which)
    └── AlreadySet          (the PIN can only be set once through onboarding)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from appliance.core.fsio import write_secret

log = logging.getLogger(__name__)

PIN_FILE = "admin-pin"
REMOTE_PASSWORD_FILE = "remote-password"  # noqa: S105 -- a file name, not a password
PIN_DIGITS = (4, 12)
REMOTE_PASSWORD_MIN = 10
#: Longer input is refused before hashing (a form cannot hold a book).
SECRET_MAX_CHARS = 1024

# scrypt cost: 16 MiB and tens of milliseconds on a Raspberry Pi 4, per attempt.
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SCRYPT_DKLEN = 32
SALT_BYTES = 16
# Stored parameters are honoured up to this cost, so a damaged file cannot eat the memory.
_MAX_N = 2**20
_MAXMEM = 256 * 1024 * 1024

_PIN = re.compile(r"[0-9]+")


class CredentialError(Exception):
    """A credential cannot be set or used."""


class InvalidCredential(CredentialError):
    """The PIN or password does not meet the rules."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class AlreadySet(CredentialError):
    """The PIN is already set; it is changed in Settings, not through onboarding."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int, dklen: int) -> bytes:
    return hashlib.scrypt(
        secret.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=dklen, maxmem=_MAXMEM
    )


def hash_secret(secret: str) -> str:
    """Return the stored form of ``secret``: scrypt with a fresh salt and its parameters."""
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P, SCRYPT_DKLEN)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def check_secret(secret: str, stored: str) -> bool:
    """Return whether ``secret`` matches the stored form (False for anything unreadable)."""
    fields = stored.strip().split("$")
    if len(fields) != 6 or fields[0] != "scrypt" or len(secret) > SECRET_MAX_CHARS:
        return False
    try:
        n, r, p = int(fields[1]), int(fields[2]), int(fields[3])
        salt, expected = _unb64(fields[4]), _unb64(fields[5])
    except (ValueError, binascii.Error):
        return False
    if not (1 < n <= _MAX_N and n & (n - 1) == 0 and 0 < r <= 32 and 0 < p <= 16):
        return False
    if not 16 <= len(expected) <= 64:
        return False
    return hmac.compare_digest(_scrypt(secret, salt, n, r, p, len(expected)), expected)


def validate_pin(pin: str, confirm: str | None = None) -> None:
    """Raise :class:`InvalidCredential` unless ``pin`` is 4 to 12 digits equal to ``confirm``."""
    low, high = PIN_DIGITS
    if not (_PIN.fullmatch(pin) and pin.isascii() and low <= len(pin) <= high):
        raise InvalidCredential("invalid-pin", f"The PIN must be {low} to {high} digits.")
    if confirm is not None and not hmac.compare_digest(pin.encode(), confirm.encode()):
        raise InvalidCredential("pin-mismatch", "The two PINs differ. Type the same PIN twice.")


def validate_remote_password(password: str) -> None:
    """Raise :class:`InvalidCredential` unless ``password`` is long enough (and not absurd)."""
    if len(password) < REMOTE_PASSWORD_MIN:
        raise InvalidCredential(
            "invalid-password",
            f"The remote password must be at least {REMOTE_PASSWORD_MIN} characters.",
        )
    if len(password) > SECRET_MAX_CHARS:
        raise InvalidCredential(
            "invalid-password", f"The remote password must be under {SECRET_MAX_CHARS} characters."
        )


@dataclass(frozen=True)
class Credentials:
    """The admin PIN and remote password kept in ``keys_dir``."""

    keys_dir: Path

    @property
    def pin_path(self) -> Path:
        """File holding the PIN's hash."""
        return self.keys_dir / PIN_FILE

    @property
    def remote_password_path(self) -> Path:
        """File holding the remote password's hash."""
        return self.keys_dir / REMOTE_PASSWORD_FILE

    def has_pin(self) -> bool:
        """Return whether the admin PIN has been set."""
        return self.pin_path.is_file()

    def has_remote_password(self) -> bool:
        """Return whether a remote password has been set."""
        return self.remote_password_path.is_file()

    def set_pin(self, pin: str, *, first: bool = False) -> None:
        """Store the PIN; with ``first``, refuse (:class:`AlreadySet`) if one exists."""
        validate_pin(pin)
        data = (hash_secret(pin) + "\n").encode("ascii")
        if not write_secret(self.pin_path, data, exclusive=first):
            raise AlreadySet("The admin PIN is already set. Log in, then change it in Settings.")
        log.info("[auth] op=pin-set first=%s", first)

    def set_remote_password(self, password: str) -> None:
        """Store (or replace) the remote password."""
        validate_remote_password(password)
        write_secret(self.remote_password_path, (hash_secret(password) + "\n").encode("ascii"))
        log.info("[auth] op=remote-password-set")

    def check_pin(self, pin: str) -> bool:
        """Return whether ``pin`` is the admin PIN (False while none is set)."""
        return self._check(self.pin_path, pin)

    def check_remote_password(self, password: str) -> bool:
        """Return whether ``password`` is the remote password (False while none is set)."""
        return self._check(self.remote_password_path, password)

    @staticmethod
    def _check(path: Path, secret: str) -> bool:
        try:
            stored = path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            return False
        return check_secret(secret, stored)
