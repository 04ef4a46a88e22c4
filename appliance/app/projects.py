"""The Projects view: the owner's active projects with their health, one in focus in the graph.

    /admin/projects            the view (a section of the admin shell; ``?focus=<id>`` focuses
                               one project's neighbourhood, drawn by the Graph page's code from
                               ``/api/admin/graph/node/{id}``)
    GET /api/admin/projects    {projects: [{id, name, phase, tier, targetDate?, health, reasons,
                               counts, next, …}], total, truncated}, worst health first

Authentication is the auth middleware's; errors are the pages' JSON ``{code, message}`` (503
when the engine does not answer). Listed before :mod:`appliance.app.pages`, whose generic
section page it replaces for Projects.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from appliance.app.context import AppContext
from appliance.app.pages import SECTIONS, call_engine, json_api, render


def routes(ctx: AppContext) -> list[BaseRoute]:
    """``/admin/projects`` and ``/api/admin/projects``."""

    async def page(request: Request) -> Response:
        title, _ = SECTIONS["projects"]
        return render(
            ctx, request, "projects.html", title, admin=True, section="projects", sections=SECTIONS
        )

    async def projects_api(request: Request) -> Any:
        return await call_engine(ctx, "project.list", {})

    return [
        Route("/admin/projects", page),
        Route("/api/admin/projects", json_api(projects_api)),
    ]
