"""The owner's journey, the product's acceptance test: headless Chromium against a real `maxy run`
(its own Neo4j, engine, session manager, app and edge), as a new owner meets a fresh device.

    1 first visit            / leads to onboarding
    2 PIN                    the owner sets the admin PIN
    3 connect Claude         Connect Claude runs setup-token (the double: the real one cannot
                             finish offline) in the browser terminal; the code is pasted; the token
                             is stored 0600
    4 + New session          the labelled button starts a real Claude Code session (the real CLI,
                             signed in with that token)
    5 a memory is written    the local stand-in for the Anthropic API scripts a memory-write tool
                             call; the real CLI runs it through `maxy mcp` into the graph
    6 the Data page          search finds the memory
    7 a visitor              on a public agent's page, answered (no API key: a toolless public
                             Claude Code session through the manager's /public-spawn)
    8 the Updates page       shows the installed version
    9 log out                back to the login page

Each step is named in the run's output (the "owner journey" section) and leaves a screenshot in
tests/artefacts/screenshots/journey-<n>-<step>.png. The stand-in API accepts only the token
Connect Claude captured, so every answer proves the sessions used it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.core.accounts import create_account
from appliance.core.version import __version__
from tests.app.running_app import chromium
from tests.app.test_browser import screenshot
from tests.fakes.anthropic_api import FakeAnthropic, Reply, ToolUse, has_tools
from tests.journey.conftest import STEPS
from tests.sessions.claude_double import token_for
from tests.support.processes import (
    Process,
    get_health,
    maxy,
    private_neo4j,
    real_claude,
    runtime_dir,
    wait_until,
)
from tests.support.stacks import DOUBLE, account_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CLAUDE = real_claude()
PIN = "604182"
CODE = "journey-code-from-the-sign-in-page#state"
TOKEN = token_for(CODE)
MEMORY = "The boiler is serviced every May by Quokka Heating"
ADMIN_REPLY = "Noted: I will remember that the boiler is serviced every May."
IDENTITY = "You are Anna, who answers visitors' questions about the garden."
VISITOR_QUESTION = "When should I water the roses?"
VISITOR_ANSWER = "Water the roses early in the morning, at the roots."
WAIT = 120_000  # ms: a deadline against hangs on a busy 2-core machine, not a timing assertion


class Journey:
    """Names each step in the output, and says which step failed."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.number = 0

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.number += 1
        print(f"[journey] step {self.number}: {name}", flush=True)
        try:
            yield
        except BaseException:
            STEPS.append((name, "FAILED"))
            with contextlib.suppress(Exception):
                screenshot(self.page, f"journey-{self.number}-failed")
            raise
        slug = name.split(":")[0].replace(" ", "-").replace("+", "plus").lower()
        screenshot(self.page, f"journey-{self.number}-{slug}")
        STEPS.append((name, "ok"))


def mentions_anna(body: dict[str, Any]) -> bool:
    """A request of the visitor's public session: its system prompt carries the agent."""
    return IDENTITY in json.dumps(body.get("system", ""))


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(reply="Garden notes", oauth_tokens=[TOKEN]) as fake:
        # The admin session's turn: a memory-write call, then the answer after its result.
        note = {"label": "Note", "properties": {"name": MEMORY, "text": MEMORY + "."}}
        fake.queue(Reply(tool=ToolUse("mcp__memory__memory-write", note)), when=has_tools)
        fake.queue(Reply(text=ADMIN_REPLY), when=has_tools)
        fake.queue(Reply(text=VISITOR_ANSWER), when=mentions_anna)
        yield fake


@pytest.fixture(scope="module")
def device(
    api: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A fresh device: `maxy run` on an account with one public agent, nothing else set up."""
    if CLAUDE is None:
        pytest.fail("The real Claude Code CLI is missing: run `just bootstrap` (it caches it).")
    root = tmp_path_factory.mktemp("journey")
    data = root / "data"
    account = create_account(data / "accounts", "Journey Owner", product_name="Maxy")
    agent = data / "accounts" / account.id / "agents" / "anna"
    agent.mkdir(parents=True)
    (agent / "config.json").write_text(json.dumps({"displayName": "Anna the Gardener"}))
    (agent / "IDENTITY.md").write_text(IDENTITY)
    env = account_env(
        data,
        runtime_dir("maxy-run-"),
        account.id,
        **private_neo4j(),
        MAXY_ANTHROPIC_BASE_URL=api.url,
        MAXY_STOP_GRACE="2",
        # The double acts out setup-token and hands every other call to the real CLI.
        MAXY_CLAUDE_BIN=str(DOUBLE),
        CLAUDE_DOUBLE_PYTHON=sys.executable,
        CLAUDE_DOUBLE_DELEGATE=CLAUDE,
        ANTHROPIC_BASE_URL=api.url,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    port = int(env["MAXY_PORT"])
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # the real CLI refuses full access as root elsewhere
    run = Process(maxy("run"), env, root / "maxy-run.log")
    try:

        def healthy() -> bool:
            assert run.proc.poll() is None, f"maxy run exited:\n{run.output()}"
            answer = get_health(port)
            return answer is not None and answer.status_code == 200

        wait_until(healthy, 600, f"maxy run to be healthy\n{run.output()}", 0.5)
        yield {"url": f"http://127.0.0.1:{port}", "data": data, "run": run}
    finally:
        run.stop()


def test_the_owner_journey(device: dict[str, Any], api: FakeAnthropic) -> None:
    from playwright.sync_api import expect

    base = device["url"]
    token_file = Path(device["data"]) / "keys" / "claude-oauth-token"
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        journey = Journey(page)

        with journey.step("first visit: onboarding"):
            page.goto(base + "/")
            assert page.url == base + "/onboarding", page.url
            expect(page.locator("h1")).to_have_text("Welcome to Maxy")

        with journey.step("PIN"):
            page.fill("#pin", PIN)
            page.fill("#confirm", PIN)
            page.click("form[data-maxy-auth=setup] button[type=submit]")
            expect(page.locator("[data-maxy-step=claude]")).to_be_visible(timeout=WAIT)

        with journey.step("connect Claude"):
            step = page.locator("[data-maxy-step=claude]")
            step.locator("[data-testid=claude-connect-start]").click()
            terminal = step.locator("[data-testid=claude-terminal] .xterm-rows")
            expect(terminal).to_contain_text("Paste code here if prompted", timeout=WAIT)
            expect(step.locator("[data-testid=claude-sign-in]")).to_have_attribute(
                "href", re.compile(r"^https://claude\.com/cai/oauth/authorize\?"), timeout=WAIT
            )
            screenshot(page, "journey-3-claude-sign-in")
            step.locator("[data-testid=claude-code]").fill(CODE)
            step.locator("[data-testid=claude-code]").press("Enter")
            expect(step.locator("[data-testid=claude-connect-status]")).to_contain_text(
                "Claude is connected", timeout=WAIT
            )
            assert token_file.read_text().strip() == TOKEN
            assert token_file.stat().st_mode & 0o777 == 0o600
            step.locator("[data-testid=onboarding-next]").click()  # "Continue"
            page.click("[data-maxy-step=remote] >> text=Skip for now")
            page.wait_for_url(base + "/")
            expect(page.locator("#claude-status")).to_have_text("Claude: connected")

        with journey.step("+ New session: a turn that writes a memory"):
            page.click("#new-session")
            expect(page.locator("#composer-input")).to_be_focused()
            page.fill("#composer-input", f"Remember that {MEMORY.lower()}.")
            page.press("#composer-input", "Enter")
            tool = page.locator("#chat-turns .turn-tool[data-tool=memory-write]")
            expect(tool).to_have_attribute("data-state", "done", timeout=WAIT)
            expect(page.locator("#chat-turns .turn-assistant").last).to_have_text(
                ADMIN_REPLY, timeout=WAIT
            )
            tool.locator("summary").click()
            expect(tool.locator(".tool-result")).to_contain_text(re.compile(r'"created":\s*true'))
            # Every request of the session was signed with the token Connect Claude stored.
            turns = [i for i, body in enumerate(api.messages) if has_tools(body)]
            assert turns, api.requests
            posts = [i for i, (m, p, _) in enumerate(api.requests) if m == "POST"]
            assert all(api.credential_of(i) == TOKEN for i in posts)

        with journey.step("the Data page finds the memory"):
            page.goto(base + "/admin/data")
            page.fill("#data-q", "boiler serviced")
            found = page.locator(".result", has_text=MEMORY).first
            # On a loaded machine the engine's first search can outlast the app's 10 s: the
            # page says so, and the owner searches again (as often as a patient owner would).
            for _ in range(5):
                page.press("#data-q", "Enter")
                slow = page.get_by_text("The memory engine is not answering")
                expect(found.or_(slow)).to_be_visible(timeout=WAIT)
                if found.is_visible():
                    break
            expect(found).to_be_visible()

        with journey.step("a visitor on a public agent page gets an answer"):
            visitor = browser.new_context(viewport={"width": 390, "height": 844})
            try:
                public = visitor.new_page()
                journey.page = public
                public.goto(base + "/anna")
                expect(public.locator("#agent-name")).to_have_text("Anna the Gardener")
                public.fill("#agent-message", VISITOR_QUESTION)
                public.press("#agent-message", "Enter")
                expect(public.locator(".bubble.from-agent").last).to_have_text(
                    VISITOR_ANSWER, timeout=WAIT
                )
                screenshot(public, "journey-visitor-390")
            finally:
                journey.page = page
                visitor.close()
            page.goto(base + "/")
            expect(page.locator("#visitor-status")).to_have_text(
                "Visitors: answered through Claude"
            )

        with journey.step("the Updates page shows the installed version"):
            page.goto(base + "/admin/updates")
            expect(page.locator("#updates-version")).to_contain_text(__version__)

        with journey.step("log out"):
            page.click("#account-trigger")
            page.click("#menu-logout")
            page.wait_for_url(base + "/login")
            page.goto(base + "/")
            assert page.url.startswith(base + "/login"), page.url
        context.close()
    log = device["run"].output()
    assert TOKEN not in log and CODE not in log
