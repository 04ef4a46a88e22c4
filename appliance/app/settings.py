"""The Settings page: the Claude connection, the Anthropic API key, Telegram, the PIN, the remote
password, signing out other devices, and how to reset a forgotten PIN.

Routes (admin only; the auth middleware checks the login and the CSRF header)::

    GET    /admin/settings                     the page
    GET    /api/admin/settings                 {"pinSet", "remotePasswordSet", "lan", "claude":
                                                {"connected"}, "apiKey": {"set", "hint"},
                                                "visitors": {"path", "message"},
                                                "telegram": (appliance.app.channels_admin)}
                                                (the page also: "whatsapp",
                                                appliance.app.whatsapp_admin)
    POST   /api/admin/settings/anthropic-key   {"key"}: checked with one API call, then stored
    DELETE /api/admin/settings/anthropic-key   forget the key

Telegram's routes are :mod:`appliance.app.channels_admin`'s, WhatsApp's
:mod:`appliance.app.whatsapp_admin`'s; the PIN and the remote password
have theirs in :mod:`appliance.app.auth`; Connect and
Disconnect Claude are the session manager's (relayed by :mod:`appliance.app.sessions`).

The API key is what the gateway, the query classifier and the public agents use
(``settings.anthropic_api_key_path``, 0600). Before it is stored it is checked with the cheapest
call the API has (``GET /v1/models``, one model): a key the API refuses is answered 400
``invalid-api-key``, an API that cannot be reached 502 ``api-key-unchecked``, and in both cases
nothing is stored. Only its last four characters are ever shown; it is never logged.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from appliance.agents.anthropic_client import check_key, read_api_key
from appliance.agents.claude_code import VISITOR_PATHS, claude_connected, visitor_path
from appliance.agents.errors import AnthropicError, AnthropicStatus
from appliance.app import channels_admin, whatsapp_admin
from appliance.app.auth import session_of
from appliance.app.context import AppContext
from appliance.app.pages import SECTIONS, json_api, render
from appliance.core.fsio import write_secret
from appliance.web.bodies import json_object
from appliance.web.credentials import Credentials
from appliance.web.errors import ApiError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4096
KEY_CHARS = (20, 300)


def key_hint(key: str | None) -> str | None:
    """What the page shows of a stored key: its last four characters."""
    return f"…{key[-4:]}" if key else None


def valid_key(key: str) -> str:
    """The key as typed, trimmed; a 400 naming the problem when it cannot be a key."""
    key = key.strip()
    low, high = KEY_CHARS
    if not key:
        raise ApiError(400, "invalid-api-key", "Paste your Anthropic API key first.")
    if not key.isascii() or any(c.isspace() or not c.isprintable() for c in key):
        raise ApiError(
            400,
            "invalid-api-key",
            "That is not an API key: it holds spaces or other characters keys never have. "
            "Copy it again from the Anthropic console (it starts with sk-ant-).",
        )
    if not low <= len(key) <= high:
        raise ApiError(
            400,
            "invalid-api-key",
            f"That is not an API key: keys are {low} to {high} characters long. Copy the whole "
            "key from the Anthropic console.",
        )
    return key


def refused(err: AnthropicError) -> ApiError:
    """The answer for a key the API did not accept, or could not be asked about."""
    if isinstance(err, AnthropicStatus) and err.status in (401, 403):
        return ApiError(
            400,
            "invalid-api-key",
            f"Anthropic refused this key (HTTP {err.status}): it is wrong, revoked or lacks "
            "access. Check it in the Anthropic console and paste it again. Nothing was saved.",
        )
    return ApiError(
        502,
        "api-key-unchecked",
        f"The key could not be checked: {err} Nothing was saved. Check the device's internet "
        "connection and try again.",
    )


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The Settings page and its JSON."""
    settings = ctx.settings
    credentials = Credentials(settings.keys_dir)
    key_path = settings.anthropic_api_key_path

    def status(request: Request) -> dict[str, Any]:
        session = session_of(request)
        key = read_api_key(settings)
        path = visitor_path(settings)
        return {
            "pinSet": credentials.has_pin(),
            "remotePasswordSet": credentials.has_remote_password(),
            "lan": session is not None and session.network == "lan",
            "claude": {"connected": claude_connected(settings)},
            "apiKey": {"set": key is not None, "hint": key_hint(key)},
            "visitors": {"path": path, "message": VISITOR_PATHS[path]},
        }

    async def page(request: Request) -> Response:
        telegram = await channels_admin.state(ctx)
        whatsapp = await whatsapp_admin.state(ctx)
        return render(
            ctx,
            request,
            "settings.html",
            "Settings",
            admin=True,
            section="settings",
            sections=SECTIONS,
            state={**status(request), "telegram": telegram, "whatsapp": whatsapp},
        )

    async def show(request: Request) -> dict[str, Any]:
        return {**status(request), "telegram": await channels_admin.state(ctx)}

    async def save_key(request: Request) -> dict[str, Any]:
        data = await json_object(request, limit=MAX_BODY_BYTES, what="the key")
        raw = data.get("key")
        key = valid_key(raw if isinstance(raw, str) else "")
        try:
            await check_key(settings, key)
        except AnthropicError as err:
            log.info("[settings] op=api-key-check outcome=refused reason=%s", err.reason)
            raise refused(err) from err
        await run_in_threadpool(write_secret, key_path, (key + "\n").encode())
        log.info("[settings] op=api-key-set path=%s", key_path)
        return status(request)

    async def forget_key(request: Request) -> dict[str, Any]:
        try:
            await run_in_threadpool(os.unlink, key_path)
            log.info("[settings] op=api-key-removed path=%s", key_path)
        except FileNotFoundError:
            pass
        return status(request)

    return [
        Route("/admin/settings", page, methods=["GET"]),
        Route("/api/admin/settings", json_api(show), methods=["GET"]),
        Route("/api/admin/settings/anthropic-key", json_api(save_key), methods=["POST"]),
        Route("/api/admin/settings/anthropic-key", json_api(forget_key), methods=["DELETE"]),
    ]
