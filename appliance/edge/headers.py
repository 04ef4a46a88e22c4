"""Which headers cross the edge, in each direction.

Hop-by-hop headers (``Connection`` and the names it lists, ``Keep-Alive``, ``Proxy-*``, ``TE``,
``Trailer``, ``Transfer-Encoding``, ``Upgrade``) stay on their hop. Host is kept. The edge alone
sets ``X-Forwarded-For/-Proto/-Host`` (a trusted proxy's chain is extended, anyone else's is
replaced) and the classification headers of :mod:`appliance.web.client`; any other ``X-Maxy-*``
header from the client is dropped except the browser's CSRF token. The hop-by-hop rules and the
response side are shared with the app's own relays (:mod:`appliance.web.upstream`).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import Scope

from appliance.edge.network import Classification
from appliance.web.client import CLIENT_IP_HEADER, HOST_ROLE_HEADER, NETWORK_HEADER
from appliance.web.upstream import Headers, hop_by_hop, stays_on_hop

# Set by the edge alone: whatever the client sent under these names is dropped.
EDGE_OWNED = frozenset(
    {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"forwarded"}
)
# X-Maxy-* headers a browser legitimately sends (the CSRF token); every other one is stripped.
CLIENT_MAXY_HEADERS = frozenset({b"x-maxy-csrf"})


def upstream_headers(
    scope: Scope, who: Classification, skip: frozenset[bytes] = frozenset()
) -> Headers:
    """The request headers the app receives."""
    raw: Sequence[tuple[bytes, bytes]] = scope["headers"]
    hop = hop_by_hop(raw) | EDGE_OWNED | skip
    headers: Headers = []
    incoming: dict[bytes, bytes] = {}
    for name, value in raw:
        name = name.lower()
        if name in EDGE_OWNED:
            incoming.setdefault(name, value)
        maxy_header = name.startswith(b"x-maxy-") and name not in CLIENT_MAXY_HEADERS
        if stays_on_hop(name, hop) or maxy_header:
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
