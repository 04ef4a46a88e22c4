"""``maxy manager``: the session manager's HTTP interface on ``<runtime_dir>/manager.sock``.

Routes (JSON unless said otherwise; ``<id>`` is a sessionId, bridge id, its suffix, or pid):

    GET    /healthz                 {"ok": true, "pid": …}
    GET    /status                  caps in use, row counts, master audit
    GET    /sessions                {"rows": [...], "lastEventId": …}
    GET    /events                  SSE feed of rows (see feed.py)
    POST   /rc-spawn                admin session → 201 {"row": …}
    POST   /public-spawn            public session (public tools only) → 201 {"row": …}
    GET    /claude                  {"connected": bool, "login": {id, state, url, error, …}}
    POST   /claude/login            start Connect Claude (`claude setup-token`) → 201 {"login"}
    DELETE /claude/login            cancel it → {"login"}
    DELETE /claude                  Disconnect Claude: remove the token, stop live sessions
    GET    /<id>                    {"row": …}
    POST   /<id>/stop               SIGTERM the group, escalate; idempotent → 200
    DELETE /<id>                    409 while alive; removes transcript, sidecar, session dir
    GET    /<id>/log                transcript (NDJSON); ?follow=1 tails; ?download=1 attachment
    POST   /<id>/input              {"text": …, "submit": true} → 200 {"written": n}
    WS     /<id>/terminal           terminal bridge (see terminal.py); also the sign-in's id

Errors answer ``{"code", "message", …}`` with the status of their :mod:`.errors` class; an
unknown id is 404 ``session-not-found`` on every route.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from appliance.core.config import Settings, load_settings
from appliance.core.proc import die_with_server
from appliance.core.resources import self_command
from appliance.sessions.errors import BadRequest, BodyTooLarge, SessionError, TranscriptMissing
from appliance.sessions.feed import feed_response
from appliance.sessions.manager import SessionManager
from appliance.sessions.spawn import Kind, SpawnRequest
from appliance.sessions.terminal import terminal_endpoint
from appliance.web import bodies
from appliance.web.bodies import DrainUnread, read_bounded
from appliance.web.errors import error_response
from appliance.web.unix_server import serve_unix

log = logging.getLogger(__name__)
MAX_BODY = 1024 * 1024  # bytes of a JSON request body (spawn parameters, typed input)

NDJSON = "application/x-ndjson"
MAX_INPUT = 64 * 1024
FOLLOW_WAKE = 15.0  # re-check a followed transcript at least this often
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SessionError)
    return error_response(exc.status, exc.code, str(exc), extra=exc.extra)


def download_name(row: Mapping[str, Any]) -> str:
    """A safe attachment filename: the title (or "session") and the id's first part."""
    stem = _UNSAFE.sub("-", row.get("title") or "session").strip("-.")[:60] or "session"
    return f"{stem}-{str(row['id'])[:8]}.jsonl"


def _complete_lines(data: bytes) -> bytes:
    """Up to the last newline: a line still being flushed is left for later."""
    return data[: data.rfind(b"\n") + 1]


async def _json_body(request: Request) -> Any:
    try:
        raw = await read_bounded(request, MAX_BODY)
    except bodies.BodyTooLarge as err:
        raise BodyTooLarge(
            f"{err} Send less (input is typed text; spawn takes a few fields)."
        ) from err
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as err:
        raise BadRequest("The body is not valid JSON.") from err


def create_app(
    settings: Settings | None = None, environ: Mapping[str, str] | None = None
) -> Starlette:
    """Build the manager app (Granian calls this as a factory)."""
    die_with_server()
    settings = settings or load_settings()
    logging.getLogger("watchfiles").setLevel(logging.WARNING)  # it logs every batch at INFO
    manager = SessionManager(settings, os.environ if environ is None else environ, self_command())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await manager.start()
        try:
            yield
        finally:
            await manager.close()

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "pid": os.getpid()})

    async def status(request: Request) -> Response:
        return JSONResponse(manager.status())

    async def sessions(request: Request) -> Response:
        last_id, rows = manager.registry.snapshot()
        return JSONResponse({"rows": rows, "lastEventId": last_id})

    async def events(request: Request) -> ASGIApp:
        return feed_response(request, manager.registry, settings.manager_keepalive)

    def spawner(kind: Kind) -> Any:
        async def spawn(request: Request) -> Response:
            spawn_request = SpawnRequest.from_json(kind, await _json_body(request))
            row = await manager.spawn(spawn_request)
            return JSONResponse({"row": row}, status_code=201)

        return spawn

    async def claude(request: Request) -> Response:
        return JSONResponse(manager.claude_status())

    async def claude_login(request: Request) -> Response:
        running = manager.login.running
        login = await manager.login.start()
        return JSONResponse({"login": login}, status_code=200 if running else 201)

    async def claude_cancel(request: Request) -> Response:
        return JSONResponse({"login": await manager.login.cancel()})

    async def claude_disconnect(request: Request) -> Response:
        return JSONResponse(await manager.disconnect_claude())

    async def show(request: Request) -> Response:
        return JSONResponse({"row": manager.row(request.path_params["token"])})

    async def stop(request: Request) -> Response:
        return JSONResponse(await manager.stop(request.path_params["token"]))

    async def delete(request: Request) -> Response:
        return JSONResponse(await manager.delete(request.path_params["token"]))

    async def submit(request: Request) -> Response:
        body = await _json_body(request)
        text = body.get("text") if isinstance(body, dict) else None
        submit_flag = body.get("submit", True) if isinstance(body, dict) else True
        if not isinstance(text, str) or not isinstance(submit_flag, bool):
            raise BadRequest('The body must be {"text": "…", "submit": true|false}.')
        if len(text.encode()) > MAX_INPUT:
            raise BadRequest(f"Input is limited to {MAX_INPUT} bytes.")
        return JSONResponse(
            await manager.submit_input(request.path_params["token"], text, submit_flag)
        )

    async def transcript_log(request: Request) -> Response:
        session_id = manager.resolve(request.path_params["token"])
        registry = manager.registry
        download = request.query_params.get("download") == "1"
        follow = request.query_params.get("follow") == "1" and not download
        path = registry.transcript_path(session_id)
        row = registry.rows[session_id]
        if path is None:
            if row["state"] == "live" and not registry.had_transcript(session_id):
                return JSONResponse({"pending": True, "id": session_id}, status_code=202)
            raise TranscriptMissing(
                f"The transcript of {session_id} is no longer on disk.", id=session_id
            )
        if follow:
            return StreamingResponse(
                _follow(session_id, path), media_type=NDJSON, headers={"Cache-Control": "no-store"}
            )
        try:
            data = _complete_lines(path.read_bytes())
        except FileNotFoundError as err:
            raise TranscriptMissing(
                f"The transcript of {session_id} is no longer on disk.", id=session_id
            ) from err
        headers = {"Cache-Control": "no-store"}
        if download:
            headers["Content-Disposition"] = f'attachment; filename="{download_name(row)}"'
        return Response(data, media_type=NDJSON, headers=headers)

    async def _follow(session_id: str, path: Path) -> AsyncGenerator[bytes, None]:
        registry = manager.registry
        offset = 0
        with registry.watching(session_id) as changed:
            while True:
                changed.clear()
                current = registry.transcript_path(session_id) or path
                with contextlib.suppress(FileNotFoundError):
                    with current.open("rb") as handle:
                        handle.seek(offset)
                        chunk = _complete_lines(handle.read())
                    if chunk:
                        offset += len(chunk)
                        yield chunk
                row = registry.rows.get(session_id)
                if row is None or row["state"] != "live":
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), FOLLOW_WAKE)

    async def terminal(websocket: WebSocket) -> None:
        await terminal_endpoint(websocket, manager)

    routes = [
        Route("/healthz", healthz),
        Route("/status", status),
        Route("/sessions", sessions),
        Route("/events", events),
        Route("/rc-spawn", spawner("admin"), methods=["POST"]),
        Route("/public-spawn", spawner("public"), methods=["POST"]),
        Route("/claude", claude, methods=["GET"]),
        Route("/claude", claude_disconnect, methods=["DELETE"]),
        Route("/claude/login", claude_login, methods=["POST"]),
        Route("/claude/login", claude_cancel, methods=["DELETE"]),
        Route("/{token}", show, methods=["GET"]),
        Route("/{token}", delete, methods=["DELETE"]),
        Route("/{token}/stop", stop, methods=["POST"]),
        Route("/{token}/log", transcript_log, methods=["GET"]),
        Route("/{token}/input", submit, methods=["POST"]),
        WebSocketRoute("/{token}/terminal", terminal),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(DrainUnread)],
        exception_handlers={SessionError: _error},
    )


def serve(settings: Settings) -> None:
    """Serve the manager until SIGTERM/SIGINT."""
    serve_unix(
        settings,
        "appliance.sessions.server:create_app",
        settings.manager_socket,
        "sessions",
        role="manager",
    )
