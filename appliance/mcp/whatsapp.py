"""The ``whatsapp`` plugin's tools: the owner's agent and their WhatsApp (a linked device).

All three are the owner's alone (:func:`appliance.mcp.owner.account_of` refuses a public
caller; none is offered to a public agent) and run in the ``maxy mcp`` process:

- ``whatsapp-chats``: the chats that have written to the device, newest first (``channel.chats``);
- ``whatsapp-send``: a message to one of those chats — by its JID, the person's or group's name,
  or a contact's name that matches one chat. Only ``maxy channels`` holds the WhatsApp
  connection (one per device), so the message is posted to its outbox (:mod:`appliance.channels
  .whatsapp.linking`); the role looks the chat up again and sends through the same outbound gate
  as every reply (known chats only, no secret, pairing code or internal text), then answers;
- ``whatsapp-import``: a chat export (``_chat.txt``) into the conversation archive — first the
  senders it found, then, told which one is the owner, the sessions (once).

Who counts as the owner (the allow-list) is set on the Settings page only, never by a tool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from appliance.channels.whatsapp import linking
from appliance.channels.whatsapp.export import ExportError
from appliance.channels.whatsapp.importer import import_export, read
from appliance.core.accounts import owner_zone
from appliance.mcp.documents import readable
from appliance.mcp.owner import account_of
from appliance.mcp.telegram import resolve_chat
from appliance.mcp.tool import Tool, ToolContext, ToolError
from appliance.rpc.protocol import RpcError

log = logging.getLogger(__name__)

PLUGIN = "whatsapp"
CHANNEL = "whatsapp"
MAX_SEND = 4000
POLL = 0.2


async def _chats(context: ToolContext, limit: int) -> list[dict[str, Any]]:
    try:
        answer = await context.engine.call(
            "channel.chats",
            {"caller": context.caller.to_wire(), "channel": CHANNEL, "limit": limit},
        )
    except RpcError as err:
        raise ToolError(f"The memory engine did not answer ({err}); try again shortly.") from err
    chats: list[dict[str, Any]] = answer["chats"]
    return chats


async def whatsapp_chats(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """The chats that wrote to the device, most recent first."""
    account_of(context)
    limit = arguments.get("limit", 20)
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ToolError("limit must be a number from 1 to 100.")
    return {"chats": await _chats(context, limit)}


async def whatsapp_send(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Post the owner's message for ``maxy channels`` to send; its answer."""
    account_of(context)
    to, text = arguments.get("to"), arguments.get("text")
    if not isinstance(to, str) or not to.strip():
        raise ToolError("to must name a chat: its JID or name (whatsapp-chats lists them).")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_SEND:
        raise ToolError(f"text must be the message, 1 to {MAX_SEND} characters.")
    chat = await resolve_chat(context, to, CHANNEL)
    channels_dir = context.settings.channels_dir
    posted = await asyncio.to_thread(linking.post, channels_dir, chat, text)
    deadline = time.monotonic() + linking.OUTBOX_WAIT
    while time.monotonic() < deadline:
        answer = await asyncio.to_thread(linking.answer_of, channels_dir, posted)
        if answer is not None:
            break
        await asyncio.sleep(POLL)
    else:
        if await asyncio.to_thread(linking.withdraw, channels_dir, posted):
            raise ToolError(
                "WhatsApp is not connected (Settings → WhatsApp says why); nothing was sent.",
                code="not-connected",
            )
        raise ToolError("The message was handed over but not confirmed; check the chat.")
    if not answer.get("sent"):
        raise ToolError(str(answer.get("error")), code=str(answer.get("reason") or "not-sent"))
    return {**answer, "to": chat.get("title") or chat.get("senderName")}


async def whatsapp_import(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """A chat export into the archive: the senders first, then (with ``owner``) the sessions."""
    account_of(context)
    source = readable(context, arguments.get("path"))
    if source.is_relative_to(context.settings.channels_dir.resolve()):
        raise ToolError(
            "That is one of the channels' own files, not an export.", code="not-allowed"
        )
    owner, chat = arguments.get("owner"), arguments.get("chat")
    zone = owner_zone(context.settings.accounts_dir, context.caller.account_id).key
    try:
        text = await asyncio.to_thread(read, source)
        return await import_export(
            context.engine, context.caller.to_wire(), text, zone, owner, chat
        )
    except ExportError as err:
        raise ToolError(str(err), code="bad-export") from err
    except RpcError as err:
        raise ToolError(f"The memory engine did not take the import ({err}).") from err


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="whatsapp-chats",
        plugin=PLUGIN,
        description=(
            "The WhatsApp chats that have written to the owner's linked device, most recent "
            "first: chat JID, type, who last wrote (name, number), when, and their last message."
        ),
        handler=whatsapp_chats,
        input_schema={
            "type": "object",
            "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
            "additionalProperties": False,
        },
    ),
    Tool(
        name="whatsapp-send",
        plugin=PLUGIN,
        description=(
            "Send a WhatsApp message from the owner's number to a chat that has written to it, "
            "named by its JID, the person's or group's name, or a contact's name. Only when the "
            "owner asks you to; never secrets, codes or error details."
        ),
        handler=whatsapp_send,
        input_schema={
            "type": "object",
            "properties": {
                "to": {"type": "string", "description": "Chat JID or name."},
                "text": {"type": "string", "maxLength": MAX_SEND},
            },
            "required": ["to", "text"],
            "additionalProperties": False,
        },
    ),
    Tool(
        name="whatsapp-import",
        plugin=PLUGIN,
        description=(
            "Import a WhatsApp chat export (_chat.txt) into the conversation archive. Call it "
            "first without owner: it lists the senders it found; ask the owner which one they "
            "are, then call again with owner. Importing again adds only what is new."
        ),
        handler=whatsapp_import,
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The export's _chat.txt."},
                "owner": {"type": "string", "description": "Which sender is the owner."},
                "chat": {"type": "string", "description": "The chat's name (optional)."},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
)
