"""`maxy memory search|ingest` and `maxy reindex` against a running engine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.memory.test_service import engine_healthy
from tests.support.processes import Env, maxy, wait_until


@pytest.fixture
def engine(maxy_env: Env, start_maxy: Any) -> Env:
    process = start_maxy(maxy_env, "engine")
    wait_until(lambda: engine_healthy(maxy_env), 90, f"engine health\n{process.output()}")
    return maxy_env


def run(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(maxy(*args), env=env.vars, capture_output=True, text=True, timeout=120)


def test_ingest_search_explain_and_reindex(engine: Env, tmp_path: Path) -> None:
    manual = tmp_path / "garden.md"
    manual.write_text("# Garden\n\nThe tomatoes need water twice a week in July.\n")
    ingested = run(engine, "memory", "ingest", str(manual))
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["chunks"] == 1

    found = run(engine, "memory", "search", "how often do I water tomatoes", "--explain")
    assert found.returncode == 0, found.stderr
    assert "twice a week" in found.stdout
    assert "--- score trace ---" in found.stdout
    assert "vector=" in found.stdout and "fused=" in found.stdout

    as_json = json.loads(run(engine, "memory", "search", "tomatoes", "--json").stdout)
    assert as_json["results"] and "trace" in as_json["results"][0]

    reindexed = run(engine, "reindex")
    assert reindexed.returncode == 0, reindexed.stderr
    assert json.loads(reindexed.stdout)["skipped"] == 0
    assert "/" in reindexed.stderr  # the progress bar


def test_without_an_engine_the_cli_says_so(maxy_env: Env) -> None:
    done = run(maxy_env, "memory", "search", "anything")
    assert done.returncode == 1
    assert "engine is not running" in done.stderr
    assert "Traceback" not in done.stderr
