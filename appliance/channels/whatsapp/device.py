"""The adapter on neonize's client: send, edit and "typing…", with the library's errors translated.

The client is anything with neonize's three sending calls (:class:`Sender`): the live
``NewAClient`` on a device; in the tests, a recorder of what would have been sent (the outside
world, replaced at the library's call boundary). Nothing here decides who may be written to —
that is the outbound gate's (:mod:`appliance.channels.outbound`), which every send goes through.

A reply quotes the message it answers when this process saw it (its id, sender and text are
remembered for a while); otherwise it is sent as a plain message to the same chat.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Protocol

from neonize.exc import NeonizeError
from neonize.proto.Neonize_pb2 import JID
from neonize.proto.waE2E.WAWebProtobufsE2E_pb2 import ContextInfo, ExtendedTextMessage, Message
from neonize.utils.enum import ChatPresence, ChatPresenceMedia

from appliance.channels.adapter import ChannelRefused, ChannelUnavailable
from appliance.channels.whatsapp.linking import CHANNEL

log = logging.getLogger(__name__)

MAX_TEXT = 4000  # WhatsApp takes longer texts; a phone shows them folded beyond this
REMEMBERED = 500  # inbound messages kept for quoting; our sent ids kept to drop their echoes


class Sender(Protocol):
    """neonize's calls the channel sends with (``neonize.aioze.client.NewAClient``)."""

    async def send_message(self, to: Any, message: Any) -> Any: ...

    async def edit_message(self, chat: Any, message_id: str, new_message: Any) -> Any: ...

    async def send_chat_presence(self, jid: Any, state: Any, media: Any) -> None: ...


def jid_of(text: str) -> JID:
    """The JID a chat id names (``user@server``); :class:`ChannelRefused` for anything else."""
    user, at, server = text.partition("@")
    if not at or not server or not all(c.isalnum() or c in ".-_" for c in user + server):
        raise ChannelRefused(
            f"{text!r} is not a WhatsApp chat (a JID such as 4915…@s.whatsapp.net)."
        )
    return JID(User=user, Server=server, Device=0, Integrator=0, RawAgent=0, IsEmpty=False)


class WhatsAppDevice:
    """The owner's linked device: the adapter the lifeline and the tools send through."""

    name = CHANNEL
    limit = MAX_TEXT

    def __init__(self, client: Sender) -> None:
        self.client = client
        self.quotable: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id → (sender, text)
        self.sent: OrderedDict[str, None] = OrderedDict()

    def seen(self, message_id: str, sender_jid: str, text: str) -> None:
        """Remember an inbound message so a reply can quote it."""
        self.quotable[message_id] = (sender_jid, text[:500])
        while len(self.quotable) > REMEMBERED:
            self.quotable.popitem(last=False)

    def sent_ids(self) -> frozenset[str]:
        """The ids of the messages this device sent (their echoes are not inbound)."""
        return frozenset(self.sent)

    def _message(self, text: str, reply_to: str | None) -> Any:
        quoted = self.quotable.get(reply_to) if reply_to else None
        if quoted is None:
            return Message(conversation=text)
        sender, said = quoted
        context = ContextInfo(
            stanzaID=reply_to, participant=sender, quotedMessage=Message(conversation=said)
        )
        return Message(extendedTextMessage=ExtendedTextMessage(text=text, contextInfo=context))

    async def _call(self, what: str, call: Any) -> Any:
        try:
            return await call
        except NeonizeError as err:
            text = str(err)
            if any(word in text.lower() for word in ("not connected", "timed out", "websocket")):
                raise ChannelUnavailable(f"WhatsApp could not be reached ({what}): {text}") from err
            raise ChannelRefused(f"WhatsApp refused {what}: {text}") from err

    async def send(self, chat_id: str, text: str, reply_to: str | None) -> str:
        """Send ``text`` to ``chat_id`` (quoting ``reply_to`` when known); the new message's id."""
        to = jid_of(chat_id)
        sent = await self._call("send", self.client.send_message(to, self._message(text, reply_to)))
        message_id = str(getattr(sent, "ID", "") or "")
        if message_id:
            self.sent[message_id] = None
            while len(self.sent) > REMEMBERED:
                self.sent.popitem(last=False)
        return message_id

    async def edit(self, chat_id: str, message_id: str, text: str) -> None:
        """Replace the text of a message this device sent."""
        await self._call(
            "edit",
            self.client.edit_message(jid_of(chat_id), message_id, Message(conversation=text)),
        )

    async def typing(self, chat_id: str) -> None:
        """Show "typing…" in the chat."""
        await self._call(
            "typing",
            self.client.send_chat_presence(
                jid_of(chat_id),
                ChatPresence.CHAT_PRESENCE_COMPOSING,
                ChatPresenceMedia.CHAT_PRESENCE_MEDIA_TEXT,
            ),
        )
