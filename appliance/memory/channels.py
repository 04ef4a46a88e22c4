"""Channel messages: every Telegram (or WhatsApp) message, kept before anything is decided.

The channels role (:mod:`appliance.channels`) calls :func:`record` for each message a channel
delivers — from anyone, allowed or not — BEFORE it decides anything about it, and only then lets
the channel's cursor advance. A message is one node ``(:Message:ChannelMessage:<Label>)``
(``TelegramMessage``, ``WhatsAppMessage``) in its chat's ``Conversation {sessionId:
"<channel>:<chatId>"}``, admin scope: the owner's record of who wrote what. It is unique per
account by ``channelKey`` (the delivery's own id: a channel that delivers an update again names
the same key), so a redelivery finds the row it made the first time (``created: false``) and
nothing is written twice.

The row is committed first and embedded after (a separate statement), so the forensic write is as
short as it can be; an embedding that fails is logged and left to ``maxy reindex``.

The role moves an inbound message along (:func:`update`: ``state``, ``route``, ``replyState``,
…) and, after a restart, takes up what it had not finished (:func:`pending`). Replies and the
owner's outbound messages are recorded the same way (``direction: out``), an answer linked
``(reply)-[:ANSWERS]->(inbound)``. :func:`chats` lists a channel's chats, newest first.

Log lines: ``[channels] op=record channel=… id=… created=… chat=… order=…``.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.chunking import MAX_CHARS, content_hash, summary
from appliance.memory.errors import EngineError, rejected
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.write import EmbedText
from appliance.rpc import engine as api
from appliance.rpc.channels import OPEN_STATES, STATES

log = logging.getLogger(__name__)

LABELS = {"telegram": "TelegramMessage", "whatsapp": "WhatsAppMessage"}
_UPDATABLE = (
    "state",
    "route",
    "verdict",
    "session_id",
    "prompts_before",
    "reply_state",
    "reply_message_id",
    "outcome",
    "error",
)
_MESSAGE = (
    "m {.id, .channel, .direction, .role, text: m.body, .chatId, .chatType, .senderId, "
    ".senderName, .senderHandle, .channelMessageId, .channelKey, .sentAt, .receivedAt, "
    ".addressed, .state, .route, .verdict, .sessionId, .promptsBefore, .replyState, "
    ".replyMessageId, .outcome, .error, .order, .inReplyTo, chatTitle: c.title}"
)


def label_of(channel: str) -> str:
    """The node label of a channel's messages; a channel we do not know is refused."""
    label = LABELS.get(channel)
    if label is None:
        raise rejected(
            "channels",
            "unknown-channel",
            f"There is no channel {channel!r}; the channels are {', '.join(LABELS)}.",
        )
    return label


def session_of(channel: str, chat_id: str) -> str:
    """The conversation's session id of one chat."""
    return f"{channel}:{chat_id}"


async def record(
    graph: Graph,
    caller: Caller,
    embed: EmbedText,
    model_name: str,
    call: api.ChannelRecordRequest,
) -> dict[str, Any]:
    """Keep one message once (by its key) in its chat's conversation; embed it after."""
    label = label_of(call.channel)
    if not call.key.strip() or not call.chat_id.strip():
        raise rejected("channels", "invalid-message", "A channel message needs a key and a chat.")
    now = datetime.now(UTC)
    inbound = call.direction == "in"
    props = {
        "channel": call.channel,
        "direction": call.direction,
        "role": "user" if inbound else "assistant",
        "body": call.text,
        "chatId": call.chat_id,
        "chatType": call.chat_type,
        "senderId": call.sender_id,
        "senderName": call.sender_name,
        "senderHandle": call.sender_handle,
        "channelMessageId": call.message_id,
        "sentAt": call.sent_at or now,
        "receivedAt": now,
        "addressed": call.addressed,
        "raw": call.raw,
        "state": "received" if inbound else "answered",
        "inReplyTo": call.in_reply_to,
    }
    props = {key: value for key, value in props.items() if value is not None}
    # The conversation's write lock is taken (lastMessageAt) before its count is read, so two
    # messages of one chat never get the same order; only a newly created row is counted.
    rows, _ = await graph.run(
        "MERGE (c:Conversation {accountId: $account, sessionId: $session}) "
        "ON CREATE SET c.id = $cid, c.startedAt = $now, c.createdAt = $now, c.scope = 'admin', "
        "c.channel = $channel, c.chatId = $chatId "
        f"WITH c WHERE {guard('c')} "
        "SET c.chatType = $chatType, c.title = coalesce($chatTitle, c.title) "
        "MERGE (m:ChannelMessage {accountId: $account, channelKey: $key}) "
        "ON CREATE SET m.id = $mid "
        "WITH c, m, m.id = $mid AS created "
        "CALL (c, m, created) { "
        "  WITH c, m WHERE created "
        "  SET c.lastMessageAt = $now "
        "  WITH c, m, coalesce(c.messageCount, 0) AS position "
        f"  SET c.messageCount = position + 1, m:Message:{label}, m += $props, "
        "  m.order = position, m.scope = c.scope, m.agents = c.agents "
        "  CREATE (c)-[:HAS_MESSAGE]->(m) "
        "  WITH m "
        "  OPTIONAL MATCH (answered:Message {id: $inReplyTo}) "
        "  WHERE answered:ChannelMessage AND answered.accountId = $account "
        "  FOREACH (a IN CASE WHEN answered IS NULL THEN [] ELSE [answered] END | "
        "    CREATE (m)-[:ANSWERS]->(a)) "
        "} "
        f"RETURN created, c.id AS conversationId, {_MESSAGE} AS message",
        {
            **caller.params(),
            "session": session_of(call.channel, call.chat_id),
            "cid": str(uuid.uuid4()),
            "mid": str(uuid.uuid4()),
            "now": now,
            "channel": call.channel,
            "chatId": call.chat_id,
            "chatType": call.chat_type,
            "chatTitle": call.chat_title,
            "key": f"{call.channel}:{call.key}",
            "props": props,
            "inReplyTo": call.in_reply_to,
        },
    )
    if not rows:
        raise rejected(
            "channels",
            "hidden-conversation",
            "This chat's conversation is not visible to this caller; nothing was written.",
        )
    row = rows[0]
    message = row["message"]
    log.info(
        "[channels] op=record channel=%s direction=%s id=%s created=%s chat=%s order=%s",
        call.channel,
        call.direction,
        message["id"],
        row["created"],
        call.chat_id,
        message["order"],
    )
    warnings: list[str] = []
    if row["created"] and call.text.strip():
        warnings = await embed_message(graph, caller, embed, model_name, message["id"], call.text)
    return {
        "id": message["id"],
        "created": row["created"],
        "conversationId": row["conversationId"],
        "message": message,
        "warnings": warnings,
    }


async def embed_message(
    graph: Graph, caller: Caller, embed: EmbedText, model_name: str, message_id: str, text: str
) -> list[str]:
    """Embed a kept message (a channel's or an archived one); a failure is logged, the row stays
    (``maxy reindex`` heals it)."""
    embed_text = summary(text, MAX_CHARS)
    try:
        vector = await embed(embed_text)
    except EngineError as err:
        log.warning(
            "[graph-write] warn reason=embed-failed label=Message id=%s error=%s", message_id, err
        )
        return ["embed-failed"]
    await graph.run(
        "MATCH (m:Message {accountId: $account, id: $id}) "
        "SET m.embedding = $vector, m.embeddingModel = $model, m.contentHash = $hash",
        {
            **caller.params(),
            "id": message_id,
            "vector": vector,
            "model": model_name,
            "hash": content_hash(embed_text),
        },
    )
    return []


async def update(graph: Graph, caller: Caller, call: api.ChannelUpdateRequest) -> dict[str, Any]:
    """Change the handling fields of one inbound message (only those given)."""
    given = call.model_dump(include=set(_UPDATABLE), exclude_unset=True, by_alias=True)
    changes = {key: value for key, value in given.items() if value is not None}
    if "state" in changes and changes["state"] not in STATES:
        raise rejected(
            "channels",
            "invalid-state",
            f"state must be one of {', '.join(STATES)}.",
            state=changes["state"],
        )
    rows, _ = await graph.run(
        "MATCH (m:Message {id: $id}) "
        f"WHERE m:ChannelMessage AND {guard('m')} "
        "MATCH (c:Conversation)-[:HAS_MESSAGE]->(m) "
        "SET m += $changes, m.updatedAt = $now "
        f"RETURN {_MESSAGE} AS message",
        {**caller.params(), "id": call.id, "changes": changes, "now": datetime.now(UTC)},
    )
    if not rows:
        raise rejected(
            "channels", "no-such-message", f"No channel message {call.id} is visible here."
        )
    message = rows[0]["message"]
    log.info(
        "[channels] op=update id=%s %s",
        call.id,
        " ".join(f"{key}={value}" for key, value in changes.items() if key != "error"),
    )
    return {"id": call.id, "created": False, "conversationId": "", "message": message}


async def pending(graph: Graph, caller: Caller, channel: str, limit: int) -> dict[str, Any]:
    """Inbound messages of ``channel`` whose handling has not ended, in the order they came."""
    label_of(channel)
    rows, _ = await graph.read(
        "MATCH (c:Conversation)-[:HAS_MESSAGE]->(m:ChannelMessage {accountId: $account}) "
        "WHERE m.channel = $channel AND m.direction = 'in' AND m.state IN $open "
        f"AND {guard('m')} "
        f"RETURN {_MESSAGE} AS message ORDER BY m.receivedAt, m.order LIMIT $limit",
        {**caller.params(), "channel": channel, "open": list(OPEN_STATES), "limit": limit},
    )
    return {"messages": [row["message"] for row in rows]}


async def chats(graph: Graph, caller: Caller, channel: str, limit: int) -> dict[str, Any]:
    """A channel's chats, the most recently active first, with who last wrote in each."""
    label_of(channel)
    rows, _ = await graph.read(
        "MATCH (c:Conversation {accountId: $account}) "
        f"WHERE c.channel = $channel AND {guard('c')} "
        "WITH c ORDER BY c.lastMessageAt DESC LIMIT $limit "
        "OPTIONAL MATCH (c)-[:HAS_MESSAGE]->(m:ChannelMessage) "
        f"WHERE m.direction = 'in' AND {guard('m')} "
        "WITH c, m ORDER BY m.order DESC "
        "WITH c, collect(m)[0] AS last "
        "RETURN c.chatId AS chatId, c.chatType AS chatType, c.title AS title, "
        "last.senderId AS senderId, last.senderName AS senderName, "
        "last.senderHandle AS senderHandle, c.lastMessageAt AS lastMessageAt, "
        "last.body AS lastText, c.messageCount AS messages "
        "ORDER BY lastMessageAt DESC",
        {**caller.params(), "channel": channel, "limit": limit},
    )
    return {"chats": rows}
