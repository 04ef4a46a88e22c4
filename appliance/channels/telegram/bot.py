"""The Telegram Bot API, through python-telegram-bot, with its errors translated once.

Why python-telegram-bot (over aiogram): it runs on httpx, which Maxy already ships (aiogram
needs aiohttp and its C extensions on the Pi), it is fully typed, and it is kept release for
release with the Bot API. It is used as a client only — ``getUpdates`` with offsets the lifeline
advances itself, after each message is kept — never its ``Application``/``Updater``, which would
confirm updates before they are kept.

The base URL is ``MAXY_TELEGRAM_API_URL`` (Telegram's own by default; the tests' local Bot API
otherwise). The token is part of every request URL, so this module never logs a URL, never
passes the library's error text on unread (its token error names the token), and the roles keep
``httpx`` and ``telegram`` logging at WARNING (:func:`appliance.core.logs.configure`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from telegram import Bot, Message, ReplyParameters, Update
from telegram.constants import ChatAction
from telegram.error import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest

from appliance.channels.adapter import (
    ChannelRefused,
    ChannelUnavailable,
    Inbound,
    TokenInvalid,
)

log = logging.getLogger(__name__)

CHANNEL = "telegram"
MAX_TEXT = 4096
REQUEST_TIMEOUT = 15.0
POOL_TIMEOUT = 10.0
NOT_MODIFIED = "message is not modified"
_SHAPE = "digits, a colon and about 35 letters, digits, - or _ (as BotFather shows it)"


def valid_token(token: str) -> str:
    """The token as typed, trimmed; :class:`TokenInvalid` when it cannot be a bot token."""
    token = token.strip()
    head, _, tail = token.partition(":")
    if not (head.isdigit() and 20 <= len(tail) <= 80 and token.isascii()):
        raise TokenInvalid(f"That is not a bot token: a token is {_SHAPE}.")
    if not all(c.isalnum() or c in "-_" for c in tail):
        raise TokenInvalid(f"That is not a bot token: a token is {_SHAPE}.")
    return token


def _redacted(text: str, token: str) -> str:
    return text.replace(token, "<token>") if token else text


@dataclass(frozen=True)
class BotInfo:
    """Who the bot is."""

    id: int
    username: str
    name: str

    @property
    def link(self) -> str:
        """The link that opens a chat with the bot."""
        return f"https://t.me/{self.username}"

    def to_json(self) -> dict[str, Any]:
        """For the status file."""
        return {"id": self.id, "username": self.username, "name": self.name, "link": self.link}


class TelegramBot:
    """One bot (one token) on the Bot API: the adapter the lifeline sends through."""

    name = CHANNEL
    limit = MAX_TEXT

    def __init__(self, token: str, base_url: str | None, poll_timeout: float = 25.0) -> None:
        self.token = token
        self.poll_timeout = poll_timeout
        base = f"{base_url}/bot" if base_url else "https://api.telegram.org/bot"
        self.bot = Bot(
            token,
            base_url=base,
            request=HTTPXRequest(
                read_timeout=REQUEST_TIMEOUT,
                write_timeout=REQUEST_TIMEOUT,
                connect_timeout=REQUEST_TIMEOUT,
                pool_timeout=POOL_TIMEOUT,
            ),
            get_updates_request=HTTPXRequest(
                connection_pool_size=1,
                read_timeout=poll_timeout + REQUEST_TIMEOUT,
                connect_timeout=REQUEST_TIMEOUT,
                pool_timeout=POOL_TIMEOUT,
            ),
        )
        self.info: BotInfo | None = None

    @contextlib.asynccontextmanager
    async def _calling(self, what: str) -> AsyncIterator[None]:
        """Translate the library's errors into the channel's (never with the token in them)."""
        try:
            yield
        except InvalidToken as err:
            raise TokenInvalid(
                "Telegram does not accept the bot's token (it was revoked, or mistyped). Get it "
                "again from @BotFather (/mybots → the bot → API Token) and enter it in Settings."
            ) from err
        except RetryAfter as err:
            wait = err.retry_after
            seconds = wait.total_seconds() if hasattr(wait, "total_seconds") else float(wait)
            raise ChannelUnavailable(
                f"Telegram asks to wait {seconds:.0f} s ({what}).", seconds
            ) from err
        except Conflict as err:
            raise ChannelUnavailable(
                "Another program polls this bot's updates (only one may). Stop it, or give it "
                f"its own bot ({what})."
            ) from err
        except (BadRequest, Forbidden) as err:
            raise ChannelRefused(
                f"Telegram refused {what}: {_redacted(err.message, self.token)}"
            ) from err
        except (TimedOut, NetworkError) as err:
            raise ChannelUnavailable(
                f"Telegram could not be reached ({what}): {_redacted(err.message, self.token)}"
            ) from err
        except TelegramError as err:
            raise ChannelUnavailable(
                f"Telegram failed ({what}): {_redacted(err.message, self.token)}"
            ) from err

    async def start(self) -> BotInfo:
        """Open the connection and learn who the bot is (``getMe``)."""
        async with self._calling("getMe"):
            await self.bot.initialize()
            me = self.bot.bot
        self.info = BotInfo(me.id, me.username or "", me.full_name)
        return self.info

    async def close(self) -> None:
        """Close the connection pools."""
        with contextlib.suppress(TelegramError, RuntimeError):
            await self.bot.shutdown()

    async def updates(self, offset: int | None) -> tuple[Update, ...]:
        """One long poll: the updates from ``offset`` on (those before it are confirmed)."""
        async with self._calling("getUpdates"):
            return await self.bot.get_updates(
                offset=offset,
                timeout=int(self.poll_timeout),
                allowed_updates=["message"],
                read_timeout=self.poll_timeout + REQUEST_TIMEOUT,
            )

    async def send(self, chat_id: str, text: str, reply_to: str | None) -> str:
        """``sendMessage``, as a reply to ``reply_to`` when given; the new message's id."""
        reply = (
            ReplyParameters(int(reply_to), allow_sending_without_reply=True) if reply_to else None
        )
        async with self._calling("sendMessage"):
            sent = await self.bot.send_message(int(chat_id), text, reply_parameters=reply)
        return str(sent.message_id)

    async def edit(self, chat_id: str, message_id: str, text: str) -> None:
        """``editMessageText``; the same text again is no change, not an error."""
        try:
            async with self._calling("editMessageText"):
                await self.bot.edit_message_text(text, int(chat_id), int(message_id))
        except ChannelRefused as err:
            if NOT_MODIFIED not in str(err).lower():
                raise

    async def typing(self, chat_id: str) -> None:
        """``sendChatAction typing``."""
        async with self._calling("sendChatAction"):
            await self.bot.send_chat_action(int(chat_id), ChatAction.TYPING)


def _describe(message: Message) -> str:
    """The text of a message, or what it carries when it has none."""
    if message.text:
        return message.text
    kinds = ("photo", "video", "voice", "audio", "document", "sticker", "location", "contact")
    kind = next((k for k in kinds if getattr(message, k, None)), "message")
    caption = f": {message.caption}" if message.caption else ""
    return f"[{kind}{caption}]"


def addressed_to(message: Message, bot: BotInfo) -> bool:
    """True in a private chat, or when the bot is mentioned or its message is replied to."""
    if message.chat.type == "private":
        return True
    replied = message.reply_to_message
    if replied is not None and replied.from_user is not None and replied.from_user.id == bot.id:
        return True
    handle = f"@{bot.username}".lower()
    return bool(bot.username) and handle in (message.text or message.caption or "").lower()


def inbound_of(update: Update, bot: BotInfo) -> Inbound | None:
    """The lifeline's view of one update; None for an update that carries no message."""
    message = update.message
    if message is None or message.from_user is None:
        return None
    chat, sender = message.chat, message.from_user
    private = chat.type == "private"
    text = _describe(message)
    if not private and bot.username:  # the mention is how the group called the bot, not words
        text = text.replace(f"@{bot.username}", "").strip() or text
    sent_at = message.date if message.date else datetime.now(UTC)
    return Inbound(
        channel=CHANNEL,
        key=f"{bot.id}:{update.update_id}",
        chat_id=str(chat.id),
        chat_type="private" if private else "group",
        chat_title=chat.title,
        sender_id=str(sender.id),
        sender_name=sender.full_name,
        sender_handle=sender.username,
        text=text,
        message_id=str(message.message_id),
        sent_at=sent_at,
        addressed=addressed_to(message, bot),
        raw=json.dumps(update.to_dict(), ensure_ascii=False)[:16_000],
    )
