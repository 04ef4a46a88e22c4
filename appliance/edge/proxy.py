"""Proxy HTTP, Server-Sent Events and WebSockets from the edge to the app's Unix socket.

Bodies stream both ways without buffering (event streams are cut only at event boundaries, so
the edge can end them with a whole ``restarting`` event). A client that leaves closes the
upstream request. Which headers cross is :mod:`appliance.edge.headers`; the WebSocket frame
relay is :mod:`appliance.edge.websocket`. While the app is down the edge answers for it
(:mod:`appliance.edge.restarting`).

Errors::

    EdgeError
    └── AppUnavailable    the app's socket is missing, refuses, or the app died mid-request
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import httpx
from starlette.types import Message, Receive, Scope, Send
from websockets.asyncio.client import unix_connect
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from appliance.edge import restarting
from appliance.edge.headers import downstream_headers, target, upstream_headers
from appliance.edge.network import Classification, same_origin
from appliance.edge.websocket import TRY_AGAIN_LATER, deny, relay
from appliance.logs import kv

log = logging.getLogger(__name__)

# The WebSocket handshake belongs to each leg; websockets writes its own.
WS_HANDSHAKE = frozenset(
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
SMALL_BODY = 64 * 1024  # a response this small with a Content-Length is sent in one piece
CONNECT_TIMEOUT = 5.0
# Streams (SSE, downloads, uploads) may be quiet or slow for as long as they like.
TIMEOUTS = {"connect": CONNECT_TIMEOUT, "read": None, "write": None, "pool": None}
_HOST = re.compile(r"(?:[A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
_EVENT_END = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")


class EdgeError(Exception):
    """The edge could not complete a request."""


class AppUnavailable(EdgeError):
    """The app is not answering on its Unix socket (restarting, stopped or crashed)."""


class _ClientGone(Exception):
    """The client disconnected before its request body was complete."""


@functools.lru_cache(maxsize=1024)  # parsing a URL costs more than the rest of the request
def _upstream_url(path_and_query: str) -> httpx.URL:
    return httpx.URL("http://app" + path_and_query)


def _event_end(buffer: bytes) -> int:
    """Offset just past the last complete event in an event-stream buffer (0: none)."""
    last = 0
    for match in _EVENT_END.finditer(buffer):
        last = match.end()
    return last


async def _request_body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body", False):
            return


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _unless_client_leaves(work: Awaitable[None], receive: Receive) -> bool:
    """Run ``work`` until it ends or the client disconnects; True if the client left first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()
        watch.cancel()
        await asyncio.wait((task, watch))
    if task.cancelled():
        return True
    task.result()  # re-raise what went wrong in the work itself
    return False


class Proxy:
    """One pooled HTTP transport to the app's socket, plus per-request WebSocket legs."""

    def __init__(self, socket: Path, brand: str = "Maxy") -> None:
        self.socket = socket
        self.brand = brand
        self.app_is_up = True
        # The transport is the pool, used without an AsyncClient around it: a proxy must not
        # keep cookies, follow redirects or read proxy settings, and skipping those layers
        # saves a tenth of a millisecond on every request.
        self.transport = httpx.AsyncHTTPTransport(
            uds=str(socket),
            retries=0,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self.transport.aclose()

    async def http(self, scope: Scope, receive: Receive, send: Send, who: Classification) -> None:
        """Proxy one HTTP request, streaming both bodies."""
        try:
            response = await self._open(scope, receive, who)
            try:
                await self._respond(scope, receive, send, response)
            finally:
                await response.aclose()
        except AppUnavailable as err:
            self._app_down(scope["path"], err)
            await self._restarting(scope, send)
            return
        except _ClientGone:
            log.debug("[edge] op=client-gone path=%s stage=request-body", scope["path"])
            return
        self._app_up()
        log.debug(
            "[edge] op=proxy method=%s path=%s status=%s network=%s",
            scope["method"],
            scope["path"],
            response.status_code,
            who.network,
        )

    async def _open(self, scope: Scope, receive: Receive, who: Classification) -> httpx.Response:
        """Send the request upstream and return its response, body not yet read."""
        names = {name for name, _ in scope["headers"]}
        has_body = b"content-length" in names or b"transfer-encoding" in names
        request = httpx.Request(
            scope["method"],
            _upstream_url(target(scope)),
            headers=upstream_headers(scope, who, skip=frozenset({b"expect"})),
            content=_request_body(receive) if has_body else None,
            extensions={"timeout": TIMEOUTS},
        )
        try:
            return await self.transport.handle_async_request(request)
        except httpx.TransportError as err:
            raise AppUnavailable(f"The app did not answer on {self.socket} ({err!r}).") from err

    def _app_down(self, path: str, why: Exception) -> None:
        """Log the first failure of an outage as a warning, the rest at debug."""
        level = logging.WARNING if self.app_is_up else logging.DEBUG
        self.app_is_up = False
        if log.isEnabledFor(level):
            log.log(level, "[edge] %s", kv(op="app-unavailable", path=path, reason=why))

    def _app_up(self) -> None:
        if not self.app_is_up:
            self.app_is_up = True
            log.info("[edge] op=app-available socket=%s", self.socket)

    async def _respond(
        self, scope: Scope, receive: Receive, send: Send, response: httpx.Response
    ) -> None:
        content_type = response.headers.get("content-type", "")
        sse = content_type.startswith("text/event-stream")
        length = response.headers.get("content-length", "")
        if not sse and length.isdigit() and int(length) <= SMALL_BODY:
            try:
                body = await response.aread()
            except httpx.TransportError as err:
                raise AppUnavailable(f"The app went away mid-response ({err!r}).") from err
            await send(self._start(response, keep_length=True))
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await send(self._start(response, keep_length=not sse))
        if await _unless_client_leaves(self._pump(scope, response, send, sse), receive):
            log.debug("[edge] op=client-gone path=%s sse=%s", scope["path"], sse)

    @staticmethod
    def _start(response: httpx.Response, keep_length: bool) -> Message:
        return {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": downstream_headers(response.headers.raw, keep_length=keep_length),
        }

    async def _pump(self, scope: Scope, response: httpx.Response, send: Send, sse: bool) -> None:
        pending = b""
        try:
            async for chunk in response.aiter_raw():
                if sse:
                    pending += chunk
                    cut = _event_end(pending)
                    if not cut:
                        continue
                    chunk, pending = pending[:cut], pending[cut:]
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.TransportError as err:
            log.warning("[edge] %s", kv(op="upstream-lost", path=scope["path"], sse=sse, error=err))
            if sse:
                await send(
                    {"type": "http.response.body", "body": restarting.SSE_EVENT, "more_body": False}
                )
            # A plain body is left unfinished on purpose: the client sees a truncated
            # transfer rather than a short response that looks complete.
            return
        await send({"type": "http.response.body", "body": pending, "more_body": False})

    async def _restarting(self, scope: Scope, send: Send) -> None:
        """Answer 503 + Retry-After because the app is down."""
        accept = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"accept"), ""
        )
        headers, body = restarting.answer(scope["method"], scope["path"], accept, self.brand)
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def websocket(
        self, scope: Scope, receive: Receive, send: Send, who: Classification
    ) -> None:
        """Proxy one WebSocket: text and binary frames both ways, then the close."""
        if (await receive())["type"] != "websocket.connect":
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"app").decode("latin-1")
        if not _HOST.fullmatch(host):  # it becomes part of the upstream URI: nothing else fits
            await deny(scope, send, 400, b"Bad Host header.")
            return
        origin = headers[b"origin"].decode("latin-1") if b"origin" in headers else None
        if origin is not None and not same_origin(origin, host):
            log.info("[edge] %s", kv(op="ws-refused", path=scope["path"], origin=origin, host=host))
            await deny(scope, send, 403, b"Cross-origin WebSocket refused.")
            return
        try:
            upstream = await unix_connect(
                str(self.socket),
                uri="ws://" + host + target(scope),
                additional_headers=[
                    (name.decode("latin-1"), value.decode("latin-1"))
                    for name, value in upstream_headers(scope, who, skip=WS_HANDSHAKE)
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
            return
        except (OSError, InvalidHandshake, TimeoutError) as err:
            self._app_down(scope["path"], err)
            await send({"type": "websocket.accept"})
            await send(
                {"type": "websocket.close", "code": TRY_AGAIN_LATER, "reason": restarting.CODE}
            )
            return
        self._app_up()
        async with upstream:
            await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
            await relay(scope, upstream, receive, send)
