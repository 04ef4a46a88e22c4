"""Relay one WebSocket between a client (ASGI) and a server on a Unix socket (websockets).

:func:`connect` opens the upstream leg (a refused handshake is passed on to the client as is);
:func:`relay` carries text and binary frames both ways. Whoever closes first has its close code
and reason passed on to the other side; an upstream that dies without a close frame becomes
1012 (Service Restart) for the client, with the caller's reason. Granian's
``websocket.disconnect`` carries the client's close code but not its reason, so the upstream
receives the code only.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from appliance.web.upstream import CONNECT_TIMEOUT, Headers, UpstreamUnavailable, downstream_headers

log = logging.getLogger(__name__)

# Close codes an endpoint may send; the others only describe what happened.
_SENDABLE = frozenset({1000, 1001, 1002, 1003, *range(1007, 1015)}) | frozenset(range(3000, 5000))
SERVICE_RESTART = 1012
TRY_AGAIN_LATER = 1013
# The WebSocket handshake belongs to each leg; websockets writes its own.
HANDSHAKE = frozenset(
    {
        b"host",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
        b"content-length",
        b"expect",
    }
)


def _close_code(code: int | None, fallback: int) -> int:
    return code if code is not None and code in _SENDABLE else fallback


async def connect(
    scope: Scope, send: Send, socket: Path, uri: str, headers: Headers
) -> ClientConnection | None:
    """Open the upstream leg; None when the upstream refused (the client has been told).

    Raises :class:`UpstreamUnavailable` when nothing answers (the client has not been told).
    """
    try:
        return await unix_connect(
            str(socket),
            uri=uri,
            additional_headers=[
                (name.decode("latin-1"), value.decode("latin-1")) for name, value in headers
            ],
            subprotocols=[Subprotocol(p) for p in scope.get("subprotocols", ())] or None,
            user_agent_header=None,
            compression=None,
            proxy=None,
            max_size=None,
            ping_interval=None,
            open_timeout=CONNECT_TIMEOUT,
        )
    except InvalidStatus as err:
        refused = err.response
        relayed = [(k.lower().encode(), v.encode()) for k, v in refused.headers.raw_items()]
        body = bytes(refused.body or b"")
        await deny(scope, send, refused.status_code, body, downstream_headers(relayed))
        return None
    except (OSError, InvalidHandshake, TimeoutError) as err:
        raise UpstreamUnavailable(f"No WebSocket answer on {socket} ({err!r}).") from err


async def relay(
    scope: Scope, upstream: ClientConnection, receive: Receive, send: Send, lost_reason: str
) -> None:
    """Relay frames both ways until one side closes, then pass its close on to the other."""
    upstream_side = asyncio.ensure_future(_upstream_to_client(upstream, send, lost_reason))
    client_side = asyncio.ensure_future(_client_to_upstream(receive, upstream))
    try:
        await asyncio.wait((upstream_side, client_side), return_when=asyncio.FIRST_COMPLETED)
        closed = client_side.result() if client_side.done() else None
        if closed is not None:
            upstream_side.cancel()
            log.debug("[web] op=ws-closed path=%s by=client code=%s", scope["path"], closed[0])
            await upstream.close(*closed)
        else:
            await upstream_side
    finally:
        upstream_side.cancel()
        client_side.cancel()
        await asyncio.wait((upstream_side, client_side))


async def _client_to_upstream(
    receive: Receive, upstream: ClientConnection
) -> tuple[int, str] | None:
    """Forward client frames; the client's close (code, reason), or None if upstream closed."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            code = message.get("code")
            return _close_code(code, 1001 if code == 1006 else 1000), message.get("reason") or ""
        data = message.get("text")
        if data is None:
            data = message.get("bytes")
        if data is None:
            continue
        try:
            await upstream.send(data)
        except ConnectionClosed:
            return None


async def _upstream_to_client(upstream: ClientConnection, send: Send, lost_reason: str) -> None:
    """Forward upstream frames, then its close (1012 if it died without one)."""
    try:
        async for message in upstream:
            if isinstance(message, str):
                await send({"type": "websocket.send", "text": message})
            else:
                await send({"type": "websocket.send", "bytes": message})
    except ConnectionClosed:
        pass
    if upstream.close_code in (None, 1006):
        code, reason = SERVICE_RESTART, lost_reason
    else:
        code, reason = _close_code(upstream.close_code, 1000), upstream.close_reason or ""
    await send({"type": "websocket.close", "code": code, "reason": reason})


async def unavailable(send: Send, reason: str) -> None:
    """Accept the handshake and close at once with 1013 (Try Again Later) and ``reason``."""
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": TRY_AGAIN_LATER, "reason": reason})


async def deny(
    scope: Scope, send: Send, status: int, body: bytes, headers: Headers | None = None
) -> None:
    """Refuse a WebSocket handshake with an HTTP status (close 1008 if the server can't)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    given = headers or [(b"content-type", b"text/plain; charset=utf-8")]
    headers = [(name, value) for name, value in given if name != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})
