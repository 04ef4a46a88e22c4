"""Server-Sent Events: the one frame writer and the one streaming response.

Used by the session manager's feed, the app's update progress and public chat, and the edge's
``restarting`` event. :class:`EventStream` stops producing as soon as the client disconnects.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

from starlette.types import Receive, Scope, Send


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    """One SSE event: ``event``, an optional ``id`` and ``data`` as compact JSON."""
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return (
        head + "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n"
    ).encode()


class EventStream:
    """An SSE response that stops as soon as the client disconnects."""

    def __init__(self, events: AsyncGenerator[bytes, None]) -> None:
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )

        async def pump() -> None:
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(disconnected())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                try:
                    await task
                except (asyncio.CancelledError, OSError):
                    pass
            await self.events.aclose()
        for task in done:
            if task is tasks[0] and not task.cancelled() and task.exception() is None:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
