"""Cross-site request forgery defences for the admin UI.

* State-changing admin requests carry ``X-Maxy-CSRF``: an HMAC of the session id under the cookie
  key (a page learns it from ``GET /api/admin/session`` or ``<meta name="maxy-csrf">``). A site
  elsewhere cannot read it, so it cannot forge the header.
* Login and PIN setup happen before there is a session: they need a JSON body (a cross-site form
  cannot send one without a CORS preflight we never grant) and an ``Origin`` (or ``Referer``)
  naming this host when the browser sends one.
* WebSocket upgrades to admin paths need an ``Origin`` naming this host: browsers send cookies
  with cross-site WebSocket handshakes and the same-origin policy does not apply to them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection

from appliance.web import signing
from appliance.web.client import client_of

CSRF_HEADER = "x-maxy-csrf"
_DOMAIN = b"csrf:"
_TOKEN_BYTES = 24
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def token(key: bytes, session_id: str) -> str:
    """Return the CSRF token of a session."""
    return signing.b64(signing.mac(key, _DOMAIN, session_id.encode("ascii"))[:_TOKEN_BYTES])


def check(key: bytes, session_id: str, presented: str | None) -> bool:
    """Return whether ``presented`` is the session's CSRF token (constant-time)."""
    if not presented or len(presented) > 128 or not presented.isascii():
        return False
    return signing.same(presented, token(key, session_id))


def _host_port(netloc: str) -> tuple[str, int | None] | None:
    try:
        parts = urlsplit("//" + netloc)
        return (parts.hostname or "").lower(), parts.port
    except ValueError:
        return None


def _origin_of(headers: Headers) -> str | None:
    """The scheme://host[:port] the browser says the request comes from, if it says."""
    origin = headers.get("origin")
    if origin is not None:
        return origin.strip()
    referer = headers.get("referer")
    if referer is None:
        return None
    try:
        parts = urlsplit(referer.strip())
    except ValueError:
        return "null"
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else "null"


def origin_matches_host(headers: Headers, *, required: bool) -> bool:
    """Return whether the Origin (or Referer) names the Host; if neither is sent, ``not required``.

    Host names must be equal; ports must be equal when the Host header names one (the edge may
    sit behind a TLS tunnel that drops the default port).
    """
    origin = _origin_of(headers)
    if origin is None:
        return not required
    host_header = headers.get("host")
    if not host_header or origin == "null":
        return False
    try:
        parts = urlsplit(origin)
        origin_host, origin_port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS or not origin_host:
        return False
    host = _host_port(host_header)
    if host is None or host[0] != origin_host:
        return False
    if host[1] is None:
        return True
    return host[1] == (origin_port or _DEFAULT_PORTS[parts.scheme])


def websocket_origin_ok(conn: HTTPConnection) -> bool:
    """Return whether a WebSocket upgrade to an admin path may proceed (Origin must name Host).

    A local process on the app's socket (no edge headers) may omit Origin; a browser never does.
    """
    local = client_of(conn).via == "socket"
    return origin_matches_host(conn.headers, required=not local)


def is_json(headers: Headers) -> bool:
    """Return whether the request body is declared as JSON."""
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json"
