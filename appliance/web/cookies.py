"""The login cookie: an HMAC-SHA256 signed session, shared by the edge and the app.

The value is ``<payload>.<mac>``, both base64url without padding. The payload is
``v1|<session id>|<l or e>|<issued at>|<expires at>|<generation>`` (seconds since the epoch);
the MAC covers a domain-separated copy of it, so no other HMAC made with the same key (the CSRF
token) can pass as a cookie. The key lives at ``settings.cookie_key_path`` (32 random bytes,
created mode 0600 on first use) so that restarts and updates log nobody out.

A cookie is bound to the network it was issued on: a LAN (PIN) cookie is not valid on the
external (remote password) path and vice versa. The generation, kept in ``keys_dir``, is bumped by
"New session": every cookie signed with an older generation is then stale.

:func:`verify` never raises on a bad value: truncated, forged, re-signed with another key,
expired, for the other network, stale or oversized cookies all return ``None``.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from appliance.core.fsio import write_secret
from appliance.web import signing

log = logging.getLogger(__name__)

COOKIE_NAME = "maxy_session"
KEY_BYTES = 32
#: How long a login lasts on the LAN (PIN) path: a month, the appliance is at home.
LAN_LIFETIME_S = 30 * 24 * 3600
#: How long a login lasts through the tunnel (remote password): half a day.
EXTERNAL_LIFETIME_S = 12 * 3600
#: Longer values are refused before any decoding (a real cookie is about 110 characters).
MAX_COOKIE_CHARS = 400
GENERATION_FILE = "session-generation"

_VERSION = "v1"
_MAC_DOMAIN = b"maxy-session-v1\x00"
_NETWORK_CODES = {"lan": "l", "external": "e"}
_NETWORKS = {code: name for name, code in _NETWORK_CODES.items()}
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
_B64 = re.compile(r"[A-Za-z0-9_-]+")
_DIGITS = re.compile(r"[0-9]{1,12}")


class CookieKeyError(Exception):
    """The cookie key file exists but cannot be used."""


@dataclass(frozen=True)
class Session:
    """One login: who holds the cookie is logged in on ``network`` until ``expires_at``."""

    id: str
    network: str
    issued_at: int
    expires_at: int
    generation: int


def new_session_id() -> str:
    """Return a fresh random session id."""
    return secrets.token_urlsafe(18)


def lifetime(network: str) -> int:
    """Return how many seconds a login on ``network`` lasts."""
    return LAN_LIFETIME_S if network == "lan" else EXTERNAL_LIFETIME_S


def issue(network: str, generation: int, *, now: float | None = None) -> Session:
    """Return a new session for ``network`` starting now."""
    issued = int(time.time() if now is None else now)
    return Session(
        id=new_session_id(),
        network=network,
        issued_at=issued,
        expires_at=issued + lifetime(network),
        generation=generation,
    )


def _b64decode(text: str) -> bytes:
    if not _B64.fullmatch(text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(key: bytes, session: Session) -> str:
    """Return the cookie value carrying ``session``."""
    if not _SESSION_ID.fullmatch(session.id):
        raise ValueError("a session id is 16 to 64 base64url characters")
    fields = (
        _VERSION,
        session.id,
        _NETWORK_CODES[session.network],
        str(session.issued_at),
        str(session.expires_at),
        str(session.generation),
    )
    payload = "|".join(fields).encode("ascii")
    return f"{signing.b64(payload)}.{signing.b64(signing.mac(key, _MAC_DOMAIN, payload))}"


def _parse(payload: bytes) -> Session | None:
    try:
        fields = payload.decode("ascii").split("|")
    except UnicodeDecodeError:
        return None
    if len(fields) != 6 or fields[0] != _VERSION:
        return None
    _, session_id, network, issued, expires, generation = fields
    if not _SESSION_ID.fullmatch(session_id) or network not in _NETWORKS:
        return None
    if not all(_DIGITS.fullmatch(n) for n in (issued, expires, generation)):
        return None
    return Session(session_id, _NETWORKS[network], int(issued), int(expires), int(generation))


def verify(
    key: bytes,
    value: str | None,
    network: str,
    *,
    generation: int | None = None,
    now: float | None = None,
) -> Session | None:
    """Return the session a cookie value carries if it is genuine and valid here, else None.

    ``generation`` (when given) must equal the session's; leave it out to check the generation
    yourself and tell a stale cookie ("session-rotated") from a missing one.
    """
    if not value or len(value) > MAX_COOKIE_CHARS or value.count(".") != 1:
        return None
    payload_text, mac_text = value.split(".")
    try:
        payload = _b64decode(payload_text)
        mac = _b64decode(mac_text)
    except (ValueError, binascii.Error):
        return None
    # Compare before parsing: nothing about an unsigned payload is looked at.
    if not signing.same(mac, signing.mac(key, _MAC_DOMAIN, payload)):
        return None
    session = _parse(payload)
    if session is None or session.network != network:
        return None
    moment = time.time() if now is None else now
    if not session.issued_at <= session.expires_at or moment >= session.expires_at:
        return None
    if generation is not None and session.generation != generation:
        return None
    return session


def load_key(path: Path) -> bytes:
    """Return the cookie HMAC key, creating 32 random bytes (mode 0600) on first use."""
    if not path.exists() and write_secret(path, secrets.token_bytes(KEY_BYTES), exclusive=True):
        log.info("[auth] op=cookie-key-created path=%s", path)
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise CookieKeyError(
            f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte cookie key. Delete it and "
            "restart Maxy to make a new one (everyone will have to log in again)."
        )
    return key


def read_generation(keys_dir: Path) -> int:
    """Return the current session generation (0 until the first "New session")."""
    try:
        text = (keys_dir / GENERATION_FILE).read_text().strip()
    except FileNotFoundError:
        return 0
    return int(text) if _DIGITS.fullmatch(text) else 0


def bump_generation(keys_dir: Path) -> int:
    """Increase the session generation by one, atomically; return the new value."""
    value = read_generation(keys_dir) + 1
    write_secret(keys_dir / GENERATION_FILE, f"{value}\n".encode())
    log.info("[auth] op=generation-bumped generation=%s", value)
    return value
