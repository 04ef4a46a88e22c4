"""The admin plugin's tools over the session manager: list, stop, and start a specialist.

They ask ``maxy manager`` on its Unix socket (:class:`~appliance.web.manager_client.ManagerClient`),
as the device's own account only (:func:`~appliance.mcp.owner.device_account`).

- ``session-list``: the newest sessions, compact; with ``id``, that one session and the last
  reply in its transcript (how a specialist's result is read).
- ``session-stop``: SIGTERM a session's process group (SIGKILL after the grace); never the
  caller's own session.
- ``specialist-start``: a role of an enabled plugin as a session of its own (``--agent``), marked
  specialist, so the manager's caps guard it: at most ``MAXY_SPECIALIST_CAP`` at once, the oldest
  idle one evicted for a new one, the operator's reserved slots never taken, and the idle reaper
  stopping one that stays silent.
- ``session-compact``: this session's compaction briefing (what was asked, done and decided, the
  work in progress, what the owner shared), kept by the engine's ``briefing.write`` for the next
  admin session to start from. The manager asks for it when the context passes its threshold
  (:mod:`appliance.sessions.compaction`); the caller's own session and account come from its
  environment, never from an argument.
"""

from __future__ import annotations

import json
from typing import Any

from appliance.mcp.owner import device_account
from appliance.mcp.plugins import installed_of
from appliance.mcp.tool import Tool, ToolContext, ToolError
from appliance.plugins.errors import PluginNotFound
from appliance.rpc import engine as api
from appliance.web.manager_client import (
    ManagerClient,
    ManagerError,
    ManagerRefused,
    ManagerUnavailable,
)

MANAGER_TIMEOUT = 60.0  # a spawn waits for the CLI's PID file (the manager allows 30 s)
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
REPLY_CAP = 8000
PREFIX_MIN = 8  # an id's first characters that name it (the logs print 8)
MAX_TASK = 20_000
STATES = ("live", "archived", "all")
ROW_KEYS = (
    "id",
    "title",
    "kind",
    "state",
    "status",
    "pid",
    "startedAt",
    "lastActivityAt",
    "prompts",
    "turnEnded",
    "stopReason",
    "specialist",
    "role",
    "agent",
    "channel",
    "hidden",
)


def manager_of(context: ToolContext) -> ManagerClient:
    """The manager of the device's account (the caller's, checked)."""
    device_account(context)
    return ManagerClient(context.settings.manager_socket, timeout=MANAGER_TIMEOUT)


def refusal(err: ManagerError) -> ToolError:
    """A manager's answer as the tool's error, its code kept."""
    if isinstance(err, ManagerRefused):
        details = {k: v for k, v in err.body.items() if k not in ("code", "message")}
        return ToolError(str(err), code=err.code, **details)
    if isinstance(err, ManagerUnavailable):
        return ToolError(str(err), code="manager-unavailable")
    return ToolError(str(err), code="manager-error")


def compact(row: dict[str, Any]) -> dict[str, Any]:
    """A session row as the agent needs it."""
    return {key: row.get(key) for key in ROW_KEYS}


def last_reply(transcript: str) -> str | None:
    """The text of the transcript's last assistant message."""
    reply = None
    for line in transcript.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        if entry.get("type") != "assistant" or not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        text = "".join(
            b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"
        )
        if text.strip():
            reply = text
    return reply


async def find_row(manager: ManagerClient, token: str) -> dict[str, Any]:
    """The row ``token`` names: what the manager resolves, else a unique id prefix (8+)."""
    try:
        return await manager.row(token)
    except ManagerRefused as err:
        if err.code != "session-not-found" or len(token) < PREFIX_MIN:
            raise
        found = [row for row in await manager.sessions() if str(row["id"]).startswith(token)]
        if len(found) != 1:
            raise
        return found[0]


def _limit(arguments: dict[str, Any]) -> int:
    value = arguments.get("limit", DEFAULT_LIMIT)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LIMIT:
        raise ToolError(f"limit must be a whole number from 1 to {MAX_LIMIT}.")
    return value


async def session_list(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """The newest sessions; or one, with its last reply."""
    manager = manager_of(context)
    token = arguments.get("id")
    try:
        if token:
            if not isinstance(token, str):
                raise ToolError("id must be a session id (or its first characters).")
            row = await find_row(manager, token)
            reply = last_reply(await manager.transcript(row["id"]))
            answer = compact(row)
            if reply is not None:
                answer["reply"] = reply[:REPLY_CAP]
                answer["replyLength"] = len(reply)
            return {"session": answer}
        state = arguments.get("state", "live")
        if state not in STATES:
            raise ToolError(f"state must be one of {', '.join(STATES)}.")
        limit = _limit(arguments)
        rows = await manager.sessions()
    except ManagerError as err:
        raise refusal(err) from err
    if state != "all":
        rows = [row for row in rows if row.get("state") == state]
    rows.sort(key=lambda row: row.get("startedAt") or 0, reverse=True)
    return {
        "sessions": [compact(row) for row in rows[:limit]],
        "total": len(rows),
        "shown": min(limit, len(rows)),
        "you": context.caller.session_id,
    }


async def session_stop(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Stop one session (not the caller's own); its transcript is kept."""
    manager = manager_of(context)
    token = arguments.get("id")
    if not isinstance(token, str) or not token.strip():
        raise ToolError("Name the session to stop (`id`); session-list shows them.")
    try:
        row = await find_row(manager, token.strip())
        if row["id"] == context.caller.session_id:
            raise ToolError(
                "That is this session, the one you are running in; it is not stopped from here.",
                code="own-session",
            )
        result = await manager.stop(row["id"])
    except ManagerError as err:
        raise refusal(err) from err
    after = result.get("row") or row
    return {
        "id": result.get("id"),
        "stopped": bool(result.get("stopped")),
        "signal": result.get("signal"),
        "state": after.get("state"),
        "note": "Stopped; its transcript is kept."
        if result.get("stopped")
        else "It was not running.",
    }


async def specialist_start(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Start a role as a specialist session working on ``task``."""
    role = arguments.get("role")
    task = arguments.get("task")
    if not isinstance(role, str) or not role.strip():
        raise ToolError("Name the role (`role`); capabilities-here lists them.")
    if not isinstance(task, str) or not task.strip() or len(task) > MAX_TASK:
        raise ToolError(f"task must be the specialist's brief, at most {MAX_TASK} characters.")
    installed = installed_of(context)
    try:
        plugin = installed.role(role.strip())
    except PluginNotFound as err:
        roles = ", ".join(sorted(r for p in installed.enabled for r in p.agents))
        raise ToolError(f"{err} Roles here: {roles or 'none'}.", code="role-not-found") from err
    manager = manager_of(context)
    body: dict[str, Any] = {"message": task.strip(), "role": role.strip(), "specialist": True}
    model = arguments.get("model")
    if model is not None:
        if not isinstance(model, str) or not model.strip():
            raise ToolError("model must be a model name.")
        body["model"] = model.strip()
    try:
        row = await manager.spawn(body)
    except ManagerError as err:
        raise refusal(err) from err
    return {
        "session": compact(row),
        "role": role.strip(),
        "plugin": plugin.name,
        "note": (
            "Started. It works on its own; session-list with its id shows its state and its "
            "last reply. An idle specialist is stopped after a while."
        ),
    }


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="session-list",
        plugin="admin",
        handler=session_list,
        input_schema={
            "type": "object",
            "properties": {
                "state": {
                    "type": "string",
                    "enum": list(STATES),
                    "description": "live (default), archived or all.",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                "id": {
                    "type": "string",
                    "description": "One session (id or its first characters): its row and "
                    "last reply.",
                },
            },
            "additionalProperties": False,
        },
        description=(
            "List the device's Claude Code sessions (admin, public, specialists), newest first; "
            "or, given an id, that session and its last reply."
        ),
    ),
    Tool(
        name="session-stop",
        plugin="admin",
        handler=session_stop,
        input_schema={
            "type": "object",
            "properties": {"id": {"type": "string", "description": "The session to stop."}},
            "required": ["id"],
            "additionalProperties": False,
        },
        description=(
            "Stop a session (one the owner names, or one clearly stuck); its transcript is kept. "
            "Never this session itself."
        ),
    ),
    Tool(
        name="specialist-start",
        plugin="admin",
        handler=specialist_start,
        input_schema={
            "type": "object",
            "properties": {
                "role": {
                    "type": "string",
                    "description": "A role of an enabled plugin (capabilities-here lists them).",
                },
                "task": {"type": "string", "description": "The brief: what to do and return."},
                "model": {"type": "string", "description": "A model name (optional)."},
            },
            "required": ["role", "task"],
            "additionalProperties": False,
        },
        description=(
            "Start a role as a specialist session of its own for longer work, under the "
            "device's specialist cap; read its result later with session-list and its id."
        ),
    ),
    Tool(
        name="session-compact",
        plugin="admin",
        method=api.BRIEFING_WRITE,
        forwarded=("asked", "done", "decisions", "inProgress", "aboutOwner"),
        description=(
            "Leave this session's briefing for the next admin session before the context is "
            "compacted: what the owner asked, what was done, the decisions made, the work in "
            "progress, and what the owner shared about themselves. Call it when asked to."
        ),
    ),
)
