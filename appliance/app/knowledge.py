"""Knowledge in and out of the memory graph from the admin pages: uploads, forget and restore,
a document's versions and its attachment. The upload component (``_upload.html``,
``knowledge.js``) is included by the Data and Artefacts pages.

Routes (admin only; state changes need the session's CSRF header)::

    POST /api/admin/uploads?name=&title=&scope=   the file itself as the body (no form
                                                  encoding) → 202 {uploadId, name, bytes,
                                                  events}; 413 past MAXY_UPLOAD_MAX_MB (told by
                                                  Content-Length before a byte is read, or once
                                                  the body passes it), 415 a type not taken
    GET  /api/admin/uploads/{id}/events           SSE: ``progress`` {stage: receiving|reading|
                                                  embedding, done, total}, then ``done`` (what
                                                  was ingested) or ``failed`` {code, message};
                                                  ``Last-Event-ID`` resumes
    POST /api/admin/nodes/{label}/{id}/delete     soft delete (the grace period), → the engine's
    POST /api/admin/nodes/{label}/{id}/restore    answer; the Data page's Forget and its Undo
    GET  /api/admin/documents/{id}/versions       newest first
    GET  /api/admin/documents/{id}/versions/{n}?against=   text and unified diff
    POST /api/admin/documents/{id}/versions/{n}/restore    a new version with that text
    GET  /api/admin/documents/{id}/file           the uploaded file the document came from

An upload is received into the account's staging folder, then converted and ingested by the
engine (``document.ingest-file``) as a background job whose progress the events stream relays;
a refused file leaves nothing behind (:mod:`appliance.memory.uploads`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from appliance.app.context import AppContext
from appliance.app.pages import admin_caller, call_engine, json_api, templates
from appliance.core.fsio import disk_full_errors
from appliance.memory import uploads
from appliance.memory.convert import ConversionRefused, kind_of
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.web.errors import ApiError, engine_error
from appliance.web.sse import EventStream, frame

log = logging.getLogger(__name__)

UPLOAD_TIMEOUT = 300.0  # per frame: the ingest's last transaction sends none while it writes
WRITE_BLOCK = 1024 * 1024
MAX_JOBS = 32  # finished uploads remembered for a late events stream
KEEPALIVE_S = 15.0
MAX_NAME_CHARS = 255
SCOPES = ("public", "shared", "admin")
_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass
class Job:
    """One upload being converted and ingested: its events so far, and whether it ended."""

    id: str
    name: str
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    ended: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    started: float = field(default_factory=time.monotonic)

    def add(self, event: str, data: dict[str, Any]) -> None:
        """Record an event and wake the streams following this job."""
        self.events.append((event, data))
        self.ended = self.ended or event in ("done", "failed")
        self.changed.set()
        self.changed = asyncio.Event()


def _name(request: Request) -> str:
    name = request.query_params.get("name", "").strip()
    if not name or len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
        raise ApiError(400, "bad-request", "Say the file's name (?name=), at most 255 characters.")
    return name


def _scope(request: Request) -> str | None:
    scope = request.query_params.get("scope") or None
    if scope is not None and scope not in SCOPES:
        raise ApiError(400, "bad-request", "scope must be one of " + ", ".join(SCOPES))
    return scope


async def _receive(request: Request, staged: Path, limit: int, name: str) -> int:
    """Write the body to ``staged``, refusing (413, nothing kept) once it passes ``limit``, or
    (507 disk-full, nothing kept) when the disk has no room for it."""
    received = 0
    pending = bytearray()
    try:
        with disk_full_errors(staged), staged.open("wb") as out:
            async for chunk in request.stream():
                received += len(chunk)
                if received > limit:
                    raise ApiError(413, "too-large", str(uploads.too_large(name, limit)))
                pending += chunk
                if len(pending) >= WRITE_BLOCK:
                    await run_in_threadpool(out.write, bytes(pending))
                    pending.clear()
            await run_in_threadpool(out.write, bytes(pending))
    except BaseException:
        await run_in_threadpool(staged.unlink, True)
        raise
    return received


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The upload, forget/restore and versions routes (before the pages' /admin catch-all)."""
    settings = ctx.settings
    limits = uploads.Limits(settings.upload_max_mb * 1024 * 1024, settings.upload_types)
    engine = RpcClient(settings.engine_socket, timeout=UPLOAD_TIMEOUT)
    jobs: dict[str, Job] = {}
    tasks: set[asyncio.Task[None]] = set()
    # What the upload component says it takes (read by _upload.html on every admin page).
    templates.env.globals["upload_limits"] = {
        "mb": settings.upload_max_mb,
        "types": [f".{t}" for t in settings.upload_types],
    }

    def remember(job: Job) -> None:
        jobs[job.id] = job
        for old in sorted(jobs.values(), key=lambda j: j.started)[: max(0, len(jobs) - MAX_JOBS)]:
            if old.ended:
                del jobs[old.id]

    async def run(job: Job, staged: Path, params: dict[str, Any]) -> None:
        def progress(event: dict[str, Any]) -> None:
            job.add("progress", event)

        try:
            done = await engine.call(
                "document.ingest-file",
                {**params, "staged": staged.name, "caller": admin_caller(ctx)},
                on_progress=progress,
            )
        except RpcError as err:
            failure = engine_error(err)
            log.warning("[upload] op=failed name=%s code=%s", job.name, failure.code)
            job.add("failed", {"code": failure.code, "message": failure.message})
        else:
            job.add("done", done)
        finally:
            await run_in_threadpool(staged.unlink, True)  # the engine has it, or never will

    async def upload(request: Request) -> Response:
        name = _name(request)
        try:
            limits.check_name(name)
        except ConversionRefused as err:
            raise ApiError(415, err.reason, str(err)) from err
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_bytes:
            raise ApiError(413, "too-large", str(uploads.too_large(name, limits.max_bytes)))
        params: dict[str, Any] = {"fileName": name, "scope": _scope(request)}
        title = request.query_params.get("title", "").strip()
        if title:
            params["title"] = title[:300]
        staged = await run_in_threadpool(uploads.new_staged, settings.accounts_dir, ctx.account.id)
        size = await _receive(request, staged, limits.max_bytes, name)
        job = Job(secrets.token_urlsafe(12), name)
        job.add("progress", {"stage": "receiving", "done": size, "total": size})
        remember(job)
        task = asyncio.create_task(run(job, staged, params))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        log.info("[upload] op=received kind=%s bytes=%d job=%s", kind_of(name), size, job.id)
        body = {
            "uploadId": job.id,
            "name": name,
            "bytes": size,
            "events": f"/api/admin/uploads/{job.id}/events",
        }
        response = JSONResponse(body, status_code=202)
        response.headers["cache-control"] = "no-store"
        return response

    async def follow(job: Job, after: int) -> AsyncGenerator[bytes, None]:
        sent = after
        while True:
            while sent < len(job.events):
                event, data = job.events[sent]
                sent += 1
                yield frame(event, data, str(sent))
            if job.ended:
                return
            changed = job.changed
            try:
                await asyncio.wait_for(changed.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield b": keep-alive\n\n"

    async def events(request: Request) -> ASGIApp:
        job = jobs.get(request.path_params["upload_id"])
        if job is None:
            raise ApiError(404, "not-found", "No such upload (or it ended long ago).")
        last = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
        after = int(last) if last and last.isdigit() else 0
        return EventStream(follow(job, after))

    def node(request: Request) -> dict[str, str]:
        label = request.path_params["label"]
        if not _LABEL.match(label):
            raise ApiError(400, "bad-request", f"{label!r} is not a node label.")
        return {"label": label, "id": request.path_params["node_id"]}

    async def delete(request: Request) -> Any:
        return await call_engine(ctx, "delete", node(request))

    async def restore(request: Request) -> Any:
        return await call_engine(ctx, "restore", node(request))

    def version(request: Request) -> int:
        raw = request.path_params["number"]
        if not raw.isdigit() or int(raw) < 1:
            raise ApiError(400, "bad-request", "A version number is a whole number from 1.")
        return int(raw)

    async def version_list(request: Request) -> Any:
        return await call_engine(ctx, "document.versions", {"id": request.path_params["doc"]})

    async def version_show(request: Request) -> Any:
        params: dict[str, Any] = {"id": request.path_params["doc"], "number": version(request)}
        against = request.query_params.get("against", "")
        if against.isdigit():
            params["against"] = int(against)
        return await call_engine(ctx, "document.version", params)

    async def version_restore(request: Request) -> Any:
        params = {"id": request.path_params["doc"], "number": version(request)}
        try:
            return await engine.call(
                "document.restore-version", {**params, "caller": admin_caller(ctx)}
            )
        except RpcError as err:
            raise engine_error(err) from err

    async def attachment(request: Request) -> Response:
        found = await call_engine(
            ctx, "graph.node", {"id": request.path_params["doc"], "label": "KnowledgeDocument"}
        )
        props = (found.get("node") or {}).get("props") or {}
        relative = props.get("file")
        path = (
            uploads.file_path(settings.accounts_dir, ctx.account.id, relative)
            if isinstance(relative, str)
            else None
        )
        if path is None:
            raise ApiError(404, "not-found", "This document has no uploaded file.")
        return FileResponse(
            path,
            media_type=str(props.get("mediaType") or "application/octet-stream"),
            filename=str(props.get("fileName") or path.name),
            headers={"cache-control": "no-store"},
        )

    return [
        Route("/api/admin/uploads", upload, methods=["POST"]),
        Route("/api/admin/uploads/{upload_id}/events", events, methods=["GET"]),
        Route("/api/admin/nodes/{label}/{node_id}/delete", json_api(delete), methods=["POST"]),
        Route("/api/admin/nodes/{label}/{node_id}/restore", json_api(restore), methods=["POST"]),
        Route("/api/admin/documents/{doc}/versions", json_api(version_list), methods=["GET"]),
        Route(
            "/api/admin/documents/{doc}/versions/{number}",
            json_api(version_show),
            methods=["GET"],
        ),
        Route(
            "/api/admin/documents/{doc}/versions/{number}/restore",
            json_api(version_restore),
            methods=["POST"],
        ),
        Route("/api/admin/documents/{doc}/file", attachment, methods=["GET"]),
    ]
