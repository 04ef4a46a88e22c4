"""Security headers on every response: one table, added by the app and completed by the edge.

Every answer carries ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin``,
``X-Frame-Options: DENY`` and a Content-Security-Policy with ``frame-ancestors 'none'`` (nothing
frames Maxy's pages). Scripts are ``'self'`` only everywhere: no page has an inline script or an
inline event handler. The CSP's styles depend on the page:

- ``STRICT``: the public pages (agents, /bot, login) — styles from ``'self'`` only.
- ``ADMIN``: the admin shell, Settings, onboarding — xterm.js and cytoscape.js insert ``<style>``
  elements at run time, so ``style-src`` allows inline styles there (scripts stay ``'self'``).
- ``SITES``: the owner's published tree (/sites/*) shares an origin with the admin UI, so it
  runs no script at all (``script-src 'none'``); its pages may load images and styles from
  anywhere on https.

The app picks a policy per request (:class:`SecurityHeaders`); the edge fills in whatever an
answer lacks (its own answers, the restarting page) with :func:`add_missing`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from appliance.web.upstream import Headers

_COMMON = (
    "default-src 'self'; script-src 'self'; img-src 'self' data: blob:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
STRICT = f"{_COMMON}; style-src 'self'"
ADMIN = f"{_COMMON}; style-src 'self' 'unsafe-inline'"
SITES = (
    "default-src 'self' https: data:; script-src 'none'; object-src 'none'; frame-ancestors 'none'"
)

CSP = b"content-security-policy"
BASE: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
)


def style_hash(css: str) -> str:
    """The CSP source that allows exactly this inline ``<style>`` body (``'sha256-…'``)."""
    digest = hashlib.sha256(css.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def add_missing(headers: Headers, policy: str = STRICT) -> Headers:
    """``headers`` plus every security header it does not already carry."""
    present = {name.lower() for name, _ in headers}
    extra = [(name, value) for name, value in BASE if name not in present]
    if CSP not in present:
        extra.append((CSP, policy.encode()))
    return headers + extra


def on_start(send: Send, policy: str) -> Send:
    """``send`` adding the security headers to the response's start message."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": add_missing(list(message.get("headers", [])), policy)}
        await send(message)

    return wrapped


class SecurityHeaders:
    """ASGI middleware: every HTTP response gets the headers, with the policy ``choose`` names."""

    def __init__(self, app: ASGIApp, choose: Callable[[Scope], str]) -> None:
        self.app = app
        self.choose = choose

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, on_start(send, self.choose(scope)))
