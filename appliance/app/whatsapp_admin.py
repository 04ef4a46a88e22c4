"""The WhatsApp card of the Settings page: link the owner's number, who the owner is, the rest.

Routes (admin only; the auth middleware checks the login and the CSRF header)::

    POST   /api/admin/settings/whatsapp-link   link the device: ``maxy channels`` connects and
                                               the card shows the QR code to scan (refreshed)
    DELETE /api/admin/settings/whatsapp-link   unlink: ``maxy channels`` logs the device out and
                                               forgets the session (or stops showing codes)
    POST   /api/admin/settings/whatsapp        {"ownerIds"?, "strangers"?, "groups"?, "agent"?}:
                                               the channel's settings (numbers: digits only,
                                               "+49 170 123…" is taken as 49170123…)
    GET    /api/admin/settings/whatsapp        the card's state (the page polls it while pairing)

The QR code is drawn here, server-side, as inline SVG (segno; no script from elsewhere). It is
pairing data: it is in this card and its 0600 file only — never in a log line, never in a chat.
Internal errors show here (the status file's ``lastError``) and in the log, never in a chat.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import segno
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from appliance.app.context import AppContext
from appliance.app.pages import json_api
from appliance.channels import config as channel_config
from appliance.channels import status as channel_status
from appliance.channels.whatsapp import linking
from appliance.core.identity import Caller
from appliance.rpc.protocol import RpcError
from appliance.web.bodies import json_object
from appliance.web.errors import ApiError

log = logging.getLogger(__name__)

CHANNEL = "whatsapp"
MAX_BODY_BYTES = 16 * 1024
CHATS = 30
_NUMBER_MARKS = re.compile(r"[\s()+.\-]")


def number(raw: Any) -> str:
    """A phone number as the allow-list keeps it (digits); :class:`ApiError` otherwise."""
    text = _NUMBER_MARKS.sub("", str(raw)) if isinstance(raw, str | int) else ""
    if not (text.isdigit() and 6 <= len(text) <= 15):
        raise ApiError(
            400,
            "bad-settings",
            f"{raw!r} is not a phone number: give it with its country code, e.g. +49 170 1234567.",
        )
    return text


def qr_svg(code: str | None) -> str | None:
    """The code to scan, drawn as inline SVG."""
    if not code:
        return None
    return str(segno.make(code, error="l").svg_inline(scale=4, border=2, dark="#111", light="#fff"))


async def state(ctx: AppContext) -> dict[str, Any]:
    """What the WhatsApp card shows."""
    folder = ctx.settings.channels_dir
    config = channel_config.load(folder, CHANNEL, "silent")
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
        log.warning("[settings] op=whatsapp-chats warn=engine error=%s", err)
    running = channel_status.read(folder, CHANNEL)
    pairing = running.get("state") == "pairing"
    return {
        "linked": linking.has_session(folder),
        "linkRequested": linking.link_requested(folder),
        "state": running.get("state"),
        "device": running.get("bot"),
        "lastError": running.get("lastError"),
        "qrSvg": qr_svg(linking.qr(folder)) if pairing else None,
        "ownerIds": list(config.owner_ids),
        "strangers": config.strangers,
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
                "lastText": (chat.get("lastText") or "")[:80],
                "owner": config.is_owner(str(chat.get("senderId") or chat["chatId"])),
            }
            for chat in chats
            if chat.get("chatType") == "private"
        ],
    }


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The WhatsApp card's JSON routes."""
    folder = ctx.settings.channels_dir

    async def show(request: Request) -> dict[str, Any]:
        return await state(ctx)

    async def link(request: Request) -> dict[str, Any]:
        await run_in_threadpool(linking.request_link, folder)
        log.info("[settings] op=whatsapp-link")
        return await state(ctx)

    async def unlink(request: Request) -> dict[str, Any]:
        await run_in_threadpool(linking.request_unlink, folder)
        log.info("[settings] op=whatsapp-unlink")
        return await state(ctx)

    async def save_settings(request: Request) -> dict[str, Any]:
        data = await json_object(request, limit=MAX_BODY_BYTES, what="the WhatsApp settings")
        unknown = sorted(set(data) - {"ownerIds", "strangers", "groups", "agent"})
        if unknown:
            raise ApiError(400, "bad-settings", f"Unknown settings: {', '.join(unknown)}.")
        if "ownerIds" in data:
            owners = data["ownerIds"]
            if not isinstance(owners, list):
                raise ApiError(400, "bad-settings", "ownerIds must be a list of phone numbers.")
            data["ownerIds"] = [number(owner) for owner in owners]
        current = channel_config.load(folder, CHANNEL, "silent")
        try:
            changed = channel_config.changed(current, **data)
        except channel_config.ConfigError as err:
            raise ApiError(400, "bad-settings", str(err)) from err
        await run_in_threadpool(channel_config.save, folder, CHANNEL, changed)
        return await state(ctx)

    return [
        Route("/api/admin/settings/whatsapp", json_api(show), methods=["GET"]),
        Route("/api/admin/settings/whatsapp", json_api(save_settings), methods=["POST"]),
        Route("/api/admin/settings/whatsapp-link", json_api(link), methods=["POST"]),
        Route("/api/admin/settings/whatsapp-link", json_api(unlink), methods=["DELETE"]),
    ]
