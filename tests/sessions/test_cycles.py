"""500 spawn/stop cycles, half stopped by the operator and half ending by themselves: the
manager's open descriptors and children return to their baseline (read from /proc), and no
zombie is left."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tests.sessions.conftest import Manager, children
from tests.support.processes import open_fds, wait_until, wait_until_async

CYCLES = 500
PARALLEL = 4


async def cycle(client: httpx.AsyncClient, i: int) -> str:
    """One spawn and its end; return how it ended."""
    if i % 2:
        response = await client.post(
            "/rc-spawn", json={"message": f"c{i} [double exit_after_turn=1]"}
        )
        assert response.status_code == 201, response.text
        token = response.json()["row"]["id"]

        async def reaped() -> bool:  # the process ends by itself; "attached" turns false then
            row = (await client.get(f"/{token}")).json()["row"]
            return bool(row["state"] == "archived" and not row["attached"])

        await wait_until_async(reaped, 60, f"session {token} to end by itself")
        return "natural"
    response = await client.post("/rc-spawn", json={})
    assert response.status_code == 201, response.text
    stopped = await client.post(f"/{response.json()['row']['id']}/stop")
    assert stopped.status_code == 200 and stopped.json()["stopped"] is True
    return "operator"


async def run_cycles(manager: Manager, indexes: range) -> list[str]:
    transport = httpx.AsyncHTTPTransport(uds=str(manager.socket))
    async with httpx.AsyncClient(transport=transport, base_url="http://m", timeout=60) as client:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in indexes:
            queue.put_nowait(i)
        ends: list[str] = []

        async def worker() -> None:
            while not queue.empty():
                ends.append(await cycle(client, queue.get_nowait()))

        await asyncio.gather(*(worker() for _ in range(PARALLEL)))
        return ends


def settled(pid: int, fds: int) -> bool:
    """No child left and no more descriptors than at the start (connections may close late)."""
    return children(pid) == [] and open_fds(pid) <= fds


def steady_fds(pid: int) -> int:
    """The descriptor count once it stops moving."""
    counts = [open_fds(pid)]
    while len(counts) < 3 or len(set(counts[-3:])) > 1:
        time.sleep(0.2)
        counts.append(open_fds(pid))
    return counts[-1]


def test_spawn_stop_cycles_leak_no_descriptor_child_or_zombie(start_manager: Any) -> None:
    manager: Manager = start_manager(pty_cap=PARALLEL)
    pid = manager.status()["pid"]
    asyncio.run(run_cycles(manager, range(4)))  # warm up: lazily made threads, files, pools
    wait_until(lambda: children(pid) == [], 10, "warm-up children reaped")
    baseline = steady_fds(pid)

    ends = asyncio.run(run_cycles(manager, range(CYCLES)))
    assert sorted(set(ends)) == ["natural", "operator"] and len(ends) == CYCLES

    wait_until(
        lambda: settled(pid, baseline),
        15,
        f"children {children(pid)} and {open_fds(pid)} fds back to {baseline}",
    )
    assert all(state != "Z" for _, state in children(pid))
    status = manager.status()
    assert status["caps"]["total"] == 0
    assert status["audit"] == {
        "liveTrackers": 0,
        "archivedWithMaster": 0,
        "orphanLiveSessionsNoMaster": 0,
    }
    assert status["rows"]["live"] == 0
