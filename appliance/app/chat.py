"""The public chat API: a visitor talks to an agent on its page ``/{slug}``.

    POST /api/public/{slug}/messages   {"text"} → an SSE stream of the reply:
         event: delta    {"text"}        a piece of the reply, in order
         event: refusal  {"text"}        the gateway discarded the message; the agent never ran
         event: error    {"message"}     nothing (more) can be said now; a friendly sentence
         event: done     {"persisted"}   the reply is complete
    GET  /api/public/{slug}/messages   {"messages": [{"role", "text"}], "persisted"}

A visitor is known by the signed cookie ``maxy_visitor`` (a random id and its HMAC under the
cookie key, domain-separated from login cookies), set on the first request. Each message is
screened by the inbound gateway (public channel); unless it is discarded, what memory holds for
it is fetched as the agent (:mod:`appliance.agents.recall`: query classifier, guarded search), and
the agent answers with that in its prompt — through the Messages API when an API key is stored
(:mod:`appliance.agents.public_agent`, toolless), else, when Claude is connected, as a public
Claude Code session with only the public tools (:mod:`appliance.agents.claude_code`); the
conversation is kept by :mod:`appliance.agents.visitors` (in the graph from the visitor's second
message).

Refusals, before any stream: 404 unknown agent, 415 not JSON, 403 cross-site Origin, 400 empty
or malformed, 413 a message over :data:`MAX_MESSAGE_CHARS` characters, 429 too many messages
from one address (:data:`RATE_LIMIT` per :data:`RATE_WINDOW_S`; local processes exempt).
One log line per message: ``[public-chat] op=message agent=… outcome=… chars=…``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from appliance.agents.anthropic_client import AnthropicClient
from appliance.agents.claude_code import SessionAgent, visitor_path
from appliance.agents.errors import AgentConfigError, AnthropicError
from appliance.agents.gateway import REFUSAL, Gateway
from appliance.agents.public_agent import PublicAgent
from appliance.agents.recall import recall
from appliance.agents.store import subscriptions_of
from appliance.agents.visitors import Conversation, Visitors
from appliance.app import public
from appliance.app.context import AppContext
from appliance.app.public import MAX_MESSAGE_CHARS
from appliance.core.identity import Caller
from appliance.web import csrf, signing
from appliance.web.bodies import json_body
from appliance.web.client import client_of
from appliance.web.cookies import load_key
from appliance.web.errors import ApiError
from appliance.web.sse import frame
from appliance.web.throttle import WindowLimiter

log = logging.getLogger(__name__)

VISITOR_COOKIE = "maxy_visitor"
VISITOR_LIFETIME_S = 30 * 24 * 3600
MAX_BODY_BYTES = 16 * 1024
RATE_LIMIT = 20  # messages per address …
RATE_WINDOW_S = 60.0  # … in this many seconds
MAX_TRACKED_ADDRESSES = 10_000
UNAVAILABLE = "Sorry — I can't answer right now. Please try again in a little while."
_MAC_DOMAIN = b"maxy-visitor-v1\x00"


def _mac(key: bytes, visitor: str) -> str:
    return signing.b64(signing.mac(key, _MAC_DOMAIN, visitor.encode()))


def sign_visitor(key: bytes, visitor: str) -> str:
    """The cookie value naming ``visitor``."""
    return f"{visitor}.{_mac(key, visitor)}"


def verify_visitor(key: bytes, value: str | None) -> str | None:
    """The visitor id a cookie value carries, or None when it is absent or not ours."""
    if not value or len(value) > 200 or value.count(".") != 1:
        return None
    visitor, mac = value.split(".")
    if not visitor.replace("-", "").replace("_", "").isalnum():
        return None
    return visitor if signing.same(mac, _mac(key, visitor)) else None


async def _message_text(request: Request) -> str:
    too_long = ApiError(
        413, "message-too-long", f"Messages are limited to {MAX_MESSAGE_CHARS:,} characters."
    )
    data = await json_body(
        request, limit=MAX_BODY_BYTES, what='the message ({"text": "…"})', too_large=too_long
    )
    text = data.get("text") if isinstance(data, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise ApiError(400, "empty-message", "Type a message first.")
    text = text.strip()
    if len(text) > MAX_MESSAGE_CHARS:
        raise ApiError(
            413,
            "message-too-long",
            f"Messages are limited to {MAX_MESSAGE_CHARS:,} characters "
            f"(this one has {len(text):,}). Shorten it and send it again.",
        )
    return text


def routes(ctx: AppContext, visitors: Visitors | None = None) -> list[BaseRoute]:
    """The public chat API (before the ``/{slug}`` catch-all); ``visitors`` holds the
    conversations (shared with the lead review, :mod:`appliance.agents.leads`)."""
    settings = ctx.settings
    client = AnthropicClient(settings)
    gateway = Gateway(client, settings.gateway_model, settings.gateway_timeout)
    visitors = visitors or Visitors(ctx.engine, ctx.account.id)
    limiter = WindowLimiter(RATE_LIMIT, RATE_WINDOW_S, MAX_TRACKED_ADDRESSES)
    key = load_key(settings.cookie_key_path)

    def agent_of(request: Request) -> PublicAgent:
        slug = request.path_params["slug"]
        if public.load_agent(ctx, slug) is None:
            raise ApiError(404, "no-such-agent", f"There is no agent called {slug!r} here.")
        folder = public.agents_dir(ctx) / slug
        if visitor_path(settings) == "claude":
            return SessionAgent(
                client, settings.agent_model, folder, ctx.account, settings.manager_socket
            )
        return PublicAgent(client, settings.agent_model, folder, ctx.account)

    def visitor_of(request: Request) -> tuple[str, bool]:
        known = verify_visitor(key, request.cookies.get(VISITOR_COOKIE))
        return (known, False) if known else (secrets.token_urlsafe(18), True)

    def remember(response: Response, visitor: str, new: bool) -> None:
        if new:
            response.set_cookie(
                VISITOR_COOKIE,
                sign_visitor(key, visitor),
                max_age=VISITOR_LIFETIME_S,
                httponly=True,
                samesite="lax",
                path="/",
            )

    async def transcript(request: Request) -> Response:
        agent = agent_of(request)
        visitor, new = visitor_of(request)
        messages: list[dict[str, str]] = []
        persisted = False
        if not new:
            conversation = await visitors.open(visitor, agent.slug)
            messages = [{"role": t.role, "text": t.text} for t in conversation.turns]
            persisted = bool(conversation.turns) and conversation.persisted == len(
                conversation.turns
            )
        response = JSONResponse({"messages": messages, "persisted": persisted})
        response.headers["cache-control"] = "no-store"
        remember(response, visitor, new)
        return response

    async def post_message(request: Request) -> Response:
        agent = agent_of(request)
        if not csrf.origin_matches_host(request.headers, required=False):
            raise ApiError(403, "cross-site", "Messages can only be sent from this site's pages.")
        who = client_of(request)
        if not who.local:
            wait = limiter.retry_after(who.ip)
            if wait:
                log.info("[public-chat] op=rate-limited ip=%s retry_after_s=%d", who.ip, wait)
                raise ApiError(
                    429,
                    "rate-limited",
                    f"Too many messages. Please wait {wait} seconds and try again.",
                    headers={"Retry-After": str(wait)},
                )
        text = await _message_text(request)
        visitor, new = visitor_of(request)
        response = StreamingResponse(
            _converse(agent, visitor, text),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )
        remember(response, visitor, new)
        return response

    async def _converse(agent: PublicAgent, visitor: str, text: str) -> AsyncIterator[bytes]:
        conversation: Conversation = await visitors.open(visitor, agent.slug)
        async with conversation.lock:
            screening = await gateway.screen(text, "public")
            if screening.refuse("public"):
                _log(agent, "refused", text)
                yield frame("refusal", {"text": REFUSAL})
                yield frame("done", {"persisted": False})
                return
            caller = Caller(
                ctx.account.id,
                ("public",),
                agent.slug,
                conversation.session_id,
                subscriptions_of(agent.folder),
            )
            found = await recall(client, settings, ctx.engine, caller, text, conversation.turns)
            pieces: list[str] = []
            try:
                async for delta in agent.reply(
                    list(conversation.turns), text, screening, found.block
                ):
                    pieces.append(delta)
                    yield frame("delta", {"text": delta})
            except AgentConfigError as err:
                log.error("[public-chat] op=reply error=agent-config agent=%s: %s", agent.slug, err)
                yield frame("error", {"message": UNAVAILABLE})
                return
            except AnthropicError as err:
                _log(agent, f"degraded-{err.reason}", text)
                yield frame("error", {"message": UNAVAILABLE})
                return
            reply = "".join(pieces)
            if not reply.strip():
                _log(agent, "empty-reply", text)
                yield frame("error", {"message": UNAVAILABLE})
                return
            persisted = await visitors.add_exchange(conversation, text, reply)
            _log(agent, "answered", text)
            yield frame("done", {"persisted": persisted})

    def _log(agent: PublicAgent, outcome: str, text: str) -> None:
        log.info(
            "[public-chat] op=message agent=%s outcome=%s chars=%d", agent.slug, outcome, len(text)
        )

    return [
        Route("/api/public/{slug}/messages", transcript, methods=["GET"]),
        Route("/api/public/{slug}/messages", post_message, methods=["POST"]),
    ]
