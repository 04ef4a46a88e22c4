"""Signed values: the one HMAC-SHA256 construction behind login cookies, CSRF tokens and the
public visitor cookie.

Each use has its own domain prefix (``maxy-session-v1``, ``csrf:``, ``maxy-visitor-v1``), so a
value signed for one can never pass as another; checks compare in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def mac(key: bytes, domain: bytes, payload: bytes) -> bytes:
    """The HMAC-SHA256 of ``payload`` under ``key``, separated by ``domain``."""
    return hmac.new(key, domain + payload, hashlib.sha256).digest()


def b64(data: bytes) -> str:
    """URL-safe base64 without padding (cookie- and header-safe)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def same(a: str | bytes, b: str | bytes) -> bool:
    """Whether two signatures are equal, in constant time."""
    left = a.encode("ascii") if isinstance(a, str) else a
    right = b.encode("ascii") if isinstance(b, str) else b
    return hmac.compare_digest(left, right)
