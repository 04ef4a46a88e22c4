"""Channel messages against the real Neo4j and model: one row per delivery key, however often
or concurrently it is delivered, in order per chat; handling states; pending; chats; guards."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from appliance.memory import channels
from appliance.memory.errors import WriteRejected
from appliance.rpc import engine as api
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio


def inbound(key: str, chat: str = "100", text: str = "hello there", **extra: Any) -> Any:
    params = {
        "channel": "telegram",
        "key": key,
        "chatId": chat,
        "senderId": chat,
        "senderName": "Ann",
        "messageId": key,
        "text": text,
        **extra,
    }
    return api.CHANNEL_RECORD.parse(params)


async def record(memory: Memory, call: Any) -> dict[str, Any]:
    async def embed(text: str) -> list[float]:
        return [0.1] * 384

    return await channels.record(memory.graph, memory.caller, embed, "test-model", call)


async def rows(memory: Memory) -> list[dict[str, Any]]:
    found, _ = await memory.graph.run(
        "MATCH (c:Conversation)-[:HAS_MESSAGE]->(m:ChannelMessage {accountId: $account}) "
        "RETURN labels(m) AS labels, properties(m) AS p, c.sessionId AS session "
        "ORDER BY m.order",
        {"account": memory.caller.account_id},
    )
    return found


async def test_a_message_is_kept_once_with_the_channel_label_in_its_chat(memory: Memory) -> None:
    first = await record(memory, inbound("1:1"))
    again = await record(memory, inbound("1:1", text="a redelivery says the same"))
    assert first["created"] and not again["created"] and first["id"] == again["id"]
    [row] = await rows(memory)
    assert set(row["labels"]) == {"Message", "ChannelMessage", "TelegramMessage"}
    assert row["session"] == "telegram:100"
    assert row["p"]["body"] == "hello there" and row["p"]["state"] == "received"
    assert row["p"]["scope"] == "admin" and len(row["p"]["embedding"]) == 384


async def test_concurrent_deliveries_of_one_key_make_one_row(memory: Memory) -> None:
    done = await asyncio.gather(*(record(memory, inbound("1:7")) for _ in range(6)))
    assert [d["created"] for d in done].count(True) == 1
    assert len({d["id"] for d in done}) == 1
    assert len(await rows(memory)) == 1


async def test_messages_of_one_chat_are_ordered_and_counted_once(memory: Memory) -> None:
    for n in range(5):
        await record(memory, inbound(f"1:{n}", text=f"message {n}"))
        await record(memory, inbound(f"1:{n}", text="again"))
    kept = await rows(memory)
    assert [r["p"]["order"] for r in kept] == [0, 1, 2, 3, 4]
    assert [r["p"]["body"] for r in kept] == [f"message {n}" for n in range(5)]


async def test_update_pending_and_a_reply_that_answers_its_message(memory: Memory) -> None:
    first = await record(memory, inbound("1:1"))
    second = await record(memory, inbound("1:2", chat="200"))
    done = api.CHANNEL_UPDATE.parse({"id": first["id"], "state": "answered", "route": "owner"})
    changed = await channels.update(memory.graph, memory.caller, done)
    assert changed["message"]["state"] == "answered" and changed["message"]["route"] == "owner"
    waiting = await channels.pending(memory.graph, memory.caller, "telegram", 50)
    assert [m["id"] for m in waiting["messages"]] == [second["id"]]
    reply = inbound("out:200:9", chat="200", text="Hi!", direction="out", inReplyTo=second["id"])
    out = await record(memory, reply)
    assert out["message"]["role"] == "assistant" and out["message"]["state"] == "answered"
    linked, _ = await memory.graph.run(
        "MATCH (r:ChannelMessage {id: $r})-[:ANSWERS]->(m:ChannelMessage) RETURN m.id AS id",
        {"r": out["id"]},
    )
    assert [row["id"] for row in linked] == [second["id"]]
    listed = await channels.chats(memory.graph, memory.caller, "telegram", 10)
    assert [c["chatId"] for c in listed["chats"]] == ["200", "100"]
    assert listed["chats"][0]["senderName"] == "Ann" and listed["chats"][0]["messages"] == 2


async def test_a_bad_state_or_channel_is_refused_and_other_callers_see_nothing(
    memory: Memory,
) -> None:
    first = await record(memory, inbound("1:1"))
    with pytest.raises(WriteRejected, match="state must be one of"):
        bad = api.CHANNEL_UPDATE.parse({"id": first["id"], "state": "lost"})
        await channels.update(memory.graph, memory.caller, bad)
    with pytest.raises(WriteRejected, match="no channel"):
        await channels.pending(memory.graph, memory.caller, "carrier-pigeon", 5)
    visitor = memory.other(scopes=("public",), agent="front-desk")
    assert (await channels.pending(memory.graph, visitor, "telegram", 5))["messages"] == []
    assert (await channels.chats(memory.graph, visitor, "telegram", 5))["chats"] == []
    stranger = memory.other(account_id="test-other-account")
    assert (await channels.pending(memory.graph, stranger, "telegram", 5))["messages"] == []
