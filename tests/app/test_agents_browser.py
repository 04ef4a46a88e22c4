"""The owner sets up a public agent in headless Chromium; a visitor then talks to it.

Through the real edge, app and engine (the Anthropic API is the local fake): on the Agents page
the owner creates an agent with its IDENTITY and SOUL, subscribes it to a keyword, regenerates its
KNOWLEDGE.md and makes it the default agent; then ``/{slug}`` — and the public home page — answer
with that agent, whose request to the model carries the new IDENTITY and the knowledge, no tools.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.app.running_app import chromium
from tests.app.test_browser import PUBLIC_HOST, PUBLIC_HOST_RULE, edge_url, screenshot
from tests.app.test_chat_browser import verdict
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.support.processes import Neo4jServer
from tests.support.stacks import PIN, Stack, give_api_key, make_env, running_stack

GATEWAY = "claude-haiku-4-5"
AGENT = "claude-sonnet-4-6"
IDENTITY = "You are Ivy (IVY-IDENTITY-7731), the botanist of {{productName}}."
REPLY = "Water your fern once a week and keep it out of direct sun."
# Milliseconds a step that goes through the server may take on a busy two-core machine.
SERVER_STEP = 30_000


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as api:
        yield api


@pytest.fixture(scope="module")
def stack(
    neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory, fake: FakeAnthropic
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("agents-browser")
    env = make_env(
        neo4j_server,
        root / "data",
        brand="Gardenia",
        MAXY_ANTHROPIC_BASE_URL=fake.url,
        MAXY_PUBLIC_HOSTNAMES=PUBLIC_HOST,
    )
    give_api_key(env)
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        for name, text, agents in (
            ("Fern care", "IVY-KNOWLEDGE: ferns like shade and damp soil.", ["ivy"]),
            ("Bonsai wiring", "BONSAI-SUBSCRIBED: wire bonsai in late winter.", None),
        ):
            params: dict[str, Any] = {
                "label": "Note",
                "properties": {"name": name, "text": text},
                "scope": "public",
            }
            if agents:
                params["agents"] = agents
            running.rpc("write", params)
        yield running


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Any]:
    with chromium(PUBLIC_HOST_RULE) as launched:
        yield launched


def test_the_owner_sets_up_an_agent_and_a_visitor_talks_to_it(
    browser: Any, stack: Stack, fake: FakeAnthropic
) -> None:
    from playwright.sync_api import expect

    base = edge_url(stack)
    owner = browser.new_context(viewport={"width": 1400, "height": 900})
    page = owner.new_page()
    page.goto(base + "/")
    page.fill("#pin", PIN)
    page.fill("#confirm", PIN)
    page.click("form[data-maxy-auth=setup] button[type=submit]")
    page.locator("[data-maxy-step=claude]").wait_for(state="visible")
    page.click("[data-maxy-step=claude] [data-maxy-next]")  # Connect Claude: later
    page.locator("[data-maxy-step=remote]").wait_for(state="visible")
    page.click("[data-maxy-step=remote] >> text=Skip for now")
    page.locator("#sidebar").wait_for(state="visible")

    page.click('[data-nav="agents"]')
    page.wait_for_url(base + "/admin/agents")
    status = page.get_by_test_id("agent-status")
    expect(page.locator("#agents-status")).to_contain_text("No agents yet")

    # Create: address, names, IDENTITY.md and SOUL.md.
    page.fill("#agent-slug", "ivy")
    page.fill("#agent-name", "Ivy the Botanist")
    page.fill("#agent-identity", IDENTITY)
    page.fill("#agent-soul", "Calm and precise.")
    page.get_by_test_id("agent-save").click()
    expect(status).to_contain_text("Created", timeout=SERVER_STEP)
    expect(page.locator('.agent-item[data-slug="ivy"]')).to_contain_text("Ivy the Botanist")
    expect(page.locator("#agent-slug")).to_be_disabled()

    # A bad keyword list is refused with the server's words; five good ones are kept.
    page.fill("#agent-keywords", "a, b, c, d, e, f")
    page.get_by_test_id("agent-save").click()
    expect(status).to_contain_text("at most 5 keywords", timeout=SERVER_STEP)
    page.fill("#agent-keywords", "bonsai")
    page.get_by_test_id("agent-save").click()
    expect(status).to_have_text("Saved.", timeout=SERVER_STEP)

    # Knowledge from the graph: the tagged note and the subscription's match.
    page.get_by_test_id("agent-knowledge").click()
    expect(status).to_contain_text("Knowledge regenerated", timeout=SERVER_STEP)
    expect(status).to_contain_text("1 from keyword subscriptions")
    expect(page.get_by_test_id("agent-knowledge-state")).to_contain_text("Generated")

    page.get_by_test_id("agent-default").click()
    expect(status).to_have_text("This is now the default agent.", timeout=SERVER_STEP)
    expect(page.locator('.agent-item[data-slug="ivy"] .badge')).to_have_text("default")
    expect(page.get_by_test_id("agent-default")).to_be_hidden()
    screenshot(page, "agents-1400")

    folder = stack.env.settings.accounts_dir / stack.env.account_id / "agents" / "ivy"
    assert (folder / "IDENTITY.md").read_text() == IDENTITY
    assert json.loads((folder / "config.json").read_text())["keywordSubscriptions"] == ["bonsai"]
    knowledge = (folder / "KNOWLEDGE.md").read_text()
    assert "IVY-KNOWLEDGE" in knowledge and "BONSAI-SUBSCRIBED" in knowledge
    account = stack.env.settings.accounts_dir / stack.env.account_id / "account.json"
    assert json.loads(account.read_text())["defaultAgent"] == "ivy"
    owner.close()

    # A visitor: /ivy answers with that agent; so does the public home page.
    fake.always(verdict("CLEAN"), model=GATEWAY)
    fake.always(Reply(text=REPLY), model=AGENT)
    visitor = browser.new_context(viewport={"width": 390, "height": 844})
    page = visitor.new_page()
    page.goto(base + "/ivy")
    expect(page.locator("h1")).to_contain_text("Ivy the Botanist")
    page.fill("#agent-message", "How often should I water my fern at home?")
    page.press("#agent-message", "Enter")
    expect(page.locator(".bubble.from-agent").first).to_have_text(REPLY, timeout=SERVER_STEP)
    system = fake.calls_for(AGENT)[-1]["system"]
    assert "You are Ivy (IVY-IDENTITY-7731), the botanist of Gardenia." in system
    assert "Calm and precise." in system and "IVY-KNOWLEDGE" in system
    page.goto(f"http://{PUBLIC_HOST}:{stack.env.settings.port}/")
    expect(page.locator("h1")).to_contain_text("Ivy the Botanist")
    visitor.close()
    assert all("tools" not in body and "tool_choice" not in body for body in fake.messages)
