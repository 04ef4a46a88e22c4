"""The ``telegram`` plugin's tools: the owner's agent writes to people on Telegram.

All three are the owner's alone (:func:`appliance.mcp.owner.account_of` refuses a public
caller; none is ever offered to a public agent) and run in the ``maxy mcp`` process:

- ``telegram-chats``: the bot's chats, newest first, with who last wrote and their ids (the
  engine's ``channel.chats``);
- ``telegram-send``: a message to a chat that has written to the bot — named by its chat id,
  the person's @username or name, or a contact's name that matches one chat — through the same
  outbound gate as every reply (:mod:`appliance.channels.outbound`: known chats only, no secret
  or internal text), and kept in that chat's conversation;
- ``telegram-token-set``: store the bot's token from @BotFather after Telegram accepted it
  (``getMe``), 0600; ``maxy channels`` starts that bot within seconds.

Who is the owner (the allow-list) is set on the Settings page only, never by a tool: a tool the
agent can call is a tool a message could talk it into calling.
"""

from __future__ import annotations

import logging
from typing import Any

from appliance.channels.adapter import ChannelError, OutboundBlocked
from appliance.channels.outbound import Outbound
from appliance.channels.telegram.bot import CHANNEL, MAX_TEXT, TelegramBot, valid_token
from appliance.core.fsio import read_secret, write_secret
from appliance.mcp.owner import account_of
from appliance.mcp.tool import Tool, ToolContext, ToolError
from appliance.rpc.protocol import RpcError

log = logging.getLogger(__name__)

PLUGIN = "telegram"
NAMES = {"telegram": "Telegram", "whatsapp": "WhatsApp"}
MAX_SEND = 4000
NO_BOT = (
    "No Telegram bot is set up. Create one with @BotFather (see the telegram plugin's reference "
    "'botfather'), then give its token to telegram-token-set or enter it in Settings."
)


async def _chats(context: ToolContext, limit: int, channel: str = CHANNEL) -> list[dict[str, Any]]:
    try:
        answer = await context.engine.call(
            "channel.chats",
            {"caller": context.caller.to_wire(), "channel": channel, "limit": limit},
        )
    except RpcError as err:
        raise ToolError(f"The memory engine did not answer ({err}); try again shortly.") from err
    chats: list[dict[str, Any]] = answer["chats"]
    return chats


async def telegram_chats(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """The bot's chats, most recent first."""
    account_of(context)
    limit = arguments.get("limit", 20)
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ToolError("limit must be a number from 1 to 100.")
    return {"chats": await _chats(context, limit)}


def _matches(chat: dict[str, Any], to: str) -> bool:
    wanted = to.strip().lstrip("@").casefold()
    names = (chat.get("title"), chat.get("senderName"), chat.get("senderHandle"))
    return to.strip() == str(chat.get("chatId")) or any(
        isinstance(n, str) and n.casefold() == wanted for n in names
    )


async def _contact_names(context: ToolContext, name: str) -> list[str]:
    """The names of contacts matching ``name`` (a contact is named as the person calls them)."""
    try:
        answer = await context.engine.call(
            "contacts.lookup", {"caller": context.caller.to_wire(), "name": name, "limit": 5}
        )
    except RpcError:
        return []
    return [str(c.get("name")) for c in answer.get("contacts") or [] if c.get("name")]


async def resolve_chat(context: ToolContext, to: str, channel: str = CHANNEL) -> dict[str, Any]:
    """The one chat of ``channel`` ``to`` names; :class:`ToolError` naming the candidates
    otherwise."""
    chats = await _chats(context, 200, channel)
    found = [chat for chat in chats if _matches(chat, to)]
    if not found:
        for name in await _contact_names(context, to):
            found += [chat for chat in chats if _matches(chat, name) and chat not in found]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ToolError(
            f"No {NAMES.get(channel, channel)} chat matches {to!r}. Only people who have written "
            f"to {'the bot' if channel == CHANNEL else 'your number'} can be written to; "
            f"{channel}-chats lists them.",
            code="unknown-chat",
        )
    names = ", ".join(f"{c.get('title') or c.get('senderName')} ({c['chatId']})" for c in found)
    raise ToolError(f"{to!r} matches several chats: {names}. Name one by its chat id.")


async def telegram_send(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Send the owner's message to one chat that has written to the bot."""
    account_of(context)
    to, text = arguments.get("to"), arguments.get("text")
    if not isinstance(to, str) or not to.strip():
        raise ToolError("to must name a chat: its chat id, @username or name (telegram-chats).")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_SEND:
        raise ToolError(f"text must be the message, 1 to {MAX_SEND} characters.")
    token = read_secret(context.settings.telegram_token_path)
    if token is None:
        raise ToolError(NO_BOT, code="no-bot")
    chat = await resolve_chat(context, to)
    bot = TelegramBot(token, context.settings.telegram_api_url)
    gate = Outbound(bot, context.settings.keys_dir, MAX_TEXT)
    try:
        await bot.start()  # opens the connection pools that close() shuts (and checks the token)
        sent = await gate.send(chat, text)
    except OutboundBlocked as err:
        raise ToolError(str(err), code=err.reason) from err
    except ChannelError as err:
        raise ToolError(f"Telegram did not take the message: {err}", code=err.reason) from err
    finally:
        await bot.close()
    log.info("[channels] op=owner-send channel=telegram chat=%s message=%s", chat["chatId"], sent)
    try:
        await context.engine.call(
            "channel.record",
            {
                "caller": context.caller.to_wire(),
                "channel": CHANNEL,
                "key": f"out:{chat['chatId']}:{sent}",
                "direction": "out",
                "chatId": str(chat["chatId"]),
                "chatType": chat.get("chatType") or "private",
                "messageId": sent,
                "text": text,
            },
        )
    except RpcError as err:
        log.warning(
            "[channels] op=owner-send warn=unrecorded chat=%s error=%s", chat["chatId"], err
        )
    return {
        "sent": True,
        "chatId": chat["chatId"],
        "messageId": sent,
        "to": chat.get("title") or chat.get("senderName"),
    }


async def telegram_token_set(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Check a bot token with Telegram and store it (0600)."""
    account_of(context)
    raw = arguments.get("token")
    try:
        token = valid_token(raw if isinstance(raw, str) else "")
    except ChannelError as err:
        raise ToolError(str(err), code="invalid-token") from err
    bot = TelegramBot(token, context.settings.telegram_api_url)
    try:
        info = await bot.start()
    except ChannelError as err:
        raise ToolError(f"{err} Nothing was saved.", code=err.reason) from err
    finally:
        await bot.close()
    write_secret(context.settings.telegram_token_path, (token + "\n").encode())
    log.info("[channels] op=token-set channel=telegram bot=%s via=tool", info.id)
    return {"saved": True, "bot": info.to_json()}


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="telegram-chats",
        plugin=PLUGIN,
        description=(
            "The Telegram chats of the owner's bot, most recent first: chat id, type, title, "
            "who last wrote (name, @username, id), when, and their last message."
        ),
        handler=telegram_chats,
        input_schema={
            "type": "object",
            "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
            "additionalProperties": False,
        },
    ),
    Tool(
        name="telegram-send",
        plugin=PLUGIN,
        description=(
            "Send a Telegram message from the owner's bot to a chat that has written to it, "
            "named by chat id, @username, the person's or group's name, or a contact's name. "
            "Only when the owner asks you to; never secrets or error details."
        ),
        handler=telegram_send,
        input_schema={
            "type": "object",
            "properties": {
                "to": {"type": "string", "description": "Chat id, @username or name."},
                "text": {"type": "string", "maxLength": MAX_SEND},
            },
            "required": ["to", "text"],
            "additionalProperties": False,
        },
    ),
    Tool(
        name="telegram-token-set",
        plugin=PLUGIN,
        description=(
            "Store the owner's Telegram bot token (from @BotFather) after Telegram accepts it; "
            "the bot starts answering within seconds."
        ),
        handler=telegram_token_set,
        input_schema={
            "type": "object",
            "properties": {"token": {"type": "string", "description": "The token BotFather gave."}},
            "required": ["token"],
            "additionalProperties": False,
        },
    ),
)
