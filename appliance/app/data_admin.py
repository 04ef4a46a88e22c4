"""The Data page's changes: add a note, edit a node's text, change who can see it, delete it.

    POST   /api/admin/memory/notes                 {title?, text, scope?, agents?} → 201 node
    PATCH  /api/admin/memory/nodes/{id}            {label, title?, text?, scope?, agents?} → node
    DELETE /api/admin/memory/nodes/{id}?label=     soft delete → {id, label, deletedAt, changed}
    POST   /api/admin/memory/nodes/{id}/restore    {label}: undo the delete → {id, label, changed}

Every change goes through the engine as the account's admin caller (``write``, ``ingest``,
``delete``, ``restore``: the engine's guards and checks hold), and a node is read back through
``graph.node`` first, so only a visible node is changed. A node's node answer is what
``graph.node`` gives.

What may change:

- ``title`` is the node's first naming property (name, title, …; ``name`` when it has none),
  ``text`` its first text property (text, body, description, …; ``text`` for a Note,
  ``description`` otherwise). The node is embedded again from what it then holds.
- ``scope``: ``admin`` (only the owner), ``shared``, or ``public`` for the agents named in
  ``agents`` (at least one, each an agent of this account): a public agent sees a node only when
  it is public and tagged for it. A knowledge document changes scope whole, by ingesting its
  kept text again with the new scope (its sections and chunks follow).
- Conversation records (Conversation, Message, ToolCall) keep what was said: never edited (a
  Message may be deleted). A document's sections and chunks change with their document: in
  Artefacts (text) or on the document (scope).

Errors are ``{code, message}``: 400 ``bad-request``, 404 ``not-found``, 409 ``read-only``,
503 ``engine-unavailable``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from appliance.agents import store
from appliance.app import pages
from appliance.app.context import AppContext
from appliance.core.documents import read_text
from appliance.core.identity import SCOPES
from appliance.memory.explore import TEXT_KEYS, TITLE_KEYS, is_internal
from appliance.rpc.client import RpcClient
from appliance.web.bodies import json_object
from appliance.web.errors import ApiError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 * 1024
MAX_TITLE_CHARS = 300
MAX_TEXT_CHARS = 20_000
RECORDS = ("Conversation", "Message", "ToolCall")
DOCUMENT_PARTS = ("Section", "Chunk")
INGEST_TIMEOUT = 300.0


def first_key(props: Mapping[str, Any], keys: tuple[str, ...], default: str) -> str:
    """The first of ``keys`` the node has as text, else ``default``."""
    return next((k for k in keys if isinstance(props.get(k), str)), default)


def text_field(data: Mapping[str, Any], name: str, limit: int) -> str | None:
    """An optional text field of the body, at most ``limit`` characters; 400 otherwise."""
    if name not in data or data[name] is None:
        return None
    value = data[name]
    if not isinstance(value, str):
        raise ApiError(400, "bad-request", f"{name} must be text.")
    if len(value) > limit:
        raise ApiError(400, "bad-request", f"{name} is longer than {limit:,} characters.")
    return value


def label_of(value: object) -> str:
    """A node label from the request; 400 otherwise."""
    if not isinstance(value, str) or not pages.LABEL.match(value):
        raise ApiError(400, "bad-request", "Name the node's label (label), e.g. Note.")
    return value


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The Data page's change API."""
    account_dir = ctx.settings.accounts_dir / ctx.account.id
    ingest_engine = RpcClient(ctx.settings.engine_socket, timeout=INGEST_TIMEOUT)

    def agent_slugs() -> set[str]:
        folder = store.agents_dir_of(ctx.settings.accounts_dir, ctx.account.id)
        return {a.slug for a in store.list_all(folder, ctx.account.default_agent)}

    async def visibility(data: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
        """The scope and agents a change leaves the node with (its own when not changed)."""
        scope = data.get("scope", current.get("scope"))
        agents = data.get("agents", current.get("agents"))
        if scope is not None and scope not in SCOPES:
            raise ApiError(400, "bad-request", f"scope must be one of {', '.join(SCOPES)}.")
        if scope != "public":
            return {"scope": scope, "agents": None}
        if (
            not isinstance(agents, list)
            or not agents
            or not all(isinstance(a, str) for a in agents)
        ):
            raise ApiError(
                400, "bad-request", "Choose the agent (agents) that may show it to visitors."
            )
        if "agents" in data:
            unknown = sorted(set(agents) - await anyio.to_thread.run_sync(agent_slugs))
            if unknown:
                raise ApiError(400, "bad-request", f"There is no agent called {unknown[0]!r}.")
        return {"scope": scope, "agents": list(dict.fromkeys(agents))}

    async def node(node_id: str, label: str | None) -> dict[str, Any]:
        found = await pages.call_engine(ctx, "graph.node", {"id": node_id, "label": label})
        if not found or not found.get("node"):
            raise ApiError(404, "not-found", "No such node, or it was deleted. Search again.")
        return dict(found)

    async def body(request: Request) -> dict[str, Any]:
        return await json_object(request, limit=MAX_BODY_BYTES, what="the change")

    async def add_note(request: Request) -> Any:
        data = await body(request)
        text = (text_field(data, "text", MAX_TEXT_CHARS) or "").strip()
        if not text:
            raise ApiError(400, "bad-request", "Write the note's text first.")
        title = (text_field(data, "title", MAX_TITLE_CHARS) or "").strip()
        if not title:
            title = " ".join(text.split())[:80]
        shown = await visibility(data, {"scope": "admin"})
        written = await pages.call_engine(
            ctx,
            "write",
            {"label": "Note", "properties": {"name": title, "text": text}, **shown},
        )
        log.info("[data] op=add-note id=%s scope=%s", written["id"], shown["scope"])
        return 201, await node(written["id"], "Note")

    async def edit(request: Request) -> Any:
        node_id = request.path_params["node_id"]
        data = await body(request)
        label = label_of(data.get("label"))
        current = await node(node_id, label)
        labels = list(current["node"].get("labels") or [])
        props = dict(current["node"].get("props") or {})
        title = text_field(data, "title", MAX_TITLE_CHARS)
        text = text_field(data, "text", MAX_TEXT_CHARS)
        if any(r in labels for r in RECORDS) or is_internal(labels, props):
            raise ApiError(409, "read-only", "A conversation record keeps what was said as it was.")
        if any(part in labels for part in DOCUMENT_PARTS):
            raise ApiError(
                409,
                "read-only",
                "This is part of a document: edit the document in Artefacts, and change who "
                "can see it on the document itself.",
            )
        shown = await visibility(data, props)
        if "KnowledgeDocument" in labels:
            if title is not None or text is not None:
                raise ApiError(409, "read-only", "Edit a document's text in Artefacts.")
            kept = await anyio.to_thread.run_sync(read_text, account_dir, node_id)
            if kept is None:
                raise ApiError(
                    409,
                    "read-only",
                    "This document was ingested before its text was kept: ingest it again, "
                    "then change who can see it.",
                )
            params = {
                "title": props.get("title") or "Untitled document",
                "text": kept,
                "attachmentId": props.get("attachmentId") or f"document:{node_id}",
                **shown,
            }
            await pages.call_engine(ctx, "ingest", params, client=ingest_engine)
        else:
            properties: dict[str, Any] = {}
            if title is not None:
                if not title.strip():
                    raise ApiError(400, "bad-request", "A title cannot be empty.")
                properties[first_key(props, TITLE_KEYS, "name")] = title.strip()
            if text is not None:
                default = "text" if label == "Note" else "description"
                properties[first_key(props, TEXT_KEYS, default)] = text
            await pages.call_engine(
                ctx, "write", {"label": label, "id": node_id, "properties": properties, **shown}
            )
        log.info(
            "[data] op=edit label=%s id=%s fields=%s scope=%s",
            label,
            node_id,
            ",".join(k for k in ("title", "text") if data.get(k) is not None) or "-",
            shown["scope"],
        )
        return await node(node_id, label)

    async def delete(request: Request) -> Any:
        label = label_of(request.query_params.get("label"))
        done = await pages.call_engine(
            ctx, "delete", {"label": label, "id": request.path_params["node_id"]}
        )
        log.info("[data] op=delete label=%s id=%s changed=%s", label, done["id"], done["changed"])
        return done

    async def restore(request: Request) -> Any:
        label = label_of((await body(request)).get("label"))
        done = await pages.call_engine(
            ctx, "restore", {"label": label, "id": request.path_params["node_id"]}
        )
        log.info("[data] op=restore label=%s id=%s changed=%s", label, done["id"], done["changed"])
        return done

    prefix = "/api/admin/memory"
    api = pages.json_api
    return [
        Route(prefix + "/notes", api(add_note), methods=["POST"]),
        Route(prefix + "/nodes/{node_id}", api(edit), methods=["PATCH"]),
        Route(prefix + "/nodes/{node_id}", api(delete), methods=["DELETE"]),
        Route(prefix + "/nodes/{node_id}/restore", api(restore), methods=["POST"]),
    ]
