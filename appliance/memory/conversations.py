"""Conversations: every message of a session, kept and searchable by meaning.

- :func:`record_message` merges the account's ``Conversation {sessionId}`` (created with ``id``,
  ``accountId``, ``startedAt``, ``agentSlug``, ``scope``, ``agents``) and appends one ``Message``
  (``id``, ``role`` user|assistant, the text in ``body``, ``createdAt``, ``order`` from 0)
  linked ``(c)-[:HAS_MESSAGE]->(m)``. A message takes its conversation's scope and agent tag, so
  a conversation and its messages are always visible to the same callers. Messages are embedded
  at write time; a failed embed never aborts the write
  (``[graph-write] warn reason=embed-failed``). A conversation the caller cannot see (another
  scope or agent, or soft-deleted) is never appended to. A message with a ``key`` (where it
  comes from: the session manager passes each transcript line's uuid) is stored once: recording
  the same key again answers the stored message (``created: false``) and embeds nothing, so a
  transcript read again after a restart adds nothing (the key is ``sourceKey``, unique per
  account by a schema constraint).
- :func:`session_messages` reads one session's messages back in order (the public chat's
  transcript after a restart), guarded like every read.
- :func:`conversation_search` runs the query vector against the ``message_embedding`` index
  (account filtered inside the index, over-fetched), then applies the remaining guards to each
  message AND to its conversation.

Session: the caller's ``session_id`` (from its environment, via the RPC caller map) wins over a
``session_id`` parameter whenever the caller has one, for recording and for searching alike, so
an agent can neither write into nor read from another session by naming it. A caller without a
session (the admin tools, the PTY manager) names the session by parameter; a search without any
session covers the caller's whole account, within its guards.

One log line per operation: ``[conversations] op=record|search …``.
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
from appliance.memory.guards import guard, guard_after_search
from appliance.memory.reports import caller_agents, resolve_scope
from appliance.memory.write import EmbedText
from appliance.rpc.protocol import BadParams

log = logging.getLogger(__name__)

ROLES = ("user", "assistant")
MESSAGE_INDEX = "message_embedding"
MAX_SEARCH_LIMIT = 50
MAX_FETCH = 2000
MAX_SESSION_ID_CHARS = 200
MAX_KEY_CHARS = 200


def effective_session(caller: Caller, session_id: str | None) -> str | None:
    """The session an operation is about: the caller's own if it has one, else the parameter."""
    if caller.session_id:
        if session_id and session_id != caller.session_id:
            log.info(
                "[conversations] note=session-from-caller requested=%s used=%s",
                session_id,
                caller.session_id,
            )
        return caller.session_id
    return session_id or None


async def record_message(
    graph: Graph,
    caller: Caller,
    embed: EmbedText,
    model_name: str,
    session_id: str,
    role: str,
    text: str,
    agent_slug: str | None = None,
    scope: str | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """Append one message to the session's conversation (created on first use); embed it.

    A ``key`` already recorded in this session's conversation is not appended again.
    """
    session = effective_session(caller, session_id)
    if not session or not isinstance(session, str) or len(session) > MAX_SESSION_ID_CHARS:
        raise rejected(
            "conversations",
            "invalid-session",
            f"A message needs a session id of 1 to {MAX_SESSION_ID_CHARS} characters.",
        )
    if role not in ROLES:
        raise rejected(
            "conversations", "invalid-role", f"role must be one of {', '.join(ROLES)}.", role=role
        )
    if not isinstance(text, str) or not text.strip():
        raise rejected("conversations", "empty-text", "A message needs non-empty text.")
    if key is not None and (not key.strip() or len(key) > MAX_KEY_CHARS):
        raise rejected(
            "conversations",
            "invalid-key",
            f"A message's key must be 1 to {MAX_KEY_CHARS} characters.",
        )
    node_scope = resolve_scope(caller, scope)
    agent = caller.agent or agent_slug
    if key is not None:
        known = await _recorded(graph, caller, session, key)
        if known is not None:
            return known

    # The opening of a long message stands for it: the model sees at most MAX_CHARS anyway.
    embed_text = summary(text, MAX_CHARS)
    embedding: list[float] | None = None
    warnings: list[str] = []
    message_id = str(uuid.uuid4())
    try:
        embedding = await embed(embed_text)
    except EngineError as err:
        log.warning(
            "[graph-write] warn reason=embed-failed label=Message id=%s error=%s", message_id, err
        )
        warnings.append("embed-failed")
    set_embedding = (
        "SET m.embedding = $embedding, m.embeddingModel = $model, m.contentHash = $hash "
        if embedding is not None
        else ""
    )
    # Without a uniqueness constraint on (accountId, sessionId) two first messages racing could
    # each create a conversation; one session's messages arrive in turn, so this does not occur.
    # Setting lastMessageAt first takes the conversation's write lock, so the messageCount read
    # after it is never stale and concurrent appends get distinct order indexes.
    rows, _ = await graph.run(
        "MERGE (c:Conversation {accountId: $account, sessionId: $session}) "
        "ON CREATE SET c.id = $cid, c.startedAt = $now, c.createdAt = $now, "
        "c.agentSlug = $agentSlug, c.scope = $scope, c.agents = $agents "
        f"WITH c WHERE {guard('c')} "
        "SET c.lastMessageAt = $now "
        "WITH c, coalesce(c.messageCount, 0) AS position "
        "SET c.messageCount = position + 1 "
        "CREATE (c)-[:HAS_MESSAGE]->(m:Message {id: $mid, accountId: $account, role: $role, "
        "body: $text, createdAt: $now, order: position, sourceKey: $key}) "
        "SET m.scope = c.scope, m.agents = c.agents "
        f"{set_embedding}"
        "RETURN c.id AS conversationId, m.id AS messageId, position, c.id = $cid AS started",
        {
            **caller.params(),
            "session": session,
            "cid": str(uuid.uuid4()),
            "mid": message_id,
            "now": datetime.now(UTC),
            "agentSlug": agent,
            "scope": node_scope,
            "agents": caller_agents(caller, agent_slug),
            "role": role,
            "text": text,
            "embedding": embedding,
            "model": model_name,
            "hash": content_hash(embed_text),
            "key": key,
        },
    )
    if not rows:
        raise rejected(
            "conversations",
            "hidden-conversation",
            "This session's conversation is not visible to this caller; nothing was written.",
            session=session,
        )
    row = rows[0]
    log.info(
        "[conversations] op=record conversation=%s message=%s role=%s order=%s started=%s "
        "embedded=%s",
        row["conversationId"],
        row["messageId"],
        role,
        row["position"],
        row["started"],
        embedding is not None,
    )
    return {
        "conversationId": row["conversationId"],
        "messageId": row["messageId"],
        "order": row["position"],
        "embedded": embedding is not None,
        "warnings": warnings,
        "created": True,
    }


async def _recorded(graph: Graph, caller: Caller, session: str, key: str) -> dict[str, Any] | None:
    """The message of this session already recorded under ``key``, as record_message answers."""
    rows, _ = await graph.run(
        "MATCH (c:Conversation {accountId: $account, sessionId: $session})"
        "-[:HAS_MESSAGE]->(m:Message {sourceKey: $key}) "
        f"WHERE {guard('c')} "
        "RETURN c.id AS conversationId, m.id AS messageId, m.order AS position, "
        "m.embedding IS NOT NULL AS embedded LIMIT 1",
        {**caller.params(), "session": session, "key": key},
    )
    if not rows:
        return None
    row = rows[0]
    log.info(
        "[conversations] op=record conversation=%s message=%s known=true",
        row["conversationId"],
        row["messageId"],
    )
    return {
        "conversationId": row["conversationId"],
        "messageId": row["messageId"],
        "order": row["position"],
        "embedded": bool(row["embedded"]),
        "warnings": [],
        "created": False,
    }


_SEARCH = (
    "CYPHER 25 "
    f"MATCH (m:Message) SEARCH m IN (VECTOR INDEX {MESSAGE_INDEX} FOR $v "
    "WHERE m.accountId = $account LIMIT $k) SCORE AS s "
    "OPTIONAL MATCH (c:Conversation)-[:HAS_MESSAGE]->(m) "
    f"WHERE {guard('c')} AND ($session IS NULL OR c.sessionId = $session OR c.id = $session) "
    f"RETURN CASE WHEN c IS NOT NULL AND {guard_after_search('m')} THEN {{"
    "id: m.id, conversationId: c.id, sessionId: c.sessionId, role: m.role, text: m.body, "
    "createdAt: m.createdAt, order: m.order} END AS hit, s AS score "
    "ORDER BY score DESC"
)


async def conversation_search(
    graph: Graph,
    caller: Caller,
    embed: EmbedText,
    query: str,
    session_id: str | None = None,
    limit: int = 10,
) -> dict[str, Any]:
    """Messages closest in meaning to ``query``, in one session or the whole account, guarded."""
    if not isinstance(query, str) or not query.strip():
        raise BadParams("query must be non-empty text")
    if not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise BadParams(f"limit must be between 1 and {MAX_SEARCH_LIMIT}")
    session = effective_session(caller, session_id)
    vector = await embed(query)
    params = {**caller.params(), "v": vector, "session": session}
    # Guards and the session filter run after the index, so fetch a pool larger than the limit
    # and widen it while filtering leaves the answer short and the index has more to give.
    # A session among more than MAX_FETCH closer messages of the account may come back short.
    k = max(limit * 4, 40)
    while True:
        rows, _ = await graph.read(_SEARCH, {**params, "k": k})
        hits = [{**row["hit"], "score": row["score"]} for row in rows if row["hit"]]
        if len(hits) >= limit or len(rows) < k or k >= MAX_FETCH:
            break
        k = min(k * 4, MAX_FETCH)
    hits = hits[:limit]
    log.info(
        "[conversations] op=search session=%s pooled=%d found=%d",
        session,
        len(rows),
        len(hits),
    )
    return {"results": hits, "sessionId": session}


async def session_messages(
    graph: Graph, caller: Caller, session_id: str | None, limit: int = 50
) -> dict[str, Any]:
    """The latest ``limit`` messages of one session's conversation, oldest first, guarded."""
    session = effective_session(caller, session_id)
    if not session:
        raise rejected("conversations", "invalid-session", "Name the session to read.")
    if not 1 <= limit <= MAX_FETCH:
        raise BadParams(f"limit must be between 1 and {MAX_FETCH}")
    rows, _ = await graph.read(
        "MATCH (c:Conversation {accountId: $account, sessionId: $session}) "
        f"WHERE {guard('c')} "
        "MATCH (c)-[:HAS_MESSAGE]->(m:Message) "
        f"WHERE {guard('m')} "
        "WITH c, m ORDER BY m.order DESC LIMIT $limit "
        "RETURN c.id AS conversationId, m.id AS id, m.role AS role, m.body AS text, "
        "m.createdAt AS createdAt, m.order AS order, m.sourceKey AS key ORDER BY order",
        {**caller.params(), "session": session, "limit": limit},
    )
    log.info("[conversations] op=read session=%s found=%d", session, len(rows))
    return {
        "sessionId": session,
        "conversationId": rows[0]["conversationId"] if rows else None,
        "messages": [
            {k: row[k] for k in ("id", "role", "text", "createdAt", "order", "key")} for row in rows
        ],
    }


# --- the review of visitors' ended conversations (appliance.agents.leads) ---------------------

VISITOR_SESSION_PREFIX = "public:"
REVIEW_OUTCOMES = ("lead", "none", "delegated")
MAX_ENDED = 100


def _owner_only(caller: Caller, op: str) -> None:
    if caller.scopes is not None or caller.agent is not None:
        raise rejected(
            "conversations",
            "not-owner",
            "Only the owner's side reviews visitors' conversations.",
            op=op,
        )


async def ended_conversations(
    graph: Graph, caller: Caller, before: datetime, limit: int = 20
) -> dict[str, Any]:
    """Visitors' conversations with no message since ``before`` and no review yet, oldest
    first: what the lead review still has to read."""
    _owner_only(caller, "ended")
    rows, _ = await graph.read(
        "MATCH (c:Conversation {accountId: $account}) "
        f"WHERE {guard('c')} AND c.sessionId STARTS WITH $prefix "
        "AND c.lastMessageAt < $before AND c.reviewedAt IS NULL "
        "RETURN c.sessionId AS sessionId, c.agentSlug AS agentSlug, "
        "c.lastMessageAt AS lastAt, coalesce(c.messageCount, 0) AS messages "
        "ORDER BY c.lastMessageAt LIMIT $limit",
        {
            **caller.params(),
            "prefix": VISITOR_SESSION_PREFIX,
            "before": before,
            "limit": max(1, min(limit, MAX_ENDED)),
        },
    )
    log.info("[conversations] op=ended found=%d", len(rows))
    return {"conversations": rows}


async def mark_reviewed(
    graph: Graph,
    caller: Caller,
    session_id: str,
    outcome: str,
    now: datetime,
    task_id: str | None = None,
    person_id: str | None = None,
) -> dict[str, Any]:
    """Mark a visitor's conversation reviewed (once: a second mark changes nothing)."""
    _owner_only(caller, "reviewed")
    if outcome not in REVIEW_OUTCOMES:
        raise rejected(
            "conversations",
            "invalid-outcome",
            f"outcome must be one of {', '.join(REVIEW_OUTCOMES)}.",
        )
    rows, _ = await graph.run(
        "MATCH (c:Conversation {accountId: $account, sessionId: $session}) "
        f"WHERE {guard('c')} AND c.sessionId STARTS WITH $prefix "
        "WITH c, c.reviewedAt IS NULL AS fresh "
        "FOREACH (_ IN CASE WHEN fresh THEN [1] ELSE [] END | "
        "  SET c.reviewedAt = $now, c.reviewOutcome = $outcome, c.leadTaskId = $task, "
        "  c.leadPersonId = $person) "
        "RETURN fresh",
        {
            **caller.params(),
            "session": session_id,
            "prefix": VISITOR_SESSION_PREFIX,
            "outcome": outcome,
            "now": now,
            "task": task_id,
            "person": person_id,
        },
    )
    if not rows:
        raise rejected(
            "conversations",
            "not-found",
            f"No visitor conversation of session {session_id} in this account.",
        )
    log.info(
        "[conversations] op=reviewed session=%s outcome=%s changed=%s",
        session_id,
        outcome,
        rows[0]["fresh"],
    )
    return {"sessionId": session_id, "changed": bool(rows[0]["fresh"])}
