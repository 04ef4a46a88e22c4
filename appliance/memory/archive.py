"""Chat archives: an imported chat export kept as conversations, one per session.

The importer (``maxy channels whatsapp import``, the ``whatsapp-import`` tool) reads an export
(:mod:`appliance.channels.whatsapp.export`), splits it into sessions (messages no more than
eight hours apart) and calls :func:`keep_session` for each. A session is a ``Conversation
{sessionId: "<channel>-archive:<chat>:<start>"}`` (admin scope, ``archived: true``, the chat's
name as its title) holding its ``Message`` nodes in order — ``role`` ``user`` for the owner's,
``contact`` for anyone else's, the sender's name in ``senderName`` and before the text in
``body`` (``"Anna: see you at 8"``, so a search by meaning finds who said it), ``createdAt`` the
time the export gives. Every node is stamped with the account like the recorder's.

Importing the same export again adds nothing: a session already kept (its start and chat name)
is only extended by the messages it did not have yet (a longer export of the same chat), so a
re-import appends only what is new. Messages are embedded after the write; an embedding that
fails is logged and left to ``maxy reindex``.

Log line: ``[conversations] op=archive channel=… chat=… session=… created=… appended=…``.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.channels import embed_message, label_of
from appliance.memory.errors import rejected
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.write import EmbedText
from appliance.rpc import engine as api

log = logging.getLogger(__name__)


def session_of(channel: str, chat: str, start: datetime) -> str:
    """The session id of one archived session."""
    return f"{channel}-archive:{chat}:{start.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


async def keep_session(
    graph: Graph, caller: Caller, embed: EmbedText, model_name: str, call: api.ChannelArchiveRequest
) -> dict[str, Any]:
    """Keep one session of an export once; only messages it does not have yet are appended."""
    label_of(call.channel)
    if not call.chat.strip() or not call.messages:
        raise rejected("channels", "invalid-archive", "A session needs a chat name and messages.")
    ordered = sorted(call.messages, key=lambda m: m.sent_at)
    session = session_of(call.channel, call.chat.strip(), ordered[0].sent_at)
    messages = [
        {
            "role": "user" if m.owner else "contact",
            "body": f"{m.sender}: {m.text}",
            "senderName": m.sender,
            "createdAt": m.sent_at,
        }
        for m in ordered
    ]
    rows, _ = await graph.run(
        "MERGE (c:Conversation {accountId: $account, sessionId: $session}) "
        "ON CREATE SET c.id = $cid, c.startedAt = $start, c.createdAt = $now, c.scope = 'admin', "
        "c.channel = $channel, c.title = $chat, c.archived = true "
        f"WITH c WHERE {guard('c')} "
        "WITH c, coalesce(c.messageCount, 0) AS before, c.id = $cid AS created "
        "CALL (c, before) { "
        "  UNWIND range(before, size($messages) - 1) AS i "
        "  WITH c, i, $messages[i] AS msg "
        "  CREATE (c)-[:HAS_MESSAGE]->(m:Message {id: randomUUID(), accountId: $account, "
        "  order: i, channel: $channel}) "
        "  SET m += msg, m.scope = c.scope, m.agents = c.agents "
        "  RETURN collect({id: m.id, body: m.body}) AS made "
        "} "
        "SET c.messageCount = before + size(made), "
        "c.lastMessageAt = CASE WHEN size(made) > 0 THEN $last ELSE c.lastMessageAt END "
        "RETURN c.id AS conversationId, created, made",
        {
            **caller.params(),
            "session": session,
            "cid": str(uuid.uuid4()),
            "start": ordered[0].sent_at,
            "last": ordered[-1].sent_at,
            "now": datetime.now(UTC),
            "channel": call.channel,
            "chat": call.chat.strip(),
            "messages": messages,
        },
    )
    if not rows:
        raise rejected(
            "channels",
            "hidden-conversation",
            "This archive's conversation is not visible to this caller; nothing was written.",
        )
    row = rows[0]
    warnings: list[str] = []
    for made in row["made"]:
        warnings += await embed_message(graph, caller, embed, model_name, made["id"], made["body"])
    log.info(
        "[conversations] op=archive channel=%s session=%s created=%s appended=%d",
        call.channel,
        session,
        row["created"],
        len(row["made"]),
    )
    return {
        "conversationId": row["conversationId"],
        "sessionId": session,
        "created": row["created"],
        "appended": len(row["made"]),
        "warnings": sorted(set(warnings)),
    }
