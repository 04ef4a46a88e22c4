"""Relay HTTP, Server-Sent Events and WebSockets to a server on a Unix socket.

The edge relays browsers to the app with it; the app relays ``/api/admin/sessions/*`` to the
session manager. Bodies stream both ways without buffering; an event stream is cut only at event
boundaries, so a caller can end a broken one with a whole event of its own; a client that leaves
closes the upstream request. Hop-by-hop headers never cross (:func:`downstream_headers`); which
request headers cross is the caller's choice. WebSocket frames are relayed by
:mod:`appliance.web.wsrelay`.

Errors::

    UpstreamError
    ├── UpstreamUnavailable   the socket is missing, refuses, or the server died mid-answer
    └── ClientGone            the client disconnected before its request body was complete
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Iterable
from pathlib import Path

import httpx
from starlette.types import Message, Receive, Scope, Send

from appliance.core.logs import kv

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)
SMALL_BODY = 64 * 1024  # a response this small with a Content-Length is sent in one piece
CONNECT_TIMEOUT = 5.0
# Streams (SSE, downloads, uploads) may be quiet or slow for as long as they like.
TIMEOUTS = {"connect": CONNECT_TIMEOUT, "read": None, "write": None, "pool": None}
_EVENT_END = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")
_URL_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))


class UpstreamError(Exception):
    """A request could not be relayed."""


class UpstreamUnavailable(UpstreamError):
    """The server is not answering on its Unix socket (stopped, restarting or crashed)."""


class ClientGone(UpstreamError):
    """The client disconnected before its request body was complete."""


def hop_by_hop(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Names that must not cross this hop: the fixed set plus those Connection lists."""
    listed = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    return HOP_BY_HOP | frozenset(listed)


def stays_on_hop(name: bytes, hop: frozenset[bytes]) -> bool:
    """Whether the (lower-case) header ``name`` belongs to this hop only."""
    return name in hop or name.startswith(b"proxy-")


def downstream_headers(raw: Iterable[tuple[bytes, bytes]], *, keep_length: bool = True) -> Headers:
    """The response headers the client receives."""
    items = [(name.lower(), value) for name, value in raw]
    hop = hop_by_hop(items)
    return [
        (name, value)
        for name, value in items
        if not stays_on_hop(name, hop) and (keep_length or name != b"content-length")
    ]


def target(scope: Scope, path: str | None = None) -> str:
    """Path and query exactly as the client sent them (non-ASCII bytes escaped).

    ``path`` (already escaped) replaces the client's path; the query is kept.
    """
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    if path is not None:
        raw = path.encode()
    query: bytes = scope.get("query_string", b"")
    if query:
        raw += b"?" + query
    return urllib.parse.quote_from_bytes(raw, safe=_URL_SAFE)


@functools.lru_cache(maxsize=1024)  # parsing a URL costs more than the rest of the request
def _url(base: str, path_and_query: str) -> httpx.URL:
    return httpx.URL(base + path_and_query)


def _event_end(buffer: bytes) -> int:
    """Offset just past the last complete event in an event-stream buffer (0: none)."""
    last = 0
    for match in _EVENT_END.finditer(buffer):
        last = match.end()
    return last


def has_body(scope: Scope) -> bool:
    """Whether the request declares a body."""
    names = {name.lower() for name, _ in scope["headers"]}
    return b"content-length" in names or b"transfer-encoding" in names


async def request_body(receive: Receive) -> AsyncIterator[bytes]:
    """The client's request body as it arrives; :class:`ClientGone` if the client leaves."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body", False):
            return


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(work: Awaitable[None], receive: Receive) -> bool:
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


class Upstream:
    """One pooled HTTP transport to a server's Unix socket.

    ``name`` is the upstream's host in URLs and messages ("app", "manager"); ``area`` tags log
    lines (``[edge] op=upstream-lost …``).
    """

    def __init__(self, socket: Path, *, name: str, area: str) -> None:
        self.socket = socket
        self.name = name
        self.area = area
        self._base = "http://" + name
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

    async def open(
        self,
        method: str,
        path_and_query: str,
        headers: Headers,
        body: AsyncIterator[bytes] | None = None,
    ) -> httpx.Response:
        """Send a request and return its response, body not yet read."""
        request = httpx.Request(
            method,
            _url(self._base, path_and_query),
            headers=headers,
            content=body,
            extensions={"timeout": TIMEOUTS},
        )
        try:
            return await self.transport.handle_async_request(request)
        except httpx.TransportError as err:
            raise UpstreamUnavailable(
                f"The {self.name} did not answer on {self.socket} ({err!r})."
            ) from err

    async def forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        path_and_query: str,
        headers: Headers,
        *,
        sse_lost: bytes = b"",
    ) -> int:
        """Relay the client's HTTP request and stream the answer back; return its status.

        :class:`UpstreamUnavailable` means nothing was sent to the client yet. An event stream
        the upstream drops mid-way ends with ``sse_lost`` (a whole event, or nothing).
        """
        body = request_body(receive) if has_body(scope) else None
        response = await self.open(scope["method"], path_and_query, headers, body)
        try:
            await self._respond(scope, receive, send, response, sse_lost)
        finally:
            await response.aclose()
        return response.status_code

    async def _respond(
        self, scope: Scope, receive: Receive, send: Send, response: httpx.Response, sse_lost: bytes
    ) -> None:
        content_type = response.headers.get("content-type", "")
        sse = content_type.startswith("text/event-stream")
        length = response.headers.get("content-length", "")
        if not sse and length.isdigit() and int(length) <= SMALL_BODY:
            try:
                body = await response.aread()
            except httpx.TransportError as err:
                raise UpstreamUnavailable(
                    f"The {self.name} went away mid-response ({err!r})."
                ) from err
            await send(_start(response, keep_length=True))
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await send(_start(response, keep_length=not sse))
        pump = self._pump(scope, response, send, sse, sse_lost)
        if await unless_client_leaves(pump, receive):
            log.debug("[%s] op=client-gone path=%s sse=%s", self.area, scope["path"], sse)

    async def _pump(
        self, scope: Scope, response: httpx.Response, send: Send, sse: bool, sse_lost: bytes
    ) -> None:
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
            path = scope["path"]
            fields = kv(op="upstream-lost", upstream=self.name, path=path, sse=sse, error=err)
            log.warning("[%s] %s", self.area, fields)
            if sse:
                await send({"type": "http.response.body", "body": sse_lost, "more_body": False})
            # A plain body is left unfinished on purpose: the client sees a truncated
            # transfer rather than a short response that looks complete.
            return
        await send({"type": "http.response.body", "body": pending, "more_body": False})


def _start(response: httpx.Response, keep_length: bool) -> Message:
    return {
        "type": "http.response.start",
        "status": response.status_code,
        "headers": downstream_headers(response.headers.raw, keep_length=keep_length),
    }
