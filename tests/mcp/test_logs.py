"""The admin plugin's ``logs-read``: a real `maxy manager` started the way `maxy run` starts a role
(its output teed to ``<data_dir>/logs/manager.log``), its sessions' plugin servers' logs, and the
journal on the device (``journalctl``, the outside world, replaced by an executable that prints
its JSON export format); filters, the cap, and secrets never shown."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance import supervisor
from appliance.core.accounts import create_account
from appliance.core.config import Settings, load_settings
from appliance.core.proc import stop_group
from appliance.mcp import logs
from appliance.mcp.tool import ToolError
from tests.support.processes import runtime_dir, wait_until
from tests.support.stacks import answers, manager_env
from tests.support.tools import call_tool, tool_context, tool_refusal

pytestmark = pytest.mark.slow

SECRET = "sk-ant-api03-Zq8sN2vR7tY4uW1xK9mL3pJ6hG5fD0aS"
PASSWORD = "correct-horse-battery"


def read(settings: Settings, /, **arguments: Any) -> dict[str, Any]:
    return call_tool(logs.TOOLS, "logs-read", tool_context(settings), arguments)


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[tuple[Settings, subprocess.Popen[bytes]]]:
    """A `maxy manager` (running the `claude` double) started by the supervisor's own code."""
    data = tmp_path / "data"
    account = create_account(data / "accounts", "Owner")
    env = manager_env(data, runtime_dir("maxy-log-"), account.id, {}, {})
    settings = load_settings(env)
    proc = supervisor.start_role("manager", env, settings.log_dir)
    try:
        wait_until(lambda: answers(settings.manager_socket), 60, "the manager", 0.05)
        yield settings, proc
    finally:
        stop_group(proc, 30)


def spawn(settings: Settings, message: str) -> str:
    transport = httpx.HTTPTransport(uds=str(settings.manager_socket))
    with httpx.Client(transport=transport, base_url="http://manager", timeout=60) as client:
        answer = client.post("/rc-spawn", json={"message": message})
        assert answer.status_code == 201, answer.text
        session_id: str = answer.json()["row"]["id"]
        wait_until(lambda: client.get(f"/{session_id}").json()["row"]["turnEnded"], 60, "the turn")
    return session_id


def test_a_roles_lines_filtered_by_session_text_and_count(
    supervised: tuple[Settings, subprocess.Popen[bytes]],
) -> None:
    settings, _ = supervised
    first, second = spawn(settings, "first"), spawn(settings, "second")
    everything = read(settings, role="manager")
    assert everything["source"] == "files"
    assert all(line["role"] == "manager" and line["at"] for line in everything["lines"])
    assert any("[sessions] op=start" in line["line"] for line in everything["lines"])
    mine = read(settings, role="manager", session=first)
    assert any(f"op=spawn kind=admin id={first}" in line["line"] for line in mine["lines"])
    assert all(first[:8] in line["line"] for line in mine["lines"])
    assert not any(second in line["line"] for line in mine["lines"])
    spawns = read(settings, contains="OP=SPAWN kind=admin")
    assert spawns["matched"] == 2 and [
        first in spawns["lines"][0]["line"],
        second in (spawns["lines"][1]["line"]),
    ] == [True, True]
    one = read(settings, role="manager", lines=1)
    assert one["shown"] == 1 and one["matched"] == everything["matched"]
    assert one["lines"][0] == everything["lines"][-1]


def test_a_sessions_plugin_servers_are_read_by_its_id(
    supervised: tuple[Settings, subprocess.Popen[bytes]],
) -> None:
    settings, _ = supervised
    session_id = spawn(settings, "search memory for the boiler")  # starts the memory server
    helper = settings.accounts_dir / settings.account_id / "claude" / "mcp" / session_id
    wait_until(lambda: "op=boot" in (helper / "helper.log").read_text(), 60, "the server's boot")
    found = read(settings, role="mcp", session=session_id[:8])
    texts = [line["line"] for line in found["lines"]]
    assert any("[mcp-helper] op=spawn" in text and "server=memory" in text for text in texts)
    assert any("[mcp-helper] op=boot" in text for text in texts)
    assert all(line["role"].startswith(f"mcp:{session_id[:8]}:") for line in found["lines"])
    assert f"mcp:{session_id[:8]}:memory" in {line["role"] for line in found["lines"]}
    assert read(settings, role="mcp", session="0000ffff")["lines"] == []


def test_secrets_are_never_shown(supervised: tuple[Settings, subprocess.Popen[bytes]]) -> None:
    settings, _ = supervised
    settings.keys_dir.mkdir(parents=True, exist_ok=True)
    (settings.keys_dir / "anthropic-api-key").write_text(SECRET + "\n")
    (settings.keys_dir / "neo4j-password").write_text(PASSWORD + "\n")
    # What a careless library might print into a role's output.
    with (settings.log_dir / "manager.log").open("a") as log:
        log.write(f"2026-12-03T10:00:00.000+00:00 retrying with key {SECRET}\n")
        log.write(f"2026-12-03T10:00:01.000+00:00 neo4j auth failed for {PASSWORD} again\n")
        log.write("2026-12-03T10:00:02.000+00:00 connect password=hunter2 token: abc123\n")
    shown = json.dumps(read(settings, role="manager", lines=500))
    for secret in (SECRET, PASSWORD, "hunter2", "abc123"):
        assert secret not in shown
    assert shown.count("[redacted]") >= 4


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"role": "kernel"}, "role must be one of"),
        ({"session": "../../keys"}, "session must be"),
        ({"lines": 501}, "lines must be"),
        ({"lines": True}, "lines must be"),
    ],
)
def test_bad_filters_are_refused(tmp_path: Path, arguments: dict[str, Any], message: str) -> None:
    account = create_account(tmp_path / "accounts", "Owner")
    settings = load_settings({"MAXY_DATA_DIR": str(tmp_path), "MAXY_ACCOUNT_ID": account.id})
    with pytest.raises(ToolError, match=message):
        read(settings, **arguments)


ENTRIES = [
    {
        "__REALTIME_TIMESTAMP": "1796292000000000",
        "_SYSTEMD_UNIT": "maxy-engine.service",
        "MESSAGE": "10:00:00 engine INFO [rpc] op=listen socket=/run/maxy/engine.sock",
    },
    {  # the journal's form of a message that is not UTF-8: its bytes
        "__REALTIME_TIMESTAMP": "1796292001000000",
        "_SYSTEMD_UNIT": "maxy-engine.service",
        "MESSAGE": list(b"[neo4j] down \xff"),
    },
    {
        "__REALTIME_TIMESTAMP": "1796292002000000",
        "_SYSTEMD_UNIT": "maxy-manager.service",
        "MESSAGE": "[sessions] op=spawn id=1234abcd-0000 key=sk-ant-api03-AAAAAAAAAAAAAAAA",
    },
]
JOURNALCTL = f"""#!/bin/sh
# journalctl, as the device's journal answers `-o json`: one JSON object a line.
echo "$@" > "$(dirname "$0")/args"
if [ -n "$JOURNAL_DENY" ]; then
  echo "No journal files were opened due to insufficient permissions." >&2
  exit 1
fi
cat <<'EOF'
{chr(10).join(json.dumps(entry) for entry in ENTRIES)}
EOF
"""


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, Path]:
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "journalctl"
    program.write_text(JOURNALCTL)
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    account = create_account(tmp_path / "data" / "accounts", "Owner")
    settings = load_settings(
        {"MAXY_DATA_DIR": str(tmp_path / "data"), "MAXY_ACCOUNT_ID": account.id}
    )
    return settings, folder


def test_on_the_device_the_journal_is_read(journal: tuple[Settings, Path]) -> None:
    settings, folder = journal
    found = read(settings, role="engine")
    assert found["source"] == "journald"
    args = (folder / "args").read_text().split()
    assert ["-u", "maxy-engine.service"] == args[-2:] and "json" in args
    assert [line["role"] for line in found["lines"]] == ["engine", "engine", "manager"]
    assert found["lines"][1]["line"] == "[neo4j] down \ufffd"  # bytes that are not UTF-8
    assert found["lines"][0]["at"].startswith("2026-")
    spawned = read(settings, session="1234abcd")["lines"]
    assert len(spawned) == 1 and "sk-ant" not in spawned[0]["line"]


def test_an_unreadable_journal_says_what_to_fix(
    journal: tuple[Settings, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, _ = journal
    monkeypatch.setenv("JOURNAL_DENY", "1")
    with pytest.raises(ToolError, match="systemd-journal") as caught:
        read(settings)
    assert caught.value.code == "journal-unreadable"


def test_another_account_reads_no_device_logs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    device = create_account(data / "accounts", "Owner")
    other = create_account(data / "accounts", "Neighbour")
    settings = load_settings({"MAXY_DATA_DIR": str(data), "MAXY_ACCOUNT_ID": device.id})
    context = tool_context(settings, other.id)
    assert tool_refusal(logs.TOOLS, "logs-read", context, {}).code == "other-account"
