"""Safeguards through the HTTP interface: specialist cap and eviction, operator reserve, total
cap, free memory, 50 concurrent spawns, the idle reaper."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import httpx

from appliance.sessions.caps import available_mb
from tests.sessions.conftest import Manager, children
from tests.support.processes import wait_until

REFUSALS = {"specialist-cap-reached", "operator-slots-reserved", "pty-cap-reached", "memory-low"}


def refusal(manager: Manager, **body: Any) -> dict[str, Any]:
    response = manager.request("POST", "/rc-spawn", json=body)
    assert response.status_code == 429, response.text
    answer: dict[str, Any] = response.json()
    return answer


def refused(manager: Manager, **body: Any) -> str:
    code: str = refusal(manager, **body)["code"]
    return code


def free_mb() -> int:
    free = available_mb()
    assert free is not None, "/proc/meminfo has no MemAvailable"
    return free


def test_a_spawn_the_free_memory_cannot_hold_is_refused_and_starts_nothing(
    start_manager: Any,
) -> None:
    need = free_mb() * 4
    manager: Manager = start_manager(session_memory_mb=need)
    worker = manager.status()["pid"]
    answer = refusal(manager, message="one too many")
    assert answer["code"] == "memory-low" and answer["need"] == need, answer
    assert "MAXY_SESSION_MEMORY_MB" in answer["message"], answer
    assert answer["starting"] == 0
    assert children(worker) == [] and manager.status()["caps"]["total"] == 0


def test_a_session_still_starting_counts_against_the_free_memory(start_manager: Any) -> None:
    """Two spawns at once must not both take the same free memory: the first, still starting,
    is counted at its share; once it is up, what it really takes is what counts."""
    manager: Manager = start_manager(session_memory_mb=free_mb() * 6 // 10)
    first: list[int] = []
    slow = threading.Thread(
        target=lambda: first.append(
            manager.request(
                "POST", "/rc-spawn", json={"message": "slow [double start_delay=4]"}
            ).status_code
        )
    )
    slow.start()
    wait_until(lambda: manager.status()["caps"]["total"] == 1, 10, "the first slot taken")
    answer = refusal(manager, message="second")
    assert answer["code"] == "memory-low" and answer["starting"] == 1, answer
    assert "less 1 session(s) still starting" in answer["message"]
    slow.join(30)
    assert first == [201]
    manager.spawn("third, once the first is up")
    assert manager.status()["caps"]["total"] == 2


def test_a_fourth_specialist_is_refused_when_all_are_busy(start_manager: Any) -> None:
    manager: Manager = start_manager(specialist_cap=3, operator_reserve=2, pty_cap=8)
    busy = [manager.spawn("work [double hold=1]", specialist=True) for _ in range(3)]
    for row in busy:
        manager.wait_row(row["id"], lambda r: r["status"] == "busy")
    assert refused(manager, message="one more", specialist=True) == "specialist-cap-reached"
    assert manager.status()["caps"]["specialists"] == 3
    manager.spawn("the operator still gets a session")


def test_a_fourth_specialist_evicts_the_oldest_idle_one(start_manager: Any) -> None:
    manager: Manager = start_manager(specialist_cap=3, operator_reserve=2, pty_cap=8)
    rows = [manager.spawn(f"job {i}", specialist=True) for i in range(3)]
    for row in rows:
        manager.wait_row(row["id"], lambda r: r["status"] == "idle" and r["turnEnded"])
    feed = manager.feed()
    feed.next()
    newest = manager.spawn("job 3", specialist=True)
    assert manager.row(rows[0]["id"])["state"] == "archived"  # type: ignore[index]
    assert [manager.row(r["id"])["state"] for r in rows[1:]] == ["live", "live"]  # type: ignore[index]
    events = feed.until(lambda e: e.data["id"] == newest["id"])
    assert [(e.event, e.data["id"]) for e in events if e.event != "row-updated"] == [
        ("row-archived", rows[0]["id"]),
        ("row-created", newest["id"]),
    ]
    assert manager.status()["caps"]["specialists"] == 3
    assert f"op=evict id={rows[0]['id']} reason=specialist-cap" in manager.output()


def test_operator_slots_are_reserved_and_the_total_cap_holds(start_manager: Any) -> None:
    manager: Manager = start_manager(specialist_cap=3, operator_reserve=2, pty_cap=5)
    manager.spawn("operator 1")
    manager.spawn("operator 2")
    manager.spawn("specialist 1", specialist=True)
    # 3 of 5 slots taken: the last 2 belong to the operator.
    assert refused(manager, message="specialist 2", specialist=True) == "operator-slots-reserved"
    manager.spawn("operator 3")
    manager.spawn("operator 4")
    assert refused(manager, message="operator 5") == "pty-cap-reached"
    assert manager.status()["caps"]["total"] == 5


async def spawn_many(manager: Manager, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    transport = httpx.AsyncHTTPTransport(uds=str(manager.socket))
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://manager", timeout=60, limits=limits
    ) as client:
        return list(await asyncio.gather(*(client.post("/rc-spawn", json=b) for b in bodies)))


def test_fifty_concurrent_spawns_hold_the_caps_exactly(start_manager: Any) -> None:
    # The slot caps alone: eight sessions starting at once would count 8 GB against free memory.
    manager: Manager = start_manager(
        specialist_cap=3, operator_reserve=2, pty_cap=8, session_memory_mb=0
    )
    worker = manager.status()["pid"]
    bodies = [
        {"message": f"s{i} [double hold=1]", "specialist": True} if i % 2 else {"message": f"o{i}"}
        for i in range(50)
    ]
    responses = asyncio.run(spawn_many(manager, bodies))
    created = [(b, r) for b, r in zip(bodies, responses, strict=True) if r.status_code == 201]
    codes = Counter(r.json()["code"] for r in responses if r.status_code != 201)
    assert {r.status_code for r in responses} <= {201, 429}
    assert len(created) == 8  # enough demand to fill every slot, never more
    specialists = sum(1 for body, _ in created if body.get("specialist"))
    assert specialists <= 3 and len(created) - specialists >= 2
    assert set(codes) <= REFUSALS and sum(codes.values()) == 42
    assert codes["pty-cap-reached"] >= 1  # operators asked for more than the cap
    status = manager.status()["caps"]
    assert status["total"] == 8 and status["specialists"] == specialists
    live = [(pid, state) for pid, state in children(worker)]
    assert len(live) == 8 and all(state != "Z" for _, state in live)
    manager.stop_all()
    wait_until(lambda: children(worker) == [], 10, "every child reaped")


def test_the_idle_reaper_stops_silent_specialists_but_never_busy_ones(start_manager: Any) -> None:
    manager: Manager = start_manager(idle_reap_interval=0.2, idle_limit=1)
    idle = manager.spawn("done quickly", specialist=True)
    busy = manager.spawn("long job [double hold=1]", specialist=True)
    operator = manager.spawn("the operator's own")
    manager.wait_row(busy["id"], lambda r: r["status"] == "busy")
    manager.wait_row(idle["id"], lambda r: r["state"] == "archived", timeout=15)
    assert f"op=idle-reap id={idle['id']}" in manager.output()
    # The busy one has been silent as long: let the reaper pass over it again, until it has
    # reaped a second idle specialist started only now (more than idle_limit later).
    later = manager.spawn("done quickly too", specialist=True)
    manager.wait_row(later["id"], lambda r: r["state"] == "archived", timeout=15)
    assert manager.row(busy["id"])["state"] == "live"  # type: ignore[index]
    assert manager.row(operator["id"])["state"] == "live"  # type: ignore[index]
    assert f"op=idle-reap id={busy['id']}" not in manager.output()
