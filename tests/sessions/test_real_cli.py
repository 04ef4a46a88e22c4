"""Smoke test with the real Claude Code CLI, when it is installed: the manager spawns it in a
PTY against a local stand-in for the Messages API, sees its PID file, lets it finish a turn, and
stops it cleanly."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.sessions.conftest import Manager
from tests.support.processes import real_claude

CLAUDE = real_claude()

pytestmark = pytest.mark.skipif(
    CLAUDE is None,
    reason="the real Claude Code CLI is not installed (no `claude` on PATH or in the cache; "
    "`just bootstrap` caches it)",
)


def test_the_real_cli_runs_a_turn_and_stops_cleanly(start_manager: Any) -> None:
    assert CLAUDE is not None
    with FakeAnthropic(reply="Hello from the local API.") as api:
        env = {
            "ANTHROPIC_BASE_URL": api.url,
            "ANTHROPIC_API_KEY": "sk-ant-local-smoke-test-key-0123456789",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"  # the CLI refuses bypassPermissions for root elsewhere
        manager: Manager = start_manager(env=env, claude_bin=CLAUDE)
        row = manager.spawn("hello there")
        pid_file = manager.config_dir / "sessions" / f"{row['pid']}.json"
        written = json.loads(pid_file.read_text())
        assert written["sessionId"] == row["id"] and written["pid"] == row["pid"]
        assert written["procStart"].isdigit()  # what the PID-reuse guard compares
        done = manager.wait_row(row["id"], lambda r: r["turnEnded"], timeout=90)
        assert done["stopReason"] == "end_turn" and done["prompts"] == 1
        assert any(path.startswith("/v1/messages") for _, path, _ in api.requests)
        result = manager.stop(row["id"])
        assert result["signal"] == "SIGTERM", manager.output()
        assert result["row"]["state"] == "archived"
        assert not pid_file.exists()
