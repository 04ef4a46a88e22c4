"""A role killed outright takes its children with it: no orphaned server worker keeps running.

Each long-running role is started as `maxy <role>`; once it serves, its descendants are counted
from /proc, the role's own process gets SIGKILL (no chance to clean up), and every descendant
must be gone shortly after (the kernel's parent-death signal, see appliance.core.proc).
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import Env, Process, wait_until

pytestmark = pytest.mark.timeout(180)

READY: dict[str, Callable[[Env], bool]] = {
    "edge": lambda env: _listening_tcp(env.settings.port),
    "app": lambda env: env.settings.app_socket.exists(),
    "manager": lambda env: env.settings.manager_socket.exists(),
    "engine": lambda env: env.settings.engine_socket.exists(),
}


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


@pytest.mark.parametrize("role", sorted(READY))
def test_a_killed_role_leaves_no_process_behind(role: str, maxy_env: Env, start_maxy: Any) -> None:
    process: Process = start_maxy(maxy_env, role)
    wait_until(lambda: READY[role](maxy_env), 90, f"{role} serving\n{process.output()}")
    children: set[int] = set()

    def has_children() -> bool:
        children.update(descendants(process.proc.pid))
        return bool(children) or role == "engine"  # the engine serves from one process

    wait_until(has_children, 30, f"{role}'s worker\n{process.output()}")
    os.kill(process.proc.pid, signal.SIGKILL)
    process.proc.wait(10)
    wait_until(
        lambda: not any(running(pid) for pid in children),
        30,
        f"{role}'s children {sorted(children)} to end after the role was killed",
    )
