"""The app's Starlette application: each area contributes its routes and nothing else.

auth     onboarding (set the PIN), login, logout, "New session", the session API
pages    admin shell, Data and Graph pages, their JSON APIs, static assets
knowledge uploads into memory, forget and restore, a document's versions and its file
chat     /api/public/{slug}/messages: a visitor's conversation with an agent (SSE)
public   public agent pages (/{slug}, / on public hostnames, /bot)
sites    /sites/* static publish tree
sessions /api/admin/sessions/*, /api/admin/claude*: the session manager, relayed
settings /admin/settings: Claude connection, API key, Telegram (channels_admin), WhatsApp
         (whatsapp_admin), PIN, remote
         password, other devices
plugins_admin /admin/plugins: the installed plugins, the optional ones turned on and off
artefacts /admin/artefacts: knowledge documents and agents' templates, opened and edited
data_admin /api/admin/memory/*: the Data page's notes, edits, scope changes and deletes
projects /api/admin/projects: the Projects view's list of active projects and their health

While it runs, the app also reviews visitors' ended conversations for leads
(:mod:`appliance.agents.leads`), with the conversations the public chat holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import Scope

from appliance.agents.anthropic_client import AnthropicClient
from appliance.agents.leads import LeadReview
from appliance.agents.visitors import Visitors
from appliance.app import (
    agents_admin,
    artefacts,
    auth,
    backups,
    channels_admin,
    chat,
    data_admin,
    knowledge,
    pages,
    plugins_admin,
    projects,
    public,
    sessions,
    sites,
    updates,
    whatsapp_admin,
)
from appliance.app import settings as settings_page
from appliance.app.context import AppContext
from appliance.core.accounts import validate_account_id
from appliance.core.config import Settings, load_settings
from appliance.core.proc import die_with_server
from appliance.rpc.client import RpcClient
from appliance.web import security
from appliance.web.client import client_of
from appliance.web.errors import error_response

log = logging.getLogger(__name__)

ENGINE_TIMEOUT = 10.0


def page_policy(scope: Scope) -> str:
    """The Content-Security-Policy of a response (see :mod:`appliance.web.security`)."""
    path = scope["path"]
    if path == "/sites" or path.startswith("/sites/"):
        return security.SITES
    role = client_of(HTTPConnection(scope)).host_role
    if path == "/onboarding" or auth.is_admin_path(path, role):
        return security.ADMIN
    return security.STRICT


def create_app(settings: Settings | None = None) -> Starlette:
    """Build the app (Granian calls this as a factory)."""
    die_with_server()
    settings = settings or load_settings()
    account = validate_account_id(settings.accounts_dir, settings.account_id)
    account.product_name()  # every page shows it: a missing one stops the app at start
    ctx = AppContext(
        settings=settings,
        account=account,
        engine=RpcClient(settings.engine_socket, timeout=ENGINE_TIMEOUT),
    )
    visitors = Visitors(ctx.engine, account.id)
    review = LeadReview(settings, ctx.engine, account.id, AnthropicClient(settings), visitors)
    # Order matters: specific prefixes first, the public catch-all (/{slug}) last.
    routes: list[BaseRoute] = [
        *auth.routes(ctx),
        *sites.routes(ctx),
        *sessions.routes(ctx),
        *updates.routes(ctx),
        *backups.routes(ctx),
        *settings_page.routes(ctx),
        *channels_admin.routes(ctx),
        *whatsapp_admin.routes(ctx),
        *agents_admin.routes(ctx),
        *plugins_admin.routes(ctx),
        *artefacts.routes(ctx),
        *data_admin.routes(ctx),
        *knowledge.routes(ctx),
        *projects.routes(ctx),
        *pages.routes(ctx),
        *chat.routes(ctx, visitors),
        *public.routes(ctx),
    ]

    async def no_route(request: Request, exc: Exception) -> Response:
        """No route for this path (404) or method (405): a JSON error, or the 404 page."""
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404 and not request.url.path.startswith("/api/"):
            return public.not_found(ctx, request)
        if exc.status_code == 405:
            message = f"{request.url.path} does not take {request.method}."
            return error_response(405, "method-not-allowed", message, headers=exc.headers)
        return error_response(404, "not-found", "Nothing is served at this address.")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        loop = asyncio.create_task(review.run(stop), name="lead-review")
        try:
            yield
        finally:
            stop.set()
            await loop
            await review.client.aclose()

    headers = Middleware(security.SecurityHeaders, choose=page_policy)
    return Starlette(
        routes=routes,
        middleware=[headers, *auth.middleware(ctx)],
        exception_handlers={404: no_route, 405: no_route},
        lifespan=lifespan,
    )
