"""The public chat API: a visitor talks to an agent on its page ``/{slug}``.

    POST /api/public/{slug}/messages   {"text"} → an SSE stream of the reply:
         event: delta    {"text"}        a piece of the reply, in order
         event: refusal  {"text"}        the gateway discarded the message; the agent never ran
         event: error    {"message"}     nothing (more) can be said now; a friendly sentence
         event: done     {"persisted"}   the reply is complete
    GET  /api/public/{slug}/messages   {"messages": [{"role", "text"}], "persisted"}

A visitor is known by the signed cookie ``maxy_visitor`` (a random id and its HMAC under the
cookie key, domain-separated from login cookies), set on the first request. Each message is
answered as on every channel (:mod:`appliance.agents.answering`): screened by the inbound gateway
(public channel); unless it is discarded, what memory holds for it is fetched as the agent, and
the agent answers with that in its prompt — through the Messages API when an API key is stored,
else, when Claude is connected, as a public Claude Code session with only the public tools; the
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

from appliance.agents.answering import Answering
from appliance.agents.public_agent import PublicAgent
from appliance.agents.visitors import Visitors
from appliance.app import public
from appliance.app.context import AppContext
from appliance.app.public import MAX_MESSAGE_CHARS
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
    answering = Answering(settings, ctx.account, ctx.engine, visitors)
    visitors = answering.visitors
    limiter = WindowLimiter(RATE_LIMIT, RATE_WINDOW_S, MAX_TRACKED_ADDRESSES)
    key = load_key(settings.cookie_key_path)

    def agent_of(request: Request) -> PublicAgent:
        slug = request.path_params["slug"]
        if public.load_agent(ctx, slug) is None:
            raise ApiError(404, "no-such-agent", f"There is no agent called {slug!r} here.")
        return answering.agent(public.agents_dir(ctx) / slug)

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
        async for said in answering.answer(agent, visitor, text):
            if said.kind == "delta":
                yield frame("delta", {"text": said.text})
                continue
            if said.kind == "refusal":
                yield frame("refusal", {"text": said.text})
                continue
            _log(agent, said.outcome, text)
            if said.kind == "error":
                yield frame("error", {"message": said.text})
            else:
                yield frame("done", {"persisted": said.persisted})

    def _log(agent: PublicAgent, outcome: str, text: str) -> None:
        log.info(
            "[public-chat] op=message agent=%s outcome=%s chars=%d", agent.slug, outcome, len(text)
        )

    return [
        Route("/api/public/{slug}/messages", transcript, methods=["GET"]),
        Route("/api/public/{slug}/messages", post_message, methods=["POST"]),
    ]
