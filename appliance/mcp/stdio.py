"""MCP over stdio for one plugin's tools: JSON-RPC 2.0, one message a line, the handshake era.

A session runs one ``maxy mcp`` per plugin, nine on a full install, each for the session's whole
life. The MCP SDK's server imports its HTTP stack and both protocol eras' pydantic models even for
stdio: nine servers took 556 MB with it and take 339 without (PSS, ``just bench-memory``), on a Pi
that holds two sessions in 4 GB (README, Memory). What a tools-only server speaks is small, so it
is spoken here:

- ``initialize``: the client's ``protocolVersion`` when it is one of :data:`PROTOCOL_VERSIONS`,
  else the newest of them; ``capabilities`` ``{"tools": {"listChanged": false}}``, ``serverInfo``
  and the plugin's ``instructions``. ``notifications/initialized`` needs no answer.
- ``ping``, ``tools/list`` (every tool in one page) and ``tools/call``.
- ``notifications/cancelled`` cancels that request's call; a cancelled request gets no answer.
- Anything else, ``server/discover`` (the stateless era's probe) included, is "Method not found"
  (-32601): a client of both eras then falls back to ``initialize``. A line that is not JSON is a
  parse error (-32700), a message that is not a request an invalid request (-32600), a call
  without a tool name invalid parameters (-32602).
- Requests run concurrently, each in its own task; answers go out as they finish.
- Stdout is the protocol: fd 1 is pointed at stderr once the protocol has its own copy, so a
  stray ``print`` in a tool can never corrupt a message.
- End of input ends the server: calls still running are cancelled.

The SDK's client and the real Claude Code CLI talk to it in the tests (tests/mcp/test_server.py,
tests/mcp/test_stdio.py, tests/sessions/test_real_cli.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import date, datetime
from typing import IO, Any, Protocol

log = logging.getLogger(__name__)

# The handshake era's revisions, oldest first (the stateless 2026-07-28 era has no initialize).
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class Tools(Protocol):
    """What a plugin's server answers with."""

    name: str
    version: str
    instructions: str | None

    def list_tools(self) -> list[dict[str, Any]]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]: ...


class RequestError(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.data = code, data


def _json_default(value: object) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def encode(message: dict[str, Any]) -> bytes:
    """One message as one line of JSON."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=_json_default)
    return text.encode("utf-8") + b"\n"


class Session:
    """One client on a pair of byte streams: reads requests, runs them, writes answers."""

    def __init__(self, tools: Tools, write: Callable[[bytes], None]) -> None:
        self.tools = tools
        self._write = write
        self._running: dict[Any, asyncio.Task[None]] = {}

    def send(self, message: dict[str, Any]) -> None:
        self._write(encode({"jsonrpc": "2.0", **message}))

    def receive(self, line: bytes) -> None:
        """Handle one line of input (called on the event loop)."""
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError as err:
            self._error(None, RequestError(PARSE_ERROR, "Parse error", str(err)))
            return
        if not isinstance(message, dict) or not isinstance(message.get("method", ""), str):
            self._error(None, RequestError(INVALID_REQUEST, "Invalid request"))
            return
        method = message.get("method")
        if method is None:
            return  # an answer to a request of ours: this server sends none
        if "id" not in message:
            self._notified(method, message.get("params"))
            return
        request_id = message["id"]
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            self._error(None, RequestError(INVALID_REQUEST, "Invalid request id"))
            return
        task = asyncio.get_running_loop().create_task(
            self._answer(request_id, method, message.get("params"))
        )
        self._running[request_id] = task
        task.add_done_callback(lambda _t: self._running.pop(request_id, None))

    def _notified(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            task = self._running.get(params.get("requestId"))
            if task is not None:
                log.info("[mcp] op=cancelled request=%s", params.get("requestId"))
                task.cancel()

    async def _answer(self, request_id: str | int, method: str, params: Any) -> None:
        try:
            result = await self._dispatch(method, params if params is not None else {})
        except asyncio.CancelledError:
            return  # cancelled by the client (no answer) or at the end of input
        except RequestError as err:
            self._error(request_id, err)
            return
        except Exception as err:
            log.exception("[mcp] error op=%s", method)
            self._error(request_id, RequestError(INTERNAL_ERROR, f"{type(err).__name__}: {err}"))
            return
        self.send({"id": request_id, "result": result})

    def _error(self, request_id: str | int | None, err: RequestError) -> None:
        error: dict[str, Any] = {"code": err.code, "message": str(err)}
        if err.data is not None:
            error["data"] = err.data
        self.send({"id": request_id, "error": error})

    async def _dispatch(self, method: str, params: Any) -> dict[str, Any]:
        if not isinstance(params, dict):
            raise RequestError(INVALID_PARAMS, "Invalid params: an object is expected")
        if method == "initialize":
            return self._initialize(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": self.tools.list_tools()}
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments")
            if not isinstance(name, str):
                raise RequestError(INVALID_PARAMS, "Invalid params: tools/call needs a name")
            if arguments is not None and not isinstance(arguments, dict):
                raise RequestError(INVALID_PARAMS, "Invalid params: arguments must be an object")
            return await self.tools.call_tool(name, arguments or {})
        raise RequestError(METHOD_NOT_FOUND, "Method not found", method)

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.tools.name, "version": self.tools.version},
        }
        if self.tools.instructions:
            result["instructions"] = self.tools.instructions
        client = params.get("clientInfo")
        name = client.get("name", "-") if isinstance(client, dict) else "-"
        log.info("[mcp] op=initialize version=%s client=%s", version, name)
        return result

    async def close(self) -> None:
        """Cancel what still runs and wait for it."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _read_lines(source: IO[bytes], deliver: Callable[[bytes | None], None]) -> None:
    for line in iter(source.readline, b""):
        deliver(line)
    deliver(None)


def serve(tools: Tools) -> None:
    """Serve ``tools`` on this process's stdin and stdout until the client closes stdin."""
    # The protocol's own stdout; fd 1 now writes to stderr, so nothing else lands in the stream.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    asyncio.run(_serve(tools, sys.stdin.buffer, out))


async def _serve(tools: Tools, source: IO[bytes], out: IO[bytes]) -> None:
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes | None] = asyncio.Queue()

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    session = Session(tools, write)

    def deliver(line: bytes | None) -> None:
        loop.call_soon_threadsafe(lines.put_nowait, line)

    # A thread reads: stdin may be a pipe, a socket or a file, and a line may be megabytes.
    threading.Thread(target=_read_lines, args=(source, deliver), daemon=True).start()
    try:
        while (line := await lines.get()) is not None:
            session.receive(line)
    finally:
        await session.close()
