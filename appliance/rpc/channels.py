"""Request and response types of the engine's channel methods: every message of Telegram and
WhatsApp kept before anything is decided (:mod:`appliance.memory.channels`), and chat exports
kept as archived conversations (:mod:`appliance.memory.archive`).

Declared here to keep :mod:`appliance.rpc.engine` short; it names the methods in its one table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, JsonValue

from appliance.rpc.calls import Called
from appliance.rpc.contract import Request, Response

CHANNELS: list[JsonValue] = ["telegram", "whatsapp"]
MAX_CHANNEL_TEXT = 32_000
MAX_RAW = 16_000
#: Where an inbound message can be; the open ones are taken up again after a restart.
OPEN_STATES = ("received", "routed", "submitted", "replying")
FINAL_STATES = ("answered", "ignored", "silenced", "failed", "stale", "uncertain")
STATES = OPEN_STATES + FINAL_STATES


def channel_field() -> Any:
    """The channel a message came by (its node also gets that channel's label)."""
    return Field(json_schema_extra={"enum": CHANNELS})


class ChannelRecordRequest(Called):
    """One channel message, kept once by its key: in as it arrived, out as it was sent."""

    channel: str = channel_field()
    key: str = Field(description="Unique per channel: a redelivery names the same key.")
    direction: Literal["in", "out"] = "in"
    chat_id: str
    chat_type: str = "private"
    chat_title: str | None = None
    sender_id: str | None = None
    sender_name: str | None = None
    sender_handle: str | None = None
    message_id: str | None = None
    text: str = Field(max_length=MAX_CHANNEL_TEXT)
    sent_at: datetime | None = None
    addressed: bool = False
    in_reply_to: str | None = Field(default=None, description="The inbound message's id (out).")
    raw: str | None = Field(default=None, max_length=MAX_RAW)


class ChannelMessageResponse(Response):
    """The message as stored (``message``: its fields, camelCase)."""

    id: str
    created: bool
    conversation_id: str
    message: dict[str, Any]
    warnings: list[str] = Field(default_factory=list)


class ChannelUpdateRequest(Called):
    """Where an inbound message is in its handling; only the fields given change."""

    id: str
    state: str | None = None
    route: str | None = None
    verdict: str | None = None
    session_id: str | None = None
    prompts_before: int | None = None
    reply_state: str | None = None
    reply_message_id: str | None = None
    outcome: str | None = None
    error: str | None = Field(default=None, max_length=2000)


class ChannelPendingRequest(Called):
    """Inbound messages of a channel whose handling has not ended, oldest first."""

    channel: str = channel_field()
    limit: int = Field(default=500, json_schema_extra={"minimum": 1, "maximum": 2000})


class ChannelMessagesResponse(Response):
    """Messages with their handling state."""

    messages: list[dict[str, Any]]


class ChannelChatsRequest(Called):
    """The chats of a channel, most recent first."""

    channel: str = channel_field()
    limit: int = Field(default=20, json_schema_extra={"minimum": 1, "maximum": 200, "default": 20})


class ChannelChatsResponse(Response):
    """One entry a chat: ``{chatId, chatType, title, senderId, senderName, senderHandle,
    lastMessageAt, lastText, messages}``."""

    chats: list[dict[str, Any]]


class ArchivedMessage(Request):
    """One message of an imported chat export."""

    sender: str = Field(json_schema_extra={"maxLength": 200})
    text: str = Field(max_length=MAX_CHANNEL_TEXT)
    sent_at: datetime
    owner: bool = Field(default=False, description="Written by the owner.")


class ChannelArchiveRequest(Called):
    """One session of a chat export (messages no more than hours apart), kept once."""

    channel: str = channel_field()
    chat: str = Field(description="The chat's name.", json_schema_extra={"maxLength": 200})
    messages: list[ArchivedMessage] = Field(json_schema_extra={"minItems": 1, "maxItems": 5000})


class ChannelArchiveResponse(Response):
    """The session's conversation; ``appended``: messages new to it (0 on a re-import)."""

    conversation_id: str
    session_id: str
    created: bool
    appended: int
    warnings: list[str] = Field(default_factory=list)
