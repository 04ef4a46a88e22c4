"""Who may use the admin UI: onboarding, login, logout, "Sign out other devices", the guard.

Admin routes are ``/`` on the admin host role, ``/admin/*`` and ``/api/admin/*``. The guard
(:class:`AuthMiddleware`) answers for them before any route runs:

* public host role: 404, admin routes do not exist there;
* LAN and no PIN yet: pages redirect to ``/onboarding``, the API answers 401 ``setup-required``;
* no valid cookie: pages redirect to ``/login?next=…``, the API answers 401 ``login-required``
  (or ``session-rotated`` when the cookie predates the last "Sign out other devices");
* POST/PUT/PATCH/DELETE without the session's ``X-Maxy-CSRF`` header: 403 ``csrf``;
* WebSocket upgrades additionally need an ``Origin`` naming the host.

The LAN (and local processes on the app's socket) log in with the PIN; the tunnel's admin
hostname (network ``external``) logs in with the remote password, which a LAN admin sets. A
cookie is valid only on the network it was issued on. Everything else (``/{slug}``, ``/bot``,
``/sites/*``, ``/static/*``, ``/login``, ``/onboarding``, ``/api/auth/*``) passes the guard.

Routes::

    GET  /onboarding                          set the PIN (LAN, only while none is set)
    GET  /login                               PIN or remote password form
    POST /api/auth/pin/setup                  {"pin", "confirm"} -> logged in
    POST /api/auth/login                      {"pin"} on the LAN, {"password"} remotely
    POST /api/auth/logout                     clears the cookie
    GET  /api/admin/session                   {"sessionId", "csrf", "network", "expiresAt"}
    POST /api/admin/session/rotate            new session id, every other cookie is rejected
                                              (Settings: "Sign out other devices")
    POST /api/admin/settings/remote-password  {"password"} (a LAN admin only)
    POST /api/admin/settings/pin              {"current", "pin", "confirm"} (a LAN admin only)
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from appliance.agents.claude_code import claude_connected
from appliance.app.context import AppContext
from appliance.core.config import Settings
from appliance.web import cookies, csrf
from appliance.web.bodies import DrainUnread, json_object
from appliance.web.client import Client, client_of
from appliance.web.credentials import AlreadySet, Credentials, InvalidCredential, validate_pin
from appliance.web.errors import ApiError, ApiErrorMiddleware, error_response
from appliance.web.throttle import Throttle

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
#: Largest JSON body the auth routes read.
MAX_BODY_BYTES = 4096
ADMIN_PREFIXES = ("/admin", "/api/admin")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Where the guard puts the verified session for routes and pages (see :func:`session_of`).
SESSION_SCOPE_KEY = "maxy.session"
CSRF_SCOPE_KEY = "maxy.csrf"

_NEXT = re.compile(r"/(?![/\\])[^\x00-\x1f\x7f\\]*")


def is_admin_path(path: str, host_role: str) -> bool:
    """Return whether ``path`` is an admin route (``/`` counts only on the admin host role).

    Judged on the same (decoded, not normalised) path the router matches, so whatever the guard
    lets through cannot be routed to an admin endpoint.
    """
    if path == "/":
        return host_role == "admin"
    return any(path == prefix or path.startswith(prefix + "/") for prefix in ADMIN_PREFIXES)


def session_of(conn: HTTPConnection) -> cookies.Session | None:
    """Return the session the guard verified for this admin request (None elsewhere)."""
    session = conn.scope.get(SESSION_SCOPE_KEY)
    return session if isinstance(session, cookies.Session) else None


def require_lan(conn: HTTPConnection, why: str) -> None:
    """Refuse (403 ``lan-only``) a change made from outside the home network, e.g. the tunnel."""
    session = session_of(conn)
    if session is None or session.network != "lan":
        raise ApiError(403, "lan-only", why)


def csrf_of(conn: HTTPConnection) -> str | None:
    """Return the CSRF token of this admin request's session, for ``<meta name="maxy-csrf">``."""
    token = conn.scope.get(CSRF_SCOPE_KEY)
    return token if isinstance(token, str) else None


def safe_next(value: str | None) -> str:
    """Return ``value`` if it is a path on this site, else ``/`` (no open redirects)."""
    if value and len(value) <= 2048 and _NEXT.fullmatch(value):
        return value
    return "/"


def _is_navigation(scope: Scope) -> bool:
    return scope["method"] in ("GET", "HEAD") and not scope["path"].startswith("/api/")


def _expires_at(session: cookies.Session) -> str:
    moment = datetime.fromtimestamp(session.expires_at, UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _https(conn: HTTPConnection) -> bool:
    forwarded = conn.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return forwarded == "https" or conn.url.scheme in ("https", "wss")


class Gate:
    """The cookie key and the credentials: what deciding "logged in?" needs."""

    def __init__(self, settings: Settings) -> None:
        self.keys_dir = settings.keys_dir
        self.key = cookies.load_key(settings.cookie_key_path)
        self.credentials = Credentials(settings.keys_dir)

    def authenticate(
        self, conn: HTTPConnection, network: str
    ) -> tuple[cookies.Session | None, str]:
        """Return the session of the request's cookie, or None and the error code to answer."""
        value = conn.cookies.get(cookies.COOKIE_NAME)
        session = cookies.verify(self.key, value, network)
        if session is None:
            return None, "login-required"
        if session.generation != cookies.read_generation(self.keys_dir):
            return None, "session-rotated"
        return session, ""

    def session_body(self, session: cookies.Session) -> dict[str, Any]:
        """Return what ``GET /api/admin/session`` tells a page."""
        return {
            "sessionId": session.id,
            "csrf": csrf.token(self.key, session.id),
            "network": session.network,
            "expiresAt": _expires_at(session),
        }

    def login_response(self, conn: HTTPConnection, network: str, extra: dict[str, Any]) -> Response:
        """Start a new session on ``network``: the session JSON plus its cookie."""
        session = cookies.issue(network, cookies.read_generation(self.keys_dir))
        response = JSONResponse({**self.session_body(session), **extra})
        self.set_cookie(conn, response, session)
        return response

    def set_cookie(
        self, conn: HTTPConnection, response: Response, session: cookies.Session
    ) -> None:
        """Attach the login cookie carrying ``session``."""
        response.headers["cache-control"] = "no-store"
        response.set_cookie(
            cookies.COOKIE_NAME,
            cookies.sign(self.key, session),
            max_age=session.expires_at - session.issued_at,
            path="/",
            secure=_https(conn),
            httponly=True,
            samesite="strict",
        )


_MESSAGES = {
    "login-required": "Log in to use the admin pages.",
    "session-rotated": (
        "This device was signed out (Sign out other devices, or a PIN reset). Reload the page and "
        "log in again."
    ),
}


class AuthMiddleware:
    """Guard admin routes: host role, onboarding, login cookie, CSRF header, WebSocket Origin."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.gate = Gate(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        client = client_of(conn)
        if not is_admin_path(scope["path"], client.host_role):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await self._websocket(conn, client, scope, receive, send)
            return
        refusal = self._check(conn, client, scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check(self, conn: HTTPConnection, client: Client, scope: Scope) -> Response | None:
        if client.host_role == "public":
            return error_response(404, "not-found", "There is no such page.")
        navigation = _is_navigation(scope)
        if client.network == "lan" and not self.gate.credentials.has_pin():
            if navigation:
                return RedirectResponse("/onboarding", status_code=303)
            return error_response(
                401, "setup-required", "Set the admin PIN first: open /onboarding on the LAN."
            )
        session, code = self.gate.authenticate(conn, client.network)
        if session is None:
            if navigation:
                target = quote(scope["path"], safe="/")
                if scope["query_string"]:
                    target += "?" + scope["query_string"].decode("latin-1")
                return RedirectResponse("/login?next=" + quote(target, safe=""), status_code=303)
            return error_response(401, code, _MESSAGES[code])
        if scope["method"] not in SAFE_METHODS and not csrf.check(
            self.gate.key, session.id, conn.headers.get(csrf.CSRF_HEADER)
        ):
            return error_response(
                403,
                "csrf",
                "The request lacks this session's X-Maxy-CSRF token. Reload the page and retry.",
            )
        scope[SESSION_SCOPE_KEY] = session
        scope[CSRF_SCOPE_KEY] = csrf.token(self.gate.key, session.id)
        return None

    async def _websocket(
        self, conn: HTTPConnection, client: Client, scope: Scope, receive: Receive, send: Send
    ) -> None:
        session = None
        if client.host_role == "admin" and csrf.websocket_origin_ok(conn):
            session, _ = self.gate.authenticate(conn, client.network)
        if session is None:
            log.info("[auth] op=websocket-refused path=%s ip=%s", scope["path"], client.ip)
            await send({"type": "websocket.close", "code": 1008})
            return
        scope[SESSION_SCOPE_KEY] = session
        await self.app(scope, receive, send)


def middleware(ctx: AppContext) -> list[Middleware]:
    """Unread bodies read first, the error renderer and the guard in front of every admin route."""
    return [
        Middleware(DrainUnread),
        Middleware(ApiErrorMiddleware),
        Middleware(AuthMiddleware, settings=ctx.settings),
    ]


async def _json_body(request: Request) -> dict[str, Any]:
    return await json_object(request, limit=MAX_BODY_BYTES, what="the form")


def _text(data: dict[str, Any], name: str) -> str:
    value = data.get(name, "")
    return value if isinstance(value, str) else ""


def _admin_host(client: Client) -> None:
    if client.host_role != "admin":
        raise ApiError(404, "not-found", "There is no such page.")


def _same_origin(request: Request) -> None:
    if not csrf.origin_matches_host(request.headers, required=False):
        raise ApiError(403, "csrf", "The request comes from another site.")


def _invalid(err: InvalidCredential) -> ApiError:
    return ApiError(400, err.code, str(err))


def routes(ctx: AppContext) -> list[BaseRoute]:
    """Onboarding, login, logout and the session API."""
    gate = Gate(ctx.settings)
    credentials = gate.credentials
    throttle = Throttle()
    # One credential check at a time: parallel guesses cannot outrun the throttle.
    checking = asyncio.Lock()
    templates = Jinja2Templates(directory=TEMPLATES)
    brand = ctx.account.product_name()

    def page(request: Request, name: str, title: str, **context: Any) -> Response:
        response = templates.TemplateResponse(
            request, name, {"page": title, "brand": brand, "admin": False, **context}
        )
        response.headers["cache-control"] = "no-store"
        return response

    async def onboarding(request: Request) -> Response:
        client = client_of(request)
        if client.host_role != "admin" or client.network != "lan":
            raise ApiError(404, "not-found", "There is no such page.")
        if credentials.has_pin():
            return RedirectResponse("/login", status_code=303)
        from appliance.app.pages import vendor_version  # pages imports this module

        return page(
            request,
            "onboarding.html",
            "Welcome",
            vendor=vendor_version(),
            claude_connected=claude_connected(ctx.settings),
        )

    async def login_page(request: Request) -> Response:
        client = client_of(request)
        _admin_host(client)
        if client.network == "lan" and not credentials.has_pin():
            return RedirectResponse("/onboarding", status_code=303)
        remote_ready = client.network == "lan" or credentials.has_remote_password()
        return page(
            request,
            "login.html",
            "Log in",
            network=client.network,
            remote_ready=remote_ready,
            next=safe_next(request.query_params.get("next")),
        )

    def throttled(client: Client) -> None:
        wait = throttle.retry_after(client)
        if wait:
            raise ApiError(
                429,
                "throttled",
                f"Too many wrong attempts. Try again in {wait} s.",
                {"retry-after": str(wait)},
            )

    async def check_secret(client: Client, secret: str, check: Callable[[str], bool]) -> None:
        """Check a PIN or password under the throttle; raise 401 or 429 when it is not right."""
        async with checking:
            throttled(client)
            ok = bool(secret) and await run_in_threadpool(check, secret)
            if not ok:
                wait = throttle.failed(client)
                what = "PIN" if client.network == "lan" else "password"
                message = f"That is not the right {what}."
                if wait:
                    message += f" Wait {wait} s before trying again."
                raise ApiError(
                    401, "bad-credentials", message, {"retry-after": str(wait)} if wait else None
                )
            throttle.succeeded(client)

    async def login(request: Request) -> Response:
        client = client_of(request)
        _admin_host(client)
        _same_origin(request)
        data = await _json_body(request)
        if client.network == "lan":
            if not credentials.has_pin():
                raise ApiError(
                    409, "setup-required", "No admin PIN is set yet: open /onboarding first."
                )
            await check_secret(client, _text(data, "pin"), credentials.check_pin)
        else:
            if not credentials.has_remote_password():
                raise ApiError(
                    403,
                    "remote-password-unset",
                    f"Remote access is not set up yet. On your home network, log in to {brand} "
                    "with your PIN and set a remote password in Settings.",
                )
            await check_secret(client, _text(data, "password"), credentials.check_remote_password)
        log.info("[auth] op=login ip=%s network=%s", client.ip, client.network)
        return gate.login_response(
            request, client.network, {"next": safe_next(_text(data, "next"))}
        )

    async def pin_setup(request: Request) -> Response:
        client = client_of(request)
        if client.host_role != "admin" or client.network != "lan":
            raise ApiError(404, "not-found", "The PIN is set on the home network.")
        _same_origin(request)
        data = await _json_body(request)
        if credentials.has_pin():
            raise ApiError(409, "pin-already-set", "The admin PIN is already set. Log in instead.")
        pin = _text(data, "pin")
        try:
            validate_pin(pin, _text(data, "confirm"))
            await run_in_threadpool(lambda: credentials.set_pin(pin, first=True))
        except InvalidCredential as err:
            raise _invalid(err) from err
        except AlreadySet as err:
            raise ApiError(409, "pin-already-set", str(err)) from err
        log.info("[auth] op=onboarded ip=%s", client.ip)
        return gate.login_response(request, "lan", {"next": "/"})

    async def logout(request: Request) -> Response:
        client = client_of(request)
        _admin_host(client)
        _same_origin(request)
        response = JSONResponse({"next": "/login"})
        response.headers["cache-control"] = "no-store"
        response.delete_cookie(
            cookies.COOKIE_NAME, path="/", secure=_https(request), httponly=True, samesite="strict"
        )
        log.info("[auth] op=logout ip=%s network=%s", client.ip, client.network)
        return response

    def current(request: Request) -> cookies.Session:
        session = session_of(request)
        if session is None:  # the guard runs first; this is a wiring error, not a client's
            raise ApiError(401, "login-required", _MESSAGES["login-required"])
        return session

    async def session_info(request: Request) -> Response:
        response = JSONResponse(gate.session_body(current(request)))
        response.headers["cache-control"] = "no-store"
        return response

    async def rotate(request: Request) -> Response:
        old = current(request)
        generation = await run_in_threadpool(cookies.bump_generation, ctx.settings.keys_dir)
        session = cookies.issue(old.network, generation)
        response = JSONResponse(gate.session_body(session))
        gate.set_cookie(request, response, session)
        log.info("[auth] op=rotate network=%s generation=%s", old.network, generation)
        return response

    def lan_admin(request: Request) -> cookies.Session:
        session = current(request)
        if session.network != "lan":
            raise ApiError(
                403, "lan-only", "This setting can only be changed from the home network."
            )
        return session

    async def remote_password(request: Request) -> Response:
        lan_admin(request)
        data = await _json_body(request)
        password = _text(data, "password")
        confirm = data.get("confirm")
        if isinstance(confirm, str) and confirm != password:
            raise ApiError(400, "password-mismatch", "The two passwords differ.")
        try:
            await run_in_threadpool(credentials.set_remote_password, password)
        except InvalidCredential as err:
            raise _invalid(err) from err
        return JSONResponse({"remotePasswordSet": True})

    async def change_pin(request: Request) -> Response:
        lan_admin(request)
        client = client_of(request)
        data = await _json_body(request)
        await check_secret(client, _text(data, "current"), credentials.check_pin)
        pin = _text(data, "pin")
        try:
            validate_pin(pin, _text(data, "confirm"))
            await run_in_threadpool(credentials.set_pin, pin)
        except InvalidCredential as err:
            raise _invalid(err) from err
        return JSONResponse({"pinSet": True})

    return [
        Route("/onboarding", onboarding, methods=["GET"]),
        Route("/login", login_page, methods=["GET"]),
        Route("/api/auth/pin/setup", pin_setup, methods=["POST"]),
        Route("/api/auth/login", login, methods=["POST"]),
        Route("/api/auth/logout", logout, methods=["POST"]),
        Route("/api/admin/session", session_info, methods=["GET"]),
        Route("/api/admin/session/rotate", rotate, methods=["POST"]),
        Route("/api/admin/settings/remote-password", remote_password, methods=["POST"]),
        Route("/api/admin/settings/pin", change_pin, methods=["POST"]),
    ]
