"""Connect Claude in the session manager: `claude setup-token` (the double acts it out) in a real
PTY, driven over the terminal bridge as the browser does; the token captured from the output,
stored 0600, given to every session; Disconnect Claude removes it and ends the live sessions."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.sessions.claude_double import token_for
from tests.sessions.conftest import Manager, ended
from tests.sessions.test_terminal import connect
from tests.support.processes import wait_until

CODE = "4f9c2e-owner-pasted-this-code#state"
KEY = "sk-ant-local-0123456789abcdefghijklmnop"


@pytest.fixture
def recorded(start_manager: Any, tmp_path: Path) -> tuple[Manager, Path]:
    record = tmp_path / "record"
    env = {"CLAUDE_DOUBLE_RECORD": str(record), "ANTHROPIC_API_KEY": KEY}
    manager: Manager = start_manager(env=env)
    return manager, record


def claude(manager: Manager) -> dict[str, Any]:
    response = manager.request("GET", "/claude")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_login(manager: Manager, state: str, timeout: float = 20) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.update(claude(manager))
        return bool(seen["login"]["state"] == state)

    wait_until(reached, timeout, f"the sign-in to be {state}; last {seen}")
    return seen


def start_login(manager: Manager) -> dict[str, Any]:
    response = manager.request("POST", "/claude/login")
    assert response.status_code == 201, response.text
    login: dict[str, Any] = response.json()["login"]
    return login


async def paste(manager: Manager, login_id: str, code: str, expect: bytes) -> bytes:
    """Type the code into the sign-in's terminal, as the owner does in the browser."""
    viewer = await connect(manager, login_id)
    await viewer.read_until(b"Paste code here")
    await viewer.send(type="input", data=code + "\r")
    try:
        return await viewer.read_until(expect)
    finally:
        await viewer.ws.close()


def environment(record: Path, session_id: str) -> dict[str, str]:
    env: dict[str, str] = json.loads((record / f"{session_id}.json").read_text())["env"]
    return env


def test_connect_claude_stores_the_token_and_every_session_gets_it(
    recorded: tuple[Manager, Path],
) -> None:
    manager, record = recorded
    assert claude(manager) == {
        "connected": False,
        "login": {
            "id": None,
            "state": "none",
            "url": None,
            "error": None,
            "message": None,
            "startedAt": None,
            "exitCode": None,
            "running": False,
        },
    }
    login = start_login(manager)
    assert login["id"].startswith("login-") and login["state"] in ("starting", "waiting-for-code")
    shown = wait_login(manager, "waiting-for-code")["login"]
    assert shown["url"].startswith("https://claude.com/cai/oauth/authorize?")
    # A second Connect Claude while one waits is the same flow, not a second process.
    again = manager.request("POST", "/claude/login")
    assert again.status_code == 200 and again.json()["login"]["id"] == login["id"]

    screen = asyncio.run(paste(manager, login["id"], CODE, b"Store this token securely"))
    token = token_for(CODE)
    assert token.encode()[:20] in screen  # the owner sees what the CLI printed
    done = wait_login(manager, "connected")
    assert done["connected"] is True and done["login"]["url"] is None
    wait_until(lambda: not claude(manager)["login"]["running"], 20, "the CLI to exit")

    stored = manager.data_dir / "keys" / "claude-oauth-token"
    assert stored.read_text().strip() == token
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700
    log = manager.output()
    assert "op=claude-connected" in log
    assert token not in log and shown["url"] not in log and CODE not in log
    # The sign-in ran in its own config dir: it is not a session.
    assert manager.request("GET", "/sessions").json()["rows"] == []

    admin = manager.spawn("hello")
    public = manager.spawn("hi", kind="public")
    for row in (admin, public):
        env = environment(record, row["id"])
        assert env["CLAUDE_CODE_OAUTH_TOKEN"] == token
        assert "ANTHROPIC_API_KEY" not in env  # the subscription, not the inherited key

    # Disconnect Claude: the token goes, and so do the sessions that were started with it.
    response = manager.request("DELETE", "/claude")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["connected"] is False and body["removed"] is True and body["stopped"] == 2
    assert not stored.exists()
    for row in (admin, public):
        assert ended(manager.wait_row(row["id"], ended))
    later = manager.spawn("after")
    assert "CLAUDE_CODE_OAUTH_TOKEN" not in environment(record, later["id"])
    assert manager.request("DELETE", "/claude").json()["removed"] is False  # idempotent


def test_a_refused_code_is_reported_and_the_owner_can_try_again(start_manager: Any) -> None:
    manager: Manager = start_manager()
    login = start_login(manager)
    wait_login(manager, "waiting-for-code")
    asyncio.run(paste(manager, login["id"], "bad", b"Press"))
    wait_until(
        lambda: (claude(manager)["login"]["error"] or "").startswith("OAuth error: Invalid code"),
        20,
        f"the OAuth error to show; last {claude(manager)}",
    )
    assert claude(manager)["connected"] is False
    asyncio.run(paste(manager, login["id"], CODE, b"Store this token"))
    assert wait_login(manager, "connected")["login"]["error"] is None


def test_cancelling_the_sign_in_stops_it(start_manager: Any) -> None:
    manager: Manager = start_manager()
    login = start_login(manager)
    wait_login(manager, "waiting-for-code")
    response = manager.request("DELETE", "/claude/login")
    assert response.status_code == 200
    assert response.json()["login"]["state"] == "cancelled"
    wait_until(lambda: not claude(manager)["login"]["running"], 20, "the CLI to stop")

    assert asyncio.run(close_code(manager, login["id"])) == 4409  # no terminal once it ended
    assert not (manager.data_dir / "keys" / "claude-oauth-token").exists()


async def close_code(manager: Manager, token: str) -> int:
    """The close code the terminal bridge answers ``token`` with (4404, 4409, …)."""
    from websockets.asyncio.client import unix_connect
    from websockets.exceptions import ConnectionClosed

    async with unix_connect(str(manager.socket), f"ws://manager/{token}/terminal") as ws:
        try:
            while True:
                await ws.recv()
        except ConnectionClosed as closed:
            assert closed.rcvd is not None
            return closed.rcvd.code


def test_a_sign_in_that_exits_early_says_so(start_manager: Any, tmp_path: Path) -> None:
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\necho 'error: this build cannot set up tokens' >&2\nexit 2\n")
    fake.chmod(0o755)
    manager: Manager = start_manager(claude_bin=str(fake))
    start_login(manager)
    failed = wait_login(manager, "failed")["login"]
    assert failed["exitCode"] == 2
    assert failed["message"].startswith("claude setup-token exited with code 2")
    assert "this build cannot set up tokens" in failed["message"]


def test_connect_claude_without_a_cli_is_a_clear_503(start_manager: Any) -> None:
    manager: Manager = start_manager(claude_bin="/nonexistent/claude")
    response = manager.request("POST", "/claude/login")
    assert response.status_code == 503
    assert response.json()["code"] == "claude-not-found"
