"""``WS /<id>/terminal``: the browser's terminal (xterm.js) on a session's PTY.

Protocol. The server first sends a text frame ``{"type": "sync", "seq": N, "reset": bool}``, then
binary frames of terminal output; byte ``k`` after the sync has sequence number ``N + k``, so a
client always knows the sequence number of the next byte. Reconnecting with ``?resume=<seq>``
replays from ``seq`` out of the ring buffer; when those bytes are gone (or without ``resume``)
the sync says ``reset: true`` and the replay starts at the oldest byte kept — the client clears
its screen first. When the process exits the server sends ``{"type": "ended", "code": …}`` and
closes with 1000.

The client sends text frames: ``{"type": "input", "data": "…"}``, ``{"type": "resize", "rows":
…, "cols": …}`` and ``{"type": "focus"}``; binary frames are input bytes. The viewer that last
typed or focused is the active one, and the PTY takes its size. A viewer whose unsent output
grows past a budget is closed with code 4000 ("resync") instead of stalling the PTY for everyone;
it reconnects with ``?resume=``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from appliance.sessions.errors import SessionError
from appliance.sessions.manager import SessionManager
from appliance.sessions.pty import PtyHandle

log = logging.getLogger(__name__)

VIEWER_BUDGET = 2 * 1024 * 1024  # unsent bytes a viewer may fall behind before it is dropped
FRAME_BYTES = 256 * 1024  # output queued meanwhile is sent as one frame of at most this
CLOSE_RESYNC = 4000
CLOSE_NOT_FOUND = 4404
CLOSE_NOT_LIVE = 4409

Item = bytes | dict[str, Any] | None


class WebSocketViewer:
    """One browser tab on a PTY, with its own bounded queue of output."""

    def __init__(self, websocket: WebSocket, budget: int = VIEWER_BUDGET) -> None:
        self.websocket = websocket
        self.budget = budget
        self.pending = 0
        self.dropped = False
        self._items: deque[Item] = deque()
        self._ready = asyncio.Event()

    def _put(self, item: Item) -> None:
        self._items.append(item)
        self._ready.set()

    def control(self, message: dict[str, Any]) -> None:
        """Queue a control message."""
        self._put(message)

    def offer(self, seq: int, data: bytes) -> None:
        """Queue output, or drop this viewer when it is too far behind."""
        if self.dropped or not data:
            return
        if self.pending + len(data) > self.budget:
            self.dropped = True
            self._put(None)
            return
        self.pending += len(data)
        self._put(data)

    def ended(self, code: int) -> None:
        """Tell the client the process exited."""
        self._put({"type": "ended", "code": code})

    async def _next(self) -> Item:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()

    async def send_loop(self) -> None:
        """Send queued frames in order until the end or a drop."""
        while True:
            item = await self._next()
            if item is None:
                await self.websocket.close(CLOSE_RESYNC, "resync")
                return
            if isinstance(item, bytes):
                # Coalesce what queued up meanwhile: fewer, larger frames keep a reader up to speed.
                parts = [item]
                size = len(item)
                while size < FRAME_BYTES and self._items and isinstance(self._items[0], bytes):
                    part = self._items.popleft()
                    assert isinstance(part, bytes)
                    parts.append(part)
                    size += len(part)
                self.pending -= size
                await self.websocket.send_bytes(b"".join(parts))
                continue
            await self.websocket.send_text(json.dumps(item))
            if item.get("type") == "ended":
                await self.websocket.close(1000, "session ended")
                return


def _activate(handle: PtyHandle, viewer: WebSocketViewer) -> None:
    handle.active = viewer
    size = handle.sizes.get(viewer)
    if size:
        handle.resize(*size)


async def _receive_loop(handle: PtyHandle, viewer: WebSocketViewer) -> None:
    websocket = viewer.websocket
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes") is not None:
            _activate(handle, viewer)
            await handle.write(message["bytes"])
            continue
        try:
            command = json.loads(message.get("text") or "")
        except ValueError:
            continue
        if not isinstance(command, dict):
            continue
        kind = command.get("type")
        if kind == "input" and isinstance(command.get("data"), str):
            _activate(handle, viewer)
            await handle.write(command["data"].encode())
        elif kind == "resize":
            rows, cols = command.get("rows"), command.get("cols")
            if (
                isinstance(rows, int)
                and isinstance(cols, int)
                and 0 < rows < 1000
                and 0 < cols < 1000
            ):
                handle.sizes[viewer] = (rows, cols)
                if handle.active in (None, viewer):
                    _activate(handle, viewer)
        elif kind == "focus":
            _activate(handle, viewer)


async def terminal_endpoint(websocket: WebSocket, manager: SessionManager) -> None:
    """Bridge one WebSocket to a session's PTY."""
    token = websocket.path_params["token"]
    await websocket.accept()
    try:
        handle = manager.handle(token)
    except SessionError as err:
        await websocket.send_text(json.dumps(err.to_json()))
        code = CLOSE_NOT_FOUND if err.status == 404 else CLOSE_NOT_LIVE
        await websocket.close(code, err.code)
        return
    raw = websocket.query_params.get("resume")
    resume = int(raw) if raw is not None and raw.isdigit() else None
    viewer = WebSocketViewer(websocket)
    # Replay and subscription in one step, so no byte falls between them.
    start, backlog = handle.ring.since(resume if resume is not None else handle.ring.start)
    viewer.control({"type": "sync", "seq": start, "reset": start != resume})
    viewer.offer(start, backlog)
    handle.viewers.add(viewer)
    if handle.active is None:
        handle.active = viewer
    sender = asyncio.create_task(viewer.send_loop())
    receiver = asyncio.create_task(_receive_loop(handle, viewer))
    try:
        await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        handle.viewers.discard(viewer)
        handle.sizes.pop(viewer, None)
        if handle.active is viewer:
            # Another tab takes over; a non-browser viewer (the login's token reader) never does.
            handle.active = next(
                (other for other in handle.viewers if isinstance(other, WebSocketViewer)), None
            )
            if handle.active is not None:
                size = handle.sizes.get(handle.active)
                if size:
                    handle.resize(*size)
        for task in (sender, receiver):
            task.cancel()
        for task in (sender, receiver):
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                await task
        if viewer.dropped:
            log.info("[sessions] op=viewer-dropped id=%s reason=slow", handle.session_id)
    with contextlib.suppress(RuntimeError):
        await websocket.close()
