"""session.js in headless Chromium: onboarding and login forms, CSRF, "Sign out other devices"
(maxySession.rotate), the banner.

The browser reaches the real `maxy app` through a loopback TCP port piped to its Unix socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.app.running_app import RunningApp, TcpToUnix, chromium, start_app, wait_for_js
from tests.support.processes import Env

PIN = "271828"
BANNER = "Your admin session was renewed in another tab. Click to reload."

POST_SETTING = """async () => {
    const response = await window.maxySession.fetch("/api/admin/settings/remote-password", {
        method: "POST",
        headers: {"Content-Type": "application/json"},
        body: JSON.stringify({password: "a remote password"}),
    });
    return response.status;
}"""


@pytest.fixture
def browser_app(maxy_env: Env, start_maxy: Any) -> Iterator[tuple[Any, str, RunningApp]]:
    app = start_app(start_maxy, maxy_env)
    forward = TcpToUnix(app.socket)
    try:
        with chromium() as browser:
            yield browser, f"http://127.0.0.1:{forward.port}", app
    finally:
        forward.close()


def onboard_in(page: Any, base: str) -> None:
    page.goto(base + "/admin/anything")
    assert page.url == base + "/onboarding"
    page.fill("#pin", "1234")
    page.fill("#confirm", "4321")
    page.click("form[data-maxy-auth=setup] button[type=submit]")
    message = page.locator("form[data-maxy-auth=setup] [data-maxy-message]")
    message.filter(has_text="The two PINs differ").wait_for()
    page.fill("#pin", PIN)
    page.fill("#confirm", PIN)
    page.click("form[data-maxy-auth=setup] button[type=submit]")
    page.locator("[data-maxy-step=claude]").wait_for(state="visible")  # Connect Claude: skipped
    assert page.locator("[data-maxy-step=pin]").is_hidden()
    page.click("[data-maxy-step=claude] [data-maxy-next]")
    page.locator("[data-maxy-step=remote]").wait_for(state="visible")
    assert page.locator("[data-maxy-step=claude]").is_hidden()


def log_in(page: Any, base: str) -> None:
    page.goto(base + "/login?next=/login")
    page.fill("#pin", "000000")
    page.click("form[data-maxy-auth=login] button[type=submit]")
    wrong = page.locator("form[data-maxy-auth=login] [data-maxy-message]")
    wrong.filter(has_text="not the right PIN").wait_for()
    page.fill("#pin", PIN)
    with page.expect_navigation():
        page.click("form[data-maxy-auth=login] button[type=submit]")
    assert page.url == base + "/login"


def test_onboarding_then_the_remote_password_step(browser_app: tuple[Any, str, RunningApp]) -> None:
    browser, base, app = browser_app
    page = browser.new_context().new_page()
    onboard_in(page, base)
    page.fill("#remote-password", "long enough 1")
    page.fill("#remote-confirm", "long enough 2")
    page.click("form[data-maxy-auth=remote-password] button[type=submit]")
    message = page.locator("form[data-maxy-auth=remote-password] [data-maxy-message]")
    message.filter(has_text="The two passwords differ").wait_for()
    page.fill("#remote-password", "a long remote password")
    page.fill("#remote-confirm", "a long remote password")
    with page.expect_navigation():
        page.click("form[data-maxy-auth=remote-password] button[type=submit]")
    assert (app.settings.keys_dir / "remote-password").is_file()
    cookie = next(c for c in page.context.cookies() if c["name"] == "maxy_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"


def test_signing_out_other_devices_updates_sibling_tabs_and_warns_other_browsers(
    browser_app: tuple[Any, str, RunningApp],
) -> None:
    browser, base, _ = browser_app
    first = browser.new_context()
    tab_a = first.new_page()
    onboard_in(tab_a, base)
    tab_a.goto(base + "/login")
    tab_b = first.new_page()
    tab_b.goto(base + "/login")
    # The token is fetched on first use and sent as X-Maxy-CSRF.
    assert tab_b.evaluate(POST_SETTING) == 200
    before = tab_b.evaluate("window.maxySession.token()")

    # "Sign out other devices" in tab A: tab B learns the new token over BroadcastChannel, silently.
    rotated = tab_a.evaluate("window.maxySession.rotate()")
    assert rotated["csrf"] != before
    wait_for_js(tab_b, "t => window.maxySession.token() === t", rotated["csrf"])
    requests: list[str] = []
    tab_b.on("request", lambda request: requests.append(request.url))
    assert tab_b.evaluate(POST_SETTING) == 200
    assert requests == [base + "/api/admin/settings/remote-password"]  # no refetch, no retry
    assert tab_b.locator("#session-banner").count() == 0

    # A rotation nobody broadcast (the same cookie jar, a stale token in tab B): one refetch of
    # the token, one retry, no banner.
    tab_a.evaluate(
        """t => fetch("/api/admin/session/rotate", {method: "POST", headers: {"X-Maxy-CSRF": t}})
            .then(r => r.status)""",
        rotated["csrf"],
    )
    requests.clear()
    assert tab_b.evaluate(POST_SETTING) == 200
    setting, session = base + "/api/admin/settings/remote-password", base + "/api/admin/session"
    assert requests == [setting, session, setting]
    assert tab_b.locator("#session-banner").count() == 0

    # Another browser logs in; then tab A rotates again: the other browser's cookie is stale.
    second = browser.new_context()
    other = second.new_page()
    log_in(other, base)
    assert other.evaluate(POST_SETTING) == 200
    tab_a.evaluate("window.maxySession.rotate()")
    assert other.evaluate(POST_SETTING) == 401
    banner = other.locator("#session-banner")
    banner.wait_for()
    assert banner.inner_text() == BANNER
    assert other.evaluate(POST_SETTING) == 401
    assert other.locator("#session-banner").count() == 1  # one banner, however often it fails
    with other.expect_navigation():
        banner.click()
    assert other.locator("#session-banner").count() == 0
    first.close()
    second.close()
