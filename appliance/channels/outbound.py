"""The outbound gate: the one way anything leaves the device on a channel, and its rules.

Every message a channel sends goes through :class:`Outbound`, which holds these rules:

1. **A reply goes only to the chat of the inbound message it answers.** :meth:`Outbound.reply`
   takes the inbound message's row, not a chat: the chat and the quoted message are read from
   it, so a reply cannot be addressed anywhere else.
2. **Nothing is sent to a sender who is not allowed.** A row whose route (decided from the
   channel's settings for this very message, :mod:`.lifeline`) is not ``owner`` or ``public`` is
   refused (``not-allowed``): a silenced stranger, an ignored group message, anything not yet
   routed. On a personal number the default for strangers is silence.
3. **Internal errors, diagnostics and secrets never go out.** A text holding a secret of this
   device (the bot token, the Anthropic key, the Claude token, pairing data an adapter names),
   a Python traceback, or one of our log lines is not sent: :data:`HELD_BACK` goes instead, and
   the reason goes to the log (``[channels] op=outbound-held reason=…``) and the admin UI.
4. **A message the owner sends from a tool** (:meth:`Outbound.send`) goes only to a chat that
   has written to the bot (a chat the channel has kept messages of), never to a new number.

Nothing here sends on its own: a reconnect, a restart or a new token sends nothing, since only
an inbound message (rules 1-2) or the owner's explicit tool call (rule 4) leads to a send.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from appliance.channels.adapter import Adapter, OutboundBlocked
from appliance.core.fsio import read_secret

log = logging.getLogger(__name__)

ALLOWED_ROUTES = ("owner", "public")
HELD_BACK = "Sorry — I couldn't answer that properly. Please try again in a little while."
SECRET_FILES = ("telegram-bot-token", "anthropic-api-key", "claude-oauth-token", "cookie-hmac.key")
MIN_SECRET = 12  # shorter "secrets" (an empty or placeholder file) are not looked for
# What internal text looks like: a traceback, our own log lines, a key or token by its shape.
_INTERNAL = (
    ("traceback", re.compile(r"Traceback \(most recent call last\)")),
    ("log-line", re.compile(r"\[[a-z][a-z-]*\] (?:op|warn|reject|FATAL)[= ]")),
    ("bot-token", re.compile(r"\b\d{6,12}:[A-Za-z0-9_-]{30,}\b")),
    ("api-key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{10,}")),
)


def internal_reason(text: str, secrets: Iterable[str]) -> str | None:
    """Why ``text`` must not go out (a rule's name), or None when it may."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET and secret in text:
            return "secret"
    for reason, pattern in _INTERNAL:
        if pattern.search(text):
            return reason
    return None


def split(text: str, limit: int) -> list[str]:
    """``text`` in parts of at most ``limit`` characters, cut at a line or word where it can."""
    parts: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        cut = rest.rfind("\n", 0, limit)
        if cut < limit // 2:
            cut = rest.rfind(" ", 0, limit)
        if cut < limit // 2:
            cut = limit
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        parts.append(rest)
    return parts


class Outbound:
    """The gate between the lifeline (or a tool) and one channel's adapter."""

    def __init__(
        self,
        adapter: Adapter,
        keys_dir: Path,
        limit: int,
        pairing: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self.adapter = adapter
        self.keys_dir = keys_dir
        self.limit = limit
        self.pairing = pairing

    def secrets(self) -> list[str]:
        """This device's secrets, read now (they change when the owner enters new ones)."""
        found = [read_secret(self.keys_dir / name) for name in SECRET_FILES]
        return [s for s in found if s] + [p for p in self.pairing() if p]

    def checked(self, text: str, where: str) -> str:
        """``text`` if it may go out, else :data:`HELD_BACK` (the reason is logged)."""
        reason = internal_reason(text, self.secrets())
        if reason is None:
            return text
        log.warning(
            "[channels] op=outbound-held channel=%s reason=%s to=%s chars=%d",
            self.adapter.name,
            reason,
            where,
            len(text),
        )
        return HELD_BACK

    def _allowed(self, message: dict[str, Any]) -> str:
        """The chat of an inbound message that may be answered; refused otherwise."""
        route = message.get("route")
        if message.get("direction") != "in" or route not in ALLOWED_ROUTES:
            log.warning(
                "[channels] op=outbound-refused channel=%s reason=not-allowed message=%s route=%s",
                self.adapter.name,
                message.get("id"),
                route,
            )
            raise OutboundBlocked(
                "not-allowed", f"Message {message.get('id')} may not be answered (route {route})."
            )
        return str(message["chatId"])

    async def reply(self, message: dict[str, Any], text: str) -> str:
        """Send ``text`` to the chat of ``message``, quoting it; the (first) sent message's id."""
        chat = self._allowed(message)
        parts = split(self.checked(text, f"reply:{message.get('id')}"), self.limit) or [HELD_BACK]
        first = await self.adapter.send(chat, parts[0], message.get("channelMessageId"))
        for part in parts[1:]:
            await self.adapter.send(chat, part, None)
        return first

    async def revise(self, message: dict[str, Any], sent_id: str, text: str) -> None:
        """Replace the text of a reply already sent to ``message``'s chat."""
        chat = self._allowed(message)
        checked = self.checked(text, f"reply:{message.get('id')}")
        await self.adapter.edit(chat, sent_id, split(checked, self.limit)[0])

    async def typing(self, message: dict[str, Any]) -> None:
        """Show that an answer to ``message`` is being written (allowed messages only)."""
        await self.adapter.typing(self._allowed(message))

    async def send(self, chat: dict[str, Any] | None, text: str) -> str:
        """The owner's own message to a chat that has written to the bot (``chat``: its entry
        from the channel's chats; None: no such chat)."""
        if chat is None or not chat.get("chatId"):
            raise OutboundBlocked(
                "unknown-chat",
                "That chat has never written to the bot, so nothing can be sent to it. The "
                "person must write to the bot first.",
            )
        parts = split(self.checked(text, f"chat:{chat['chatId']}"), self.limit) or [HELD_BACK]
        first = ""
        for part in parts:
            sent = await self.adapter.send(str(chat["chatId"]), part, None)
            first = first or sent
        return first
