"""Public agent pages: ``/{slug}``, ``/`` on public host names, and the ``/bot`` landing page
(the web agents, and the Telegram bot's link with its QR code, drawn here as SVG, no CDN).

An agent lives in ``<accounts_dir>/<account>/agents/<slug>/`` (:mod:`appliance.agents.store`);
its ``config.json`` may name it (``displayName``) and describe it (``description``). A slug is
1-40 of ``[a-z0-9-]`` and never one of the reserved first path segments. A page shows the agent,
its conversation with this visitor and a message box; the conversation itself runs through
:mod:`appliance.app.chat`. The owner manages agents from :mod:`appliance.app.agents_admin`.

``/`` is shared: on an admin host it is the admin shell (:func:`appliance.app.pages.shell_page`),
on a public host the account's default agent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import segno
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from appliance.agents.store import is_slug, read_config
from appliance.app import pages
from appliance.app.context import AppContext
from appliance.channels import status as channel_status
from appliance.web.client import client_of

log = logging.getLogger(__name__)

MAX_TEXT = 200
#: The longest message a visitor may send (the chat API answers 413 beyond it).
MAX_MESSAGE_CHARS = 2000


@dataclass(frozen=True)
class Agent:
    """What a public page shows of an agent."""

    slug: str
    display_name: str
    description: str = ""


def agents_dir(ctx: AppContext) -> Path:
    """The account's agents folder."""
    return ctx.settings.accounts_dir / ctx.account.id / "agents"


def load_agent(ctx: AppContext, slug: str, *, must_exist: bool = True) -> Agent | None:
    """The agent named ``slug``, or None when there is no such agent."""
    if not is_slug(slug):
        return None
    folder = agents_dir(ctx) / slug
    if folder.is_symlink() or not folder.is_dir():
        return None if must_exist else Agent(slug, slug)
    config = read_config(folder)
    name = config.get("displayName")
    description = config.get("description")
    return Agent(
        slug=slug,
        display_name=str(name).strip()[:MAX_TEXT] if name and str(name).strip() else slug,
        description=str(description).strip()[:MAX_TEXT] if description else "",
    )


def list_agents(ctx: AppContext) -> list[Agent]:
    """Every agent of the account, the default first, then by name."""
    folder = agents_dir(ctx)
    found = []
    if folder.is_dir():
        for child in sorted(folder.iterdir()):
            agent = load_agent(ctx, child.name) if child.is_dir() else None
            if agent is not None:
                found.append(agent)
    default = ctx.account.default_agent
    return sorted(found, key=lambda a: (a.slug != default, a.display_name.lower()))


def not_found(ctx: AppContext, request: Request) -> Response:
    """The public 404 page."""
    return pages.render(
        ctx,
        request,
        "not_found.html",
        "Not found",
        admin=False,
        status_code=404,
        path=request.url.path,
    )


def agent_response(ctx: AppContext, request: Request, agent: Agent) -> Response:
    """An agent's public page."""
    log.info("[public] op=page agent=%s", agent.slug)
    return pages.render(
        ctx,
        request,
        "agent.html",
        agent.display_name,
        admin=False,
        agent=agent,
        max_chars=MAX_MESSAGE_CHARS,
    )


def telegram_bot(ctx: AppContext) -> dict[str, str] | None:
    """The Telegram bot visitors can write to, with its link's QR code (SVG), if one runs."""
    running = channel_status.read(ctx.settings.channels_dir, "telegram")
    bot = running.get("bot")
    if running.get("state") != "polling" or not isinstance(bot, dict) or not bot.get("username"):
        return None
    link = f"https://t.me/{bot['username']}"
    qr = segno.make(link, error="m").svg_inline(scale=5, border=2, dark="#111", light="#fff")
    return {"username": str(bot["username"]), "link": link, "qr": qr}


def routes(ctx: AppContext) -> list[BaseRoute]:
    """``/``, ``/bot`` and the ``/{slug}`` catch-all (keep these last)."""
    shell = pages.shell_page(ctx)

    async def home(request: Request) -> Response:
        if client_of(request).host_role == "admin":
            return await shell(request)
        # The account's default agent is its public face, even before it has a folder.
        agent = load_agent(ctx, ctx.account.default_agent, must_exist=False)
        return agent_response(ctx, request, agent) if agent else not_found(ctx, request)

    async def bot(request: Request) -> Response:
        return pages.render(
            ctx,
            request,
            "bot.html",
            "Talk to us",
            admin=False,
            agents=list_agents(ctx),
            telegram=telegram_bot(ctx),
        )

    async def agent_page(request: Request) -> Response:
        agent = load_agent(ctx, request.path_params["slug"])
        return agent_response(ctx, request, agent) if agent else not_found(ctx, request)

    return [
        Route("/", home),
        Route("/bot", bot),
        Route("/{slug}", agent_page),
    ]
