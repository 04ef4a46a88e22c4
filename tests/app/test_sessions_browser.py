"""The live sessions list in headless Chromium, through the real edge, app and session manager.

The admin shell lists sessions as they are spawned and stopped, without a reload; "+" starts a
session whose transcript shows in the chat pane; its terminal opens in xterm.js; and the
live-updates note tells a restarting server from a stopped session manager.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.app import test_browser as shell_tests
from tests.app.running_app import edge_headers
from tests.support.processes import Process, wait_until
from tests.support.stacks import Stack, running_stack, sessions_env, start_manager

pytestmark = pytest.mark.timeout(120)

# The shell tests' Chromium and logged-in admin tab, resolved against this module's `stack`.
browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

WAIT = 15_000  # ms; a deadline against hangs, not a timing assertion
RESTARTING = "Server is restarting — reconnect will happen automatically."
MANAGER_DOWN = "The session manager is not running"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("sessions-browser")
    env = sessions_env(root)
    with running_stack(env, root / "logs", "app", "edge") as running:
        start_manager(running)
        yield running


def spawn_through_the_app(stack: Stack, message: str) -> dict[str, Any]:
    """Start a session as another tab would: POST /api/admin/sessions/spawn on the app."""
    cookies = stack.admin_cookies()
    with stack.client(cookies, **edge_headers()) as client:
        token = client.get("/api/admin/session").json()["csrf"]
        answer = client.post(
            "/api/admin/sessions/spawn", json={"message": message}, headers={"X-Maxy-CSRF": token}
        )
    assert answer.status_code == 201, answer.text
    row: dict[str, Any] = answer.json()["row"]
    return row


def crash(process: Process) -> None:
    """Kill a role's whole process group at once, as a crash (or an impatient stop) would.

    A graceful stop waits for open event streams: the app up to its 5 s kill timeout, the
    manager for as long as the app keeps its feed open.
    """
    os.killpg(process.proc.pid, signal.SIGKILL)
    process.stop()


def row_named(page: Any, title: str) -> Any:
    return page.locator("#session-list [data-testid=session-row]", has_text=title)


def test_the_sessions_list_is_live(admin: Any, base_url: str, stack: Stack) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/")
    expect(admin.locator("#live-dot")).to_have_attribute("data-state", "live", timeout=WAIT)
    assert admin.locator("#session-empty").inner_text() == "No sessions yet"

    # Spawned elsewhere: the row appears, then takes the title from the transcript.
    spawn_through_the_app(stack, "Plan the garden [double title=Garden-plan]")
    garden = row_named(admin, "Garden-plan")
    expect(garden).to_be_visible(timeout=WAIT)
    expect(garden.locator(".session-status")).to_have_text("idle", timeout=WAIT)
    assert admin.locator("#session-empty").is_hidden()

    # "+" starts a session from the composer; its transcript shows in the chat pane.
    admin.click("#start-session")
    admin.fill("#composer-input", "Water the tomatoes")
    admin.press("#composer-input", "Enter")
    turns = admin.locator("#chat-turns .turn")
    expect(turns.first).to_have_text("Water the tomatoes", timeout=WAIT)
    expect(admin.locator("#chat-turns .turn-assistant")).to_have_text(
        "Reply 1 to: Water the tomatoes", timeout=WAIT
    )
    untitled = row_named(admin, "Untitled session")
    expect(untitled).to_have_attribute("aria-current", "true", timeout=WAIT)
    assert "session=" in admin.url
    screenshot(admin, "sessions-1400")

    # Its terminal, in xterm.js over the WebSocket.
    admin.click("#view-terminal")
    expect(admin.locator("#session-terminal .xterm-rows")).to_contain_text(
        "claude double", timeout=WAIT
    )
    screenshot(admin, "sessions-terminal-1400")
    admin.click("#view-transcript")

    # Stopped: it leaves the Active tab and shows under Archived as ended.
    admin.click("#session-stop")
    expect(untitled).to_have_count(0, timeout=WAIT)
    admin.click(".tabs [data-filter=archived]")
    expect(row_named(admin, "Untitled session").locator(".session-status")).to_have_text("ended")
    expect(row_named(admin, "Garden-plan")).to_have_count(0)

    # On another page the list is live too, and a row opens the session on the Sessions page.
    admin.goto(base_url + "/admin/people")
    row_named(admin, "Garden-plan").click()
    expect(admin.locator("#session-bar-title")).to_have_text("Garden-plan", timeout=WAIT)
    assert admin.url.startswith(base_url + "/?session=")


def test_the_live_note_tells_a_restart_from_a_stopped_manager(
    admin: Any, base_url: str, stack: Stack
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/")
    dot, note = admin.locator("#live-dot"), admin.locator("#live-note")
    expect(dot).to_have_attribute("data-state", "live", timeout=WAIT)
    assert note.is_hidden()

    # The app goes down: the edge ends the feed with `event: restarting`.
    crash(stack.processes["app"])
    expect(note).to_have_text(RESTARTING, timeout=WAIT)
    expect(dot).to_have_attribute("data-state", "reconnecting")
    stack.start("app")
    wait_until(stack.app_answers, 60, f"the app again\n{stack.output()}")
    expect(dot).to_have_attribute("data-state", "live", timeout=WAIT)
    expect(note).to_be_hidden()

    # The session manager goes down: the app says so; the list comes back with it.
    crash(stack.processes["manager"])
    expect(note).to_contain_text(MANAGER_DOWN, timeout=WAIT)
    expect(dot).to_have_attribute("data-state", "reconnecting")
    start_manager(stack)
    expect(dot).to_have_attribute("data-state", "live", timeout=WAIT)
    expect(note).to_be_hidden()
