"""`maxy run` end to end: its own Neo4j, engine and edge; a killed Neo4j is noticed and
restarted."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from appliance import supervisor
from appliance.core.accounts import create_account
from tests.support.processes import (
    get_health,
    health_status,
    neo4j_pid,
    private_neo4j,
    runtime_dir,
    wait_until,
)
from tests.support.stacks import account_env

pytestmark = pytest.mark.slow


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_killed_neo4j_is_reported_then_restarted(tmp_path: Path, start_maxy: Any) -> None:
    data = tmp_path / "data"
    account = create_account(data / "accounts", "Owner")
    env = account_env(data, runtime_dir("maxy-run-"), account.id, **private_neo4j())
    port = int(env["MAXY_PORT"])
    run = start_maxy(env, "run")
    wait_until(lambda: health_status(port) == 200, 240, f"maxy run healthy\n{run.output()}", 0.5)
    body = get_health(port).json()  # type: ignore[union-attr]
    assert body["neo4j"]["ok"] and body["embedder"]["ok"]
    # The generated password is kept in the data directory, owner-only.
    password_file = data / "keys" / "neo4j-password"
    assert password_file.stat().st_mode & 0o777 == 0o600
    # Each role's output is kept in <data>/logs/<role>.log, every line stamped (logs-read).
    for role in ("engine", "manager", "channels", "app", "edge"):
        lines = (data / "logs" / f"{role}.log").read_text().splitlines()
        assert lines and all(line[:2] == "20" and line[10] == "T" for line in lines), role
    assert "[sessions] op=start" in (data / "logs" / "manager.log").read_text()
    assert "[channels] op=start" in (data / "logs" / "channels.log").read_text()

    home = data / "neo4j"
    first = neo4j_pid(home)
    assert first is not None and alive(first)
    os.kill(first, signal.SIGKILL)

    # The acceptance criterion: /healthz reports Neo4j unhealthy within 5 s of the kill.
    wait_until(lambda: health_status(port) == 503, 5, "healthz 503 after killing Neo4j", 0.1)
    body = get_health(port).json()  # type: ignore[union-attr]
    assert body["status"] == "unhealthy"
    assert body["neo4j"]["ok"] is False
    assert body["embedder"]["ok"] is True

    # The supervisor restarts it and health recovers.
    wait_until(lambda: health_status(port) == 200, 240, f"recovery\n{run.output()}", 0.5)
    second = neo4j_pid(home)
    assert second is not None and second != first and alive(second)
    assert "op=exited child=neo4j" in run.output()

    # Stopping `maxy run` stops everything it started.
    assert run.stop() == 0
    wait_until(lambda: not alive(second), 30, "Neo4j to stop with the supervisor")
    assert health_status(port) is None


def test_a_roles_log_is_moved_aside_once_it_is_large(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    first = supervisor.open_role_log(logs, "engine")
    assert first == logs / "engine.log" and logs.stat().st_mode & 0o777 == 0o700
    first.write_bytes(b"x" * (supervisor.LOG_CAP + 1))
    again = supervisor.open_role_log(logs, "engine")
    assert again == first and not again.exists()
    assert (logs / "engine.log.1").stat().st_size == supervisor.LOG_CAP + 1
    again.write_text("small\n")
    assert supervisor.open_role_log(logs, "engine").read_text() == "small\n"
