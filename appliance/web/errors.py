"""HTTP-facing errors: every one carries a status and renders as ``{"code", "message"}``.

Raise :class:`ApiError` from a route; :class:`ApiErrorMiddleware` (installed by the auth
middleware list) is the one handler that renders it. Code that answers without raising (a
middleware) calls :func:`error_response` and gets the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send


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


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """Return the JSON error response ``{"code", "message"}`` with ``status``."""
    response = JSONResponse({"code": code, "message": message}, status_code=status)
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
