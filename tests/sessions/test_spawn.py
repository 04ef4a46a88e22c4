"""What a session is started with, as the `claude` double records it: argv of the two spawn
kinds, the environment, the seeded CLAUDE_CONFIG_DIR, the sidecar."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from appliance.sessions.layout import slug
from appliance.sessions.spawn import DENIED_TOOLS
from tests.sessions.conftest import Manager, ended

KEY = "sk-ant-local-0123456789abcdefghijklmnop"


@pytest.fixture
def recorded(start_manager: Any, tmp_path: Path) -> tuple[Manager, Path]:
    record = tmp_path / "record"
    manager: Manager = start_manager(
        env={"CLAUDE_DOUBLE_RECORD": str(record), "ANTHROPIC_API_KEY": KEY, "CLAUDECODE": "1"},
        claude_model="opus",
    )
    (manager.account_dir / "agents" / "maxy").mkdir(parents=True)
    return manager, record


def option(argv: list[str], name: str) -> list[str]:
    """The values after ``name`` up to the next option."""
    values: list[str] = []
    for i, arg in enumerate(argv):
        if arg == name:
            for value in argv[i + 1 :]:
                if value.startswith("--"):
                    break
                values.append(value)
    return values


def test_admin_spawn_registers_each_plugin_server_with_the_account(
    recorded: tuple[Manager, Path],
) -> None:
    manager, record = recorded
    row = manager.spawn("hello -- with dashes", permissionMode="plan", senderId="owner")
    seen = json.loads((record / f"{row['id']}.json").read_text())
    argv, env = seen["argv"], seen["env"]
    assert option(argv, "--session-id") == [row["id"]]
    assert argv[-2:] == ["--", "hello -- with dashes"]  # the prompt is an argument, not typed
    assert option(argv, "--permission-mode") == ["plan"] and option(argv, "--model") == ["opus"]
    agents = manager.account_dir.resolve() / "agents" / "maxy"
    assert option(argv, "--add-dir") == [str(agents)]
    [config] = option(argv, "--mcp-config")
    server = json.loads(config)["mcpServers"]["memory"]
    log_dir = manager.config_dir / "mcp" / row["id"]
    assert [server["command"], *server["args"]] == [
        sys.executable,
        "-m",
        "appliance",
        "mcp-helper",
        "--session",
        row["id"],
        "--server",
        "memory",
        "--log-dir",
        str(log_dir),
        "--",
        sys.executable,
        "-m",
        "appliance",
        "mcp",
        "--plugin",
        "memory",
    ]
    assert server["env"]["ACCOUNT_ID"] == manager.account_id
    assert server["env"]["SESSION_ID"] == row["id"]
    assert server["env"]["MAXY_RUNTIME_DIR"] == str(manager.runtime_dir)
    assert server["env"]["MAXY_DATA_DIR"] == str(manager.data_dir)
    assert "--strict-mcp-config" not in argv
    assert env["DISABLE_AUTOUPDATER"] == "1" and "CLAUDECODE" not in env
    assert env["CLAUDE_CONFIG_DIR"] == str(manager.config_dir)
    assert env["ACCOUNT_ID"] == manager.account_id and env["SESSION_ID"] == row["id"]
    assert seen["cwd"] == str(manager.account_dir.resolve())


def test_public_spawn_gets_only_the_public_tools(recorded: tuple[Manager, Path]) -> None:
    manager, record = recorded
    row = manager.spawn("hi, visitor here", kind="public", agent="maxy", channel="web")
    argv = json.loads((record / f"{row['id']}.json").read_text())["argv"]
    # Only the scheduling plugin allows public tools: the time and times in words.
    [config] = option(argv, "--mcp-config")
    servers = json.loads(config)["mcpServers"]
    assert set(servers) == {"scheduling"}
    env = servers["scheduling"]["env"]
    assert env["MAXY_MCP_TOOLS"] == "current-datetime,time-resolve"
    assert env["ALLOWED_SCOPES"] == "public"
    assert "--strict-mcp-config" in argv
    assert option(argv, "--tools") == [""]
    assert option(argv, "--allowedTools") == [
        "mcp__scheduling__current-datetime,mcp__scheduling__time-resolve"
    ]
    denied = option(argv, "--disallowedTools")[0].split(",")
    assert {"Bash", "Edit", "Write", "Read", "WebFetch"} <= set(denied)
    native = [tool for tool in DENIED_TOOLS if tool != "mcp__*"]
    assert denied[: len(native)] == native  # dontAsk refuses every other MCP tool
    assert {"mcp__scheduling__reminder-create", "mcp__scheduling__event-list"} <= set(denied)
    assert not any(
        tool.startswith("mcp__memory__") for tool in denied + option(argv, "--allowedTools")
    )
    assert option(argv, "--permission-mode") == ["dontAsk"]
    assert "--add-dir" not in argv
    assert row["kind"] == "public" and row["channel"] == "web"
    public = manager.spawn("no agent dir", kind="public", agent="ghost")
    assert public["cwd"] == str(manager.account_dir.resolve() / "public")


def test_public_spawn_takes_no_permission_mode(manager: Manager) -> None:
    response = manager.request("POST", "/public-spawn", json={"permissionMode": "auto"})
    assert response.status_code == 400 and response.json()["code"] == "bad-request"


def test_the_config_dir_is_seeded_so_no_prompt_waits(recorded: tuple[Manager, Path]) -> None:
    manager, _ = recorded
    manager.spawn("x")
    state = json.loads((manager.config_dir / ".claude.json").read_text())
    assert state["hasCompletedOnboarding"] is True
    assert state["bypassPermissionsModeAccepted"] is True
    assert state["hasSeenAutoDefaultNudge"] is True
    assert state["customApiKeyResponses"] == {"approved": [KEY[-20:]], "rejected": []}
    trusted = {path for path, p in state["projects"].items() if p["hasTrustDialogAccepted"]}
    assert str(manager.account_dir.resolve()) in trusted
    assert str(manager.account_dir.resolve() / "public") in trusted
    settings = json.loads((manager.config_dir / "settings.json").read_text())
    assert settings["permissions"] == {"allow": [], "defaultMode": "bypassPermissions"}


def test_the_sidecar_holds_what_the_spawn_said(recorded: tuple[Manager, Path]) -> None:
    manager, _ = recorded
    row = manager.spawn(
        "meta",
        senderId="u1",
        role="librarian",
        channel="whatsapp",
        url="https://example.invalid/c/1",
        hidden=True,
        specialist=True,
    )
    project = manager.config_dir / "projects" / slug(manager.account_dir.resolve())
    sidecar = json.loads((project / f"{row['id']}.meta.json").read_text())
    assert {k: sidecar[k] for k in ("senderId", "role", "channel", "url", "hidden")} == {
        "senderId": "u1",
        "role": "librarian",
        "channel": "whatsapp",
        "url": "https://example.invalid/c/1",
        "hidden": True,
    }
    assert sidecar["specialist"] is True and sidecar["model"] == "opus"
    assert sidecar["permissionMode"] == "bypassPermissions" and sidecar["startedAt"] > 0
    assert row["senderId"] == "u1" and row["specialist"] is True and row["hidden"] is True


def test_an_admin_spawn_with_a_role_runs_as_that_agent(recorded: tuple[Manager, Path]) -> None:
    manager, record = recorded
    row = manager.spawn("check the database", role="database-operator", specialist=True)
    argv = json.loads((record / f"{row['id']}.json").read_text())["argv"]
    # The generated plugin folder names each role after its plugin, as the real CLI lists them.
    assert option(argv, "--agent") == ["admin:database-operator"]
    [folder] = option(argv, "--plugin-dir")
    assert (Path(folder) / "admin" / "agents" / "database-operator.md").is_file()
    assert (
        "--agent"
        not in json.loads((record / f"{manager.spawn('plain')['id']}.json").read_text())["argv"]
    )
    visitor = manager.spawn("hello", kind="public", role="visitor")  # a label on a public spawn
    assert "--agent" not in json.loads((record / f"{visitor['id']}.json").read_text())["argv"]


def test_a_role_no_enabled_plugin_defines_is_refused(manager: Manager) -> None:
    response = manager.request("POST", "/rc-spawn", json={"message": "x", "role": "astronaut"})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "bad-request" and body["role"] == "astronaut"
    assert "librarian" in body["message"]
    assert manager.status()["caps"]["total"] == 0


def test_resume_continues_the_same_transcript(manager: Manager) -> None:
    row = manager.spawn("first life [double exit_after_turn=1]")
    manager.wait_row(row["id"], ended)
    again = manager.spawn("second life", resume=row["id"])
    assert again["id"] == row["id"] and again["state"] == "live"
    manager.wait_row(row["id"], lambda r: r["prompts"] == 2 and r["turnEnded"])
    response = manager.request("POST", "/rc-spawn", json={"resume": row["id"]})
    assert response.status_code == 409 and response.json()["code"] == "session-alive"


def test_a_chosen_session_id_starts_that_session_once(manager: Manager) -> None:
    chosen = str(uuid.uuid4())
    row = manager.spawn("hello [double exit_after_turn=1]", sessionId=chosen)
    assert row["id"] == chosen
    manager.wait_row(chosen, ended)
    again = manager.request("POST", "/rc-spawn", json={"sessionId": chosen})
    assert again.status_code == 409 and "resume" in again.json()["message"]
    for bad in ({"sessionId": "not-a-uuid"}, {"sessionId": chosen, "resume": chosen}):
        assert manager.request("POST", "/rc-spawn", json=bad).status_code == 400
    public = manager.request("POST", "/public-spawn", json={"sessionId": str(uuid.uuid4())})
    assert public.status_code == 400


def test_a_missing_cli_is_a_clear_503(start_manager: Any) -> None:
    manager: Manager = start_manager(claude_bin="/nonexistent/claude")
    response = manager.request("POST", "/rc-spawn", json={"message": "x"})
    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "claude-not-found" and "MAXY_CLAUDE_BIN" in body["message"]
    assert manager.status()["caps"]["total"] == 0
