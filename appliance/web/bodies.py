"""Request bodies: read with a size limit (the one bounded reader), JSON, errors the client can
act on, and the small bodies an answer leaves unread (:class:`DrainUnread`). Used by the edge, the
app's APIs and the session manager alike."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from appliance.web import csrf
from appliance.web.errors import ApiError

#: The largest unread body :class:`DrainUnread` reads before an answer goes out.
DRAIN_BYTES = 64 * 1024


class BodyTooLarge(Exception):
    """The body is (or says it is) larger than the limit; nothing past it was read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"The request body is larger than {limit} bytes.")
        self.limit = limit


async def read_bounded(request: Request, limit: int) -> bytes:
    """The whole request body, or :class:`BodyTooLarge` once it passes ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > limit:
            raise BodyTooLarge(limit)
    return bytes(received)


async def json_body(
    request: Request, *, limit: int, what: str, too_large: ApiError | None = None
) -> Any:
    """The request's JSON, refusing another content type (415), more than ``limit`` bytes (413)
    and malformed JSON (400); ``what`` names the body in the messages ("the form", …)."""
    if not csrf.is_json(request.headers):
        raise ApiError(415, "json-required", f"Send {what} as JSON (application/json).")
    try:
        received = await read_bounded(request, limit)
    except BodyTooLarge as err:
        raise too_large or ApiError(
            413, "too-large", f"{what.capitalize()} is larger than {limit} bytes."
        ) from err
    try:
        return json.loads(received)
    except ValueError as err:
        raise ApiError(400, "bad-json", "The request body is not valid JSON.") from err


async def json_object(
    request: Request, *, limit: int, what: str, too_large: ApiError | None = None
) -> dict[str, Any]:
    """Like :func:`json_body`, and the JSON must be an object."""
    data = await json_body(request, limit=limit, what=what, too_large=too_large)
    if not isinstance(data, dict):
        raise ApiError(400, "bad-json", "The request body must be a JSON object.")
    return data


CLOSE = (b"connection", b"close")


class DrainUnread:
    """Read what is left of a small request body before the answer starts.

    An answer given without reading the body (a 401 or 403 from a guard, a 404, a 405, a 415)
    makes Granian close the keep-alive connection after it; a client that has already sent its
    next request on that connection (httpx, a page's next fetch) gets a reset instead of an
    answer. Reading the rest first keeps the connection usable. A body that declares more than
    DRAIN_BYTES, or grows past it, is left: that connection is closed, and its answer says so.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or ()) if scope["type"] == "http" else {}
        declared = headers.get(b"content-length", b"0")
        if not (b"transfer-encoding" in headers or (declared.isdigit() and int(declared) > 0)):
            await self.app(scope, receive, send)  # no body (a GET), or not HTTP
            return
        finished = False

        async def tracked() -> Message:
            nonlocal finished
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                finished = True
            return message

        async def drained(message: Message) -> None:
            nonlocal finished
            if message["type"] == "http.response.start" and not finished:
                if not declared.isdigit() or int(declared) <= DRAIN_BYTES:
                    read = 0
                    while not finished and read <= DRAIN_BYTES:
                        read += len((await tracked()).get("body", b""))
                if not finished:  # Granian closes after this answer: say so, or a client reuses it
                    message = {**message, "headers": [*message.get("headers", ()), CLOSE]}
                finished = True
            await send(message)

        await self.app(scope, tracked, drained)
