"""The admin plugin's ``system-status``: is every part of the device working, as they say it.

Each part is asked the way it reports itself, all at once, each with a short timeout:

- **edge**: its ``/healthz`` on the device's port (the engine, Neo4j, the embedder, the schema,
  the tunnel and ``missingPlugins``, as the owner's browser would see them);
- **app**: ``/healthz`` on its Unix socket answers (any status below 500: it serves);
- **engine** and **Neo4j**: the engine's ``health`` RPC (Neo4j's ping, the embedder, the schema);
- **manager**: its ``/status`` (sessions by state, the caps in use, the PTY master audit);
- **claude**: the Claude Code CLI's ``--version``.

With versions (this build, Neo4j's, the CLI's), the data partition's free space, and one
``problems`` list that says what is wrong in words.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import httpx

from appliance.core import proc
from appliance.core.config import Settings
from appliance.core.systemd import http_probe
from appliance.core.version import build_info
from appliance.mcp.owner import device_account
from appliance.mcp.tool import Tool, ToolContext
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.web.manager_client import ManagerClient, ManagerError

PART_TIMEOUT = 5.0
CLI_TIMEOUT = 15.0
LOW_DISK_BYTES = 1024**3
LOW_DISK_SHARE = 0.05


async def edge_health(settings: Settings) -> dict[str, Any]:
    """The edge's ``/healthz`` body, with ``ok``."""
    url = settings.edge_health_url
    try:
        async with httpx.AsyncClient(timeout=PART_TIMEOUT) as client:
            response = await client.get(url)
        body = response.json()
    except (httpx.HTTPError, ValueError) as err:
        return {"ok": False, "error": f"{url} did not answer ({type(err).__name__})"}
    if not isinstance(body, dict):
        return {"ok": False, "error": f"{url} answered {response.status_code} without JSON"}
    return {"ok": response.status_code == 200, **body}


async def app_health(settings: Settings) -> dict[str, Any]:
    """Whether the app serves on its socket."""
    problem = await asyncio.to_thread(http_probe("/healthz", uds=settings.app_socket), PART_TIMEOUT)
    if problem is None:
        return {"ok": True}
    return {"ok": False, "error": f"{settings.app_socket}: {problem}"}


async def engine_health(settings: Settings) -> dict[str, Any]:
    """The engine's ``health`` answer (Neo4j, embedder, schema)."""
    try:
        answer: dict[str, Any] = await RpcClient(settings.engine_socket, timeout=PART_TIMEOUT).call(
            "health"
        )
    except RpcError as err:
        return {"ok": False, "error": str(err)}
    return answer


async def manager_status(settings: Settings) -> dict[str, Any]:
    """The manager's ``/status`` (sessions, caps, audit)."""
    try:
        status = await ManagerClient(settings.manager_socket, timeout=PART_TIMEOUT).status()
    except ManagerError as err:
        return {"ok": False, "error": str(err)}
    return {"ok": True, **status}


async def claude_version(settings: Settings) -> dict[str, Any]:
    """The Claude Code CLI's version, or why there is none."""
    found = shutil.which(settings.claude_bin)
    if found is None:
        return {"ok": False, "error": f"{settings.claude_bin!r} is not installed (MAXY_CLAUDE_BIN)"}
    try:
        done = await asyncio.to_thread(proc.run, [found, "--version"], timeout=CLI_TIMEOUT)
    except proc.ToolError as err:
        return {"ok": False, "error": str(err)}
    text = done.stdout.strip().splitlines()
    if done.returncode != 0 or not text:
        return {"ok": False, "error": f"`{found} --version` exited {done.returncode}"}
    return {"ok": True, "version": text[0]}


def disk(settings: Settings) -> dict[str, Any]:
    """Free space on the data partition."""
    usage = shutil.disk_usage(settings.data_dir)
    low = usage.free < LOW_DISK_BYTES or usage.free < usage.total * LOW_DISK_SHARE
    return {
        "path": str(settings.data_dir),
        "freeBytes": usage.free,
        "totalBytes": usage.total,
        "freePercent": round(100 * usage.free / usage.total, 1) if usage.total else 0.0,
        "ok": not low,
    }


def problems(parts: dict[str, dict[str, Any]], space: dict[str, Any]) -> list[str]:
    """What is wrong, one sentence a part."""
    found = [
        f"{name}: {part.get('error') or 'not healthy'}"
        for name, part in parts.items()
        if not part.get("ok")
    ]
    neo4j = parts["engine"].get("neo4j")
    if isinstance(neo4j, dict) and not neo4j.get("ok"):
        found.append(f"neo4j: {neo4j.get('error') or 'not answering'}")
    schema = parts["engine"].get("schema")
    if isinstance(schema, dict) and schema.get("state") not in (None, "applied"):
        found.append(f"schema: {schema.get('state')} {schema.get('error') or ''}".strip())
    missing = parts["edge"].get("missingPlugins")
    if missing:
        found.append(f"plugins missing their files: {', '.join(map(str, missing))}")
    if not space["ok"]:
        found.append(f"disk: only {space['freeBytes'] // 1024**2} MB free on {space['path']}")
    return found


async def system_status(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Every part's health, the versions, disk space and session counts."""
    account = device_account(context)
    settings = context.settings
    edge, app, engine, manager, claude = await asyncio.gather(
        edge_health(settings),
        app_health(settings),
        engine_health(settings),
        manager_status(settings),
        claude_version(settings),
    )
    parts = {"edge": edge, "app": app, "engine": engine, "manager": manager, "claude": claude}
    space = await asyncio.to_thread(disk, settings)
    found = problems(parts, space)
    info = build_info()
    rows = manager.get("rows")
    rows = rows if isinstance(rows, dict) else {}
    return {
        "status": "healthy" if not found else "degraded",
        "problems": found,
        "account": account.id,
        "versions": {
            "maxy": info.get("version"),
            "revision": info.get("gitRevision"),
            "buildDate": info.get("buildDate"),
            "neo4j": settings.neo4j_version,
            "claude": claude.get("version"),
        },
        "parts": {
            "edge": edge,
            "app": app,
            "engine": {k: v for k, v in engine.items() if k != "neo4j"},
            "neo4j": engine.get("neo4j", {"ok": False, "error": "the engine did not answer"}),
            "manager": manager,
            "claude": claude,
        },
        "disk": space,
        "sessions": {
            "live": rows.get("live"),
            "archived": rows.get("archived"),
            "caps": manager.get("caps"),
        },
    }


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="system-status",
        plugin="admin",
        handler=system_status,
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        description=(
            "Is everything working? The health of each part of the device (edge, app, engine, "
            "Neo4j, session manager, Claude Code CLI), versions, free disk space and session "
            "counts, with the problems found in words."
        ),
    ),
)
