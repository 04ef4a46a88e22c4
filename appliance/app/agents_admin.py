"""The owner's agents: the Agents page and its JSON API under ``/api/admin/agents``.

    GET    /admin/agents                          the page (list, editor, knowledge, default)
    GET    /api/admin/agents                      {agents: [summary], defaultAgent}
    POST   /api/admin/agents                      {slug, displayName?, description?, identity?,
                                                   soul?, keywordSubscriptions?} → 201 agent
    GET    /api/admin/agents/{slug}               the agent, with its IDENTITY.md and SOUL.md
    PUT    /api/admin/agents/{slug}               any of the fields above but slug → the agent
    DELETE /api/admin/agents/{slug}               {deleted} (never the default agent: 409)
    POST   /api/admin/agents/{slug}/default       {defaultAgent}: account.json's defaultAgent
    POST   /api/admin/agents/{slug}/knowledge     regenerate KNOWLEDGE.md → {knowledge, agent}

The auth middleware has already required a login and, for every change, the session's CSRF
header; changes are further kept to the home network (403 ``lan-only`` over the tunnel). Files
are handled by :mod:`appliance.agents.store` (slug checks, atomic writes, nothing outside the
agents folder) and KNOWLEDGE.md by :mod:`appliance.agents.knowledge`. Errors are ``{code,
message}``: 400 ``invalid-agent``/``bad-json``, 404 ``no-such-agent``, 409 ``agent-conflict``,
413 ``too-large``, 415 ``json-required``, 503 ``engine-unavailable``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from appliance.agents import knowledge, store
from appliance.agents.errors import AgentStoreError
from appliance.app import pages
from appliance.app.auth import require_lan
from appliance.app.context import AppContext
from appliance.rpc.protocol import RemoteError, RpcError
from appliance.web.bodies import json_object
from appliance.web.errors import ApiError, engine_error

log = logging.getLogger(__name__)

KNOWLEDGE_UNAVAILABLE = (
    "The memory engine is not answering, so the knowledge was not regenerated (the agent keeps "
    "its current KNOWLEDGE.md). Start Maxy with `maxy run` and try again."
)

MAX_BODY_BYTES = 256 * 1024  # two files of MAX_FILE_CHARS, even in four-byte characters
KNOWLEDGE_TIMEOUT = 120.0


def _api_error(err: AgentStoreError) -> ApiError:
    return ApiError(err.status, err.code, str(err))


async def _json_body(request: Request) -> dict[str, Any]:
    too_large = ApiError(
        413,
        "too-large",
        f"The request is over {MAX_BODY_BYTES // 1024} KB: IDENTITY.md and SOUL.md are "
        f"limited to {store.MAX_FILE_CHARS:,} characters each.",
    )
    return await json_object(request, limit=MAX_BODY_BYTES, what="the agent", too_large=too_large)


LAN_ONLY = "Agents can only be changed from the home network."


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The Agents page and its API (before the pages' generic ``/admin/{section}``)."""
    changing = asyncio.Lock()  # one change at a time: create-if-absent and the default stay true

    def agents_dir() -> Path:
        return store.agents_dir_of(ctx.settings.accounts_dir, ctx.account.id)

    def record(slug: str) -> dict[str, Any]:
        return store.load(agents_dir(), slug, ctx.account.default_agent).to_json()

    async def run(function: Callable[..., Any], *args: Any) -> Any:
        try:
            return await run_in_threadpool(function, *args)
        except AgentStoreError as err:
            raise _api_error(err) from err

    def api(
        handler: Callable[[Request], Awaitable[Any]], *, changes: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if changes:
                require_lan(request, LAN_ONLY)
            try:
                body = await handler(request)
            except ApiError as err:
                return err.response()
            status = 200
            if isinstance(body, tuple):
                status, body = body
            response = JSONResponse(body, status_code=status)
            response.headers["cache-control"] = "no-store"
            return response

        return endpoint

    async def page(request: Request) -> Response:
        return pages.render(
            ctx,
            request,
            "agents.html",
            "Agents",
            admin=True,
            section="agents",
            sections=pages.SECTIONS,
            reserved=sorted(store.RESERVED),
            max_subscriptions=store.MAX_SUBSCRIPTIONS,
            max_file_chars=store.MAX_FILE_CHARS,
        )

    async def list_agents(request: Request) -> Any:
        found = await run(store.list_all, agents_dir(), ctx.account.default_agent)
        return {
            "agents": [agent.to_json(files=False) for agent in found],
            "defaultAgent": ctx.account.default_agent,
        }

    async def create(request: Request) -> Any:
        data = await _json_body(request)
        async with changing:
            slug = await run(store.create, agents_dir(), data.get("slug"), data)
            return 201, await run(record, slug)

    async def read(request: Request) -> Any:
        return await run(record, request.path_params["slug"])

    async def edit(request: Request) -> Any:
        data = await _json_body(request)
        async with changing:
            await run(store.update, agents_dir(), request.path_params["slug"], data)
            return await run(record, request.path_params["slug"])

    async def delete(request: Request) -> Any:
        slug = request.path_params["slug"]
        async with changing:
            await run(store.delete, agents_dir(), slug, ctx.account.default_agent)
        return {"deleted": slug}

    async def make_default(request: Request) -> Any:
        slug = request.path_params["slug"]
        async with changing:
            ctx.account = await run(
                store.set_default, ctx.settings.accounts_dir, ctx.account, agents_dir(), slug
            )
        return {"defaultAgent": ctx.account.default_agent}

    async def regenerate(request: Request) -> Any:
        slug = request.path_params["slug"]
        try:
            done = await asyncio.wait_for(
                knowledge.regenerate(ctx.engine, ctx.account.id, agents_dir(), slug),
                KNOWLEDGE_TIMEOUT,
            )
        except AgentStoreError as err:
            raise _api_error(err) from err
        except (RpcError, TimeoutError) as err:
            code = err.code if isinstance(err, RemoteError) else "engine-unavailable"
            log.warning("[agents] op=knowledge agent=%s error=%s", slug, code)
            raise engine_error(err, KNOWLEDGE_UNAVAILABLE) from err
        return {"knowledge": done.to_json(), "agent": await run(record, slug)}

    prefix = "/api/admin/agents"
    return [
        Route("/admin/agents", page, methods=["GET"]),
        Route(prefix, api(list_agents), methods=["GET"]),
        Route(prefix, api(create, changes=True), methods=["POST"]),
        Route(prefix + "/{slug}", api(read), methods=["GET"]),
        Route(prefix + "/{slug}", api(edit, changes=True), methods=["PUT"]),
        Route(prefix + "/{slug}", api(delete, changes=True), methods=["DELETE"]),
        Route(prefix + "/{slug}/default", api(make_default, changes=True), methods=["POST"]),
        Route(prefix + "/{slug}/knowledge", api(regenerate, changes=True), methods=["POST"]),
    ]
