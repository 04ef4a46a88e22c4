"""The admin shell, the Data and Graph pages, their JSON APIs, and the static assets.

Pages (authentication is the auth middleware's job; these only render):

    /                  admin shell (on the admin host role; see :mod:`appliance.app.public`)
    /admin/<section>   sessions, projects: the shell (agents: :mod:`.agents_admin`; artefacts:
                       :mod:`.artefacts`)
    /admin/people      the Graph page filtered to Person, /admin/tasks to Task
    /admin/data        search the memory graph, with each result's score breakdown
    /admin/graph       draw a guarded sample of the memory graph (?labels=Person,Note preselects)

JSON (every call goes to the engine as the account's admin caller)::

    GET /api/admin/search?q=&types=&limit=&internal=   hybrid search, one breakdown line per
                                                        result, each titled for a person
    GET /api/admin/graph?labels=&q=&limit=&internal=   nodes and edges (limit 1..2000); q
                                                        narrows to what search finds
    GET /api/admin/graph/node/{id}?label=      one node and its one-hop neighbourhood
    GET /api/admin/health                      the engine's health

Internal records (tool calls, the audit trail's Tasks: :func:`appliance.memory.explore.
is_internal`) are left out of search and the graph unless ``internal=1``; search says how many
it left out. Titles come from :func:`appliance.memory.explore.display_title` (a chunk is
"Document \u203a Section", never an id).

Errors are JSON ``{code, message}``: 400 for bad parameters, 404 for a node not visible,
503 ``engine-unavailable`` when the engine does not answer.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import Scope

from appliance.agents.claude_code import VISITOR_PATHS, claude_connected, visitor_path
from appliance.app.auth import csrf_of
from appliance.app.context import AppContext
from appliance.core.identity import Caller
from appliance.memory.explore import TEXT_KEYS, display_title, is_internal
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RemoteError, RpcError
from appliance.tunnel.state import tunnel_health
from appliance.web.errors import ApiError, engine_error

log = logging.getLogger(__name__)

APP_DIR = Path(__file__).resolve().parent
STATIC_DIR = APP_DIR / "static"
VENDOR_STAMP = STATIC_DIR / "vendor" / ".vendor-stamp"
templates = Jinja2Templates(directory=APP_DIR / "templates")

# Vendored files are pinned and their URLs carry the vendoring stamp: cache them for a year.
VENDOR_CACHE = "public, max-age=31536000, immutable"
OWN_CACHE = "no-cache"  # our own CSS/JS: revalidate (ETag) so an update shows at once

#: Sidebar sections that are the Graph page filtered to one label.
GRAPH_SECTIONS: dict[str, str] = {"people": "Person", "tasks": "Task"}
SECTIONS: dict[str, tuple[str, str]] = {
    "sessions": ("Sessions", "No sessions yet. Start one with New session."),
    "people": ("People", "No people yet. People your agent meets will appear here."),
    "agents": ("Agents", "No agents yet. Public agents you create will appear here."),
    "projects": ("Projects", "No projects yet."),
    "tasks": ("Tasks", "No tasks yet. Work your agent does on your behalf will appear here."),
    "artefacts": ("Artefacts", "No artefacts yet. Files and reports your agent makes land here."),
}
#: The Mode menu: what each of the CLI's permission modes does, in the owner's words.
MODES: dict[str, tuple[str, str]] = {
    "bypassPermissions": ("Full access", "Changes files and runs commands without asking"),
    "acceptEdits": (
        "Accept edits",
        "Edits files without asking; asks (in the Terminal tab) before running commands",
    ),
    "manual": ("Ask first", "Asks (in the Terminal tab) before it changes anything"),
    "plan": ("Plan", "Thinks and proposes, changes nothing"),
    "auto": ("Auto", "Decides for itself which actions need asking"),
    "dontAsk": ("Allowed tools only", "Never asks; refuses whatever is not allowed"),
}
MENU_MODES = ("bypassPermissions", "acceptEdits", "manual", "plan")
MAX_QUERY_CHARS = 500
MAX_SEARCH = 100
DEFAULT_SEARCH = 20
MAX_GRAPH = 2000
DEFAULT_GRAPH = 200
LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class Static(StaticFiles):
    """Path-safe static files: a long cache for vendored libraries, revalidation for ours."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        """Serve one file with the cache policy of its folder."""
        response = super().file_response(full_path, stat_result, scope, status_code)
        vendored = Path(full_path).is_relative_to(STATIC_DIR / "vendor")
        response.headers["cache-control"] = VENDOR_CACHE if vendored else OWN_CACHE
        return response


def vendor_version() -> str:
    """The vendoring stamp (cache-busts vendor URLs); empty when nothing is vendored."""
    try:
        return VENDOR_STAMP.read_text().strip()[:12]
    except OSError:
        return ""


def brand_of(ctx: AppContext) -> str:
    """The product name pages show: the account's brand (checked when the app starts)."""
    return ctx.account.product_name()


def mode_menu(default: str) -> list[dict[str, Any]]:
    """The Mode menu's items: the device's default mode (MAXY_CLAUDE_PERMISSION_MODE) first."""
    order = [default, *(mode for mode in MENU_MODES if mode != default)]
    return [
        {
            "mode": mode,
            "label": MODES[mode][0],
            "description": MODES[mode][1],
            "default": mode == default,
        }
        for mode in order
    ]


def device_state(ctx: AppContext) -> dict[str, Any]:
    """What the sidebar tells the owner about this device: Claude, and who answers visitors."""
    path = visitor_path(ctx.settings)
    return {
        "claude_connected": claude_connected(ctx.settings),
        "visitors": {"path": path, "message": VISITOR_PATHS[path]},
        "modes": mode_menu(ctx.settings.claude_permission_mode),
    }


def render(
    ctx: AppContext,
    request: Request,
    template: str,
    page: str,
    *,
    admin: bool,
    status_code: int = 200,
    **extra: Any,
) -> Response:
    """Render a page with the context every template shares (title, brand, CSRF, vendor)."""
    context = {
        "page": page,
        "brand": brand_of(ctx),
        "admin": admin,
        "csrf": csrf_of(request) if admin else None,
        "vendor": vendor_version(),
        **(device_state(ctx) if admin else {}),
        **extra,
    }
    response = templates.TemplateResponse(request, template, context, status_code=status_code)
    if admin:
        response.headers["cache-control"] = "no-store"  # carries the session's CSRF token
    return response


def admin_caller(ctx: AppContext) -> dict[str, Any]:
    """The engine caller of the admin pages: this account, every scope."""
    return Caller(account_id=ctx.account.id).to_wire()


async def call_engine(
    ctx: AppContext, method: str, params: Mapping[str, Any], client: RpcClient | None = None
) -> Any:
    """Call the engine as the admin (through ``client``, e.g. one with a longer timeout for an
    ingest); translate failures into :class:`ApiError` once, here."""
    try:
        engine = client or ctx.engine
        return await engine.call(method, {**params, "caller": admin_caller(ctx)})
    except RpcError as err:
        code = err.code if isinstance(err, RemoteError) else type(err).__name__
        log.warning("[pages] op=engine-call method=%s error=%s detail=%s", method, code, err)
        raise engine_error(err) from err


def json_api(
    handler: Callable[[Request], Awaitable[Any]],
) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a JSON handler: its result becomes 200 JSON (a ``(status, body)`` pair that status),
    an ApiError its status and message."""

    async def endpoint(request: Request) -> Response:
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


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    """A whole-number query parameter within [low, high], else a 400."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ApiError(400, "bad-request", f"{name} must be a whole number from {low} to {high}.")
    return value


def labels_param(request: Request, name: str) -> list[str] | None:
    """A comma-separated list of node labels (absent or empty: every label), else a 400."""
    raw = request.query_params.get(name, "")
    labels = [part.strip() for part in raw.split(",") if part.strip()]
    for label in labels:
        if not LABEL.match(label):
            raise ApiError(400, "bad-request", f"{name}: {label!r} is not a node label.")
    return labels or None


def text_param(request: Request, name: str, *, required: bool) -> str:
    """A free-text parameter, trimmed and at most MAX_QUERY_CHARS long."""
    text = request.query_params.get(name, "").strip()
    if required and not text:
        raise ApiError(400, "bad-request", f"Type something to search for ({name} is empty).")
    if len(text) > MAX_QUERY_CHARS:
        raise ApiError(400, "bad-request", f"{name} is longer than {MAX_QUERY_CHARS} characters.")
    return text


def breakdown(trace: Mapping[str, Any]) -> str:
    """One line of a result's scores: ``vector 0.NN · bm25 0.NN · combined 0.NN``."""

    def two(value: Any) -> str:
        return f"{float(value or 0.0):.2f}"

    return (
        f"vector {two(trace.get('vector'))} · bm25 {two(trace.get('keyword'))} · "
        f"combined {two(trace.get('score'))}"
    )


def bool_param(request: Request, name: str) -> bool:
    """A yes/no query parameter: 1/true/yes/on is yes, anything else (or nothing) no."""
    return request.query_params.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def snippet_of(props: Mapping[str, Any], title: str) -> str:
    """A short line of a result's text other than its title."""
    for key in TEXT_KEYS:
        value = props.get(key)
        if isinstance(value, str) and value.strip() and value.strip() != title:
            text = " ".join(value.split())
            return text if len(text) <= 200 else text[:199] + "…"
    return ""


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The admin pages, their JSON APIs and /static."""

    def admin_page(
        request: Request, template: str, page: str, section: str, **extra: Any
    ) -> Response:
        return render(
            ctx, request, template, page, admin=True, section=section, sections=SECTIONS, **extra
        )

    async def section(request: Request) -> Response:
        name = request.url.path.rsplit("/", 1)[-1]
        title, empty = SECTIONS[name]
        if name in GRAPH_SECTIONS:
            return graph_view(request, title, name, [GRAPH_SECTIONS[name]])
        return admin_page(request, "shell.html", title, name, empty=empty)

    async def admin_root(request: Request) -> Response:
        return RedirectResponse("/", status_code=307)

    async def admin_missing(request: Request) -> Response:
        return admin_page(
            request,
            "shell.html",
            "Not found",
            "missing",
            empty="There is no such page.",
            status_code=404,
        )

    async def data_page(request: Request) -> Response:
        return admin_page(request, "data.html", "Data", "data")

    def graph_view(request: Request, title: str, section: str, labels: list[str]) -> Response:
        return admin_page(
            request,
            "graph.html",
            title,
            section,
            max_graph=MAX_GRAPH,
            default_graph=DEFAULT_GRAPH,
            graph_labels=",".join(labels),
            empty=SECTIONS[section][1] if section in SECTIONS else None,
        )

    async def graph_page(request: Request) -> Response:
        try:
            labels = labels_param(request, "labels") or []
        except ApiError:
            labels = []  # the page's own call reports a bad filter
        # The Graph filtered to exactly one section's label is that section.
        for name, label in GRAPH_SECTIONS.items():
            if labels == [label]:
                return graph_view(request, SECTIONS[name][0], name, labels)
        return graph_view(request, "Graph", "graph", labels)

    async def search_api(request: Request) -> dict[str, Any]:
        query = text_param(request, "q", required=True)
        types = labels_param(request, "types")
        limit = int_param(request, "limit", DEFAULT_SEARCH, 1, MAX_SEARCH)
        internal = bool_param(request, "internal")
        found = await call_engine(
            ctx,
            "search",
            # The Data page lists nodes: a document's sections and chunks have rows of their own.
            {
                "query": query,
                "labels": types,
                "limit": limit,
                "expandHops": 0,
                "perDocument": False,
            },
        )
        results: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        hidden = 0
        for hit in found.get("results") or []:
            labels = list(hit.get("labels") or [])
            props = hit.get("props") or {}
            if not internal and is_internal(labels, props):
                hidden += 1
                continue
            title = display_title(props, labels)
            trace = hit.get("trace") or {}
            results.append(
                {
                    "id": hit["id"],
                    "labels": labels,
                    "title": title,
                    "snippet": snippet_of(props, title),
                    "score": hit.get("score"),
                    "breakdown": breakdown(trace),
                    "trace": trace,
                    # The document a section or chunk belongs to (its row offers Versions).
                    "documentId": props.get("documentId")
                    or (hit["id"] if "KnowledgeDocument" in labels else None),
                }
            )
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        return {
            "query": query,
            "results": results,
            "types": [{"label": k, "count": v} for k, v in sorted(counts.items())],
            "hiddenInternal": hidden,
            "keywordOnly": bool(found.get("keywordOnly")),
            "vectorOnly": bool(found.get("vectorOnly")),
            "ms": found.get("ms"),
        }

    async def graph_api(request: Request) -> Any:
        params = {
            "labels": labels_param(request, "labels"),
            "q": text_param(request, "q", required=False) or None,
            "limit": int_param(request, "limit", DEFAULT_GRAPH, 1, MAX_GRAPH),
            "internal": bool_param(request, "internal"),
        }
        return await call_engine(ctx, "graph.sample", params)

    async def node_api(request: Request) -> Any:
        node_id = request.path_params["node_id"]
        label = request.query_params.get("label") or None
        if label is not None and not LABEL.match(label):
            raise ApiError(400, "bad-request", f"label: {label!r} is not a node label.")
        found = await call_engine(ctx, "graph.node", {"id": node_id, "label": label})
        if not found or found.get("node") is None:
            raise ApiError(
                404, "not-found", "No such node, or it was deleted. Search again to refresh."
            )
        return found

    async def health_api(request: Request) -> Any:
        health = await call_engine(ctx, "health", {})
        return {**health, "engine": {"ok": True}}

    async def tunnel_api(request: Request) -> Any:
        return await tunnel_health(ctx.settings.cloudflared_config)

    return [
        Route("/admin", admin_root),
        *(Route(f"/admin/{name}", section) for name in SECTIONS if name != "artefacts"),
        Route("/admin/data", data_page),
        Route("/admin/graph", graph_page),
        Route("/admin/{rest:path}", admin_missing),
        Route("/api/admin/search", json_api(search_api)),
        Route("/api/admin/graph", json_api(graph_api)),
        Route("/api/admin/graph/node/{node_id}", json_api(node_api)),
        Route("/api/admin/health", json_api(health_api)),
        Route("/api/admin/tunnel", json_api(tunnel_api)),
        Mount("/static", app=Static(directory=STATIC_DIR), name="static"),
    ]


def shell_page(ctx: AppContext) -> Callable[[Request], Awaitable[Response]]:
    """The admin shell at ``/`` (the Sessions view)."""

    async def endpoint(request: Request) -> Response:
        title, empty = SECTIONS["sessions"]
        return render(
            ctx,
            request,
            "shell.html",
            title,
            admin=True,
            section="sessions",
            sections=SECTIONS,
            empty=empty,
        )

    return endpoint
