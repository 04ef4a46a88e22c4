"""Compaction briefings: what an admin session leaves for the next one before its context is cut.

The session manager asks an admin session whose context passed the threshold to call the admin
plugin's ``session-compact`` tool (:mod:`appliance.sessions.compaction`); the tool calls
:func:`write_briefing` through the engine's ``briefing.write``. A briefing is one
``SessionBriefing`` node (``id``, ``accountId``, ``sessionId``, ``scope: admin``, ``createdAt``,
and the fields ``asked``, ``done``, ``decisions``, ``inProgress``, ``aboutOwner``), linked
``(c:Conversation)-[:HAS_BRIEFING]->(b)`` when the session's conversation has been recorded.

Only the owner's own sessions write one: the caller must have a session and no narrowed scopes or
agent (a visitor's session never reaches the tool; the engine refuses it all the same). Every
briefing is kept; :func:`latest_briefing` reads the newest one the caller may see (every guard of
:mod:`appliance.memory.guards`), and :mod:`appliance.memory.context` starts the next admin
session's ``<previous-context>`` with it (:func:`briefing_lines`).

One log line per write: ``[briefings] op=write id=… session=… chars=…``.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.errors import rejected
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.work import clip

log = logging.getLogger(__name__)

LABEL = "SessionBriefing"
SCOPE = "admin"
FIELDS = (
    ("asked", "Asked"),
    ("done", "Done"),
    ("decisions", "Decisions"),
    ("inProgress", "In progress"),
    ("aboutOwner", "About the owner"),
)


async def write_briefing(graph: Graph, caller: Caller, fields: dict[str, str]) -> dict[str, Any]:
    """Keep one briefing of the caller's session; link it to the session's conversation."""
    if caller.scopes is not None or caller.agent is not None:
        raise rejected(
            "briefings", "not-owner", "Only the owner's own admin sessions write a briefing."
        )
    if not caller.session_id:
        raise rejected(
            "briefings",
            "no-session",
            "A briefing belongs to a session; this caller has none (call it from a session).",
        )
    values = {key: (fields.get(key) or "").strip() for key, _ in FIELDS}
    if not values["asked"] or not values["done"]:
        raise rejected(
            "briefings", "empty", "A briefing says at least what was asked and what was done."
        )
    now = datetime.now(UTC)
    rows, _ = await graph.run(
        f"CREATE (b:{LABEL} {{id: $id, accountId: $account, sessionId: $session, "
        "scope: $scope, createdAt: $now}) SET b += $fields "
        "WITH b OPTIONAL MATCH (c:Conversation {accountId: $account, sessionId: $session}) "
        f"WHERE {guard('c')} "
        "FOREACH (_ IN CASE WHEN c IS NULL THEN [] ELSE [1] END | "
        "MERGE (c)-[:HAS_BRIEFING]->(b)) "
        "RETURN b.id AS id, c.id AS conversationId",
        {
            **caller.params(),
            "id": str(uuid.uuid4()),
            "session": caller.session_id,
            "scope": SCOPE,
            "now": now,
            "fields": values,
        },
    )
    row = rows[0]
    log.info(
        "[briefings] op=write id=%s session=%s chars=%s",
        row["id"],
        caller.session_id,
        sum(len(v) for v in values.values()),
    )
    return {
        "id": row["id"],
        "sessionId": caller.session_id,
        "conversationId": row["conversationId"],
        "createdAt": now.isoformat(),
    }


async def latest_briefing(graph: Graph, caller: Caller) -> dict[str, Any] | None:
    """The newest briefing the caller may see, or None."""
    rows, _ = await graph.read(
        f"MATCH (b:{LABEL} {{accountId: $account}}) WHERE {guard('b')} "
        "RETURN b {.id, .sessionId, .createdAt, .asked, .done, .decisions, .inProgress, "
        ".aboutOwner} AS briefing ORDER BY b.createdAt DESC LIMIT 1",
        caller.params(),
    )
    return rows[0]["briefing"] if rows else None


def briefing_lines(briefing: dict[str, Any], budget: int) -> list[str]:
    """The briefing as the block's first section, at most ``budget`` characters."""
    when = str(briefing.get("createdAt") or "")[:16].replace("T", " ")
    session = str(briefing.get("sessionId") or "")[:8]
    heading = f"## Where the last session left off (its briefing, {when} UTC, session {session})"
    lines = [heading]
    used = len(heading) + 1
    present = [(label, str(briefing.get(key) or "").strip()) for key, label in FIELDS]
    present = [(label, text) for label, text in present if text]
    for index, (label, text) in enumerate(present):
        share = (budget - used) // (len(present) - index)
        line = clip(f"- {label}: {' '.join(text.split())}", share - 1)
        if len(line) < len(label) + 8:
            break
        lines.append(line)
        used += len(line) + 1
    return lines
