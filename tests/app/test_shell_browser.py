"""The shell tells the truth, in headless Chromium through the real edge, app and session manager
(which runs the `claude` double): "New session" starts a session, the Mode label is the mode the
spawn runs with, a start that fails says why, an answer Claude could not give says how to connect
it, the sidebar says whether Claude is connected and who answers visitors, Settings stores an API
key only once Anthropic (the local stand-in) accepts it, Connect Claude runs the double's
setup-token in the browser terminal and Disconnect Claude ends the sessions, Log out logs out,
and the login page tells how to reset a forgotten PIN."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app import test_browser as shell_tests
from tests.app import test_settings as settings_tests
from tests.app.running_app import wait_for_js
from tests.app.test_settings import GOOD_KEY
from tests.fakes.anthropic_api import FakeAnthropic
from tests.sessions.claude_double import token_for
from tests.sessions.test_spawn import option
from tests.support.stacks import PIN, Stack, sessions_stack

pytestmark = pytest.mark.timeout(180)

browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

WAIT = 20_000  # ms; a deadline against hangs, not a timing assertion
CODE = "code-from-the-sign-in-page#state"
api = settings_tests.api  # the local Anthropic API, accepting GOOD_KEY only


@pytest.fixture(scope="module")
def stack(api: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("shell-browser")
    variables = {"MAXY_ANTHROPIC_BASE_URL": api.url, "CLAUDE_DOUBLE_RECORD": str(root / "record")}
    with sessions_stack(root, "app", "edge", **variables) as running:
        yield running


def recorded(stack: Stack, session_id: str) -> dict[str, Any]:
    path = Path(stack.env.vars["CLAUDE_DOUBLE_RECORD"]) / f"{session_id}.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def session_of(page: Any) -> str:
    from urllib.parse import parse_qs, urlparse

    wait_for_js(page, "new URL(location.href).searchParams.has('session')")
    url: str = page.url
    return parse_qs(urlparse(url).query)["session"][0]


def start_session(page: Any, message: str) -> None:
    page.click("#new-session")
    page.fill("#composer-input", message)
    page.press("#composer-input", "Enter")


def test_new_session_starts_a_claude_session_and_logs_nobody_out(
    admin: Any, base_url: str, browser: Any, admin_state: dict[str, Any], stack: Stack
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/people")
    rotations: list[str] = []
    admin.on("request", lambda r: rotations.append(r.url) if "rotate" in r.url else None)
    admin.click("#new-session")  # on another page it opens the Sessions page, ready
    expect(admin.locator("#composer-input")).to_be_focused(timeout=WAIT)
    expect(admin.locator("#composer-input")).to_have_attribute(
        "placeholder", "Message to start a new session…"
    )
    admin.fill("#composer-input", "Plant the bulbs")
    admin.press("#composer-input", "Enter")
    expect(admin.locator("#chat-turns .turn-assistant")).to_have_text(
        "Reply 1 to: Plant the bulbs", timeout=WAIT
    )
    assert rotations == []
    # The first tab's login still works: nothing was rotated.
    other = browser.new_context(storage_state=admin_state)
    try:
        page = other.new_page()
        page.goto(base_url + "/")
        assert page.url == base_url + "/"
    finally:
        other.close()
    admin.click("#session-stop")


def test_the_mode_label_is_the_mode_the_session_runs_with(
    admin: Any, base_url: str, stack: Stack
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/")
    # The device default (MAXY_CLAUDE_PERMISSION_MODE, bypassPermissions) is named as it is.
    expect(admin.locator("#mode-label")).to_have_text("Full access")
    assert "without asking" in (admin.locator("#mode-trigger").get_attribute("title") or "")
    assert "Asks before it changes things" not in admin.locator("#sidebar").inner_text()
    start_session(admin, "First in the default mode")
    expect(admin.locator("#session-bar-mode")).to_have_text("Mode: Full access", timeout=WAIT)
    first = session_of(admin)
    assert option(recorded(stack, first)["argv"], "--permission-mode") == ["bypassPermissions"]
    admin.click("#session-stop")

    admin.click("#mode-trigger")
    admin.click("#mode-menu [data-mode=plan]")
    expect(admin.locator("#mode-label")).to_have_text("Plan")
    start_session(admin, "Then in plan mode")
    expect(admin.locator("#session-bar-mode")).to_have_text("Mode: Plan", timeout=WAIT)
    second = session_of(admin)
    assert second != first
    assert option(recorded(stack, second)["argv"], "--permission-mode") == ["plan"]
    screenshot(admin, "shell-mode-plan-1400")
    admin.click("#session-stop")
    admin.reload()
    expect(admin.locator("#mode-label")).to_have_text("Plan")  # remembered in this browser


def test_a_session_that_cannot_start_shows_the_cause_and_what_to_do(
    admin: Any, base_url: str
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/")
    start_session(admin, "Hello [double refuse_root=1]")
    error = admin.locator("#spawn-error")
    expect(error).to_contain_text(
        "refuses full access (bypassPermissions) when it runs as root", timeout=WAIT
    )
    expect(error).to_contain_text("MAXY_CLAUDE_PERMISSION_MODE")
    error.locator("details summary").click()  # what the CLI printed, folded
    expect(error.locator("details pre")).to_have_text(
        "--dangerously-skip-permissions cannot be used with root/sudo privileges for security "
        "reasons"
    )
    assert "claude exited with code 1" not in admin.locator("#composer-note").inner_text()
    screenshot(admin, "shell-spawn-error-1400")


def test_an_answer_claude_could_not_give_says_how_to_connect_it(admin: Any, base_url: str) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/")
    expect(admin.locator("#claude-notice")).to_contain_text("Claude is not connected")
    start_session(admin, "Anyone there? [double require_auth=1]")
    bubble = admin.locator("#chat-turns .turn-error")
    expect(bubble).to_contain_text("Not logged in · Please run /login", timeout=WAIT)
    expect(bubble.locator(".turn-hint")).to_contain_text("Connect Claude in Settings")
    assert bubble.locator("a").get_attribute("href") == "/admin/settings#claude"
    admin.click("#session-stop")


def test_the_sidebar_says_claude_is_not_connected_and_visitors_are_turned_away(
    admin: Any, base_url: str
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/agents")
    expect(admin.locator("#claude-status")).to_have_text("Claude: not connected")
    visitors = admin.locator("#visitor-status")
    expect(visitors).to_have_attribute("data-path", "none")
    expect(visitors).to_have_text("Visitors are being turned away")
    assert "Connect Claude or add an API key" in (visitors.get_attribute("title") or "")
    screenshot(admin, "shell-visitors-turned-away-1400")


def test_settings_store_an_api_key_only_once_anthropic_accepts_it(
    admin: Any, base_url: str, stack: Stack
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/settings")
    assert admin.title() == "Settings · Maxy"
    message = admin.locator("#api-key-message")
    admin.fill("#api-key-input", "sk-ant-api03-revoked-key-0123456789abcdefgh")
    admin.click("#api-key-save")
    expect(message).to_contain_text("Anthropic refused this key (HTTP 401)", timeout=WAIT)
    expect(message).to_contain_text("Nothing was saved")
    key_file = stack.env.settings.anthropic_api_key_path
    assert not key_file.exists()

    admin.fill("#api-key-input", GOOD_KEY)
    admin.click("#api-key-save")
    expect(message).to_have_text("Saved: Anthropic accepted the key.", timeout=WAIT)
    expect(admin.locator("#api-key-state")).to_have_text(
        f"A key is stored (it ends …{GOOD_KEY[-4:]})."
    )
    expect(admin.locator("#visitor-status")).to_have_text("Visitors: answered through the API key")
    assert key_file.read_text().strip() == GOOD_KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    screenshot(admin, "settings-1400")

    admin.click("#api-key-remove")
    expect(admin.locator("#api-key-state")).to_have_text("No key is stored.", timeout=WAIT)
    expect(admin.locator("#visitor-status")).to_have_text("Visitors are being turned away")
    assert not key_file.exists()


def test_connect_claude_in_settings_and_disconnect_it_from_the_menu(
    admin: Any, base_url: str, stack: Stack
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/settings#claude")
    admin.click("[data-testid=claude-connect-start]")
    terminal = admin.locator("[data-testid=claude-terminal] .xterm-rows")
    expect(terminal).to_contain_text("Paste code here if prompted", timeout=WAIT)
    link = admin.locator("[data-testid=claude-sign-in]")
    expect(link).to_be_visible(timeout=WAIT)
    assert (link.get_attribute("href") or "").startswith("https://claude.com/cai/oauth/authorize?")
    assert link.get_attribute("target") == "_blank"
    screenshot(admin, "settings-connect-claude-1400")
    admin.fill("[data-testid=claude-code]", CODE)
    admin.press("[data-testid=claude-code]", "Enter")
    expect(admin.locator("[data-testid=claude-connect-status]")).to_contain_text(
        "Claude is connected", timeout=WAIT
    )
    # The page reloads into the connected state; the sidebar follows.
    expect(admin.locator("#claude-state")).to_have_attribute(
        "data-state", "connected", timeout=WAIT
    )
    expect(admin.locator("#claude-status")).to_have_text("Claude: connected")
    expect(admin.locator("#visitor-status")).to_have_text("Visitors: answered through Claude")
    token = stack.env.settings.claude_token_path
    assert token.read_text().strip() == token_for(CODE)
    assert token_for(CODE) not in admin.content()

    # A session started now runs on the subscription.
    admin.goto(base_url + "/")
    expect(admin.locator("#claude-notice")).to_have_count(0)
    start_session(admin, "On the subscription")
    expect(admin.locator("#chat-turns .turn-assistant")).to_have_text(
        "Reply 1 to: On the subscription", timeout=WAIT
    )
    session_id = session_of(admin)
    assert recorded(stack, session_id)["env"]["CLAUDE_CODE_OAUTH_TOKEN"] == token_for(CODE)

    # Disconnect Claude, from the owner's menu: the token goes and the running session ends.
    admin.on("dialog", lambda dialog: dialog.accept())
    admin.click("#account-trigger")
    admin.click("#menu-disconnect-claude")
    expect(admin.locator("#claude-status")).to_have_text("Claude: not connected", timeout=WAIT)
    assert not token.exists()
    admin.goto(base_url + f"/?session={session_id}")
    expect(admin.locator("#session-bar-status")).to_have_text("ended", timeout=WAIT)


def test_change_the_pin_in_settings(admin: Any, base_url: str, stack: Stack) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/settings#pin")
    form = admin.locator("#pin form")
    for current, new in ((PIN, "97531"), ("97531", PIN)):  # and back, for the other tests
        form.locator("#pin-current").fill(current)
        form.locator("#pin-new").fill(new)
        form.locator("#pin-confirm").fill(new)
        form.locator("button[type=submit]").click()
        expect(form.locator("[data-form-message]")).to_have_text(
            "The PIN is changed.", timeout=WAIT
        )
    form.locator("#pin-current").fill("000000")
    form.locator("#pin-new").fill("1234")
    form.locator("#pin-confirm").fill("1234")
    form.locator("button[type=submit]").click()
    expect(form.locator("[data-form-message]")).to_contain_text("not the right PIN", timeout=WAIT)


def test_log_out_from_the_menu(admin: Any, base_url: str) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/")
    admin.click("#account-trigger")
    expect(admin.locator("#account-menu")).to_be_visible()
    admin.click("#menu-logout")
    admin.wait_for_url(base_url + "/login")
    admin.goto(base_url + "/admin/settings")
    assert admin.url.startswith(base_url + "/login?next=")


def test_the_login_page_says_how_to_reset_a_forgotten_pin(browser: Any, base_url: str) -> None:
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        page.goto(base_url + "/login")
        forgot = page.locator("[data-testid=forgot-pin]")
        forgot.locator("summary").click()
        expect(forgot).to_contain_text("maxy-reset-pin")
        expect(forgot).to_contain_text("BOOTCONFIG")
        expect(forgot).to_contain_text("asks you to choose a new PIN")
        screenshot(page, "login-forgot-pin-390")
    finally:
        context.close()
