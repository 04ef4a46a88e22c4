"""A role killed outright takes its children with it: no orphaned server worker keeps running.

Each long-running role is started as `maxy <role>`; once it serves, its descendants are counted
from /proc, the role's own process gets SIGKILL (no chance to clean up), and every descendant
must be gone shortly after (the kernel's parent-death signal, see appliance.core.proc). The same
holds one level up: `maxy run` killed takes every role and its Neo4j, and `maxy neo4j run` (the
launcher the device's Neo4j unit runs) takes its Java server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance.core.accounts import create_account
from tests.support.processes import (
    Env,
    Process,
    health_status,
    neo4j_pid,
    private_neo4j,
    runtime_dir,
    wait_until,
)
from tests.support.stacks import account_env

pytestmark = pytest.mark.timeout(180)

READY: dict[str, Callable[[Env], bool]] = {
    "edge": lambda env: _listening_tcp(env.settings.port),
    "app": lambda env: env.settings.app_socket.exists(),
    "manager": lambda env: env.settings.manager_socket.exists(),
    "engine": lambda env: env.settings.engine_socket.exists(),
    "channels": lambda env: env.settings.engine_socket.exists(),
}
# Roles that serve from their one process: nothing of theirs to outlive them, which is checked
# as well (a library starting a helper process would show up here).
SINGLE = {"engine", "channels"}


def _listening_tcp(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def state(pid: int) -> str | None:
    """The process's state letter from /proc (None once it is gone)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    """Alive and not a zombie waiting for whoever adopted it to reap it."""
    return state(pid) not in (None, "Z", "X")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (by walking /proc's parent links)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def killed_leaves_nothing(process: Process, children: set[int], what: str, wait: float) -> None:
    """SIGKILL ``process``; every one of ``children`` must end within ``wait`` seconds."""
    os.kill(process.proc.pid, signal.SIGKILL)
    process.proc.wait(10)
    wait_until(
        lambda: not any(running(pid) for pid in children),
        wait,
        f"{what}'s children {sorted(pid for pid in children if running(pid))} to end after "
        f"it was killed\n{process.output()}",
    )


@pytest.mark.parametrize("role", sorted(READY))
def test_a_killed_role_leaves_no_process_behind(role: str, maxy_env: Env, start_maxy: Any) -> None:
    if role == "channels":  # it needs the engine it keeps every message in
        start_maxy(maxy_env, "engine")
    process: Process = start_maxy(maxy_env, role)
    wait_until(lambda: READY[role](maxy_env), 90, f"{role} serving\n{process.output()}")
    if role == "channels":
        wait_until(lambda: "[channels] op=start" in process.output(), 60, process.output())
    children: set[int] = set()

    def has_children() -> bool:
        children.update(descendants(process.proc.pid))
        return bool(children) or role in SINGLE

    wait_until(has_children, 30, f"{role}'s worker\n{process.output()}")
    killed_leaves_nothing(process, children, role, 30)


@pytest.mark.parametrize("role", ["edge", "app", "manager"])
def test_a_flood_of_sigterm_stops_a_server_role(role: str, maxy_env: Env, start_maxy: Any) -> None:
    """Signals keep coming while the role stops (a supervisor and the kernel both stopping it, an
    impatient operator): the server acts on the first and exits, never blocks in its handler."""
    process: Process = start_maxy(maxy_env, role)
    wait_until(lambda: READY[role](maxy_env), 90, f"{role} serving\n{process.output()}")
    flood_until = time.monotonic() + 10
    while process.proc.poll() is None and time.monotonic() < flood_until:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.proc.pid, signal.SIGTERM)
        time.sleep(0.0005)
    wait_until(lambda: process.proc.poll() is not None, 30, f"{role} to exit\n{process.output()}")


@pytest.mark.slow
def test_a_killed_supervisor_takes_every_role_and_neo4j_with_it(
    tmp_path: Path, start_maxy: Any
) -> None:
    data = tmp_path / "data"
    account = create_account(data / "accounts", "Owner")
    env = account_env(data, runtime_dir("maxy-run-"), account.id, **private_neo4j())
    run: Process = start_maxy(env, "run")
    wait_until(lambda: health_status(int(env["MAXY_PORT"])) == 200, 240, run.output(), 0.5)
    children = descendants(run.proc.pid)
    java = neo4j_pid(data / "neo4j")
    assert java in children, (java, sorted(children))
    assert len(children) >= 7, sorted(children)  # Neo4j, five roles, their workers
    # Neo4j takes its time to stop on the SIGTERM it gets; it must stop all the same.
    killed_leaves_nothing(run, children, "maxy run", 120)


@pytest.mark.slow
def test_a_killed_neo4j_launcher_takes_its_server_with_it(tmp_path: Path, start_maxy: Any) -> None:
    data = tmp_path / "data"
    account = create_account(data / "accounts", "Owner")
    env = account_env(data, runtime_dir("maxy-neo4j-"), account.id, **private_neo4j())
    launcher: Process = start_maxy(env, "neo4j", "run")
    wait_until(
        lambda: "op=ready" in launcher.output(), 240, f"Neo4j ready\n{launcher.output()}", 0.5
    )
    java = neo4j_pid(data / "neo4j")
    assert java is not None and java in descendants(launcher.proc.pid)
    killed_leaves_nothing(launcher, {java}, "maxy neo4j run", 120)
