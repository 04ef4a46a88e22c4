"""Proxy HTTP, Server-Sent Events and WebSockets from the edge to the app's Unix socket.

The relaying itself (bodies streamed both ways, event streams cut at event boundaries, a client
that leaves closes the upstream request, WebSocket frames and closes) is shared with the app's
own relays: :mod:`appliance.web.upstream` and :mod:`appliance.web.wsrelay`. What is the edge's:
which headers cross (:mod:`appliance.edge.headers`), the WebSocket handshake checks
(:mod:`appliance.edge.websocket`), and answering for the app while it is down
(:mod:`appliance.edge.restarting`): 503 + Retry-After, ``event: restarting`` at the end of an
event stream the app dropped, WebSocket close 1012/1013 with reason ``app-restarting``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from starlette.types import Receive, Scope, Send

from appliance.core.logs import kv
from appliance.edge import restarting
from appliance.edge.headers import upstream_headers
from appliance.edge.network import Classification
from appliance.edge.websocket import checked_host
from appliance.web import wsrelay
from appliance.web.upstream import ClientGone, Upstream, UpstreamUnavailable, target

log = logging.getLogger(__name__)

NO_EXPECT = frozenset({b"expect"})


class Proxy:
    """One pooled HTTP transport to the app's socket, plus per-request WebSocket legs."""

    def __init__(self, socket: Path, brand: str) -> None:
        self.socket = socket
        self.brand = brand
        self.app_is_up = True
        self.upstream = Upstream(socket, name="app", area="edge")

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self.upstream.aclose()

    async def http(self, scope: Scope, receive: Receive, send: Send, who: Classification) -> None:
        """Proxy one HTTP request, streaming both bodies."""
        headers = upstream_headers(scope, who, skip=NO_EXPECT)
        try:
            status = await self.upstream.forward(
                scope, receive, send, target(scope), headers, sse_lost=restarting.SSE_EVENT
            )
        except UpstreamUnavailable as err:
            self._app_down(scope["path"], err)
            await self._restarting(scope, send)
            return
        except ClientGone:
            log.debug("[edge] op=client-gone path=%s stage=request-body", scope["path"])
            return
        self._app_up()
        log.debug(
            "[edge] op=proxy method=%s path=%s status=%s network=%s",
            scope["method"],
            scope["path"],
            status,
            who.network,
        )

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
        host = await checked_host(scope, send)
        if host is None:
            return
        headers = upstream_headers(scope, who, skip=wsrelay.HANDSHAKE)
        uri = "ws://" + host + target(scope)
        try:
            upstream = await wsrelay.connect(scope, send, self.socket, uri, headers)
        except UpstreamUnavailable as err:
            self._app_down(scope["path"], err)
            await wsrelay.unavailable(send, restarting.CODE)
            return
        if upstream is None:  # the app refused the handshake; the client has its answer
            return
        self._app_up()
        async with upstream:
            await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
            await wsrelay.relay(scope, upstream, receive, send, restarting.CODE)
