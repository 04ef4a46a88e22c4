"""Engine and edge refuse to start without a valid MAXY_ACCOUNT_ID (no fallback)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from appliance.core.accounts import create_account
from tests.support.processes import base_environ, held_port, maxy


@pytest.mark.parametrize("role", ["engine", "edge", "run"])
@pytest.mark.parametrize("reason", ["missing", "no-on-disk-account", "mismatch"])
def test_fatal_account_id_line(role: str, reason: str, tmp_path: Path) -> None:
    env = base_environ()
    env.update(MAXY_DATA_DIR=str(tmp_path), MAXY_RUNTIME_DIR=str(tmp_path / "run"))
    env["MAXY_PORT"] = str(held_port())
    if reason != "no-on-disk-account":
        create_account(tmp_path / "accounts", "Someone")
    if reason != "missing":
        env["MAXY_ACCOUNT_ID"] = str(uuid.uuid4())
    done = subprocess.run(maxy(role), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "account-id-env" in line]
    assert len(lines) == 1
    assert lines[0].startswith(f"[graph-health] account-id-env FATAL reason={reason}")
