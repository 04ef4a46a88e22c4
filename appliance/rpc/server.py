"""Serve named async handlers over the frame protocol on a Unix socket.

A handler's exception becomes the caller's error: one of the server's listed ``errors`` keeps
its ``code``; :class:`~appliance.rpc.protocol.BadParams` is ``bad-request``; anything else is
a bug, logged with its traceback and answered ``internal``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from appliance.rpc.protocol import BadParams, ProtocolError, encode_frame, read_frame

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
ProgressSink = Callable[[dict[str, Any]], Awaitable[None]]

# Set for the duration of each request: lets a long handler stream progress frames.
_progress: ContextVar[ProgressSink | None] = ContextVar("rpc_progress", default=None)


async def report_progress(event: dict[str, Any]) -> None:
    """Send ``{id, progress: event}`` to the caller of the current request (no-op outside one)."""
    sink = _progress.get()
    if sink is not None:
        await sink(event)


class RpcServer:
    """Dispatch requests to handlers; replies may come back in any order."""

    def __init__(
        self, handlers: dict[str, Handler], errors: tuple[type[Exception], ...] = ()
    ) -> None:
        self.handlers = handlers
        # Exceptions that are answers, not bugs: each carries a ``code`` the client sees.
        self.errors = errors

    async def _reply(self, request: dict[str, Any]) -> dict[str, Any]:
        request_id = request.get("id")
        method = request.get("method")
        params = request.get("params") or {}
        handler = self.handlers.get(method) if isinstance(method, str) else None
        if handler is None:
            return _error(request_id, "unknown-method", f"no method {method!r}")
        if not isinstance(params, dict):
            return _error(request_id, "bad-request", "params must be a map")
        try:
            return {"id": request_id, "result": await handler(params)}
        except self.errors as err:
            return _error(request_id, getattr(err, "code", "error"), str(err))
        except BadParams as err:
            # The one explicit "your params are wrong": a KeyError or TypeError is a bug.
            message = str(err) if str(err).startswith(f"{method}:") else f"{method}: {err}"
            return _error(request_id, "bad-request", message)
        except Exception as err:
            # A bug in a handler: log it with its traceback, and still answer so the caller
            # does not hang.
            log.exception("[rpc] op=call error=internal method=%s", method)
            return _error(request_id, "internal", f"{method} failed: {type(err).__name__}: {err}")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client's connection, until it closes or the engine stops."""
        try:
            await self._converse(reader, writer)
        except asyncio.CancelledError:
            # The engine is stopping, and its calls were cancelled with this task: a stop, not
            # an error (Python 3.11's stream callback logs a cancelled task's traceback).
            writer.close()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lock = asyncio.Lock()
        tasks: set[asyncio.Task[None]] = set()

        async def answer(request: dict[str, Any]) -> None:
            async def progress(event: dict[str, Any]) -> None:
                async with lock:
                    writer.write(encode_frame({"id": request.get("id"), "progress": event}))
                    await writer.drain()

            _progress.set(progress)
            reply = await self._reply(request)
            try:
                frame = encode_frame(reply)
            except (TypeError, ValueError, ProtocolError) as err:
                log.error("[rpc] op=reply error=unencodable method=%s", request.get("method"))
                frame = encode_frame(_error(reply.get("id"), "internal", f"unencodable: {err}"))
            async with lock:
                writer.write(frame)
                await writer.drain()

        try:
            while (request := await read_frame(reader)) is not None:
                task = asyncio.create_task(answer(request))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except ProtocolError as err:
            log.warning("[rpc] op=read warn=protocol-error error=%s", err)
            async with lock:
                writer.write(encode_frame(_error(None, "protocol-error", str(err))))
        except ConnectionError:
            pass
        finally:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            writer.close()

    async def serve(self, path: Path) -> asyncio.AbstractServer:
        """Listen on ``path`` (owner-only), replacing a stale socket file."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.unlink(missing_ok=True)  # noqa: ASYNC240 -- once, before the server listens
        server = await asyncio.start_unix_server(self._connection, path=str(path))
        os.chmod(path, 0o600)
        log.info("[rpc] op=listen socket=%s", path)
        return server


def _error(request_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "error": {"code": code, "message": message}}
