"""The Backups page: the archives kept, Back up now, download one, restore one after confirming.

Routes (admin only; the auth middleware checks the login and, on changes, the CSRF header)::

    GET    /admin/backups                         the page
    GET    /api/admin/backups                     the engine's ``backup.list``
    POST   /api/admin/backups                     {includeKeys?}: ``backup.create`` → 201 archive
    GET    /api/admin/backups/{name}              the archive itself (a download)
    POST   /api/admin/backups/{name}/restore      {confirm: name}: ``backup.restore``

Backups and restores run in the engine (it holds the graph); the page waits for the answer.
A restore needs the archive's name typed again as ``confirm``: 409 ``confirm-required`` else.
An archive the engine refuses is answered 400 ``backup-refused`` with the reason, and nothing
was changed; a full disk 503 ``backup-failed``.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

from appliance.app.context import AppContext
from appliance.app.pages import SECTIONS, call_engine, json_api, render
from appliance.core.logs import kv
from appliance.memory.backup import NAME
from appliance.rpc.client import RpcClient
from appliance.web.bodies import json_object
from appliance.web.errors import ApiError

log = logging.getLogger(__name__)

BACKUP_TIMEOUT = 3600.0  # between progress frames of a backup or restore
MAX_BODY_BYTES = 4096


def archive_name(request: Request) -> str:
    """The ``{name}`` of the path, if it can be an archive's; a 404 otherwise."""
    name = str(request.path_params["name"])
    if not NAME.match(name):
        raise ApiError(404, "not-found", "There is no such backup. Reload the page.")
    return name


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The Backups page and its API."""
    folder = ctx.settings.backups_path
    long_engine = RpcClient(ctx.settings.engine_socket, timeout=BACKUP_TIMEOUT)

    async def page(request: Request) -> Response:
        return render(
            ctx,
            request,
            "backups.html",
            "Backups",
            admin=True,
            section="backups",
            sections=SECTIONS,
        )

    async def listing(request: Request) -> dict[str, Any]:
        result: dict[str, Any] = await call_engine(ctx, "backup.list", {})
        return result

    async def create(request: Request) -> tuple[int, Any]:
        data = await json_object(request, limit=MAX_BODY_BYTES, what="the backup")
        params = {"includeKeys": data["includeKeys"]} if "includeKeys" in data else {}
        if "includeKeys" in params and not isinstance(params["includeKeys"], bool):
            raise ApiError(400, "bad-request", "includeKeys is true or false.")
        made = await call_engine(ctx, "backup.create", params, client=long_engine)
        log.info("[backups] op=create %s", kv(name=made.get("name")))
        return 201, made

    async def download(request: Request) -> Response:
        try:
            name = archive_name(request)
        except ApiError as err:
            return err.response()
        path = folder / name
        if path.is_symlink() or not path.is_file():
            return ApiError(
                404, "not-found", "There is no such backup. Reload the page."
            ).response()
        return FileResponse(
            path,
            media_type="application/x-tar",
            filename=name,
            headers={"cache-control": "no-store"},
        )

    async def restore(request: Request) -> dict[str, Any]:
        name = archive_name(request)
        data = await json_object(request, limit=MAX_BODY_BYTES, what="the confirmation")
        if data.get("confirm") != name:
            raise ApiError(
                409,
                "confirm-required",
                "Type the backup's name to confirm: restoring replaces the memory and the files "
                "of the accounts it holds.",
            )
        done: dict[str, Any] = await call_engine(
            ctx, "backup.restore", {"name": name}, client=long_engine
        )
        log.info("[backups] op=restore %s", kv(name=name))
        return done

    return [
        Route("/admin/backups", page, methods=["GET"]),
        Route("/api/admin/backups", json_api(listing), methods=["GET"]),
        Route("/api/admin/backups", json_api(create), methods=["POST"]),
        Route("/api/admin/backups/{name}", download, methods=["GET"]),
        Route("/api/admin/backups/{name}/restore", json_api(restore), methods=["POST"]),
    ]
