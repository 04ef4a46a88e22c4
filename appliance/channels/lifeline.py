"""The one inbound lifeline: every message of every channel, from arrival to answer.

For each message an adapter delivers (:class:`~.adapter.Inbound`):

1. **Keep it first.** :meth:`Lifeline.keep` writes the forensic row through the engine
   (``channel.record``: its Conversation merged, a ``:Message:ChannelMessage:TelegramMessage``
   created) before anything is decided about it — from anyone, allowed or not, DM or group. The
   adapter advances its cursor (Telegram's update offset) only after every message of a batch is
   kept; a crash in between loses nothing, and the redelivery finds the rows it made
   (``created: false``), so it is handled once.
2. **Decide who it reaches** (:func:`decide`), from the channel's settings read now
   (:mod:`.config`: the allow-list is the only source of who is the owner): the owner in a
   private chat → ``owner``; anyone else in a private chat → ``public`` (or ``silenced`` where
   strangers get silence); a group → ``public`` when the bot is addressed as the group's mode
   asks, else ``ignored``. A group is answered by the public agent even when the owner writes in
   it: the admin agent's answers are the owner's alone.
3. **Screen it** with the inbound gateway, as the web chat does (admin: advisory; public: a
   DISCARD is answered with the refusal).
4. **Answer it.** The owner's message becomes a turn of their admin session
   (:mod:`.admin_turn`), relayed from its transcript as it is written (the first text is sent,
   later ones edit it); anyone else's is answered by the public agent
   (:mod:`appliance.agents.answering`). Everything leaves through :mod:`.outbound`'s rules.

Each chat's messages are handled one at a time, oldest first (its conversation's ``order``; one
worker per chat); chats run side by side. A message is handled only after every older one of its
chat was answered or given up: one the engine or the manager failed for a moment (refused
connection) stays first in its chat's queue, the chat held, and is tried again after 2 s (to
60 s) with the rest behind it; if its row has ended meanwhile (the engine made the change, and
only its answer was lost), the retry drops the stale copy instead. A message's progress is kept
on its row (``state``: received → routed → submitted → replying → answered, or ignored,
silenced, failed, stale, uncertain). After a restart :meth:`Lifeline.recover` queues every
open one from the graph before the channel is polled again: a turn already typed is relayed, not
typed again; a reply whose send had begun is never sent twice (``uncertain``); one older than
``MAXY_CHANNEL_STALE_AFTER``, or delivered to another bot, is kept unanswered (``stale``). A
copy of a row read before its handling here ended (a redelivered update's, a retry's list)
never queues it again.

Log lines (``[channels] …``), one per event::

    op=route channel=… message=… route=… sender=…
    op=input-no-turn channel=… sender=… session=… waitedMs=…    (no turn started in time)
    op=turn-timeout cause=no-turn|relay-missed channel=… sender=… session=… waitedMs=…
    op=inbound-outcome relay-ok=N timeout-no-turn=N timeout-relay-missed=N failed=N
        channel=… sender=…                                       (after each owner message)
    op=answered channel=… message=… route=… outcome=… ms=…
    op=retry-ended channel=… message=…      (a held message found ended: not handled again)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from appliance.agents.answering import UNAVAILABLE, Answering
from appliance.agents.errors import AnthropicError
from appliance.channels import config as channel_config
from appliance.channels.adapter import ChannelError, Inbound
from appliance.channels.admin_turn import AdminTurns, Seen, Turn, typed
from appliance.channels.outbound import Outbound, split
from appliance.channels.status import Status
from appliance.core.accounts import Account
from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.rpc.channels import OPEN_STATES
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.web.manager_client import ManagerClient, ManagerError, ManagerUnavailable

log = logging.getLogger(__name__)

TYPING_EVERY = 4.5  # seconds; a chat action shows for about 5
AT_ONCE = 4  # messages handled side by side (each chat in order); the rest wait their turn
PENDING_LIMIT = 2000  # open rows read at once (a restart, a retry)
RETRY_FIRST, RETRY_MAX = 2.0, 60.0  # seconds before open messages are taken up again
ENDED_KEPT = 10_000  # ids of handled messages remembered (a late stale copy is let go)
TIMED_OUT = "Sorry — that took too long and I couldn't finish an answer. Please ask again."
INSTRUCTIONS = (
    "You are talking with your owner over {channel}. Each of their {channel} messages arrives "
    "here as a prompt, and the text you write in answer is sent back to them as {channel} "
    "messages: keep it short and plain (no tables), and never put errors, diagnostics, file "
    "paths, tokens or other secrets in it."
)


def decide(message: dict[str, Any], config: channel_config.ChannelConfig) -> str:
    """Who a message reaches: owner, public, silenced or ignored (from the settings alone)."""
    if message.get("chatType") == "private":
        if config.is_owner(str(message.get("senderId"))):
            return "owner"
        return "public" if config.strangers == "public" else "silenced"
    mode = config.group_mode(str(message.get("chatId")))
    if mode == "off" or (mode == "mention" and not message.get("addressed")):
        return "ignored"
    return "public"


def _position(message: dict[str, Any]) -> tuple[int, str]:
    """Where a message stands in its chat (its conversation's order; oldest first)."""
    order = message.get("order")
    return (order if isinstance(order, int) else 1 << 62, str(message.get("receivedAt") or ""))


@dataclass
class Tally:
    """How one sender's owner messages ended."""

    relay_ok: int = 0
    timeout_no_turn: int = 0
    timeout_relay_missed: int = 0
    failed: int = 0


class Lifeline:
    """One channel's inbound messages, from their forensic row to their answer."""

    def __init__(
        self,
        *,
        settings: Settings,
        account: Account,
        engine: RpcClient,
        manager: ManagerClient,
        answering: Answering,
        outbound: Outbound,
        status: Status,
        bot_key: str,
        default_strangers: channel_config.Strangers = "public",
    ) -> None:
        self.settings = settings
        self.account = account
        self.engine = engine
        self.answering = answering
        self.outbound = outbound
        self.status = status
        self.channel = outbound.adapter.name
        self.bot_key = bot_key  # the prefix of this bot's delivery keys
        self.default_strangers = default_strangers
        self.caller = Caller(account_id=account.id).to_wire()
        self.admin = AdminTurns(
            manager, account.id, self.channel, INSTRUCTIONS.format(channel=self.channel.title())
        )
        self.tallies: dict[str, Tally] = {}
        # Each chat's open messages by id, handled lowest ``order`` first; a message leaves its
        # chat's queue only when its handling has ended (or, on a bug, was abandoned).
        self._queues: dict[str, dict[str, dict[str, Any]]] = {}
        self._handling: dict[str, str] = {}  # chat → the id its worker is on now
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._ended: dict[str, None] = {}  # ids handled here, never queued again (FIFO)
        self._held: dict[str, str] = {}  # chat → its failed message, waiting for the retry
        self._slots = asyncio.Semaphore(AT_ONCE)
        self._retry: asyncio.Task[None] | None = None
        self._retry_delay = RETRY_FIRST

    # --- arrival -------------------------------------------------------------------------

    async def keep(self, inbound: Inbound) -> dict[str, Any]:
        """The forensic row of one delivery (made now, or found: a redelivery); RpcError."""
        answer = await self.engine.call(
            "channel.record",
            {
                "caller": self.caller,
                "channel": inbound.channel,
                "key": inbound.key,
                "direction": "in",
                "chatId": inbound.chat_id,
                "chatType": inbound.chat_type,
                "chatTitle": inbound.chat_title,
                "senderId": inbound.sender_id,
                "senderName": inbound.sender_name,
                "senderHandle": inbound.sender_handle,
                "messageId": inbound.message_id,
                "text": inbound.text[:32_000],
                "sentAt": inbound.sent_at.isoformat(),
                "addressed": inbound.addressed,
                "raw": inbound.raw,
            },
        )
        message: dict[str, Any] = answer["message"]
        return message

    def take(self, message: dict[str, Any], *, fresh: bool = False) -> None:
        """Queue a kept message for its chat's worker (once, however often it is delivered).

        ``message`` is a copy of its row read at some moment: one read before its handling here
        ended is stale, so an id handled here is never queued again. ``fresh`` (a row read while
        its chat's worker was not on it: :meth:`recover`) replaces the queued copy.
        """
        key = message["id"]
        if key in self._ended or message.get("state") not in OPEN_STATES:
            return
        chat = str(message["chatId"])
        if self._handling.get(chat) == key:
            return
        queue = self._queues.setdefault(chat, {})
        if key not in queue or fresh:
            queue[key] = message
        if chat not in self._held:  # a held chat waits for the retry, its messages queued
            self._wake(chat)

    def _wake(self, chat: str) -> None:
        worker = self._workers.get(chat)
        if worker is None or worker.done():
            self._workers[chat] = asyncio.create_task(self._work(chat), name=f"chat-{chat}")

    async def recover(self) -> int:
        """Take up every message whose handling had not ended (after a restart, or a retry).

        The graph's open rows, oldest first, are queued before the channel is polled; a chat's
        messages are handled in their order, so none is answered before an older one of its
        chat has been answered or given up.
        """
        # Only chats held before the read are let go: their rows stood still while it ran.
        held = dict(self._held)
        answer = await self.engine.call(
            "channel.pending",
            {"caller": self.caller, "channel": self.channel, "limit": PENDING_LIMIT},
        )
        messages: list[dict[str, Any]] = answer["messages"]
        for chat in held:
            del self._held[chat]
        if len(messages) < PENDING_LIMIT:
            self._drop_ended({m["id"] for m in messages}, held)
        for message in messages:
            self.take(message, fresh=str(message["chatId"]) in held)
        for chat in held:  # what was queued while it was held goes on too
            if self._queues.get(chat) and chat not in self._held:
                self._wake(chat)
        log.info("[channels] op=recover channel=%s open=%d", self.channel, len(messages))
        return len(messages)

    def _drop_ended(self, still_open: set[str], held: dict[str, str]) -> None:
        """A failed message whose row is no longer open ended after all: the error hid the
        engine's answer to a change it made (a timeout under load). Its queued copy is stale,
        and handling it again would answer it twice, or by settings changed since."""
        for chat, failed in held.items():
            queue = self._queues.get(chat, {})
            if failed not in still_open and failed in queue:
                del queue[failed]
                self._ended_here(failed)
                log.info("[channels] op=retry-ended channel=%s message=%s", self.channel, failed)

    async def idle(self) -> None:
        """Wait until every queued message has been handled."""
        while any(not w.done() for w in self._workers.values()):
            await asyncio.gather(*self._workers.values(), return_exceptions=True)

    async def close(self) -> None:
        """Stop the workers; what they had not finished is taken up after the restart."""
        if self._retry is not None:
            self._retry.cancel()
        for worker in self._workers.values():
            worker.cancel()
        for worker in self._workers.values():
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    def _ended_here(self, key: str) -> None:
        self._ended[key] = None
        if len(self._ended) > ENDED_KEPT:
            del self._ended[next(iter(self._ended))]

    async def _work(self, chat: str) -> None:
        queue = self._queues[chat]
        while queue and chat not in self._held:
            message = min(queue.values(), key=_position)
            self._handling[chat] = message["id"]
            held = False
            try:
                async with self._slots:
                    await self.handle(message)
                self._retry_delay = RETRY_FIRST
            except (RpcError, ManagerError, ChannelError, AnthropicError) as err:
                # The engine or the manager failed for a moment: what the message's row says
                # was done stands, and the rest is taken up again shortly (never a send twice:
                # a row left "replying" becomes "uncertain").
                log.error(
                    "[channels] op=handle error=%s channel=%s message=%s retry_s=%.0f: %s",
                    type(err).__name__,
                    self.channel,
                    message["id"],
                    self._retry_delay,
                    err,
                )
                self.status.error(type(err).__name__, str(err))
                # It stays first in its chat's queue: the chat's later messages wait for it.
                held = True
                self._held[chat] = message["id"]
                self._retry_later()
            finally:
                del self._handling[chat]
                if not held:
                    queue.pop(message["id"], None)
                    self._ended_here(message["id"])

    def _retry_later(self) -> None:
        """Take up the open messages again after a pause (one pending retry at a time)."""
        if self._retry is not None and not self._retry.done():
            return
        delay = self._retry_delay
        self._retry_delay = min(delay * 2, RETRY_MAX)

        async def retry() -> None:
            await asyncio.sleep(delay)
            try:
                await self.recover()
            except RpcError as err:
                log.warning(
                    "[channels] op=recover warn=engine channel=%s error=%s", self.channel, err
                )
            self._retry = None
            if self._held:  # still down, or a chat held while this retry ran
                self._retry_later()

        self._retry = asyncio.create_task(retry(), name="channels-retry")

    # --- one message ---------------------------------------------------------------------

    async def _update(self, message: dict[str, Any], **changes: Any) -> None:
        await self.engine.call(
            "channel.update", {"caller": self.caller, "id": message["id"], **changes}
        )

    def _stale(self, message: dict[str, Any]) -> str | None:
        if not str(message.get("channelKey", "")).startswith(self.bot_key):
            return "other-bot"
        received = message.get("receivedAt")
        if isinstance(received, str):
            age = datetime.now(UTC) - datetime.fromisoformat(received)
            if age.total_seconds() > self.settings.channel_stale_after:
                return "too-old"
        return None

    async def handle(self, message: dict[str, Any]) -> None:
        """Route, screen and answer one kept message, picking up where it was left."""
        stale = self._stale(message)
        if stale is not None:
            await self._update(message, state="stale", outcome=stale)
            log.info(
                "[channels] op=stale channel=%s message=%s why=%s",
                self.channel,
                message["id"],
                stale,
            )
            return
        if message["state"] == "replying":
            # Its reply was being sent when the role stopped: never risk sending it twice.
            await self._update(message, state="uncertain", outcome="reply-uncertain")
            log.warning(
                "[channels] op=reply-uncertain channel=%s message=%s", self.channel, message["id"]
            )
            return
        settings = channel_config.load(
            self.settings.channels_dir, self.channel, self.default_strangers
        )
        route = decide(message, settings)
        message = {**message, "route": route}
        log.info(
            "[channels] op=route channel=%s message=%s route=%s sender=%s chat=%s",
            self.channel,
            message["id"],
            route,
            message.get("senderId"),
            message.get("chatId"),
        )
        if route in ("ignored", "silenced"):
            await self._update(message, state=route, route=route)
            return
        if route == "owner":
            await self._owner(message)
        else:
            await self._public(message, settings)

    async def _public(
        self, message: dict[str, Any], settings: channel_config.ChannelConfig
    ) -> None:
        started = time.monotonic()
        text = str(message.get("text") or "")
        screening = await self.answering.gateway.screen(text, "public")
        await self._update(message, state="routed", route="public", verdict=screening.verdict)
        slug = settings.agent or self.account.default_agent
        agent = self.answering.agent(self.settings.accounts_dir / self.account.id / "agents" / slug)
        private = message.get("chatType") == "private"
        visitor = f"{self.channel}-{message['senderId'] if private else message['chatId']}"
        pieces: list[str] = []
        outcome = "answered"
        async with self._typing(message):
            async for said in self.answering.answer(agent, visitor, text, screening):
                if said.kind == "delta":
                    pieces.append(said.text)
                elif said.kind in ("refusal", "error"):
                    pieces, outcome = [said.text], said.outcome
                else:
                    outcome = said.outcome
        reply = "".join(pieces).strip() or UNAVAILABLE
        await self._reply_once(message, reply, outcome, started)

    async def _reply_once(
        self, message: dict[str, Any], text: str, outcome: str, started: float
    ) -> None:
        """Send one whole reply, marking it first so a restart never sends it again."""
        await self._update(message, state="replying", reply_state="sending")
        try:
            sent = await self.outbound.reply(message, text)
        except ChannelError as err:
            await self._failed(message, err)
            return
        await self._record_reply(message, sent, text)
        await self._update(
            message, state="answered", reply_state="sent", reply_message_id=sent, outcome=outcome
        )
        self._answered(message, outcome, started)

    async def _failed(self, message: dict[str, Any], err: Exception) -> None:
        reason = getattr(err, "reason", type(err).__name__)
        log.warning(
            "[channels] op=send-failed channel=%s message=%s reason=%s: %s",
            self.channel,
            message["id"],
            reason,
            err,
        )
        self.status.error(str(reason), str(err))
        await self._update(message, state="failed", reply_state="failed", error=str(err)[:2000])

    async def _record_reply(self, message: dict[str, Any], sent: str, text: str) -> None:
        try:
            await self.engine.call(
                "channel.record",
                {
                    "caller": self.caller,
                    "channel": self.channel,
                    "key": f"out:{message['chatId']}:{sent}",
                    "direction": "out",
                    "chatId": message["chatId"],
                    "chatType": message.get("chatType") or "private",
                    "messageId": sent,
                    "text": text[:32_000],
                    "inReplyTo": message["id"],
                },
            )
        except RpcError as err:  # the reply went out; only its copy in the graph is missing
            log.warning(
                "[channels] op=record-reply warn=engine message=%s error=%s", message["id"], err
            )

    def _answered(self, message: dict[str, Any], outcome: str, started: float) -> None:
        log.info(
            "[channels] op=answered channel=%s message=%s route=%s outcome=%s ms=%.0f",
            self.channel,
            message["id"],
            message.get("route"),
            outcome,
            (time.monotonic() - started) * 1000,
        )

    @contextlib.asynccontextmanager
    async def _typing(self, message: dict[str, Any]) -> Any:
        async def show() -> None:
            while True:
                with contextlib.suppress(ChannelError):
                    await self.outbound.typing(message)
                await asyncio.sleep(TYPING_EVERY)

        task = asyncio.create_task(show())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- the owner -----------------------------------------------------------------------

    async def _owner(self, message: dict[str, Any]) -> None:
        started = time.monotonic()
        sender = str(message["senderId"])
        text = str(message.get("text") or "")
        before = message.get("promptsBefore")
        turn: Turn | None = None
        if message["state"] == "submitted" and message.get("sessionId"):
            # Typed before a restart: relay that turn; typing it again would ask twice.
            turn = Turn(str(message["sessionId"]), int(before or 0), typed(text))
        elif message["state"] == "routed" and isinstance(before, int):
            # The role stopped while typing it: its session may hold it already.
            turn = await self.admin.typed_already(sender, before, text)
            if turn is not None:
                await self._update(message, state="submitted", session_id=turn.session_id)
        if turn is None:
            screening = await self.answering.gateway.screen(text, "admin")
            await self._update(message, state="routed", route="owner", verdict=screening.verdict)

            async def counted(prompts: int) -> None:
                await self._update(message, prompts_before=prompts)

            try:
                turn = await self.admin.start(sender, text, counted)
            except ManagerUnavailable:
                raise  # nothing answers for a moment: the message is held and tried again
            except ManagerError as err:  # the manager refused it: the owner is told
                log.error(
                    "[channels] op=turn-start error=manager channel=%s sender=%s: %s",
                    self.channel,
                    sender,
                    err,
                )
                self.status.error("manager", str(err))
                self._tally(sender, "failed")
                await self._reply_once(message, UNAVAILABLE, "manager-unavailable", started)
                return
            await self._update(
                message,
                state="submitted",
                session_id=turn.session_id,
                prompts_before=turn.prompts_before,
            )
        await self._relay(message, turn, started)

    async def _relay(self, message: dict[str, Any], turn: Turn, started: float) -> None:
        sender = str(message["senderId"])
        seen = Seen()
        pieces: list[str] = []
        sent: str | None = None

        shown = ""  # the text the sent message holds now

        async def on_text(piece: str) -> None:
            nonlocal sent, shown
            pieces.append(piece.strip())
            body = split("\n\n".join(pieces), self.outbound.limit)[0]
            if sent is None:
                await self._update(message, state="replying", reply_state="sending")
                sent = await self.outbound.reply(message, body)
                await self._update(message, reply_state="sent", reply_message_id=sent)
            elif body != shown:
                await self.outbound.revise(message, sent, body)
            shown = body

        ack = asyncio.create_task(self._watch_ack(message, turn, seen))
        outcome, reply = "relay-ok", None
        try:
            async with self._typing(message):
                await asyncio.wait_for(
                    self.admin.relay(turn, on_text, seen), self.settings.telegram_turn_timeout
                )
            if not seen.ended:  # the session stopped before the turn ended
                log.error(
                    "[channels] op=relay error=session-ended channel=%s sender=%s session=%s "
                    "prompt=%s",
                    self.channel,
                    sender,
                    turn.session_id,
                    seen.prompt,
                )
                outcome, reply = "failed", UNAVAILABLE
        except TimeoutError:
            outcome = "timeout-relay-missed" if seen.prompt else "timeout-no-turn"
            log.warning(
                "[channels] op=turn-timeout cause=%s channel=%s sender=%s session=%s waitedMs=%.0f",
                outcome.removeprefix("timeout-"),
                self.channel,
                sender,
                turn.session_id,
                (time.monotonic() - started) * 1000,
            )
            reply = TIMED_OUT
        except (AnthropicError, ManagerError) as err:  # an API error as the answer, a lost manager
            log.error(
                "[channels] op=relay error=%s channel=%s sender=%s session=%s: %s",
                getattr(err, "reason", type(err).__name__),
                self.channel,
                sender,
                turn.session_id,
                err,
            )
            self.status.error(str(getattr(err, "reason", "relay")), str(err))
            outcome, reply = "failed", UNAVAILABLE
        except ChannelError as err:
            ack.cancel()
            self._tally(sender, "failed")
            await self._failed(message, err)
            return
        finally:
            ack.cancel()
        self._tally(sender, outcome)
        try:
            if sent is None:
                await self._reply_once(message, reply or UNAVAILABLE, outcome, started)
                return
            parts = split("\n\n".join(pieces), self.outbound.limit)
            if parts and parts[0] != shown:
                await self.outbound.revise(message, sent, parts[0])
            for part in parts[1:]:  # a long answer goes on in more messages
                await self.outbound.reply(message, part)
        except ChannelError as err:
            await self._failed(message, err)
            return
        await self._record_reply(message, sent, "\n\n".join(pieces))
        await self._update(message, state="answered", outcome=outcome)
        self._answered(message, outcome, started)

    async def _watch_ack(self, message: dict[str, Any], turn: Turn, seen: Seen) -> None:
        """Log soon, not only at the timeout, when typed input started no turn."""
        waited = self.settings.channel_input_ack
        await asyncio.sleep(waited)
        if not seen.prompt:
            log.warning(
                "[channels] op=input-no-turn channel=%s sender=%s session=%s waitedMs=%.0f",
                self.channel,
                message.get("senderId"),
                turn.session_id,
                waited * 1000,
            )

    def _tally(self, sender: str, outcome: str) -> None:
        tally = self.tallies.setdefault(sender, Tally())
        field = outcome.replace("-", "_")
        setattr(tally, field, getattr(tally, field) + 1)
        log.info(
            "[channels] op=inbound-outcome relay-ok=%d timeout-no-turn=%d timeout-relay-missed=%d "
            "failed=%d channel=%s sender=%s",
            tally.relay_ok,
            tally.timeout_no_turn,
            tally.timeout_relay_missed,
            tally.failed,
            self.channel,
            sender,
        )
