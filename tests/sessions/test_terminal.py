"""The WebSocket terminal bridge: replay by sequence number, resize by the active viewer,
slow viewers dropped to resync, the end of a session."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import ConnectionClosed

from tests.sessions.conftest import Manager, ended
from tests.support.processes import wait_until_async

pytestmark = pytest.mark.anyio


class Viewer:
    """A terminal client that tracks the sequence number of the next byte."""

    def __init__(self, ws: ClientConnection, sync: dict[str, Any]) -> None:
        self.ws = ws
        self.sync = sync
        self.seq = int(sync["seq"])
        self.output = bytearray()

    async def read_until(self, needle: bytes, timeout: float = 10.0, count: int = 1) -> bytes:
        """Read until ``needle`` has appeared ``count`` times in all the output so far."""

        async def loop() -> bytes:
            found, scanned = 0, 0
            while True:
                # Scan only new output (with an overlap): a flood must not make this quadratic.
                while (hit := self.output.find(needle, scanned)) != -1:
                    found, scanned = found + 1, hit + len(needle)
                if found >= count:
                    return bytes(self.output)
                scanned = max(scanned, len(self.output) - len(needle) + 1)
                frame = await self.ws.recv()
                if isinstance(frame, bytes):
                    self.output += frame
                    self.seq += len(frame)

        return await asyncio.wait_for(loop(), timeout)

    async def send(self, **message: Any) -> None:
        await self.ws.send(json.dumps(message))


async def connect(manager: Manager, token: str, resume: int | None = None) -> Viewer:
    query = f"?resume={resume}" if resume is not None else ""
    ws = await unix_connect(str(manager.socket), f"ws://manager/{token}/terminal{query}")
    sync = json.loads(await ws.recv())
    assert sync["type"] == "sync"
    return Viewer(ws, sync)


async def test_a_viewer_gets_the_screen_and_can_type(manager: Manager) -> None:
    row = manager.spawn()
    viewer = await connect(manager, row["id"])
    assert viewer.sync["reset"] is True and viewer.sync["seq"] == 0
    await viewer.read_until(b"claude double")
    await viewer.send(type="input", data="typed in the terminal\r")
    await viewer.read_until(b"Reply 1")
    assert manager.wait_row(row["id"], lambda r: r["turnEnded"])["prompts"] == 1
    await viewer.ws.close()


async def test_resume_replays_only_what_was_missed(manager: Manager) -> None:
    row = manager.spawn()
    first = await connect(manager, row["id"])
    await first.read_until(b"claude double")
    seq = first.seq
    await first.ws.close()
    manager.request("POST", f"/{row['id']}/input", json={"text": "!flood 100"})
    again = await connect(manager, row["id"], resume=seq)
    assert again.sync == {"type": "sync", "seq": seq, "reset": False}
    output = await again.read_until(b"flood done")
    assert b"claude double" not in output and b"y" * 100 in output
    await again.ws.close()


async def test_resume_from_bytes_the_ring_dropped_resets(manager: Manager) -> None:
    row = manager.spawn()
    first = await connect(manager, row["id"])
    await first.read_until(b"claude double")
    old = first.seq
    await first.ws.close()
    watcher = await connect(manager, row["id"], resume=old)
    manager.request("POST", f"/{row['id']}/input", json={"text": "!flood 700000"})
    await watcher.read_until(b"flood done", 30)  # more than the ring holds has gone by
    await watcher.ws.close()
    probe = await connect(manager, row["id"], resume=old)
    assert probe.sync["reset"] is True and probe.sync["seq"] > old
    await probe.read_until(b"flood done", 30)
    await probe.ws.close()


async def test_the_pty_follows_the_active_viewers_size(manager: Manager) -> None:
    row = manager.spawn()
    a = await connect(manager, row["id"])
    b = await connect(manager, row["id"])
    await a.send(type="resize", rows=30, cols=100)
    await b.send(type="resize", rows=50, cols=150)  # not the active viewer: ignored for now
    await a.send(type="input", data="!size\r")
    await a.read_until(b"size 30x100")
    await b.send(type="focus")
    await b.send(type="input", data="!size\r")
    await b.read_until(b"size 50x150")
    await b.ws.close()

    async def a_is_active_again() -> bool:  # once the manager has seen b go
        sizes = a.output.count(b"size ")
        await a.send(type="input", data="!size\r")
        await a.read_until(b"size ", count=sizes + 1)
        return a.output.rsplit(b"size ", 1)[1].startswith(b"30x100")

    await wait_until_async(a_is_active_again, 10, "the PTY to take a's size again", 0)
    await a.ws.close()


async def test_a_slow_viewer_is_dropped_and_others_keep_up(manager: Manager) -> None:
    row = manager.spawn()
    slow = await unix_connect(
        str(manager.socket), f"ws://manager/{row['id']}/terminal", max_queue=1, max_size=None
    )
    fast = await connect(manager, row["id"])
    await fast.read_until(b"claude double")
    manager.request("POST", f"/{row['id']}/input", json={"text": "!flood 8000000"})
    await fast.read_until(b"flood done", 60)
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(slow.recv(), 30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4000
    assert closed.value.rcvd.reason == "resync"
    await fast.ws.close()


async def test_the_viewer_learns_the_session_ended(manager: Manager) -> None:
    row = manager.spawn()
    viewer = await connect(manager, row["id"])
    await viewer.send(type="input", data="/exit\r")
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            frame = await asyncio.wait_for(viewer.ws.recv(), 10)
            if isinstance(frame, str):
                assert json.loads(frame) == {"type": "ended", "code": 0}
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


@pytest.mark.parametrize(("live", "code"), [(False, 4404), (True, 4409)])
async def test_no_terminal_for_unknown_or_ended_sessions(
    manager: Manager, live: bool, code: int
) -> None:
    token = "00000000-0000-4000-8000-000000000000"
    if live:
        row = manager.spawn("x [double exit_after_turn=1]")
        manager.wait_row(row["id"], ended)
        token = row["id"]
    ws = await unix_connect(str(manager.socket), f"ws://manager/{token}/terminal")
    error = json.loads(await ws.recv())
    with pytest.raises(ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == code
    assert error["code"] == ("session-not-found" if code == 4404 else "session-not-live")
