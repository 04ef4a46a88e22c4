"""The session manager, relayed to the admin UI under ``/api/admin/sessions`` and ``/claude``.

Each route forwards to ``maxy manager`` on its Unix socket (:mod:`appliance.sessions.server`) and
streams the answer back as it comes: status, body, ``Content-Type``, ``Content-Disposition`` and
``Cache-Control``; an event stream unbuffered, and a browser that leaves closes the upstream
request::

    GET    /api/admin/sessions                  GET    /sessions
    GET    /api/admin/sessions/events           GET    /events     (Last-Event-ID passed on)
    POST   /api/admin/sessions/spawn            POST   /rc-spawn   (admin sessions only)
    GET    /api/admin/sessions/{id}             GET    /{id}
    DELETE /api/admin/sessions/{id}             DELETE /{id}
    POST   /api/admin/sessions/{id}/stop        POST   /{id}/stop
    GET    /api/admin/sessions/{id}/log         GET    /{id}/log   (?follow=1, ?download=1)
    POST   /api/admin/sessions/{id}/input       POST   /{id}/input
    WS     /api/admin/sessions/{id}/terminal    WS     /{id}/terminal  (?resume= passed on)
    GET    /api/admin/claude                    GET    /claude       (connected? the sign-in)
    DELETE /api/admin/claude                    DELETE /claude       (Disconnect Claude)
    POST   /api/admin/claude/login              POST   /claude/login (Connect Claude)
    DELETE /api/admin/claude/login              DELETE /claude/login (cancel the sign-in)

Connect Claude's terminal is ``WS /api/admin/sessions/<login id>/terminal``, like a session's.

Public (toolless) sessions are never started from here. The auth middleware has already checked
the host role, the login cookie, the CSRF header and a WebSocket's Origin; of the browser's
headers only those the manager reads cross (never its Cookie or ``X-Maxy-*``). While the manager
does not answer: 503 ``manager-unavailable``, or for the terminal a close 1013 with that reason.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from appliance.app.context import AppContext
from appliance.core.logs import kv
from appliance.web import wsrelay
from appliance.web.errors import error_response
from appliance.web.upstream import ClientGone, Headers, Upstream, UpstreamUnavailable, target

log = logging.getLogger(__name__)

PREFIX = "/api/admin/sessions"
UNAVAILABLE = "manager-unavailable"
UNAVAILABLE_MESSAGE = (
    "The session manager is not running: start it with `just run` "
    "(or systemctl start maxy-manager)."
)
# The only request headers the manager is given: what it reads, nothing that identifies the
# browser's login (Cookie) or the edge's verdict (X-Maxy-*).
FORWARDED = frozenset({b"accept", b"content-type", b"content-length", b"last-event-id"})
# A session is named by its id, bridge id (or its suffix) or pid; the manager's own routes are not.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}")
MANAGER_ROUTES = frozenset(
    {"sessions", "events", "status", "healthz", "rc-spawn", "public-spawn", "claude"}
)

Target = Callable[[Scope], str | None]


def request_headers(scope: Scope) -> Headers:
    """The browser's headers that cross to the manager."""
    return [(name.lower(), value) for name, value in scope["headers"] if name.lower() in FORWARDED]


def _session_path(suffix: str = "") -> Target:
    """The manager path of one session's route, or None for a name no session can have."""

    def path(scope: Scope) -> str | None:
        token = str(scope.get("path_params", {}).get("token", ""))
        if not _TOKEN.fullmatch(token) or token in MANAGER_ROUTES:
            return None
        return f"/{token}{suffix}"

    return path


def _fixed(path: str) -> Target:
    return lambda scope: path


class ManagerRelay:
    """One pooled connection to the manager's socket, and whether it last answered."""

    def __init__(self, socket: Path) -> None:
        self.upstream = Upstream(socket, name="manager", area="app")
        self.manager_is_up = True

    def _down(self, path: str, why: Exception) -> None:
        """Log the first failure of an outage as a warning, the rest at debug."""
        level = logging.WARNING if self.manager_is_up else logging.DEBUG
        self.manager_is_up = False
        if log.isEnabledFor(level):
            log.log(level, "[app] %s", kv(op=UNAVAILABLE, path=path, reason=why))

    def _up(self) -> None:
        if not self.manager_is_up:
            self.manager_is_up = True
            log.info("[app] op=manager-available socket=%s", self.upstream.socket)

    async def http(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        """Relay one request to ``path`` on the manager (the query string is kept)."""
        try:
            status = await self.upstream.forward(
                scope, receive, send, target(scope, path), request_headers(scope)
            )
        except UpstreamUnavailable as err:
            self._down(scope["path"], err)
            await error_response(503, UNAVAILABLE, UNAVAILABLE_MESSAGE)(scope, receive, send)
            return
        except ClientGone:
            log.debug("[app] op=client-gone path=%s stage=request-body", scope["path"])
            return
        self._up()
        log.debug(
            "[app] op=sessions-relay method=%s path=%s status=%s", scope["method"], path, status
        )

    async def websocket(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        """Relay one WebSocket to ``path`` on the manager: frames both ways, then the close."""
        if (await receive())["type"] != "websocket.connect":
            return
        uri = "ws://manager" + target(scope, path)
        try:
            upstream = await wsrelay.connect(scope, send, self.upstream.socket, uri, [])
        except UpstreamUnavailable as err:
            self._down(scope["path"], err)
            await wsrelay.unavailable(send, UNAVAILABLE)
            return
        if upstream is None:  # the manager refused the handshake; the browser has its answer
            return
        self._up()
        async with upstream:
            await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
            await wsrelay.relay(scope, upstream, receive, send, UNAVAILABLE)


class _Endpoint:
    """An ASGI endpoint relaying to the manager path that ``where`` names."""

    def __init__(self, relay: ManagerRelay, where: Target) -> None:
        self.relay = relay
        self.where = where

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = self.where(scope)
        if scope["type"] == "websocket":
            if path is None:
                await wsrelay.deny(scope, send, 404, b"No such session.")
                return
            await self.relay.websocket(scope, receive, send, path)
            return
        if path is None:
            token = scope.get("path_params", {}).get("token", "")
            message = f"No session answers to {token!r}. GET {PREFIX} lists them."
            await error_response(404, "session-not-found", message)(scope, receive, send)
            return
        await self.relay.http(scope, receive, send, path)


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The session API, relayed to the manager."""
    relay = ManagerRelay(ctx.settings.manager_socket)

    def to(where: Target) -> _Endpoint:
        return _Endpoint(relay, where)

    one = PREFIX + "/{token}"
    return [
        Route(PREFIX, to(_fixed("/sessions")), methods=["GET"]),
        Route(PREFIX + "/events", to(_fixed("/events")), methods=["GET"]),
        Route(PREFIX + "/spawn", to(_fixed("/rc-spawn")), methods=["POST"]),
        Route(one, to(_session_path()), methods=["GET", "DELETE"]),
        Route(one + "/stop", to(_session_path("/stop")), methods=["POST"]),
        Route(one + "/log", to(_session_path("/log")), methods=["GET"]),
        Route(one + "/input", to(_session_path("/input")), methods=["POST"]),
        WebSocketRoute(one + "/terminal", to(_session_path("/terminal"))),
        Route("/api/admin/claude", to(_fixed("/claude")), methods=["GET", "DELETE"]),
        Route("/api/admin/claude/login", to(_fixed("/claude/login")), methods=["POST", "DELETE"]),
    ]
