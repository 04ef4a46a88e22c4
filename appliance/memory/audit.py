"""The audit trail: every MCP tool call kept as a ``ToolCall`` node of its session.

:func:`record_tool_call` creates one ``ToolCall`` (``id``, ``accountId``, ``tool``, ``plugin``,
``input`` and ``output`` cut to :data:`MAX_CHARS` characters, ``isError``, ``startedAt``,
``endedAt``, ``ms``, ``sessionId``, ``scope``, ``agents``) and links it
``(Conversation)-[:HAS_TOOL_CALL]->(ToolCall)`` to the session's conversation, merged by
``(accountId, sessionId)`` as :mod:`appliance.memory.conversations` does. The account is the
caller's, the scope the caller's most private one, and the session the caller's own whenever it
has one. A call without a session, or whose conversation the caller cannot see, is kept unlinked.

Secrets never reach the graph: values under keys named like a password, secret, token, API key
or authorization, and text that looks like a bearer token or an ``sk-…`` key, become
``[redacted]`` before anything is cut or stored.

One log line per call: ``[audit] op=record tool=… session=… linked=… error=…``.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import datetime
from typing import Any

from appliance.memory.conversations import MAX_SESSION_ID_CHARS, effective_session
from appliance.memory.errors import rejected
from appliance.memory.graph import Graph
from appliance.memory.guards import Caller, guard
from appliance.memory.reports import caller_agents, resolve_scope

log = logging.getLogger(__name__)

MAX_CHARS = 2000
MAX_TOOL_CHARS = 200
REDACTED = "[redacted]"
PLUGIN = "maxy-memory"

_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|authori[sz]ation|credential|cookie",
    re.IGNORECASE,
)
_SECRET_TEXT = re.compile(
    r"\bBearer\s+[A-Za-z0-9._~+/=-]{8,}|\bsk-[A-Za-z0-9_-]{8,}", re.IGNORECASE
)


def redact(value: Any) -> Any:
    """``value`` with secret-named keys and token-looking text replaced by ``[redacted]``."""
    if isinstance(value, dict):
        return {
            key: REDACTED if _SECRET_KEY.search(str(key)) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return _SECRET_TEXT.sub(REDACTED, value)
    return value


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)


async def record_tool_call(
    graph: Graph,
    caller: Caller,
    tool: str,
    tool_input: Any,
    tool_output: Any,
    is_error: bool,
    started_at: datetime,
    ended_at: datetime,
    ms: float,
    session_id: str | None = None,
    plugin: str = PLUGIN,
) -> dict[str, Any]:
    """Store one tool call, redacted and cut, linked to its session's conversation."""
    if not isinstance(tool, str) or not tool.strip() or len(tool) > MAX_TOOL_CHARS:
        raise rejected(
            "audit", "invalid-tool", f"A tool name has 1 to {MAX_TOOL_CHARS} characters."
        )
    if not isinstance(ms, int | float) or ms < 0:
        raise rejected("audit", "invalid-ms", "ms must be a non-negative number.")
    session = effective_session(caller, session_id)
    if session is not None and len(session) > MAX_SESSION_ID_CHARS:
        raise rejected("audit", "invalid-session", "The session id is too long.")
    stored_input = _as_text(redact(tool_input))
    stored_output = _as_text(redact(tool_output))
    call_id = str(uuid.uuid4())
    rows, _ = await graph.run(
        "CREATE (t:ToolCall {id: $tid, accountId: $account, tool: $tool, plugin: $plugin, "
        "input: $input, output: $output, inputChars: $inputChars, outputChars: $outputChars, "
        "isError: $isError, startedAt: $startedAt, endedAt: $endedAt, ms: $ms, "
        "sessionId: $session, scope: $scope, agents: $agents, createdAt: $endedAt}) "
        "WITH t "
        "OPTIONAL CALL (t) { "
        "  WITH t WHERE $session IS NOT NULL "
        "  MERGE (c:Conversation {accountId: $account, sessionId: $session}) "
        "  ON CREATE SET c.id = $cid, c.startedAt = $startedAt, c.createdAt = $startedAt, "
        "  c.agentSlug = $agent, c.scope = $scope, c.agents = $agents "
        f"  WITH c, t WHERE {guard('c')} "
        "  MERGE (c)-[:HAS_TOOL_CALL]->(t) "
        "  RETURN c.id AS conversationId "
        "} "
        "RETURN t.id AS id, conversationId",
        {
            **caller.params(),
            "tid": call_id,
            "cid": str(uuid.uuid4()),
            "tool": tool,
            "plugin": plugin,
            "input": clip(stored_input),
            "output": clip(stored_output),
            "inputChars": len(stored_input),
            "outputChars": len(stored_output),
            "isError": bool(is_error),
            "startedAt": started_at,
            "endedAt": ended_at,
            "ms": float(ms),
            "session": session,
            "scope": resolve_scope(caller, None),
            "agents": caller_agents(caller),
        },
    )
    conversation = rows[0]["conversationId"] if rows else None
    log.info(
        "[audit] op=record tool=%s session=%s linked=%s error=%s ms=%.0f",
        tool,
        session,
        conversation is not None,
        bool(is_error),
        ms,
    )
    return {"id": call_id, "conversationId": conversation}
