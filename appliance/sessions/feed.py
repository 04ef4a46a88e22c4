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
from collections.abc import AsyncGenerator
from typing import Any

from starlette.requests import Request

from appliance.sessions.registry import Delta, Registry, Subscription
from appliance.web.sse import EventStream, frame

RETRY_MS = 1000


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
            yield frame("snapshot", {"rows": rows}, last_id)
        else:
            assert backlog is not None
            for delta in backlog:
                yield frame(delta.event, delta.data, delta.id)
        while not subscription.overflowed:
            try:
                delta = await asyncio.wait_for(subscription.queue.get(), keepalive)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            yield frame(delta.event, delta.data, delta.id)
    finally:
        registry.unsubscribe(subscription)


def feed_response(request: Request, registry: Registry, keepalive: float) -> EventStream:
    """Subscribe now (so nothing is missed) and stream the feed."""
    last_event_id = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
    # Subscribing and taking the snapshot in one step: no delta is both in it and queued.
    subscription, backlog = registry.subscribe(last_event_id)
    snapshot = registry.snapshot() if backlog is None else None
    return EventStream(_events(registry, subscription, backlog, snapshot, keepalive))
