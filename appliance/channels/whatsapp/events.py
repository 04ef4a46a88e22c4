"""neonize's events, as the lifeline sees them: facts about one message, nothing decided.

A message event (``neonize.proto.Neonize_pb2.Message``) carries ``Info`` (the id, the push name,
the time, and ``MessageSource``: chat, sender, is-from-me, is-group, the sender's phone JID when
the sender is named by a LID) and the WhatsApp message itself (``conversation`` or
``extendedTextMessage`` with its ``contextInfo``: mentions, the quoted message).

Who a sender is: their phone number (the JID's user part on ``s.whatsapp.net``, the number the
owner types in Settings); a sender known only by a LID is ``<lid>@lid`` and matches no number.

What is not inbound (None): a status broadcast, a newsletter, and what the owner's own phone
sends to other people (the linked device sees it; it is the owner talking, not a message to the
assistant). The owner's "Message yourself" chat IS inbound (the owner writes to the assistant
there) — except the replies this device sent itself, which come back the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.json_format import MessageToJson
from neonize.proto.Neonize_pb2 import JID
from neonize.proto.Neonize_pb2 import Message as MessageEv

from appliance.channels.adapter import Inbound
from appliance.channels.whatsapp.linking import CHANNEL

USER_SERVER = "s.whatsapp.net"
GROUP_SERVER = "g.us"
LID_SERVER = "lid"
SKIPPED_SERVERS = ("broadcast", "newsletter")
MAX_RAW = 16_000


def jid_text(jid: JID) -> str:
    """A JID as WhatsApp writes it, without the device (``491511234567@s.whatsapp.net``)."""
    return f"{jid.User}@{jid.Server}" if jid.User else jid.Server


def number_of(jid: JID) -> str | None:
    """The phone number of a user JID (digits), None for a LID or a group."""
    return jid.User if jid.Server == USER_SERVER and jid.User.isdigit() else None


def sender_id(source_sender: JID, alt: JID) -> str:
    """The sender's number when it is known, else their JID (a LID matches no allow-list)."""
    return number_of(source_sender) or number_of(alt) or jid_text(source_sender)


def text_of(event: MessageEv) -> str:
    """The message's text, or what it carries when it has none."""
    message = event.Message
    if message.conversation:
        return str(message.conversation)
    if message.HasField("extendedTextMessage"):
        return str(message.extendedTextMessage.text)
    kinds = (
        ("imageMessage", "photo"),
        ("videoMessage", "video"),
        ("audioMessage", "voice"),
        ("documentMessage", "document"),
        ("stickerMessage", "sticker"),
        ("locationMessage", "location"),
        ("contactMessage", "contact"),
    )
    for field, kind in kinds:
        if message.HasField(field):
            caption = getattr(getattr(message, field), "caption", "")
            return f"[{kind}: {caption}]" if caption else f"[{kind}]"
    return "[message]"


def addressed_to(event: MessageEv, me: tuple[str, ...]) -> bool:
    """True in a private chat, or when one of ``me`` (JIDs) is mentioned or replied to."""
    source = event.Info.MessageSource
    if not source.IsGroup:
        return True
    if not event.Message.HasField("extendedTextMessage"):
        return False
    context = event.Message.extendedTextMessage.contextInfo
    if any(str(jid) in me for jid in context.mentionedJID):
        return True
    return bool(context.participant) and context.participant in me


def sent_at(event: MessageEv) -> datetime:
    """When the message was sent (whatsmeow gives Unix seconds; milliseconds are taken too)."""
    stamp = int(event.Info.Timestamp)
    if stamp <= 0:
        return datetime.now(UTC)
    return datetime.fromtimestamp(stamp / 1000 if stamp > 10**11 else stamp, UTC)


def inbound_of(
    event: MessageEv, me: JID, me_lid: JID | None, sent_by_us: frozenset[str] = frozenset()
) -> Inbound | None:
    """The lifeline's view of one message event; None for what is not inbound (above)."""
    info = event.Info
    source = info.MessageSource
    chat = source.Chat
    if chat.Server in SKIPPED_SERVERS or not info.ID:
        return None
    own_chat = chat.User in (me.User, me_lid.User if me_lid else None) and not source.IsGroup
    if source.IsFromMe and (not own_chat or info.ID in sent_by_us):
        return None
    mine = tuple(text for text in (jid_text(me), jid_text(me_lid) if me_lid else None) if text)
    group = bool(source.IsGroup)
    text = text_of(event)
    if group:  # the mention is how the group called the device, not words of the message
        for handle in (f"@{me.User}", f"@{me_lid.User}" if me_lid else ""):
            if handle:
                text = text.replace(handle, "").strip() or text
    return Inbound(
        channel=CHANNEL,
        key=f"{me.User}:{jid_text(chat)}:{info.ID}",
        chat_id=jid_text(chat),
        chat_type="group" if group else "private",
        chat_title=None,
        sender_id=sender_id(source.Sender, source.SenderAlt),
        sender_name=str(info.Pushname) or sender_id(source.Sender, source.SenderAlt),
        text=text,
        message_id=str(info.ID),
        sent_at=sent_at(event),
        addressed=addressed_to(event, mine),
        raw=_raw(event),
    )


def _raw(event: MessageEv) -> str:
    return str(MessageToJson(event, indent=None))[:MAX_RAW]
