"""`maxy memory search|ingest|delete|restore` and `maxy reindex` against a running engine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.memory.test_service import engine_healthy
from tests.support import documents
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


def test_a_word_file_is_converted_then_deleted_and_restored(engine: Env, tmp_path: Path) -> None:
    plan = tmp_path / "plan.docx"
    plan.write_bytes(documents.docx([(1, "Orchard"), (0, "The quince tree is by the pond.")]))
    ingested = run(engine, "memory", "ingest", str(plan))
    assert ingested.returncode == 0, ingested.stderr
    done = json.loads(ingested.stdout)
    assert (done["kind"], done["title"], done["version"]) == ("docx", "Orchard", 1)
    doc = done["documentId"]

    def found() -> bool:
        return "quince" in run(engine, "memory", "search", "quince tree pond").stdout

    assert found()
    deleted = run(engine, "memory", "delete", doc)
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["changed"] and f"memory restore {doc}" in deleted.stderr
    assert not found()
    restored = run(engine, "memory", "restore", doc)
    assert restored.returncode == 0 and json.loads(restored.stdout)["changed"]
    assert found()
    missing = run(engine, "memory", "delete", "no-such-id", "--label", "Note")
    assert missing.returncode == 2 and "No Note with id no-such-id" in missing.stderr

    locked = tmp_path / "locked.pdf"
    locked.write_bytes(documents.encrypted(documents.book(1)))
    refused = run(engine, "memory", "ingest", str(locked))
    assert refused.returncode == 2 and "protected by a password" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_without_an_engine_the_cli_says_so(maxy_env: Env) -> None:
    done = run(maxy_env, "memory", "search", "anything")
    assert done.returncode == 1
    assert "engine is not running" in done.stderr
    assert "Traceback" not in done.stderr
