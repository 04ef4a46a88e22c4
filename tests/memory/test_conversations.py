"""Conversation recording and search against the real Neo4j and model."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from appliance.core.identity import Caller
from appliance.memory.conversations import conversation_search, record_message, session_messages
from appliance.memory.errors import ModelLoadFailed, WriteRejected
from appliance.memory.search import SearchRequest
from tests.memory.conftest import Memory
from tests.support.processes import dev_model

pytestmark = pytest.mark.anyio

MODEL = dev_model().stem  # the model the embedder fixture loads

BIRTHDAY = "My daughter turns six on Saturday and we still need a chocolate cake for her party."
TYRES = "The car needs new winter tyres before the first frost."
PLUMBER = "The plumber is coming on Tuesday morning to fix the leaking kitchen tap."


async def say(
    memory: Memory,
    session: str,
    text: str,
    role: str = "user",
    caller: Caller | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    return await record_message(
        memory.graph,
        caller or memory.caller,
        memory.writer.embed,
        MODEL,
        session,
        role,
        text,
        **kwargs,
    )


async def search(
    memory: Memory, query: str, caller: Caller | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    found = await conversation_search(
        memory.graph, caller or memory.caller, memory.writer.embed, query, **kwargs
    )
    return found["results"]  # type: ignore[no-any-return]


async def test_messages_are_appended_to_one_conversation_per_session(memory: Memory) -> None:
    first = await say(memory, "s-1", "Hello there", agent_slug="concierge")
    second = await say(memory, "s-1", "Hi! How can I help?", role="assistant")
    assert first["conversationId"] == second["conversationId"]
    assert (first["order"], second["order"]) == (0, 1)
    assert first["embedded"] and first["warnings"] == []
    rows, _ = await memory.graph.run(
        "MATCH (c:Conversation {accountId: $a})-[:HAS_MESSAGE]->(m:Message) "
        "RETURN properties(c) AS c, properties(m) AS m ORDER BY m.order",
        {"a": memory.caller.account_id},
    )
    assert len(rows) == 2
    conv, msg = rows[0]["c"], rows[1]["m"]
    assert conv["sessionId"] == "s-1" and conv["id"] == first["conversationId"]
    assert conv["agentSlug"] == "concierge" and conv["scope"] == "admin"
    assert conv["agents"] == ["concierge"] and "startedAt" in conv
    assert msg["id"] == second["messageId"] and msg["role"] == "assistant"
    assert msg["body"] == "Hi! How can I help?" and msg["order"] == 1
    assert msg["accountId"] == memory.caller.account_id and msg["scope"] == "admin"
    assert len(msg["embedding"]) == 384 and msg["embeddingModel"] == MODEL

    third = await say(memory, "s-2", "A new session")
    assert third["conversationId"] != first["conversationId"] and third["order"] == 0


async def test_a_failed_embed_never_aborts_recording(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(text: str) -> list[float]:
        raise ModelLoadFailed("model made to fail")

    with caplog.at_level(logging.WARNING):
        done = await record_message(
            memory.graph, memory.caller, broken, MODEL, "s-1", "user", "Still kept"
        )
    assert not done["embedded"] and done["warnings"] == ["embed-failed"]
    assert "[graph-write] warn reason=embed-failed" in caplog.text
    rows, _ = await memory.graph.run(
        "MATCH (m:Message {id: $id}) RETURN properties(m) AS m", {"id": done["messageId"]}
    )
    assert rows[0]["m"]["body"] == "Still kept" and "embedding" not in rows[0]["m"]


async def test_malformed_messages_are_refused(memory: Memory) -> None:
    with pytest.raises(WriteRejected, match="role must be one of user, assistant"):
        await say(memory, "s-1", "hi", role="system")
    with pytest.raises(WriteRejected, match="non-empty text"):
        await say(memory, "s-1", "   ")
    with pytest.raises(WriteRejected, match="session id"):
        await say(memory, "", "hi")
    rows, _ = await memory.graph.run(
        "MATCH (n) WHERE n.accountId = $a RETURN count(n) AS n", {"a": memory.caller.account_id}
    )
    assert rows[0]["n"] == 0


async def test_search_finds_a_message_by_meaning(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    await say(memory, "s-1", TYRES)
    birthday = await say(memory, "s-1", BIRTHDAY)
    await say(memory, "s-2", PLUMBER, role="assistant")
    with caplog.at_level(logging.INFO):
        hits = await search(memory, "baking something sweet for a child's celebration")
    assert "[conversations] op=search" in caplog.text
    assert len(hits) == 3
    top = hits[0]
    assert top["id"] == birthday["messageId"] and top["text"] == BIRTHDAY
    assert top["sessionId"] == "s-1" and top["role"] == "user"
    assert top["conversationId"] == birthday["conversationId"]
    assert 0 < top["score"] <= 1 and top["score"] >= hits[1]["score"]
    assert top["createdAt"] and "embedding" not in top and "accountId" not in top
    assert len(await search(memory, "plumbing", limit=1)) == 1


async def test_search_is_scoped_to_a_session_and_the_callers_session_wins(
    memory: Memory,
) -> None:
    await say(memory, "s-1", BIRTHDAY)
    await say(memory, "s-2", PLUMBER)
    await say(memory, "s-2", TYRES)

    in_two = await search(memory, "birthday cake", session_id="s-2")
    assert {h["sessionId"] for h in in_two} == {"s-2"} and len(in_two) == 2

    # The caller's own session (from its environment) beats the parameter.
    in_one = memory.other(session_id="s-1")
    hits = await search(memory, "the kitchen tap", caller=in_one, session_id="s-2")
    assert [h["text"] for h in hits] == [BIRTHDAY]
    # ... and it records into its own session too.
    done = await say(memory, "s-2", "Chocolate or vanilla?", role="assistant", caller=in_one)
    assert done["order"] == 1
    assert len(await search(memory, "cake", caller=in_one)) == 2


async def test_soft_deleted_messages_and_conversations_are_excluded(memory: Memory) -> None:
    kept = await say(memory, "s-1", BIRTHDAY)
    gone = await say(memory, "s-1", "We also need candles and balloons for the birthday.")
    other = await say(memory, "s-2", "Bake a cake for grandma's birthday too.")
    await memory.graph.run(
        "MATCH (m:Message {id: $id}) SET m.deletedAt = datetime()", {"id": gone["messageId"]}
    )
    await memory.graph.run(
        "MATCH (c:Conversation {id: $id}) SET c.deletedAt = datetime()",
        {"id": other["conversationId"]},
    )
    hits = await search(memory, "birthday party supplies")
    assert [h["id"] for h in hits] == [kept["messageId"]]
    # A soft-deleted conversation is not appended to either.
    with pytest.raises(WriteRejected, match="not visible"):
        await say(memory, "s-2", "anyone there?")


async def test_guards_keep_conversations_inside_scope_and_account(memory: Memory) -> None:
    public = memory.other(scopes=("public",))
    stranger = Caller(account_id=memory.caller.account_id + "-other")
    await say(memory, "owner", "The alarm code for the front door is in the drawer.")
    visitor = await say(memory, "visitor", "Is the shop open on Sunday?", caller=public)
    await say(memory, "owner-2", "When does the shop open?", scope="public")
    await say(memory, "theirs", "The shop alarm is set at night.", caller=stranger)

    public_hits = await search(memory, "shop alarm code opening", caller=public)
    assert {h["sessionId"] for h in public_hits} == {"visitor", "owner-2"}
    assert visitor["conversationId"] in {h["conversationId"] for h in public_hits}
    admin_hits = await search(memory, "shop alarm code opening")
    assert {h["sessionId"] for h in admin_hits} == {"owner", "visitor", "owner-2"}
    stranger_hits = await search(memory, "shop alarm code opening", caller=stranger)
    assert [h["sessionId"] for h in stranger_hits] == ["theirs"]

    # A public caller naming the admin session neither reads nor writes it.
    assert await search(memory, "alarm", caller=public, session_id="owner") == []
    with pytest.raises(WriteRejected, match="not visible"):
        await say(memory, "owner", "What is the code?", caller=public)

    # A message's scope follows its conversation, even if it was changed after creation.
    await memory.graph.run(
        "MATCH (c:Conversation {accountId: $a, sessionId: 'owner-2'}) SET c.scope = 'admin'",
        {"a": memory.caller.account_id},
    )
    public_hits = await search(memory, "shop alarm code opening", caller=public)
    assert {h["sessionId"] for h in public_hits} == {"visitor"}


async def test_a_public_agent_sees_only_its_own_conversations(memory: Memory) -> None:
    bot = memory.other(scopes=("public",), agent="shop-bot")
    other_bot = memory.other(scopes=("public",), agent="garden-bot")
    await say(memory, "b-1", "Do you sell birthday cakes?", caller=bot)
    await say(memory, "g-1", "Do you sell seeds for birthday flowers?", caller=other_bot)
    assert [h["sessionId"] for h in await search(memory, "birthday", caller=bot)] == ["b-1"]
    admin = {h["sessionId"] for h in await search(memory, "birthday")}
    assert admin == {"b-1", "g-1"}


async def test_memory_search_never_shows_a_visitor_another_visitors_words(memory: Memory) -> None:
    """Conversation records reach a public caller only through its own session's search."""
    visitor = memory.other(scopes=("public",), agent="concierge", session_id="visitor-1")
    other = memory.other(scopes=("public",), agent="concierge", session_id="visitor-2")
    await say(memory, "visitor-1", PLUMBER, caller=visitor, agent_slug="concierge", scope="public")
    await say(memory, "visitor-2", TYRES, caller=other, agent_slug="concierge", scope="public")

    for caller in (visitor, other, memory.other(scopes=("public",), agent="concierge")):
        found = await memory.searcher.search(caller, SearchRequest(query="plumber kitchen tap"))
        labels = {label for hit in found.results for label in hit.labels}
        assert not labels & {"Conversation", "Message", "ToolCall"}, caller
    owner = await memory.searcher.search(memory.caller, SearchRequest(query="plumber kitchen tap"))
    assert any("Message" in hit.labels for hit in owner.results)
    assert [hit["text"] for hit in await search(memory, "kitchen tap", visitor)] == [PLUMBER]
    assert PLUMBER not in {hit["text"] for hit in await search(memory, "kitchen tap", other)}


async def test_a_keyed_message_is_recorded_once(memory: Memory) -> None:
    first = await say(memory, "s-keyed", PLUMBER, key="line-1", scope="admin")
    again = await say(memory, "s-keyed", PLUMBER, key="line-1", scope="admin")
    second = await say(memory, "s-keyed", "On it.", role="assistant", key="line-2")
    assert first["created"] and not again["created"] and second["created"]
    assert again["messageId"] == first["messageId"] and again["order"] == 0
    assert second["order"] == 1
    read = await session_messages(memory.graph, memory.caller, "s-keyed")
    assert [(m["key"], m["order"]) for m in read["messages"]] == [("line-1", 0), ("line-2", 1)]
    # The same key in another session is another message; an empty key is refused.
    other = await say(memory, "s-other", PLUMBER, key="line-1b")
    assert other["created"]
    with pytest.raises(WriteRejected, match="key must be 1 to 200"):
        await say(memory, "s-keyed", "x", key=" ")
