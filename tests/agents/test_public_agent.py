"""The public agent: its prompt from the agent's folder, streamed replies, never any tools."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from appliance.agents.anthropic_client import AnthropicClient
from appliance.agents.errors import AgentConfigError, AnthropicError, NoApiKey
from appliance.agents.gateway import passthrough, screen_locally
from appliance.agents.public_agent import PublicAgent, Turn, knowledge_file, system_prompt
from appliance.core.accounts import Account
from appliance.core.config import Settings
from tests.agents.conftest import agent_settings
from tests.fakes.anthropic_api import FakeAnthropic, Reply

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def account(brand: dict[str, Any] | None = None) -> Account:
    brand = {"productName": "Gardenia"} if brand is None else brand
    return Account("acc-1", "Owner", "2026-01-01", "maxy", brand)


def make_agent(root: Path, **files: str) -> Path:
    folder = root / "agents" / "anna"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{name.replace('_', '-')}.md").write_text(text)
    return folder


def age(path: Path, seconds_ago: float) -> None:
    when = path.stat().st_mtime - seconds_ago
    os.utime(path, (when, when))


def test_the_prompt_is_identity_soul_and_knowledge_with_the_product_name(tmp_path: Path) -> None:
    folder = make_agent(
        tmp_path,
        IDENTITY="You are Anna, the gardener of {{productName}}.",
        SOUL="Warm and brief.",
        KNOWLEDGE="Roses need sun.",
    )
    prompt = system_prompt(folder, account())
    assert prompt.index("You are Anna, the gardener of Gardenia.") < prompt.index("Warm and brief.")
    assert prompt.index("Warm and brief.") < prompt.index("Roses need sun.")
    assert "{{productName}}" not in prompt


def test_the_summary_is_preferred_unless_the_knowledge_is_newer(tmp_path: Path) -> None:
    folder = make_agent(tmp_path, KNOWLEDGE="FULL", KNOWLEDGE_SUMMARY="SUMMARY")
    age(folder / "KNOWLEDGE.md", 60)
    assert knowledge_file(folder) == folder / "KNOWLEDGE-SUMMARY.md"
    assert "SUMMARY" in system_prompt(folder, account())
    age(folder / "KNOWLEDGE-SUMMARY.md", 120)  # the summary is now older than the knowledge
    assert knowledge_file(folder) == folder / "KNOWLEDGE.md"
    prompt = system_prompt(folder, account())
    assert "FULL" in prompt and "SUMMARY" not in prompt


@pytest.mark.parametrize("brand", [{}, {"productName": "  "}, {"productName": 3}])
def test_a_missing_product_name_is_an_error_not_a_default(tmp_path: Path, brand: Any) -> None:
    folder = make_agent(tmp_path, IDENTITY="I work for {{productName}}.")
    with pytest.raises(AgentConfigError, match="productName"):
        system_prompt(folder, account(brand))


async def collect(agent: PublicAgent, history: list[Turn], text: str) -> str:
    return "".join([d async for d in agent.reply(history, text, passthrough("timeout"))])


async def test_a_reply_streams_and_the_request_carries_no_tools(
    fake: FakeAnthropic, client: AnthropicClient, settings: Settings, tmp_path: Path
) -> None:
    folder = make_agent(tmp_path, IDENTITY="You are Anna of {{productName}}.")
    agent = PublicAgent(client, settings.agent_model, folder, account())
    fake.always(Reply(text="Roses like morning sun and deep watering."))
    deltas = [
        d
        async for d in agent.reply(
            [Turn("user", "Hi"), Turn("assistant", "Hello!")],
            "How do I care for roses?",
            screen_locally("How do I care for roses?"),
        )
    ]
    assert len(deltas) > 1 and "".join(deltas) == "Roses like morning sun and deep watering."
    [body] = fake.messages
    assert body["stream"] is True and body["model"] == "claude-sonnet-4-6"
    assert "tools" not in body and "tool_choice" not in body
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][-1]["content"] == "How do I care for roses?"
    assert "You are Anna of Gardenia." in body["system"]
    assert '"screened": true' in body["system"] and '"intent": "question"' in body["system"]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(status=429), "http-429"),
        (Reply(status=500), "http-500"),
        (Reply(malformed=True), "malformed"),
    ],
)
async def test_failures_raise_one_error_type(
    fake: FakeAnthropic,
    client: AnthropicClient,
    settings: Settings,
    tmp_path: Path,
    reply: Reply,
    reason: str,
) -> None:
    agent = PublicAgent(client, settings.agent_model, make_agent(tmp_path), account())
    fake.queue(reply)
    with pytest.raises(AnthropicError) as raised:
        await collect(agent, [], "Tell me about roses")
    assert raised.value.reason == reason
    assert all("tools" not in body for body in fake.messages)


async def test_no_key_raises_before_any_request(fake: FakeAnthropic, tmp_path: Path) -> None:
    settings = agent_settings(fake, tmp_path / "data", key=False)
    client = AnthropicClient(settings)
    agent = PublicAgent(client, settings.agent_model, make_agent(tmp_path), account())
    with pytest.raises(NoApiKey):
        await collect(agent, [], "Hello there, how are you doing today?")
    await client.aclose()
    assert fake.messages == []
