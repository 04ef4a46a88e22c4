"""``GET /events``: the session rows as Server-Sent Events.

On connect the current index is replayed as one ``snapshot`` event (``{"rows": [...]}``); then
each delta follows as ``row-created``, ``row-updated``, ``row-archived`` or ``row-removed``
(``{"id", "row"}``, or ``{"id"}`` for a removal). Every event carries an id
``<epoch>:<seq>``; a client reconnecting with ``Last-Event-ID`` gets only the deltas it missed
when this manager still holds them, else a fresh snapshot. A comment line keeps idle connections
open every ``manager_keepalive`` seconds (25 by default).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from appliance.sessions.registry import Delta, Registry, Subscription

RETRY_MS = 1000


def frame(event: str, event_id: str, data: Any) -> bytes:
    """One SSE event."""
    return f"event: {event}\nid: {event_id}\ndata: {json.dumps(data)}\n\n".encode()


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


async def _events(
    registry: Registry,
    subscription: Subscription,
    backlog: list[Delta] | None,
    snapshot: tuple[str, list[Any]] | None,
    keepalive: float,
) -> AsyncGenerator[bytes, None]:
    try:
        yield f"retry: {RETRY_MS}\n\n".encode()
        if snapshot is not None:
            last_id, rows = snapshot
            yield frame("snapshot", last_id, {"rows": rows})
        else:
            assert backlog is not None
            for delta in backlog:
                yield frame(delta.event, delta.id, delta.data)
        while not subscription.overflowed:
            try:
                delta = await asyncio.wait_for(subscription.queue.get(), keepalive)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            yield frame(delta.event, delta.id, delta.data)
    finally:
        registry.unsubscribe(subscription)


def feed_response(request: Request, registry: Registry, keepalive: float) -> EventStream:
    """Subscribe now (so nothing is missed) and stream the feed."""
    last_event_id = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
    # Subscribing and taking the snapshot in one step: no delta is both in it and queued.
    subscription, backlog = registry.subscribe(last_event_id)
    snapshot = registry.snapshot() if backlog is None else None
    return EventStream(_events(registry, subscription, backlog, snapshot, keepalive))
