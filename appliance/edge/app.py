"""The edge's ASGI application: classify every request, answer a few paths, proxy the rest.

The edge answers ``/healthz`` (asked of the engine over RPC) and ``/api/admin/version`` itself so
both work while the app restarts; everything else goes to the app's Unix socket
(:mod:`appliance.edge.proxy`). The version answers only a logged-in admin (the login cookie is
checked here, with the key the app signs it with): it would tell anyone which release to attack.
An external request for a host that is neither an admin nor a public host name is answered 404
here and never reaches the app; a LAN request for a name that is not the device's is answered
421 (:mod:`appliance.edge.network`: DNS rebinding). The tunnel's host names and
their roles (cloudflared's config.yml and roles.json, :mod:`appliance.tunnel.state`) join the
settings' ones and are re-read when those files change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from appliance.core.accounts import AccountError, validate_account_id
from appliance.core.config import Settings, load_settings
from appliance.core.proc import die_with_server
from appliance.core.version import build_info
from appliance.edge.network import Classification, Policy, classify
from appliance.edge.proxy import Proxy
from appliance.edge.websocket import deny
from appliance.plugins.errors import PluginError
from appliance.plugins.resolver import resolve
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.tunnel.state import HostnameRoles, tunnel_health
from appliance.web import cookies, security
from appliance.web.bodies import DrainUnread
from appliance.web.errors import error_body

log = logging.getLogger(__name__)

HEALTH_TIMEOUT = 4.0
HEALTH_PATH = "/healthz"
VERSION_PATH = "/api/admin/version"
NOT_FOUND = error_body("not-found", "Nothing is served at this address.")
LOGIN_REQUIRED = error_body("login-required", "Log in to the admin UI to see the version.")


def _misdirected(host: str) -> bytes:
    return error_body(
        "unknown-host",
        f"This device does not answer to the name {host!r}. Open it as http://maxy.local:19200 "
        "or by its address, or add the name to MAXY_LAN_HOSTNAMES.",
    )


async def _engine_health(client: RpcClient) -> dict[str, Any]:
    try:
        result: dict[str, Any] = await client.call("health")
    except RpcError as err:
        return {
            "ok": False,
            "engine": {"ok": False, "error": str(err)},
            "neo4j": {"ok": False, "error": "unknown: the engine did not answer"},
            "embedder": {"ok": False, "error": "unknown: the engine did not answer"},
        }
    result["engine"] = {"ok": True}
    return result


def _missing_plugins(settings: Settings) -> list[str]:
    """Enabled plugins whose files are gone, or the refusal that stops every session."""
    try:
        return resolve(settings, settings.account_id).missing()
    except PluginError as err:
        return [f"refused: {err}"]


def _own_routes(settings: Settings, proxy: Proxy) -> Starlette:
    """The paths the edge answers itself, and the lifespan that closes the proxy's pool."""
    engine = RpcClient(settings.engine_socket, timeout=HEALTH_TIMEOUT)
    info = build_info()

    async def healthz(request: Request) -> JSONResponse:
        health = await _engine_health(engine)
        ok = bool(health.pop("ok", False))
        body = {"status": "healthy" if ok else "unhealthy", "version": info["version"], **health}
        body["tunnel"] = await tunnel_health(settings.cloudflared_config)  # informs, never fails
        body["missingPlugins"] = await asyncio.to_thread(_missing_plugins, settings)
        if not ok:
            log.warning(
                "[health] op=check status=unhealthy neo4j=%s engine=%s",
                health.get("neo4j", {}).get("ok"),
                health["engine"]["ok"],
            )
        return JSONResponse(body, status_code=200 if ok else 503)

    async def version(request: Request) -> JSONResponse:
        # "latest" is filled in by the update channel once OTA lands; null means unknown.
        return JSONResponse({"installed": info, "latest": None})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await proxy.aclose()

    return Starlette(
        routes=[Route(HEALTH_PATH, healthz), Route(VERSION_PATH, version)], lifespan=lifespan
    )


def _headers(scope: Scope) -> dict[str, str]:
    """Lower-case header names to values; repeated headers joined with commas."""
    out: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _log_classification(peer: str, who: Classification) -> None:
    level = logging.INFO if who.network == "external" else logging.DEBUG
    if log.isEnabledFor(level):
        log.log(
            level,
            "[edge] op=classify peer=%s network=%s role=%s host=%s ip=%s tunnel=%s%s",
            peer,
            who.network,
            who.host_role or "none",
            who.host or "-",
            who.client_ip,
            who.tunnel,
            " misdirected=true" if who.misdirected else "",
        )


class AdminCheck:
    """Whether a request carries a valid admin login cookie for its network."""

    def __init__(self, settings: Settings) -> None:
        self.keys_dir = settings.keys_dir
        self.key_path = settings.cookie_key_path
        self.key: bytes | None = None  # read once it exists (the app makes it at first login)

    def __call__(self, scope: Scope, network: str) -> bool:
        if self.key is None:
            if not self.key_path.exists():
                return False  # nobody has logged in yet; never create the key from here
            self.key = cookies.load_key(self.key_path)
        key = self.key
        value = HTTPConnection(scope).cookies.get(cookies.COOKIE_NAME)
        generation = cookies.read_generation(self.keys_dir)
        return cookies.verify(key, value, network, generation=generation) is not None


class Edge:
    """The ASGI entry point Granian serves."""

    def __init__(
        self,
        own: ASGIApp,
        proxy: Proxy,
        policy: Policy,
        tunnel: HostnameRoles | None = None,
        admin: AdminCheck | None = None,
    ) -> None:
        self.own = own
        self.proxy = proxy
        self.policy = policy
        self.settings_policy = policy
        self.tunnel = tunnel
        self.admin = admin
        self._tunnel_roles: object = None

    def current_policy(self) -> Policy:
        """The settings' policy plus the tunnel's host names as config.yml has them now."""
        if self.tunnel is not None:
            roles = self.tunnel.current()  # the same object until a file changes
            if roles is not self._tunnel_roles:
                self._tunnel_roles = roles
                self.policy = self.settings_policy.with_hostnames(
                    self.tunnel.hostnames("admin"), self.tunnel.hostnames("public")
                )
        return self.policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.own(scope, receive, send)  # lifespan
            return
        if kind == "http":  # every answer, the edge's own included, has the security headers
            send = security.on_start(send, security.STRICT)
        peer = (scope.get("client") or ("", 0))[0]
        who = classify(peer, _headers(scope), self.current_policy())
        _log_classification(peer, who)
        path = scope["path"]
        if who.misdirected:
            await _refuse(scope, send, 421, _misdirected(who.host))
        elif who.host_role is None or (path == VERSION_PATH and who.host_role != "admin"):
            await _refuse(scope, send, 404, NOT_FOUND)
        elif path == VERSION_PATH and not (self.admin and self.admin(scope, who.network)):
            await _refuse(scope, send, 401, LOGIN_REQUIRED)
        elif kind == "http" and path in (HEALTH_PATH, VERSION_PATH):
            await self.own(scope, receive, send)
        elif kind == "http":
            await self.proxy.http(scope, receive, send, who)
        else:
            await self.proxy.websocket(scope, receive, send, who)


async def _refuse(scope: Scope, send: Send, status: int, body: bytes) -> None:
    if scope["type"] == "websocket":
        await deny(scope, send, status, body, [(b"content-type", b"application/json")])
        return
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _brand(settings: Settings) -> str:
    """The product name the account shows (the restarting page carries it).

    An account the edge cannot read is the app's to report (the edge must still answer, with a
    neutral name); a readable account without a product name stops the edge at start.
    """
    try:
        account = validate_account_id(settings.accounts_dir, settings.account_id)
    except AccountError as err:
        log.warning("[edge] op=brand fallback=device reason=%r", str(err))
        return "This device"
    return account.product_name()


def create_app(settings: Settings | None = None) -> ASGIApp:
    """Build the edge application, unread bodies read first (Granian calls this as a factory)."""
    die_with_server()
    settings = settings or load_settings()
    proxy = Proxy(settings.app_socket, brand=_brand(settings))
    tunnel = HostnameRoles(settings.cloudflared_config, settings.tunnel_roles_path)
    policy = Policy.from_settings(settings)
    return DrainUnread(
        Edge(_own_routes(settings, proxy), proxy, policy, tunnel, AdminCheck(settings))
    )
