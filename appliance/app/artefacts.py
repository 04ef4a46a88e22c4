"""Artefacts: every knowledge document and the agents' templates, opened in the artefact pane.

    GET  /admin/artefacts                               the page (?open=<artefact id> opens one)
    GET  /api/admin/artefacts                           {documents, agents, roles, truncated}
    GET  /api/admin/artefacts/documents/{id}            one document, opened (see below)
    PUT  /api/admin/artefacts/documents/{id}            {text, version}: saved by ingesting again
    GET  /admin/artefacts/documents/{id}/file           its source file, or its text (?download=1)
    GET  /api/admin/artefacts/agents/{slug}/{name}      one of an agent's files, opened
    PUT  /api/admin/artefacts/agents/{slug}/{name}      {text, version}: IDENTITY.md or SOUL.md
    GET  /api/admin/artefacts/roles/{plugin}/{role}     an enabled plugin's role file (read-only)

An opened artefact is ``{id, kind, title, subtitle, view, editable, text?, version?, fileUrl?,
downloadUrl?, banner?}``; ``view`` is ``text``, ``pdf`` (shown inline where the browser has a
viewer, else a Download link), ``file`` (only downloadable) or ``missing`` (``banner`` says in one
line why there is nothing to read). ``version`` is the sha256 of the text as read: a save naming
another version is refused (409 ``changed-elsewhere``) and loses nothing, the editor keeps it.

Documents: the text is the one the engine kept at the last ingest (:mod:`appliance.core.
documents`); a save calls the engine's ``ingest`` with the document's own title, attachmentId,
scope and agents, which re-embeds only the chunks that changed. A ``file:`` attachmentId inside
the account's ``attachments/`` folder is the source file (a PDF is shown, not edited); it is
opened the way ``/sites`` opens files (:func:`appliance.app.sites.locate_file`: no dot segments,
no symlink out, ``O_NOFOLLOW`` on every component) and served with a policy that lets only this
origin frame it. Agent files: IDENTITY.md and SOUL.md are the owner's and editable (through
:func:`appliance.agents.store.update`, the Agents page's writer, home network only like it);
KNOWLEDGE.md, KNOWLEDGE-SUMMARY.md and config.json are read-only here. Roles (specialists) ship
with their plugins: read-only.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from appliance.agents import store
from appliance.agents.errors import AgentStoreError
from appliance.app import pages
from appliance.app.auth import require_lan
from appliance.app.context import AppContext
from appliance.app.sites import Found, OpenFileResponse, locate_file, open_inside
from appliance.core.accounts import fill_brand
from appliance.core.documents import ATTACHMENTS, is_document_id, read_text, source_of
from appliance.core.fsio import sha256_hex
from appliance.plugins.errors import PluginError
from appliance.plugins.resolver import resolve
from appliance.rpc.client import RpcClient
from appliance.web.bodies import json_object
from appliance.web.errors import ApiError, error_response

log = logging.getLogger(__name__)

INGEST_TIMEOUT = 300.0  # a long document's changed chunks are embedded while the owner waits
MAX_DOCUMENT_BODY = 12 * 1024 * 1024  # the engine ingests at most 2,000,000 characters
MAX_TEMPLATE_BODY = 256 * 1024
MAX_READ_BYTES = 4 * 1024 * 1024
MAX_DOCUMENTS = 2000
EDITABLE = {"IDENTITY.md": "identity", "SOUL.md": "soul"}
READ_ONLY = ("KNOWLEDGE.md", "KNOWLEDGE-SUMMARY.md", store.CONFIG_FILE)
TEXT_TYPES = {"md": "text/markdown", "markdown": "text/markdown", "txt": "text/plain"}
#: A served file may be framed by the artefact pane (same origin) and runs nothing.
FILE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'"
SCOPE_WORDS = {"admin": "only you", "shared": "shared", "public": "public", None: "only you"}
LAN_ONLY = "Agents' files can only be changed from the home network."


def read_plain(path: Path, limit: int = MAX_READ_BYTES) -> str | None:
    """A regular file's text (at most ``limit`` bytes), never through a symlink; None if none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read(limit).decode("utf-8", errors="replace")


def extension(name: str) -> str:
    """The lower-case extension of a file name ('' without one)."""
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


def disposition(kind: str, name: str) -> str:
    """A Content-Disposition that survives any file name (ASCII fallback plus RFC 5987)."""
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in name)
    return f"{kind}; filename=\"{plain or 'file'}\"; filename*=UTF-8''{quote(name)}"


def opened(
    artefact_id: str,
    kind: str,
    title: str,
    subtitle: str,
    *,
    text: str | None = None,
    editable: bool = False,
    banner: str | None = None,
    view: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The JSON of one opened artefact."""
    body: dict[str, Any] = {
        "id": artefact_id,
        "kind": kind,
        "title": title,
        "subtitle": subtitle,
        "editable": editable,
        "view": view or ("text" if text is not None or editable else "missing"),
        **extra,
    }
    if text is not None or editable:
        body["text"] = text or ""
        body["version"] = sha256_hex(text) if text is not None else None
    if banner:
        body["banner"] = banner
    return body


async def save_body(request: Request, limit: int) -> tuple[str, str | None]:
    """``(text, version)`` of a save; 400 when the text is missing."""
    data = await json_object(request, limit=limit, what="the artefact")
    text, version = data.get("text"), data.get("version")
    if not isinstance(text, str):
        raise ApiError(400, "bad-request", "A save needs the artefact's text (text).")
    if version is not None and not isinstance(version, str):
        raise ApiError(400, "bad-request", "version must be the text's version as it was opened.")
    return text, version


def check_version(current: str | None, version: str | None) -> None:
    """Refuse a save made from an older copy than the one on disk."""
    now = sha256_hex(current) if current is not None else None
    if version != now:
        raise ApiError(
            409,
            "changed-elsewhere",
            "This changed since you opened it (in another tab, or the agent wrote it again). "
            "Your edit is still in the editor: copy it, then reopen the artefact.",
        )


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The Artefacts page, its API and the document file route (before the pages' routes)."""
    account_dir = ctx.settings.accounts_dir / ctx.account.id
    attachments = account_dir / ATTACHMENTS
    ingest_engine = RpcClient(ctx.settings.engine_socket, timeout=INGEST_TIMEOUT)

    def agents_dir() -> Path:
        return store.agents_dir_of(ctx.settings.accounts_dir, ctx.account.id)

    async def in_thread(function: Any, *args: Any) -> Any:
        try:
            return await anyio.to_thread.run_sync(function, *args)
        except AgentStoreError as err:
            raise ApiError(err.status, err.code, str(err)) from err

    async def page(request: Request) -> Response:
        return pages.render(
            ctx,
            request,
            "artefacts.html",
            "Artefacts",
            admin=True,
            section="artefacts",
            sections=pages.SECTIONS,
        )

    # --- the list ----------------------------------------------------------------------

    def agent_rows() -> list[dict[str, Any]]:
        rows = []
        for agent in store.list_all(agents_dir(), ctx.account.default_agent):
            folder = agents_dir() / agent.slug
            files = [{"name": name, "editable": True} for name in EDITABLE]
            files += [{"name": n, "editable": False} for n in READ_ONLY if (folder / n).is_file()]
            for entry in files:
                entry["id"] = f"agent:{agent.slug}:{entry['name']}"
                entry["exists"] = (folder / str(entry["name"])).is_file()
            rows.append({"slug": agent.slug, "displayName": agent.display_name, "files": files})
        return rows

    def role_rows() -> list[dict[str, Any]]:
        try:
            installed = resolve(ctx.settings, ctx.account.id)
        except PluginError as err:
            log.warning("[artefacts] op=roles warn=plugins-refused error=%s", err)
            return []
        return [
            {
                "id": f"role:{plugin.name}:{role}",
                "plugin": plugin.name,
                "role": role,
                "exists": plugin.agent_path(role).is_file(),
            }
            for plugin in installed.enabled
            for role in plugin.agents
        ]

    async def listing(request: Request) -> Any:
        sample = await pages.call_engine(
            ctx, "graph.sample", {"labels": ["KnowledgeDocument"], "limit": MAX_DOCUMENTS}
        )
        documents = [
            {"id": f"document:{n['id']}", "documentId": n["id"], "title": n["title"]}
            for n in sample.get("nodes") or []
        ]
        documents.sort(key=lambda d: str(d["title"]).casefold())
        return {
            "documents": documents,
            "truncated": bool(sample.get("truncated")),
            "agents": await in_thread(agent_rows),
            "roles": await anyio.to_thread.run_sync(role_rows),
        }

    # --- documents ---------------------------------------------------------------------

    async def document(document_id: str) -> dict[str, Any]:
        """The visible document's properties; 404 for an id that is none."""
        if not is_document_id(document_id):
            raise ApiError(404, "not-found", "There is no such document.")
        found = await pages.call_engine(
            ctx, "graph.node", {"id": document_id, "label": "KnowledgeDocument"}
        )
        node = (found or {}).get("node")
        if not node:
            raise ApiError(404, "not-found", "No such document, or it was deleted.")
        props: dict[str, Any] = node.get("props") or {}
        return props

    def source_file(props: dict[str, Any]) -> Found | None:
        relative = source_of(account_dir, props.get("attachmentId"))
        if relative is None:
            return None
        located = locate_file(attachments, relative)
        return located if isinstance(located, Found) else None

    def document_subtitle(props: dict[str, Any]) -> str:
        sections, chunks = props.get("sectionCount"), props.get("chunkCount")
        parts = ["Knowledge document"]
        if isinstance(sections, int) and isinstance(chunks, int):
            parts.append(
                f"{sections} section{'s' * (sections != 1)}, {chunks} chunk{'s' * (chunks != 1)}"
            )
        parts.append(f"seen by {SCOPE_WORDS.get(props.get('scope'), props.get('scope'))}")
        return " · ".join(parts)

    async def read_document(request: Request) -> Any:
        document_id = request.path_params["document_id"]
        props = await document(document_id)
        title = str(props.get("title") or "Untitled document")
        base = f"/admin/artefacts/documents/{quote(document_id)}/file"
        common = {"documentId": document_id, "downloadUrl": base + "?download=1"}
        artefact_id, subtitle = f"document:{document_id}", document_subtitle(props)
        source = await anyio.to_thread.run_sync(source_file, props)
        if source is not None and extension(source.path.name) == "pdf":
            return opened(
                artefact_id, "document", title, subtitle, view="pdf", fileUrl=base, **common
            )
        text = await anyio.to_thread.run_sync(read_text, account_dir, document_id)
        if text is None and source is not None and extension(source.path.name) in TEXT_TYPES:
            text = await anyio.to_thread.run_sync(read_plain, source.path)
        if text is not None:
            return opened(
                artefact_id, "document", title, subtitle, text=text, editable=True, **common
            )
        if source is not None:
            return opened(
                artefact_id,
                "document",
                title,
                subtitle,
                view="file",
                banner=f"{source.path.name} cannot be shown here: download it to open it.",
                **common,
            )
        return opened(
            artefact_id,
            "document",
            title,
            subtitle,
            banner="No readable file: this document was ingested before its text was kept. "
            "Ingest it again to read and edit it here.",
        )

    async def save_document(request: Request) -> Any:
        document_id = request.path_params["document_id"]
        text, version = await save_body(request, MAX_DOCUMENT_BODY)
        props = await document(document_id)
        source = await anyio.to_thread.run_sync(source_file, props)
        current = None
        if source is None or extension(source.path.name) != "pdf":
            current = await anyio.to_thread.run_sync(read_text, account_dir, document_id)
        if current is None and source is not None and extension(source.path.name) in TEXT_TYPES:
            current = await anyio.to_thread.run_sync(read_plain, source.path)
        if current is None:
            raise ApiError(
                409,
                "read-only",
                "This document has no text to edit here (a PDF, or ingested before its text was "
                "kept). Ingest it again to edit it.",
            )
        check_version(current, version)
        params: dict[str, Any] = {
            "title": props.get("title") or "Untitled document",
            "text": text,
            "attachmentId": props.get("attachmentId") or f"document:{document_id}",
            "scope": props.get("scope"),
            "agents": props.get("agents"),
        }
        done = await pages.call_engine(ctx, "ingest", params, client=ingest_engine)
        log.info(
            "[artefacts] op=save kind=document id=%s chunks=%s embedded=%s reused=%s",
            document_id,
            done.get("chunks"),
            done.get("embedded"),
            done.get("reused"),
        )
        return {"version": sha256_hex(text), "saved": done}

    async def document_file(request: Request) -> Response:
        document_id = request.path_params["document_id"]
        try:
            props = await document(document_id)
        except ApiError as err:
            return err.response()
        download = pages.bool_param(request, "download")
        source = await anyio.to_thread.run_sync(source_file, props)
        headers = {
            "content-security-policy": FILE_POLICY,
            "x-frame-options": "SAMEORIGIN",
            "cache-control": "no-store",
        }
        if source is None:
            text = await anyio.to_thread.run_sync(read_text, account_dir, document_id)
            if text is None:
                return error_response(404, "not-found", "This document has no file to download.")
            name = f"{props.get('title') or document_id}.md"
            headers["content-type"] = "text/markdown; charset=utf-8"
            headers["content-disposition"] = disposition("attachment", name)
            return Response(text.encode("utf-8"), headers=headers)
        try:
            fd = await anyio.to_thread.run_sync(open_inside, attachments, source.path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return error_response(404, "not-found", "The document's file is gone.")
        except OSError:
            return error_response(403, "forbidden", "That file may not be opened.")
        suffix = extension(source.path.name)
        pdf = suffix == "pdf"
        headers["content-type"] = (
            "application/pdf"
            if pdf
            else f"{TEXT_TYPES[suffix]}; charset=utf-8"
            if suffix in TEXT_TYPES
            else "application/octet-stream"
        )
        inline = pdf and not download
        headers["content-disposition"] = disposition(
            "inline" if inline else "attachment", source.path.name
        )
        log.info("[artefacts] op=file id=%s inline=%s", document_id, inline)
        return OpenFileResponse(fd, headers, send_body=request.method == "GET")

    # --- agents' and roles' templates -------------------------------------------------

    def agent_file(slug: str, name: str) -> dict[str, Any]:
        folder = store.folder_of(agents_dir(), slug)
        record = store.load(agents_dir(), folder.name, ctx.account.default_agent)
        if name not in EDITABLE and name not in READ_ONLY:
            raise ApiError(404, "not-found", f"{name} is not one of an agent's files.")
        text = read_plain(folder / name)
        editable = name in EDITABLE
        banner = None
        if text is None and editable:
            banner = f"No {name} yet: what you type here creates it."
        elif text is None:
            banner = f"No readable file: {record.display_name} has no {name}."
        elif not editable:
            banner = (
                "Made by Maxy from your memory: regenerate it on the Agents page."
                if name.startswith("KNOWLEDGE")
                else "Change the agent's name and keywords on the Agents page."
            )
        body = opened(
            f"agent:{folder.name}:{name}",
            "agent",
            f"{record.display_name} · {name}",
            "Your agent's file" + (" (read-only)" if not editable else ""),
            text=text,
            editable=editable,
            banner=banner,
            view="text" if text is not None or editable else "missing",
        )
        return body

    async def read_agent_file(request: Request) -> Any:
        slug, name = request.path_params["slug"], request.path_params["name"]
        return await in_thread(agent_file, slug, name)

    async def save_agent_file(request: Request) -> Any:
        require_lan(request, LAN_ONLY)
        slug, name = request.path_params["slug"], request.path_params["name"]
        if name not in EDITABLE:
            raise ApiError(
                403, "read-only", f"{name} cannot be edited here: only IDENTITY.md and SOUL.md."
            )
        text, version = await save_body(request, MAX_TEMPLATE_BODY)

        def write() -> None:
            folder = store.folder_of(agents_dir(), slug)
            check_version(read_plain(folder / name), version)
            store.update(agents_dir(), folder.name, {EDITABLE[name]: text})

        await in_thread(write)
        log.info("[artefacts] op=save kind=agent agent=%s file=%s", slug, name)
        return {"version": sha256_hex(text)}

    def role_file(plugin_name: str, role: str) -> dict[str, Any]:
        try:
            installed = resolve(ctx.settings, ctx.account.id)
        except PluginError as err:
            raise ApiError(503, "plugins-refused", str(err)) from err
        plugin = next((p for p in installed.enabled if p.name == plugin_name), None)
        if plugin is None or role not in plugin.agents:
            raise ApiError(404, "not-found", f"No enabled plugin has the role {role!r}.")
        text = read_plain(plugin.agent_path(role))
        filled = fill_brand(text, ctx.account.product_name()) if text is not None else None
        return opened(
            f"role:{plugin.name}:{role}",
            "role",
            role,
            f"A specialist of the {plugin.name} plugin (read-only: it ships with the plugin)",
            text=filled,
            banner=None if filled is not None else f"No readable file: {role}.md is missing.",
        )

    async def read_role(request: Request) -> Any:
        plugin_name, role = request.path_params["plugin"], request.path_params["role"]
        return await anyio.to_thread.run_sync(role_file, plugin_name, role)

    api = pages.json_api
    prefix = "/api/admin/artefacts"
    return [
        Route("/admin/artefacts", page, methods=["GET"]),
        Route(
            "/admin/artefacts/documents/{document_id}/file",
            document_file,
            methods=["GET", "HEAD"],
        ),
        Route(prefix, api(listing), methods=["GET"]),
        Route(prefix + "/documents/{document_id}", api(read_document), methods=["GET"]),
        Route(prefix + "/documents/{document_id}", api(save_document), methods=["PUT"]),
        Route(prefix + "/agents/{slug}/{name}", api(read_agent_file), methods=["GET"]),
        Route(prefix + "/agents/{slug}/{name}", api(save_agent_file), methods=["PUT"]),
        Route(prefix + "/roles/{plugin}/{role}", api(read_role), methods=["GET"]),
    ]
