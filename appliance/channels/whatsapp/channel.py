"""The WhatsApp channel's loop: the linked device's connection, its pairing, and the lifeline.

:meth:`WhatsAppChannel.run` keeps going until stopped:

- no session and no link asked for → ``not-linked`` (or ``logged-out`` after WhatsApp logged
  the device out), looked at again every few seconds; nothing connects;
- the owner asked to link (Settings → WhatsApp) → the library connects and shows QR codes:
  each code (:meth:`on_qr`) replaces the last in the ``qr`` file the Settings page draws
  (``pairing``); scanned (:meth:`on_paired`) → the code is removed;
- connected (:meth:`on_connected`) → the lifeline for this number (its own delivery keys:
  messages kept for another number are ``stale``, never answered) takes up what it had not
  finished; a reconnect keeps the lifeline it has. Neither sends anything;
- logged out by WhatsApp (:meth:`on_logged_out`: unlinked on the phone, or the session
  replaced) → the session files are removed, ``logged-out`` and the reason in the status file,
  and the Settings page asks to link again. Nothing is sent.

Each message event (:meth:`on_message`) is kept first (the lifeline's forensic row), then
taken: WhatsApp has no cursor to hold back, so a row that cannot be written (the engine is down)
is tried again here a few times before it is logged as lost (``op=keep error=lost``).

The owner's messages from the ``whatsapp-send`` tool come through the outbox (:mod:`.linking`)
and go out through the same gate as every reply, to a chat that has written to the device only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from neonize.aioze.client import NewAClient
from neonize.aioze.events import (
    ConnectedEv,
    DisconnectedEv,
    LoggedOutEv,
    MessageEv,
    PairStatusEv,
)
from neonize.exc import NeonizeError
from neonize.proto.Neonize_pb2 import JID, LoggedOut, PairStatus

from appliance.agents.answering import Answering
from appliance.channels.adapter import ChannelError, OutboundBlocked
from appliance.channels.lifeline import Lifeline
from appliance.channels.outbound import Outbound
from appliance.channels.status import Status
from appliance.channels.whatsapp import linking
from appliance.channels.whatsapp.device import MAX_TEXT, Sender, WhatsAppDevice
from appliance.channels.whatsapp.events import inbound_of, jid_text
from appliance.channels.whatsapp.linking import CHANNEL
from appliance.core.accounts import Account
from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.web.manager_client import ManagerClient

log = logging.getLogger(__name__)

LOOK = 3.0  # seconds between looks for a session or a link request
OUTBOX_EVERY = 0.5
KEEP_TRIES = 5
MAX_BACKOFF = 60.0
RELINK = "WhatsApp logged this device out ({why}). Link it again on Settings → WhatsApp."


class WhatsAppChannel:
    """The owner's number as a linked device, answered through the lifeline."""

    def __init__(
        self,
        settings: Settings,
        account: Account,
        engine: RpcClient,
        manager: ManagerClient,
        answering: Answering,
    ) -> None:
        self.settings = settings
        self.account = account
        self.engine = engine
        self.manager = manager
        self.answering = answering
        self.channels_dir = settings.channels_dir
        self.status = Status(settings.channels_dir, CHANNEL)
        self.device: WhatsAppDevice | None = None
        self.lifeline: Lifeline | None = None
        self.outbound: Outbound | None = None
        self.me: JID | None = None
        self.me_lid: JID | None = None
        self.ready = asyncio.Event()
        self.ended = asyncio.Event()
        self.codes: list[str] = []  # every pairing code shown by this process: never sent
        self.client: NewAClient | None = None

    # --- the connection ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve the linked device until ``stop`` is set."""
        backoff = 1.0
        while not stop.is_set():
            if not (
                linking.has_session(self.channels_dir) or linking.link_requested(self.channels_dir)
            ):
                if self.status.state != "logged-out":
                    self.status.set("not-linked", bot=None)
                await _wait(stop, LOOK)
                continue
            try:
                await self._serve(stop)
                backoff = 1.0
            except (NeonizeError, ChannelError) as err:
                log.warning(
                    "[channels] op=connect warn=unavailable channel=%s retry_s=%.0f: %s",
                    CHANNEL,
                    backoff,
                    err,
                )
                self.status.error("unavailable", str(err))
                self.status.set("unavailable")
                await _wait(stop, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
        await self.detach()
        self.status.set("stopped")

    async def _serve(self, stop: asyncio.Event) -> None:
        """One connection, until ``stop``, a logout, or the library's end."""
        client = NewAClient(str(linking.session_path(self.channels_dir)))
        client.event(MessageEv)(self.on_message)
        client.event(ConnectedEv)(self.on_connected)
        client.event(DisconnectedEv)(self.on_disconnected)
        client.event(LoggedOutEv)(self.on_logged_out)
        client.event(PairStatusEv)(self.on_paired)
        client.event.qr(self.on_qr)
        self.client = client
        self.ended.clear()
        self.status.set("connecting")
        task = await client.connect()
        outbox = asyncio.create_task(self._outbox(stop), name="whatsapp-outbox")
        stopped = asyncio.create_task(stop.wait())
        ended = asyncio.create_task(self.ended.wait())
        try:
            await asyncio.wait({task, stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()  # the library's own end: its error says why
        finally:
            for waiter in (outbox, stopped, ended):
                waiter.cancel()
            with contextlib.suppress(NeonizeError, RuntimeError):
                await client.disconnect()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, NeonizeError):
                    await task

    async def attach(self, sender: Sender, me: JID, me_lid: JID | None) -> Lifeline:
        """The lifeline for the number ``me`` (kept as it is on a reconnect); sends nothing."""
        if self.lifeline is not None and self.me is not None and self.me.User == me.User:
            return self.lifeline
        await self.detach()
        self.me, self.me_lid = me, me_lid
        self.device = WhatsAppDevice(sender)
        self.outbound = Outbound(self.device, self.settings.keys_dir, MAX_TEXT, self._pairing)
        self.lifeline = Lifeline(
            settings=self.settings,
            account=self.account,
            engine=self.engine,
            manager=self.manager,
            answering=self.answering,
            outbound=self.outbound,
            status=self.status,
            bot_key=f"{CHANNEL}:{me.User}:",
            default_strangers="silent",  # a personal number: no auto-reply to strangers
        )
        delay = 1.0
        while True:
            try:
                await self.lifeline.recover()
                break
            except RpcError as err:
                log.warning("[channels] op=recover warn=engine channel=%s error=%s", CHANNEL, err)
                self.status.error("engine", str(err))
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF)
        self.ready.set()
        return self.lifeline

    async def detach(self) -> None:
        """Stop the lifeline (what it had not finished is taken up by the next one)."""
        self.ready.clear()
        if self.lifeline is not None:
            await self.lifeline.close()
        self.lifeline = self.device = self.outbound = None

    def _pairing(self) -> list[str]:
        """Pairing data the gate must never let out: the code on screen, its parts."""
        shown = [*self.codes, linking.qr(self.channels_dir) or ""]
        return [part for code in shown if code for part in (code, *code.split(","))]

    # --- the library's events ------------------------------------------------------------

    async def on_qr(self, _client: Any, data: bytes) -> None:
        """A (new) code to scan: shown on the Settings page only."""
        code = data.decode(errors="replace")
        self.codes = [*self.codes[-19:], code]
        linking.set_qr(self.channels_dir, code)
        self.status.set("pairing", bot=None)
        log.info("[channels] op=qr channel=%s (a new code is shown in Settings)", CHANNEL)

    async def on_paired(self, _client: Any, event: PairStatus) -> None:
        """The code was scanned: paired, or the pairing failed (shown in Settings)."""
        linking.set_qr(self.channels_dir, None)
        if event.Status == PairStatus.ERROR:
            log.error("[channels] op=pair error=refused channel=%s", CHANNEL)
            self.status.error("pair-failed", f"The pairing failed: {event.Error}. Link again.")
            return
        log.info("[channels] op=paired channel=%s number=%s", CHANNEL, event.ID.User)

    async def on_connected(self, client: Any, _event: Any) -> None:
        """Connected (first time or again): the lifeline for this number; nothing is sent."""
        me = await client.get_me()
        await self.connected(client, me.JID, me.LID if me.HasField("LID") else None, me.PushName)

    async def connected(self, sender: Sender, me: JID, me_lid: JID | None, name: str = "") -> None:
        """What a connection does, from the device's own JIDs."""
        linking.set_qr(self.channels_dir, None)
        with contextlib.suppress(FileNotFoundError):
            (self.channels_dir / "whatsapp" / "link").unlink()
        await self.attach(sender, me, me_lid)
        self.status.set("connected", bot={"number": me.User, "name": name, "jid": jid_text(me)})
        log.info("[channels] op=connected channel=%s number=%s", CHANNEL, me.User)

    async def on_disconnected(self, _client: Any, _event: Any) -> None:
        """The connection dropped; the library reconnects by itself. Nothing is sent."""
        log.warning("[channels] op=disconnected channel=%s (the library reconnects)", CHANNEL)
        self.status.set("connecting")

    async def on_logged_out(self, _client: Any, event: LoggedOut) -> None:
        """Logged out: forget the session, say so in Settings; nothing is sent to anyone."""
        why = LoggedOut.DESCRIPTOR.fields_by_name["Reason"].enum_type.values_by_number.get(
            event.Reason
        )
        reason = why.name.lower().replace("_", "-") if why else "unknown"
        log.warning("[channels] op=logged-out channel=%s reason=%s", CHANNEL, reason)
        linking.forget_session(self.channels_dir)
        await self.detach()
        self.status.error("logged-out", RELINK.format(why=reason))
        self.status.set("logged-out", bot=None)
        self.ended.set()

    async def on_message(self, _client: Any, event: MessageEv) -> None:
        """Keep one message first, then hand it to the lifeline."""
        await self.ready.wait()
        lifeline, device, me = self.lifeline, self.device, self.me
        if lifeline is None or device is None or me is None:
            return
        inbound = inbound_of(event, me, self.me_lid, device.sent_ids())
        if inbound is None:
            return
        delay = 0.5
        for attempt in range(KEEP_TRIES):
            try:
                message = await lifeline.keep(inbound)
                break
            except RpcError as err:
                if attempt == KEEP_TRIES - 1:
                    log.error(
                        "[channels] op=keep error=lost channel=%s key=%s: %s",
                        CHANNEL,
                        inbound.key,
                        err,
                    )
                    self.status.error("engine", str(err))
                    return
                await asyncio.sleep(delay)
                delay *= 2
        device.seen(inbound.message_id, jid_text(event.Info.MessageSource.Sender), inbound.text)
        lifeline.take(message)

    # --- the owner's outbox --------------------------------------------------------------

    async def _outbox(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if linking.unlink_requested(self.channels_dir):
                await self.unlink()
                return
            await self.send_posted()
            await _wait(stop, OUTBOX_EVERY)

    async def unlink(self) -> None:
        """The owner unlinked the device in Settings: log out, forget the session. Sends nothing."""
        if self.client is not None:
            try:
                await self.client.logout()
            except NeonizeError as err:  # forgotten here all the same; the phone lists it still
                log.warning("[channels] op=unlink warn=logout channel=%s error=%s", CHANNEL, err)
                self.status.error("unlink", f"{err} (remove it on the phone: Linked devices).")
        linking.forget_session(self.channels_dir)
        await self.detach()
        log.info("[channels] op=unlinked channel=%s", CHANNEL)
        self.status.set("not-linked", bot=None)
        self.ended.set()

    async def send_posted(self) -> int:
        """Send what the tools posted, through the gate; each gets its answer. How many."""
        if self.outbound is None:
            return 0
        posted = linking.waiting(self.channels_dir)
        for body in posted:
            linking.answer(self.channels_dir, str(body.get("id")), await self._send_one(body))
        return len(posted)

    async def _send_one(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.outbound is not None
        caller = Caller(account_id=self.account.id).to_wire()
        wanted = str((body.get("chat") or {}).get("chatId") or "")
        try:  # the chat is looked up again here: the box is not trusted to name a known chat
            chats = await self.engine.call(
                "channel.chats", {"caller": caller, "channel": CHANNEL, "limit": 1000}
            )
            chat = next((c for c in chats["chats"] if str(c["chatId"]) == wanted), None)
            sent = await self.outbound.send(chat, str(body.get("text") or ""))
        except OutboundBlocked as err:
            return {"sent": False, "reason": err.reason, "error": str(err)}
        except (ChannelError, RpcError) as err:
            return {"sent": False, "reason": getattr(err, "reason", "error"), "error": str(err)}
        log.info("[channels] op=owner-send channel=%s chat=%s message=%s", CHANNEL, wanted, sent)
        with contextlib.suppress(RpcError):
            await self.engine.call(
                "channel.record",
                {
                    "caller": caller,
                    "channel": CHANNEL,
                    "key": f"out:{wanted}:{sent}",
                    "direction": "out",
                    "chatId": wanted,
                    "chatType": chat.get("chatType") if chat else "private",
                    "messageId": sent,
                    "text": str(body.get("text") or ""),
                },
            )
        return {"sent": True, "chatId": wanted, "messageId": sent}


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
