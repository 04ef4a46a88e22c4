"""Settings against a real `maxy app` and session manager: the Anthropic API key checked against
the local stand-in for the API before it is stored (a bad key stores nothing), the state the
page and the sidebar show, the Mode menu built from MAXY_CLAUDE_PERMISSION_MODE, and Connect /
Disconnect Claude relayed to the manager."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.app.pages import MENU_MODES, MODES
from appliance.core.config import PERMISSION_MODES
from tests.app.running_app import edge_headers
from tests.fakes.anthropic_api import FakeAnthropic
from tests.support.processes import Env, held_port, wait_until
from tests.support.stacks import Stack, sessions_stack

GOOD_KEY = "sk-ant-api03-good-key-0123456789abcdefghij"
BAD_KEY = "sk-ant-api03-revoked-key-0123456789abcdefgh"
LAN = edge_headers()
EXTERNAL = edge_headers(network="external", ip="203.0.113.9")


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(api_keys=[GOOD_KEY]) as fake:
        yield fake


@pytest.fixture(scope="module")
def stack(api: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("settings")
    variables = {"MAXY_ANTHROPIC_BASE_URL": api.url, "MAXY_CLAUDE_PERMISSION_MODE": "acceptEdits"}
    with sessions_stack(root, "app", **variables) as running:
        yield running


@pytest.fixture
def admin(stack: Stack) -> Iterator[tuple[httpx.Client, str]]:
    """A logged-in LAN client and its CSRF token; the key file is gone after each test."""
    with stack.client(stack.admin_cookies(), **LAN) as client:
        token = client.get("/api/admin/session").json()["csrf"]
        client.headers["X-Maxy-CSRF"] = token
        yield client, token
    stack.env.settings.anthropic_api_key_path.unlink(missing_ok=True)


def state(client: httpx.Client) -> dict[str, Any]:
    answer = client.get("/api/admin/settings")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_good_key_is_checked_with_one_call_and_stored_0600(
    admin: tuple[httpx.Client, str], stack: Stack, api: FakeAnthropic
) -> None:
    client, _ = admin
    before = state(client)
    assert before["apiKey"] == {"set": False, "hint": None}
    assert before["visitors"]["path"] == "none"
    assert "Visitors are being turned away" in before["visitors"]["message"]
    calls = len(api.requests)
    answer = client.post("/api/admin/settings/anthropic-key", json={"key": f"  {GOOD_KEY}\n"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["apiKey"] == {"set": True, "hint": "…" + GOOD_KEY[-4:]}
    assert answer.json()["visitors"]["path"] == "api-key"
    checks = api.requests[calls:]
    assert [(method, path.split("?")[0]) for method, path, _ in checks] == [("GET", "/v1/models")]
    assert api.credential_of(-1) == GOOD_KEY
    stored = stack.env.settings.anthropic_api_key_path
    assert stored.read_text().strip() == GOOD_KEY
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert GOOD_KEY not in stack.output()
    # The page says so, without the key.
    page = client.get("/admin/settings")
    assert page.status_code == 200 and GOOD_KEY not in page.text
    assert f"it ends …{GOOD_KEY[-4:]}" in page.text
    # And it can be removed.
    removed = client.delete("/api/admin/settings/anthropic-key")
    assert removed.status_code == 200 and removed.json()["apiKey"]["set"] is False
    assert not stored.exists()


@pytest.mark.parametrize(
    ("key", "status", "code", "words"),
    [
        (BAD_KEY, 400, "invalid-api-key", "Anthropic refused this key (HTTP 401)"),
        ("", 400, "invalid-api-key", "Paste your Anthropic API key first."),
        ("sk-ant with spaces in it 0123456789", 400, "invalid-api-key", "holds spaces"),
        ("sk-short", 400, "invalid-api-key", "20 to 300 characters"),
    ],
)
def test_a_bad_key_gets_a_clear_message_and_nothing_is_stored(
    admin: tuple[httpx.Client, str], stack: Stack, key: str, status: int, code: str, words: str
) -> None:
    client, _ = admin
    answer = client.post("/api/admin/settings/anthropic-key", json={"key": key})
    assert answer.status_code == status, answer.text
    assert answer.json()["code"] == code and words in answer.json()["message"]
    assert not stack.env.settings.anthropic_api_key_path.exists()


def test_a_key_that_cannot_be_checked_is_not_stored(tmp_path: Path, stack: Stack) -> None:
    env = dict(stack.env.vars)
    env["MAXY_ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{held_port()}"  # nothing listens
    env["MAXY_RUNTIME_DIR"] = str(tmp_path / "run")
    other = Stack(Env(env, stack.env.account_id), tmp_path)
    other.start("app")
    try:
        wait_until(other.app_answers, 60, f"the second app\n{other.output()}")
        with other.client(stack.admin_cookies(), **LAN) as client:
            client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
            answer = client.post("/api/admin/settings/anthropic-key", json={"key": GOOD_KEY})
        assert answer.status_code == 502, answer.text
        body = answer.json()
        assert body["code"] == "api-key-unchecked"
        assert "Nothing was saved" in body["message"] and "internet" in body["message"]
        assert not stack.env.settings.anthropic_api_key_path.exists()
    finally:
        other.processes["app"].stop()


def test_settings_need_the_login_and_the_csrf_header(stack: Stack) -> None:
    cookies = stack.admin_cookies()  # the PIN is set first, so "not logged in" is the refusal
    with stack.client(**LAN) as anonymous:
        assert anonymous.get("/api/admin/settings").json()["code"] == "login-required"
    with stack.client(cookies, **LAN) as client:
        refused = client.post("/api/admin/settings/anthropic-key", json={"key": GOOD_KEY})
        assert refused.status_code == 403 and refused.json()["code"] == "csrf"
        assert client.delete("/api/admin/claude").status_code == 403


def test_over_the_tunnel_the_pin_forms_are_not_offered(stack: Stack) -> None:
    with stack.client(stack.admin_cookies(), **LAN) as client:
        client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
        client.post("/api/admin/settings/remote-password", json={"password": "a long password"})
    with stack.client(**EXTERNAL) as remote:
        login = remote.post("/api/auth/login", json={"password": "a long password"})
        assert login.status_code == 200, login.text
        page = remote.get("/admin/settings")
        assert page.status_code == 200
        assert "The PIN can only be changed from your home network." in page.text
        assert 'data-settings-form="/api/admin/settings/pin"' not in page.text
        assert remote.get("/api/admin/settings").json()["lan"] is False


def test_the_mode_menu_names_the_mode_sessions_start_in(admin: tuple[httpx.Client, str]) -> None:
    client, _ = admin
    html = client.get("/").text
    # MAXY_CLAUDE_PERMISSION_MODE=acceptEdits on this stack: the label and the first item say so.
    assert 'Mode: <span id="mode-label">Accept edits</span>' in html
    assert 'data-default="acceptEdits"' in html
    assert "Accept edits (default)" in html
    assert "Asks before it changes things" not in html
    assert set(MODES) == set(PERMISSION_MODES) and set(MENU_MODES) <= set(MODES)


def test_connect_and_disconnect_claude_are_relayed_to_the_manager(
    admin: tuple[httpx.Client, str], stack: Stack
) -> None:
    client, _ = admin
    assert client.get("/api/admin/claude").json()["connected"] is False
    started = client.post("/api/admin/claude/login")
    assert started.status_code == 201, started.text
    login = started.json()["login"]
    assert login["id"].startswith("login-")
    # Its terminal is a session terminal route; the manager's own names are not sessions.
    assert client.get("/api/admin/sessions/claude").json()["code"] == "session-not-found"
    cancelled = client.delete("/api/admin/claude/login")
    assert cancelled.status_code == 200 and cancelled.json()["login"]["state"] == "cancelled"
    gone = client.delete("/api/admin/claude")
    assert gone.status_code == 200 and gone.json()["removed"] is False
