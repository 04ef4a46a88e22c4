"""The adapter boundary: what a channel gives the lifeline and what it must do for it.

A channel (Telegram here; WhatsApp later) turns each delivery into one :class:`Inbound` —
plain facts, nothing decided — and implements :class:`Adapter`: send a text to a chat (as a
reply to one of its messages), edit a message it sent, show that it is typing. Everything else
(keeping the message, deciding who it reaches, answering, what may go out) is the lifeline's, the
same for every channel.

Errors a channel raises, translated where its library's enter our code::

    ChannelError
    ├── ChannelUnavailable   the channel's service cannot be reached now (network, 5xx, 429,
    │                        another poller): try again later
    ├── ChannelRefused       it refused one call (a chat it does not know, a text too long, the
    │                        person blocked the bot): that call will never work
    ├── TokenInvalid         it does not know the bot's token: the owner must enter a new one
    └── OutboundBlocked      the outbound gate kept a message in (:mod:`.outbound`)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

ChatType = Literal["private", "group"]


class ChannelError(Exception):
    """A channel could not do what was asked."""

    reason = "channel-error"


class ChannelUnavailable(ChannelError):
    """The channel's service cannot be reached now; the call may work later."""

    reason = "unavailable"

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ChannelRefused(ChannelError):
    """The channel refused this call; it will not work if tried again."""

    reason = "refused"


class TokenInvalid(ChannelError):
    """The channel does not accept the bot's token."""

    reason = "token-invalid"


class OutboundBlocked(ChannelError):
    """The outbound gate kept a message in (the reason says which rule)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Inbound:
    """One message a channel delivered, as facts (no decision made yet)."""

    channel: str  # "telegram"
    key: str  # unique per delivery; a redelivery carries the same key
    chat_id: str
    chat_type: ChatType
    sender_id: str
    sender_name: str
    text: str
    message_id: str  # the channel's id of this message in its chat (a reply quotes it)
    sent_at: datetime
    chat_title: str | None = None
    sender_handle: str | None = None
    addressed: bool = False  # a private chat, or the bot is mentioned or replied to
    raw: str | None = None  # the delivery as the channel sent it (JSON), for the record


class Adapter(Protocol):
    """What a channel does for the lifeline."""

    name: str  # "telegram"

    async def send(self, chat_id: str, text: str, reply_to: str | None) -> str:
        """Send ``text`` to ``chat_id`` (replying to message ``reply_to``); its message id."""
        ...

    async def edit(self, chat_id: str, message_id: str, text: str) -> None:
        """Replace the text of a message the bot sent."""
        ...

    async def typing(self, chat_id: str) -> None:
        """Show in ``chat_id`` that an answer is being written."""
        ...
