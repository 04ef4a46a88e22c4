"""Relay one WebSocket between the client (ASGI) and the app (a websockets connection).

Text and binary frames pass both ways. Whoever closes first has its close code and reason
passed on to the other side; an app that dies without a close frame becomes 1012 (Service
Restart) for the browser. Granian's ``websocket.disconnect`` carries the client's close code
but not its reason, so the app receives the code only.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from appliance.edge import restarting
from appliance.edge.headers import Headers

log = logging.getLogger(__name__)

# Close codes an endpoint may send; the others only describe what happened.
_SENDABLE = frozenset({1000, 1001, 1002, 1003, *range(1007, 1015)}) | frozenset(range(3000, 5000))
SERVICE_RESTART = 1012
TRY_AGAIN_LATER = 1013


def _close_code(code: int | None, fallback: int) -> int:
    return code if code is not None and code in _SENDABLE else fallback


async def relay(scope: Scope, upstream: ClientConnection, receive: Receive, send: Send) -> None:
    """Relay frames both ways until one side closes, then pass its close on to the other."""
    app_side = asyncio.ensure_future(_app_to_client(upstream, send))
    client_side = asyncio.ensure_future(_client_to_app(receive, upstream))
    try:
        await asyncio.wait((app_side, client_side), return_when=asyncio.FIRST_COMPLETED)
        closed = client_side.result() if client_side.done() else None
        if closed is not None:
            app_side.cancel()
            log.debug("[edge] op=ws-closed path=%s by=client code=%s", scope["path"], closed[0])
            await upstream.close(*closed)
        else:
            await app_side
    finally:
        app_side.cancel()
        client_side.cancel()
        await asyncio.wait((app_side, client_side))


async def _client_to_app(receive: Receive, upstream: ClientConnection) -> tuple[int, str] | None:
    """Forward client frames; the client's close (code, reason), or None if the app closed."""
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


async def _app_to_client(upstream: ClientConnection, send: Send) -> None:
    """Forward app frames, then the app's close (1012 if the app died without one)."""
    try:
        async for message in upstream:
            if isinstance(message, str):
                await send({"type": "websocket.send", "text": message})
            else:
                await send({"type": "websocket.send", "bytes": message})
    except ConnectionClosed:
        pass
    if upstream.close_code in (None, 1006):
        code, reason = SERVICE_RESTART, restarting.CODE
    else:
        code, reason = _close_code(upstream.close_code, 1000), upstream.close_reason or ""
    await send({"type": "websocket.close", "code": code, "reason": reason})


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
