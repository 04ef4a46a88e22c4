"""The engine and the manager SIGKILLed under `maxy run`, in the middle of their work.

The engine dies while admin searches stream through the app: every search is answered (200, or
503 with the engine-unavailable JSON error; never a hang, a 5xx of another kind or a traceback),
the supervisor starts a new engine, and searches work again. The manager dies while sessions of
the `claude` double are live, one of them in the middle of a turn: the supervisor starts a new
manager, and its registry rebuilds every row from the files on disk.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from appliance.core.proc import pid_alive
from tests.sessions.conftest import Manager, ended
from tests.support.processes import wait_until
from tests.support.stacks import DOUBLE, Stack, answers, supervised_stack

SEARCHERS = 4


@pytest.fixture(scope="module")
def device(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`maxy run` whose manager runs the `claude` double."""
    root = tmp_path_factory.mktemp("crashes")
    double = {
        "MAXY_CLAUDE_BIN": str(DOUBLE),
        "CLAUDE_DOUBLE_PYTHON": sys.executable,
        "MAXY_STOP_GRACE": "1",
    }
    with supervised_stack(root, data=root / "data", **double) as stack:
        yield stack


def restarted(stack: Stack, role: str, old: int) -> bool:
    pid = stack.supervised_pid(role)
    return pid is not None and pid != old


@pytest.mark.timeout(600)
def test_engine_killed_during_searches_answers_503_then_searches_again(device: Stack) -> None:
    for n in range(5):
        device.rpc("write", {"label": "Note", "properties": {"name": f"Boiler service {n}"}})
    cookies = device.admin_cookies()
    answers_seen: list[httpx.Response] = []
    failures: list[str] = []
    stop = threading.Event()

    def search() -> None:
        with device.client(cookies) as client:
            while not stop.is_set():
                try:
                    answer = client.get("/api/admin/search", params={"q": "boiler"})
                except httpx.HTTPError as err:  # a hang ends as a timeout here
                    failures.append(f"{type(err).__name__}: {err}")
                    continue
                answers_seen.append(answer)
                if answer.status_code != 200:
                    stop.wait(0.05)  # no busy loop of 503s while the engine restarts

    def count(status: int) -> int:
        return sum(1 for a in list(answers_seen) if a.status_code == status)

    threads = [threading.Thread(target=search, daemon=True) for _ in range(SEARCHERS)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: count(200) >= 10, 120, "searches before the crash")
        engine = device.supervised_pid("engine")
        assert engine is not None
        os.killpg(engine, signal.SIGKILL)
        wait_until(lambda: count(503) > 0, 60, "a 503 while the engine is down")
        wait_until(lambda: restarted(device, "engine", engine), 60, "the engine restarted")
        before = count(200)
        wait_until(lambda: count(200) > before + 5, 240, "searches after the restart")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not failures, failures[:5]
    statuses = Counter(a.status_code for a in answers_seen)
    assert set(statuses) <= {200, 503}, statuses
    for answer in answers_seen:
        if answer.status_code == 503:
            body = answer.json()
            assert body["code"] == "engine-unavailable", body
            assert "memory engine is not answering" in body["message"], body
            assert "Traceback" not in answer.text
    assert device.processes["run"].proc.poll() is None
    print(f"\n[engine-kill] answers={dict(statuses)} failures={len(failures)}")


def manager_of(stack: Stack) -> Manager:
    """The tests' manager client, on the supervised manager's socket."""
    settings = stack.env.settings
    return Manager(
        stack.processes["run"],
        stack.env.vars,
        settings.data_dir,
        settings.runtime_dir,
        stack.env.account_id,
    )


def rows(manager: Manager) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in manager.request("GET", "/sessions").json()["rows"]}


@pytest.mark.timeout(600)
def test_manager_killed_under_a_running_turn_rebuilds_every_row(device: Stack) -> None:
    manager = manager_of(device)
    done = manager.spawn("hello [double title=Finished exit_after_turn=1]")
    manager.wait_row(done["id"], ended)
    idle = manager.spawn("hello [double title=Idle]")
    manager.wait_row(idle["id"], lambda r: r["turnEnded"] and r["title"] == "Idle")
    # Two sessions in the middle of a turn: one dies with the PTY, one outlives it.
    busy = manager.spawn("think hard [double hold=1]")
    survivor = manager.spawn("think harder [double hold=1 ignore_hup=1]")
    for row in (busy, survivor):
        manager.wait_row(row["id"], lambda r: r["status"] == "busy" and r["transcript"])
    before = rows(manager)
    assert {done["id"], idle["id"], busy["id"], survivor["id"]} <= set(before)

    old = device.supervised_pid("manager")
    assert old is not None
    os.killpg(old, signal.SIGKILL)  # the manager and its worker at once: no shutdown at all
    wait_until(lambda: restarted(device, "manager", old), 60, "the manager restarted")
    wait_until(lambda: answers(manager.socket), 60, "the new manager to answer")

    after = rows(manager)
    assert set(after) == set(before), (sorted(before), sorted(after))
    for session_id, row in before.items():
        again = after[session_id]
        assert again["title"] == row["title"] and again["kind"] == row["kind"], (row, again)
    assert after[done["id"]]["state"] == "archived"
    assert pid_alive(survivor["pid"])
    assert after[survivor["id"]]["state"] == "live" and after[survivor["id"]]["attached"] is False
    wait_until(lambda: not pid_alive(busy["pid"]), 30, "the busy session to die with its PTY")
    manager.wait_row(busy["id"], lambda r: r["state"] == "archived")
    # The new manager runs sessions again, and stops the orphan it inherited.
    fresh = manager.spawn("hello again [double title=Fresh]")
    manager.wait_row(fresh["id"], lambda r: r["turnEnded"] and r["title"] == "Fresh")
    assert manager.stop(survivor["id"])["row"]["state"] == "archived"
    wait_until(lambda: not pid_alive(survivor["pid"]), 30, "the orphan to be gone")
    manager.stop(fresh["id"])
    states = Counter(r["state"] for r in after.values())
    print(f"\n[manager-kill] rows_before={len(before)} rows_after={len(after)} {dict(states)}")
