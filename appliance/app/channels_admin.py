"""The Telegram card of the Settings page: the bot's token, who the owner is, the rest.

Routes (admin only; the auth middleware checks the login and the CSRF header)::

    POST   /api/admin/settings/telegram-token   {"token"}: checked with Telegram (getMe), then
                                                stored 0600 — refused (400) or unchecked (502)
                                                and nothing stored otherwise
    DELETE /api/admin/settings/telegram-token   forget the token (the bot stops answering)
    POST   /api/admin/settings/telegram         {"ownerIds"?, "strangers"?, "groups"?,
                                                "agent"?}: the channel's settings

Every answer is the card's state (:func:`state`): whether a token is stored (never the token),
the bot and what ``maxy channels`` is doing (its status file, last error included: internal
errors are shown here and logged, never sent to a chat), the settings, and the chats that have
written to the bot — so the owner can pick themselves ("This is me") without knowing their id.
The allow-list is changed only here: no tool of the agent can widen it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from appliance.app.context import AppContext
from appliance.app.pages import json_api
from appliance.channels import config as channel_config
from appliance.channels import status as channel_status
from appliance.channels.adapter import ChannelError, TokenInvalid
from appliance.channels.telegram.bot import CHANNEL, TelegramBot, valid_token
from appliance.core.fsio import read_secret, write_secret
from appliance.core.identity import Caller
from appliance.rpc.protocol import RpcError
from appliance.web.bodies import json_object
from appliance.web.errors import ApiError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024
CHATS = 30


async def state(ctx: AppContext) -> dict[str, Any]:
    """What the Telegram card shows."""
    settings = ctx.settings
    config = channel_config.load(settings.channels_dir, CHANNEL)
    chats: list[dict[str, Any]] = []
    try:
        answer = await ctx.engine.call(
            "channel.chats",
            {
                "caller": Caller(account_id=ctx.account.id).to_wire(),
                "channel": CHANNEL,
                "limit": CHATS,
            },
        )
        chats = answer["chats"]
    except RpcError as err:
        log.warning("[settings] op=telegram-chats warn=engine error=%s", err)
    running = channel_status.read(settings.channels_dir, CHANNEL)
    return {
        "tokenSet": read_secret(settings.telegram_token_path) is not None,
        "state": running.get("state"),
        "bot": running.get("bot"),
        "lastError": running.get("lastError"),
        "ownerIds": list(config.owner_ids),
        "strangers": config.strangers,
        "agent": config.agent,
        "groups": [
            {
                "chatId": chat["chatId"],
                "title": chat.get("title") or chat["chatId"],
                "mode": config.group_mode(str(chat["chatId"])),
            }
            for chat in chats
            if chat.get("chatType") == "group"
        ],
        "senders": [
            {
                "id": chat.get("senderId") or chat["chatId"],
                "name": chat.get("senderName") or "",
                "handle": chat.get("senderHandle"),
                "lastText": (chat.get("lastText") or "")[:80],
                "lastMessageAt": chat.get("lastMessageAt"),
                "owner": config.is_owner(str(chat.get("senderId") or chat["chatId"])),
            }
            for chat in chats
            if chat.get("chatType") == "private"
        ],
    }


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The Telegram card's JSON routes."""
    settings = ctx.settings

    async def save_token(request: Request) -> dict[str, Any]:
        data = await json_object(request, limit=MAX_BODY_BYTES, what="the token")
        raw = data.get("token")
        try:
            token = valid_token(raw if isinstance(raw, str) else "")
        except TokenInvalid as err:
            raise ApiError(400, "invalid-token", str(err)) from err
        bot = TelegramBot(token, settings.telegram_api_url)
        try:
            info = await bot.start()
        except TokenInvalid as err:
            raise ApiError(400, "invalid-token", f"{err} Nothing was saved.") from err
        except ChannelError as err:
            raise ApiError(
                502, "token-unchecked", f"The token could not be checked: {err} Nothing was saved."
            ) from err
        finally:
            await bot.close()
        await run_in_threadpool(write_secret, settings.telegram_token_path, (token + "\n").encode())
        log.info("[settings] op=telegram-token-set bot=%s username=%s", info.id, info.username)
        return await state(ctx)

    async def forget_token(request: Request) -> dict[str, Any]:
        try:
            await run_in_threadpool(os.unlink, settings.telegram_token_path)
            log.info("[settings] op=telegram-token-removed")
        except FileNotFoundError:
            pass
        return await state(ctx)

    async def save_settings(request: Request) -> dict[str, Any]:
        data = await json_object(request, limit=MAX_BODY_BYTES, what="the Telegram settings")
        known = {"ownerIds", "strangers", "groups", "agent"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ApiError(400, "bad-settings", f"Unknown settings: {', '.join(unknown)}.")
        current = channel_config.load(settings.channels_dir, CHANNEL)
        try:
            changed = channel_config.changed(current, **data)
        except channel_config.ConfigError as err:
            raise ApiError(400, "bad-settings", str(err)) from err
        await run_in_threadpool(channel_config.save, settings.channels_dir, CHANNEL, changed)
        return await state(ctx)

    return [
        Route("/api/admin/settings/telegram-token", json_api(save_token), methods=["POST"]),
        Route("/api/admin/settings/telegram-token", json_api(forget_token), methods=["DELETE"]),
        Route("/api/admin/settings/telegram", json_api(save_settings), methods=["POST"]),
    ]
