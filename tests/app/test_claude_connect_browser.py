"""Connect Claude with the REAL Claude Code CLI, in headless Chromium through the real edge, app
and session manager: onboarding's Connect Claude step runs `claude setup-token` in a PTY, and its
sign-in screen reaches the browser terminal (xterm.js) with the sign-in URL as a link.

Offline the flow can be shown and driven up to the pasted code, never completed (the CLI cannot
reach the sign-in service): the code goes in, and the CLI's own "OAuth error" reaches the page.
Token capture is tested with the double (tests/sessions/test_login.py, test_shell_browser.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.app import test_browser as shell_tests
from tests.app.running_app import chromium
from tests.support.processes import real_claude
from tests.support.stacks import PIN, Stack, sessions_stack

CLAUDE = real_claude()

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        CLAUDE is None,
        reason="the real Claude Code CLI is not installed (no `claude` on PATH or in the cache; "
        "`just bootstrap` caches it)",
    ),
]

WAIT = 60_000  # ms; the CLI's first start on a busy 2-core machine


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert CLAUDE is not None
    root = tmp_path_factory.mktemp("claude-connect")
    with sessions_stack(root, "app", "edge", MAXY_CLAUDE_BIN=CLAUDE) as running:
        yield running


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def test_onboarding_shows_the_real_setup_token_screen_in_the_browser_terminal(
    browser: Any, stack: Stack
) -> None:
    from playwright.sync_api import expect

    base = shell_tests.edge_url(stack)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(base + "/")
        assert page.url == base + "/onboarding"
        page.fill("#pin", PIN)
        page.fill("#confirm", PIN)
        page.click("form[data-maxy-auth=setup] button[type=submit]")
        step = page.locator("[data-maxy-step=claude]")
        expect(step).to_be_visible()
        step.locator("[data-testid=claude-connect-start]").click()

        terminal = step.locator("[data-testid=claude-terminal] .xterm-rows")
        expect(terminal).to_contain_text("long-lived", timeout=WAIT)
        expect(terminal).to_contain_text("Browser didn't open? Use the URL below to sign in")
        expect(terminal).to_contain_text("https://claude.com/cai/oauth/authorize")
        expect(terminal).to_contain_text("Paste code here if prompted")
        link = step.locator("[data-testid=claude-sign-in]")
        expect(link).to_be_visible(timeout=WAIT)
        href = link.get_attribute("href") or ""
        assert href.startswith("https://claude.com/cai/oauth/authorize?code=true&client_id=")
        assert "code_challenge=" in href and "state=" in href
        shell_tests.screenshot(page, "onboarding-connect-claude-real-cli-1400")

        # Offline the code cannot be exchanged: the CLI's own error reaches the page.
        step.locator("[data-testid=claude-code]").fill("offline-code#state")
        step.locator("[data-testid=claude-code]").press("Enter")
        error = step.locator("[data-testid=claude-connect-error]")
        expect(error).to_contain_text("OAuth error:", timeout=WAIT)
        assert not stack.env.settings.claude_token_path.exists()
        shell_tests.screenshot(page, "onboarding-connect-claude-offline-error-1400")
        # The sign-in is the manager's alone: nobody sees its URL in a log.
        assert href not in stack.output()
        step.locator("[data-cc=cancel]").click()
        expect(step.locator("[data-testid=claude-connect-start]")).to_be_visible(timeout=WAIT)
        step.locator("[data-testid=onboarding-next]").click()
        expect(page.locator("[data-maxy-step=remote]")).to_be_visible()
    finally:
        context.close()
