"""The query classifier and the query expander against the fake Messages API, and in the engine."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from appliance.agents.anthropic_client import AnthropicClient
from appliance.agents.expansion import paraphraser
from appliance.agents.public_agent import Turn
from appliance.agents.retrieval import (
    CLASSIFIER_SYSTEM,
    EXPANDER_SYSTEM,
    LIMITS,
    classify_query,
    make_expander,
)
from appliance.core.config import Settings
from appliance.memory.search import Searcher, SearchRequest
from appliance.memory.write import WriteRequest
from tests.agents.conftest import agent_settings
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.memory.conftest import Memory, memory  # noqa: F401 (the engine-level fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

MESSAGE = "When is her birthday party again?"
HISTORY = [
    Turn("user", f"turn {i}") if i % 2 == 0 else Turn("assistant", f"turn {i}") for i in range(10)
]
VERDICT = {"action": "search", "retrievalClass": "event", "query": "Dana birthday party date"}


def verdict(**changes: Any) -> Reply:
    return Reply(text=json.dumps({**VERDICT, **changes}))


@pytest.mark.parametrize("audience", ["admin", "public"])
async def test_the_classifier_sends_the_audiences_history_window(
    fake: FakeAnthropic,
    client: AnthropicClient,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    audience: Any,
) -> None:
    fake.queue(verdict(action="query", retrievalClass="temporal"))
    with caplog.at_level(logging.INFO, logger="appliance.agents.retrieval"):
        result = await classify_query(client, settings, MESSAGE, HISTORY, audience=audience)
    assert result == {"action": "query", "retrievalClass": "temporal", "query": VERDICT["query"]}
    [call] = fake.messages
    window = LIMITS[audience].history
    assert call["model"] == settings.gateway_model and call["system"] == CLASSIFIER_SYSTEM
    assert call["max_tokens"] == LIMITS[audience].max_tokens and "tools" not in call
    [sent] = call["messages"]
    content = sent["content"]
    assert sent["role"] == "user" and MESSAGE in content
    kept = [f"{t.role}: {t.text}" for t in HISTORY[-window:]]
    dropped = [f"{t.role}: {t.text}" for t in HISTORY[:-window]]
    assert all(line in content for line in kept)
    assert not any(line + "\n" in content for line in dropped)
    [line] = [m for m in caplog.messages if "[query-classifier] audience=" in m]
    for part in (
        f"audience={audience}",
        "action=query",
        "class=temporal",
        " ms=",
        "fallthrough=no",
    ):
        assert part in line


def test_admin_sees_more_of_the_conversation_than_a_visitor() -> None:
    assert LIMITS["admin"].history > LIMITS["public"].history
    assert LIMITS["admin"].max_tokens > LIMITS["public"].max_tokens


async def test_a_fenced_answer_is_accepted(
    fake: FakeAnthropic, client: AnthropicClient, settings: Settings
) -> None:
    fake.queue(Reply(text=f"```json\n{json.dumps(VERDICT)}\n```"))
    assert await classify_query(client, settings, MESSAGE, [], audience="public") == VERDICT


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(status=429), "http-429"),
        (Reply(status=500), "http-500"),
        (Reply(status=400), "http-400"),
        (Reply(malformed=True), "malformed"),
        (Reply(text="Search for the party, I think."), "malformed"),
        (Reply(text=json.dumps([VERDICT])), "malformed"),
        (Reply(text=json.dumps({**VERDICT, "extra": 1})), "malformed"),
        (verdict(action="lookup"), "malformed"),
        (verdict(retrievalClass="person"), "malformed"),
        (verdict(query=""), "malformed"),
        (verdict(query=None), "malformed"),
        (verdict(query="x" * 1001), "malformed"),
        (Reply(delay=5.0), "timeout"),
    ],
    ids=[
        "429",
        "500",
        "400",
        "broken-body",
        "prose",
        "array",
        "extra-key",
        "bad-action",
        "bad-class",
        "empty-query",
        "null-query",
        "long-query",
        "past-timeout",
    ],
)
async def test_every_failure_falls_back_to_a_general_search_of_the_message(
    fake: FakeAnthropic,
    client: AnthropicClient,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    reply: Reply,
    reason: str,
) -> None:
    fake.queue(reply)
    with caplog.at_level(logging.INFO, logger="appliance.agents.retrieval"):
        result = await classify_query(client, settings, MESSAGE, HISTORY, audience="admin")
    assert result == {"action": "search", "retrievalClass": "general", "query": MESSAGE}
    assert len(fake.messages) == 1  # one call, no retries
    [line] = [m for m in caplog.messages if "[query-classifier] audience=" in m]
    assert f"fallthrough={reason}" in line and "action=search class=general" in line


async def test_no_key_falls_back_without_calling_the_api(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    settings = agent_settings(fake, tmp_path / "data", key=False)
    client = AnthropicClient(settings)
    result = await classify_query(client, settings, MESSAGE, HISTORY, audience="public")
    await client.aclose()
    assert result == {"action": "search", "retrievalClass": "general", "query": MESSAGE}
    assert fake.messages == []


async def test_the_expander_returns_cleaned_paraphrases(
    fake: FakeAnthropic, client: AnthropicClient, settings: Settings
) -> None:
    answer = [
        "car insurance",
        "  Car   Insurance ",  # a duplicate once cleaned
        "Automobile cover",  # the query itself
        "",
        "x" * 201,  # too long
        "vehicle insurance policy",
        "motor cover",
        "auto insurance",  # a fourth: one too many
    ]
    fake.queue(Reply(text=json.dumps(answer)))
    expand = make_expander(client, settings)
    found = await expand("automobile cover")
    assert found == ["car insurance", "vehicle insurance policy", "motor cover"]
    [call] = fake.messages
    assert call["model"] == settings.gateway_model and call["system"] == EXPANDER_SYSTEM
    assert "automobile cover" in call["messages"][0]["content"] and "tools" not in call


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=429),
        Reply(status=500),
        Reply(malformed=True),
        Reply(text="car insurance, motor cover"),
        Reply(text=json.dumps({"paraphrases": ["car insurance"]})),
        Reply(text=json.dumps(["car insurance", 3])),
        Reply(delay=5.0),
    ],
    ids=["429", "500", "broken-body", "prose", "object", "non-string", "past-timeout"],
)
async def test_the_expander_answers_nothing_when_the_model_fails(
    fake: FakeAnthropic,
    client: AnthropicClient,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    reply: Reply,
) -> None:
    fake.queue(reply)
    with caplog.at_level(logging.INFO, logger="appliance.agents.retrieval"):
        assert await make_expander(client, settings)("automobile cover") == []
    [line] = [m for m in caplog.messages if "[query-expander] op=expand paraphrases=" in m]
    assert "paraphrases=0" in line and "fallthrough=no" not in line


async def test_the_expander_without_a_key_answers_nothing(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    settings = agent_settings(fake, tmp_path / "data", key=False)
    client = AnthropicClient(settings)
    assert await make_expander(client, settings)("automobile cover") == []
    await client.aclose()
    assert fake.messages == []


def test_the_engine_plugs_the_expander_in_only_with_a_key(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    assert paraphraser(agent_settings(fake, tmp_path / "none", key=False)) is None
    assert callable(paraphraser(agent_settings(fake, tmp_path / "some")))


def test_the_engine_does_not_load_the_sdk_without_a_key(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path\n"
        "from appliance.core.config import load_settings\n"
        "from appliance.agents.expansion import paraphraser\n"
        f"s = load_settings({{'MAXY_DATA_DIR': {str(tmp_path)!r}}},\n"
        "                  config_file=Path('/dev/null'))\n"
        "assert paraphraser(s) is None\n"
        "print('anthropic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_the_engine_finds_what_only_a_paraphrase_names(
    memory: Memory,  # noqa: F811
    fake: FakeAnthropic,
    client: AnthropicClient,
    settings: Settings,
) -> None:
    await memory.writer.write(
        memory.caller,
        WriteRequest("Note", {"name": "Car insurance", "description": "renews in June"}),
    )
    fake.always(Reply(text=json.dumps(["car insurance", "motor cover"])))
    searcher = Searcher(memory.graph, memory.searcher.embed_query, make_expander(client, settings))
    plain_request = SearchRequest(
        "automobile cover", vector_weight=0.0, keyword_weight=1.0, threshold=0.01
    )
    plain = await searcher.search(memory.caller, plain_request)
    assert plain.results == [] and fake.messages == []
    request = replace(plain_request, expand_queries=True)
    found = await searcher.search(memory.caller, request)
    assert [c.props.get("name") for c in found.results] == ["Car insurance"]
    assert len(fake.messages) == 1
