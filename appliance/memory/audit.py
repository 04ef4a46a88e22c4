"""The audit trail: every MCP tool call kept as a ``ToolCall`` node of its session.

:func:`record_tool_call` creates one ``ToolCall`` (``id``, ``accountId``, ``tool``, ``plugin``,
``input`` and ``output`` cut to :data:`MAX_CHARS` characters, ``isError``, ``startedAt``,
``endedAt``, ``ms``, ``sessionId``, ``scope``, ``agents``) and links it
``(Conversation)-[:HAS_TOOL_CALL]->(ToolCall)`` to the session's conversation, merged by
``(accountId, sessionId)`` as :mod:`appliance.memory.conversations` does. The account is the
caller's, the scope the caller's most private one, and the session the caller's own whenever it
has one. A call without a session, or whose conversation the caller cannot see, is kept unlinked.

A durable call (a tool that changes the graph: memory-write, memory-report-write, memory-ingest)
also becomes a ``Task`` (``name`` says what was asked — the tool and the label it wrote; the
redacted request stays on the ToolCall and the content on the node, so a Task never outranks
what it wrote in a search — ``status`` completed|failed, ``tool``, ``sessionId``,
``kind: "audit"`` — never one of the owner's tasks, see :mod:`appliance.memory.work` —
``source: "audit"``, ``createdAt``, ``completedAt``), embedded like any memory-write node so
memory-search finds it:
``(ToolCall)-[:PERFORMED]->(Task)-[:PRODUCED]->(node)`` for each node the call created or
updated, and ``(Conversation)-[:HAS_TASK]->(Task)`` when the call is linked. So "what tools ran
in the last session?" is one Cypher hop from the session's Conversation. When the session is
working on one of the owner's tasks (started ``in_progress`` in it), what the call produced is
linked to that task too (``PRODUCED``, :func:`appliance.memory.tasks.attach_output`): the
write-back of the work.

Secrets never reach the graph: values under keys named like a password, secret, token, API key
or authorization, and text that looks like a key — a bearer token, an ``sk-…`` key, a long hex
string, a long base64-looking string with mixed case and digits, the value of a ``password=…``
or ``"token": "…"`` in text — become ``[redacted]`` before anything is cut or stored, in the
ToolCall and the Task alike (:mod:`appliance.core.redact`, the one redactor: the admin plugin's
``logs-read`` shows log lines through its :func:`~appliance.core.redact.redact_text`).

One log line per call: ``[audit] op=record tool=… session=… linked=… error=… task=…``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from appliance.core.identity import Caller
from appliance.core.redact import redact
from appliance.memory.chunking import content_hash
from appliance.memory.conversations import MAX_SESSION_ID_CHARS, effective_session
from appliance.memory.errors import EngineError, rejected
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.reports import caller_agents, resolve_scope
from appliance.memory.tasks import attach_output
from appliance.memory.write import RESERVED, EmbedText, embedding_text, writable_labels

log = logging.getLogger(__name__)

MAX_CHARS = 2000
MAX_TOOL_CHARS = 200
MAX_NAME_CHARS = 200
MAX_PRODUCED = 20
PLUGIN = "maxy-memory"
TASK_SOURCE = "audit"
TASK_KIND = "audit"


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)


def asked(tool: str, tool_input: Any) -> str:
    """A one-line name for what a durable call was asked to do: the tool and the label it wrote.

    Not the content's own title: a Task named like the node it wrote would compete with that
    node in every search for it. The node is one ``PRODUCED`` hop away.
    """
    label = tool_input.get("label") if isinstance(tool_input, Mapping) else None
    if isinstance(label, str) and label.strip():
        return clip(f"{tool}: {' '.join(label.split())}", MAX_NAME_CHARS)
    return clip(tool, MAX_NAME_CHARS)


def _produced(produced: Sequence[Any] | None) -> list[dict[str, str]]:
    if produced is None:
        return []
    if not isinstance(produced, list | tuple) or len(produced) > MAX_PRODUCED:
        raise rejected("audit", "invalid-produced", "produced must be a short list.")
    found = []
    for item in produced:
        label = item.get("label") if isinstance(item, Mapping) else None
        node_id = item.get("id") if isinstance(item, Mapping) else None
        if label not in writable_labels() or not isinstance(node_id, str) or not node_id:
            raise rejected(
                "audit", "invalid-produced", "Each produced node has a graph label and an id."
            )
        found.append({"label": str(label), "id": node_id})
    return found


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
    durable: bool = False,
    produced: Sequence[Any] | None = None,
    embed: EmbedText | None = None,
    model_name: str | None = None,
) -> dict[str, Any]:
    """Store one tool call, redacted and cut, linked to its session's conversation.

    A ``durable`` call also becomes a Task that PRODUCED the ``produced`` nodes
    (``[{label, id}]``); ``embed`` embeds that Task.
    """
    if not isinstance(tool, str) or not tool.strip() or len(tool) > MAX_TOOL_CHARS:
        raise rejected(
            "audit", "invalid-tool", f"A tool name has 1 to {MAX_TOOL_CHARS} characters."
        )
    if not isinstance(ms, int | float) or ms < 0:
        raise rejected("audit", "invalid-ms", "ms must be a non-negative number.")
    session = effective_session(caller, session_id)
    if session is not None and len(session) > MAX_SESSION_ID_CHARS:
        raise rejected("audit", "invalid-session", "The session id is too long.")
    targets = _produced(produced)
    safe_input = redact(tool_input)
    stored_input = _as_text(safe_input)
    stored_output = _as_text(redact(tool_output))
    call_id = str(uuid.uuid4())
    scope = resolve_scope(caller, None)
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
            "scope": scope,
            "agents": caller_agents(caller),
        },
    )
    conversation = rows[0]["conversationId"] if rows else None
    task: dict[str, Any] | None = None
    if durable:
        task = await _record_task(
            graph,
            caller,
            call_id,
            {
                "name": asked(tool, safe_input),
                "status": "failed" if is_error else "completed",
                "tool": tool,
                "sessionId": session,
                "source": TASK_SOURCE,
                "kind": TASK_KIND,
            },
            started_at,
            ended_at,
            [] if is_error else targets,
            embed,
            model_name,
        )
    if durable and not is_error:
        await attach_output(graph, caller, session, targets)
    log.info(
        "[audit] op=record tool=%s session=%s linked=%s error=%s task=%s ms=%.0f",
        tool,
        session,
        conversation is not None,
        bool(is_error),
        task["id"] if task else None,
        ms,
    )
    return {
        "id": call_id,
        "conversationId": conversation,
        "taskId": task["id"] if task else None,
        "produced": task["produced"] if task else [],
    }


async def _record_task(
    graph: Graph,
    caller: Caller,
    call_id: str,
    props: dict[str, Any],
    started_at: datetime,
    ended_at: datetime,
    targets: list[dict[str, str]],
    embed: EmbedText | None,
    model_name: str | None,
) -> dict[str, Any]:
    """Create the Task of one durable call, linked to its ToolCall, conversation and output."""
    task_id = str(uuid.uuid4())
    # Embedded from the same text memory-reindex would compute, so it never counts as stale.
    text = embedding_text("Task", {k: v for k, v in props.items() if k not in RESERVED and v})
    embedding: list[float] | None = None
    if embed is not None and model_name and text:
        try:
            embedding = await embed(text)
        except EngineError as err:
            log.warning(
                "[graph-write] warn reason=embed-failed label=Task id=%s error=%s", task_id, err
            )
    set_embedding = (
        "SET k.embedding = $embedding, k.embeddingModel = $model, k.contentHash = $hash "
        if embedding is not None
        else ""
    )
    await graph.run(
        "MATCH (t:ToolCall {id: $tid}) WHERE t.accountId = $account "
        "CREATE (k:Task {id: $kid, accountId: $account, createdAt: $startedAt, "
        "completedAt: $endedAt, updatedAt: $endedAt, scope: t.scope, agents: t.agents}) "
        f"SET k += $props {set_embedding}"
        "MERGE (t)-[:PERFORMED]->(k) "
        "WITH t, k "
        "OPTIONAL MATCH (c:Conversation)-[:HAS_TOOL_CALL]->(t) WHERE c.accountId = $account "
        "FOREACH (_ IN CASE WHEN c IS NULL THEN [] ELSE [1] END | MERGE (c)-[:HAS_TASK]->(k))",
        {
            "tid": call_id,
            "kid": task_id,
            "account": caller.account_id,
            "props": {k: v for k, v in props.items() if v is not None},
            "startedAt": started_at,
            "endedAt": ended_at,
            "embedding": embedding,
            "model": model_name,
            "hash": content_hash(text) if text else None,
        },
    )
    linked = []
    for target in targets:
        rows, _ = await graph.run(
            f"MATCH (k:Task {{id: $kid}}) MATCH (n:`{target['label']}` {{id: $id}}) "
            f"WHERE k.accountId = $account AND {guard('n')} "
            "MERGE (k)-[:PRODUCED]->(n) RETURN n.id AS id",
            {**caller.params(), "kid": task_id, "id": target["id"]},
        )
        if rows:
            linked.append(target["id"])
        else:
            log.warning(
                "[audit] warn reason=produced-missing label=%s id=%s", target["label"], target["id"]
            )
    return {"id": task_id, "produced": linked}
