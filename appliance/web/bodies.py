"""Request bodies: read with a size limit (the one bounded reader), JSON, errors the client can
act on. Used by the app's APIs and the session manager alike."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from appliance.web import csrf
from appliance.web.errors import ApiError


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
