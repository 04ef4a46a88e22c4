"""HTTP-facing errors: every one carries a status and renders as ``{"code", "message"}``.

Raise :class:`ApiError` from a route; :class:`ApiErrorMiddleware` (installed by the auth
middleware list) is the one handler that renders it. Code that answers without raising (a
middleware) calls :func:`error_response` and gets the same shape. An engine call that fails
becomes an :class:`ApiError` through :func:`engine_error`, whose status comes from one table
(:data:`ENGINE_STATUS`): the caller's mistake is 400, the engine unable to serve now is 503, a
broken answer or an engine bug is 502. A full disk is 507 with code ``disk-full`` wherever it
was found: in the engine (its RPC error) or in a route's own write
(:class:`~appliance.core.fsio.DiskFull`, rendered by the same middleware).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from appliance.core.fsio import DiskFull
from appliance.rpc.protocol import RemoteError, RpcError, RpcUnavailable

DISK_FULL_STATUS = 507  # Insufficient Storage
# Engine error codes that are the caller's mistake; "internal" is the engine's own bug.
ENGINE_STATUS: dict[str, int] = {
    "bad-request": 400,
    "write-rejected": 400,
    "empty-text": 400,
    "not-found": 404,
    "disk-full": DISK_FULL_STATUS,
    "backup-refused": 400,
    "internal": 502,
}
ENGINE_UNAVAILABLE = (
    "The memory engine is not answering ({err}). Start Maxy with `maxy run` (or the engine "
    "alone with `maxy engine`), then try again."
)


class ApiError(Exception):
    """An error meant for the client: status, machine-readable code, human message."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        """Render this error."""
        return error_response(self.status, self.code, self.message, self.headers)


def error_body(code: str, message: str, **extra: Any) -> bytes:
    """The one error body, ``{"code", "message", …}`` as compact JSON, for raw ASGI answers."""
    body = {"code": code, "message": message, **extra}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def error_response(
    status: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSONResponse:
    """Return the JSON error response ``{"code", "message", …extra}`` with ``status``."""
    response = JSONResponse({"code": code, "message": message, **(extra or {})}, status_code=status)
    response.headers["cache-control"] = "no-store"
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


class ApiErrorMiddleware:
    """Render an :class:`ApiError` raised by any route (before it started its response)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Mapping[str, object]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(dict(message))

        try:
            await self.app(scope, receive, tracking_send)
        except ApiError as err:
            if started:
                raise
            await err.response()(scope, receive, send)
        except DiskFull as err:
            if started:
                raise
            await error_response(DISK_FULL_STATUS, err.code, str(err))(scope, receive, send)


def engine_status(code: str) -> int:
    """The HTTP status of an engine error code (503 for any the table does not name)."""
    return ENGINE_STATUS.get(code, 503)


def engine_error(err: RpcError | TimeoutError, unavailable: str | None = None) -> ApiError:
    """The one translation of a failed engine call into an HTTP answer.

    ``unavailable`` is the route's own message for an engine that does not answer (``{err}``
    is replaced by what happened).
    """
    if isinstance(err, RpcUnavailable | TimeoutError):
        message = (unavailable or ENGINE_UNAVAILABLE).replace("{err}", str(err))
        return ApiError(503, "engine-unavailable", message)
    if isinstance(err, RemoteError):
        return ApiError(engine_status(err.code), err.code, str(err))
    return ApiError(502, "engine-error", f"The engine sent a broken answer: {err}")
