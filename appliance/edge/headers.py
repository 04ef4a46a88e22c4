"""Which headers cross the edge, in each direction.

Hop-by-hop headers (``Connection`` and the names it lists, ``Keep-Alive``, ``Proxy-*``, ``TE``,
``Trailer``, ``Transfer-Encoding``, ``Upgrade``) stay on their hop. Host is kept. The edge alone
sets ``X-Forwarded-For/-Proto/-Host`` (a trusted proxy's chain is extended, anyone else's is
replaced) and the classification headers of :mod:`appliance.web.client`; any other ``X-Maxy-*``
header from the client is dropped except the browser's CSRF token.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Sequence

from starlette.types import Scope

from appliance.edge.network import Classification
from appliance.web.client import CLIENT_IP_HEADER, HOST_ROLE_HEADER, NETWORK_HEADER

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)
# Set by the edge alone: whatever the client sent under these names is dropped.
EDGE_OWNED = frozenset(
    {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"forwarded"}
)
# X-Maxy-* headers a browser legitimately sends (the CSRF token); every other one is stripped.
CLIENT_MAXY_HEADERS = frozenset({b"x-maxy-csrf"})
_URL_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))


def _hop_by_hop(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Names that must not cross this hop: the fixed set plus those Connection lists."""
    listed = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    return HOP_BY_HOP | frozenset(listed)


def _drop(name: bytes, hop: frozenset[bytes]) -> bool:
    return name in hop or name.startswith(b"proxy-")


def upstream_headers(
    scope: Scope, who: Classification, skip: frozenset[bytes] = frozenset()
) -> Headers:
    """The request headers the app receives."""
    raw: Sequence[tuple[bytes, bytes]] = scope["headers"]
    hop = _hop_by_hop(raw) | EDGE_OWNED | skip
    headers: Headers = []
    incoming: dict[bytes, bytes] = {}
    for name, value in raw:
        name = name.lower()
        if name in EDGE_OWNED:
            incoming.setdefault(name, value)
        if _drop(name, hop) or (name.startswith(b"x-maxy-") and name not in CLIENT_MAXY_HEADERS):
            continue
        headers.append((name, value))
    peer = (scope.get("client") or ("", 0))[0].encode()
    chain = incoming.get(b"x-forwarded-for") if who.forwarded_trusted else None
    proto = incoming.get(b"x-forwarded-proto", b"") if who.forwarded_trusted else b""
    if proto not in (b"http", b"https"):
        proto = b"https" if scope.get("scheme") in ("https", "wss") else b"http"
    host = next((value for name, value in raw if name.lower() == b"host"), b"")
    headers += [
        (b"x-forwarded-for", chain + b", " + peer if chain else peer),
        (b"x-forwarded-proto", proto),
        (NETWORK_HEADER.encode(), who.network.encode()),
        (CLIENT_IP_HEADER.encode(), who.client_ip.encode()),
        (HOST_ROLE_HEADER.encode(), (who.host_role or "public").encode()),
    ]
    if host:
        headers.append((b"x-forwarded-host", host))
    return headers


def downstream_headers(raw: Iterable[tuple[bytes, bytes]], *, keep_length: bool = True) -> Headers:
    """The response headers the client receives."""
    items = [(name.lower(), value) for name, value in raw]
    hop = _hop_by_hop(items)
    return [
        (name, value)
        for name, value in items
        if not _drop(name, hop) and (keep_length or name != b"content-length")
    ]


def target(scope: Scope) -> str:
    """Path and query exactly as the client sent them (non-ASCII bytes escaped)."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    if query:
        raw += b"?" + query
    return urllib.parse.quote_from_bytes(raw, safe=_URL_SAFE)
