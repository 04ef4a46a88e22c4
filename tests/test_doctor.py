"""`maxy doctor` tells what is fine and what to fix."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.support.processes import Env, base_environ, get_health, maxy, wait_until


def doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(maxy("doctor"), env=env, capture_output=True, text=True, timeout=120)


def test_all_checks_pass_with_everything_running(maxy_env: Env, start_maxy: Any) -> None:
    start_maxy(maxy_env, "engine")
    start_maxy(maxy_env, "edge")
    port = maxy_env.settings.port
    wait_until(lambda: (r := get_health(port)) is not None and r.status_code == 200, 90, "health")
    done = doctor(maxy_env.vars)
    assert done.returncode == 0, done.stdout
    assert "FAIL" not in done.stdout
    assert "10 of 10 checks passed." in done.stdout


def test_an_empty_machine_gets_a_list_of_fixes(tmp_path: Path) -> None:
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(tmp_path / "nothing"),
        MAXY_RUNTIME_DIR=str(tmp_path / "run"),
        MAXY_EMBED_MODEL=str(tmp_path / "no-model.gguf"),
        MAXY_NEO4J_URI="bolt://127.0.0.1:1",
        MAXY_SESSION_MEMORY_MB=str(10**9),
    )
    done = doctor(env)
    assert done.returncode == 1
    lines = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("FAIL")}
    assert "MAXY_DATA_DIR" in lines["data"]
    assert "maxy account create" in lines["account"]
    assert "just model" in lines["embedding"]
    assert "engine is not running" in lines["engine"]
    assert (
        "a spawn would be refused" in lines["memory"]
        and "MAXY_SESSION_MEMORY_MB" in lines["memory"]
    )
