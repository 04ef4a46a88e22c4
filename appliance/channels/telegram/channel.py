"""The Telegram channel's loop: the bot's token, its long poll, and the lifeline it feeds.

:meth:`TelegramChannel.run` keeps going until stopped:

- no token (``keys/telegram-bot-token``, from the Settings page or the ``telegram-token-set``
  tool) → ``no-token``, and it looks again every few seconds;
- a token → ``getMe``, then the lifeline takes up what it had not finished
  (:meth:`~appliance.channels.lifeline.Lifeline.recover`), then it polls: ``getUpdates`` from the
  offset, every message of the batch kept (forensic rows, chats side by side, each chat in
  order), and only then the offset moved past them — the next poll confirms them to Telegram.
  A batch that could not be kept (the engine is down) is asked for again, unconfirmed;
- a token Telegram refuses → ``token-invalid`` until the owner enters another; Telegram
  unreachable → ``unavailable``, tried again with backoff; a changed token → the old bot is
  closed and the new one started (a re-pairing sends nothing; messages delivered to the old bot
  are kept and left unanswered as stale).

The state and the last error are in the channel's status file for the admin UI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from typing import Any

from telegram import Update

from appliance.agents.answering import Answering
from appliance.channels.adapter import ChannelUnavailable, Inbound, TokenInvalid
from appliance.channels.lifeline import Lifeline
from appliance.channels.outbound import Outbound
from appliance.channels.status import Status
from appliance.channels.telegram.bot import CHANNEL, MAX_TEXT, BotInfo, TelegramBot, inbound_of
from appliance.core.accounts import Account
from appliance.core.config import Settings
from appliance.core.fsio import read_secret
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.web.manager_client import ManagerClient

log = logging.getLogger(__name__)

TOKEN_LOOK = 3.0  # seconds between looks for a token (none yet, or a refused one)
MAX_BACKOFF = 60.0
KEEP_AT_ONCE = 4  # forensic writes in flight at once (chats side by side, each in order)


class TelegramChannel:
    """The bot of the device's account, polled and answered."""

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
        self.status = Status(settings.channels_dir, CHANNEL)
        self.lifeline: Lifeline | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Serve the bot until ``stop`` is set."""
        backoff = 1.0
        refused: str | None = None
        while not stop.is_set():
            token = read_secret(self.settings.telegram_token_path)
            if token is None or token == refused:
                self.status.set("no-token" if token is None else "token-invalid")
                await _wait(stop, TOKEN_LOOK)
                continue
            try:
                await self._serve(token, stop)
                backoff = 1.0
            except TokenInvalid as err:
                refused = token
                log.error("[channels] op=start error=token-invalid channel=%s", CHANNEL)
                self.status.error("token-invalid", str(err))
                self.status.set("token-invalid", bot=None)
            except ChannelUnavailable as err:
                wait = max(backoff, err.retry_after or 0.0)
                log.warning(
                    "[channels] op=poll warn=unavailable channel=%s retry_s=%.0f: %s",
                    CHANNEL,
                    wait,
                    err,
                )
                self.status.error("unavailable", str(err))
                self.status.set("unavailable")
                await _wait(stop, wait)
                backoff = min(backoff * 2, MAX_BACKOFF)
        self.status.set("stopped")

    async def _serve(self, token: str, stop: asyncio.Event) -> None:
        """One bot, from getMe until the token changes or ``stop`` (raises ChannelError)."""
        bot = TelegramBot(
            token, self.settings.telegram_api_url, self.settings.telegram_poll_timeout
        )
        self.status.set("connecting")
        lifeline: Lifeline | None = None
        try:
            info = await bot.start()
            log.info(
                "[channels] op=connected channel=%s bot=%s username=%s",
                CHANNEL,
                info.id,
                info.username,
            )
            outbound = Outbound(bot, self.settings.keys_dir, MAX_TEXT)
            lifeline = self.lifeline = Lifeline(
                settings=self.settings,
                account=self.account,
                engine=self.engine,
                manager=self.manager,
                answering=self.answering,
                outbound=outbound,
                status=self.status,
                bot_key=f"{CHANNEL}:{info.id}:",
            )
            await self._recover(lifeline, stop)
            self.status.set("polling", bot=info.to_json())
            await self._poll(bot, info, lifeline, token, stop)
        finally:
            if lifeline is not None:
                await lifeline.close()
            await bot.close()

    async def _recover(self, lifeline: Lifeline, stop: asyncio.Event) -> None:
        """Take up what was left open; while the engine is down, wait for it."""
        delay = 1.0
        while not stop.is_set():
            try:
                await lifeline.recover()
                return
            except RpcError as err:
                log.warning("[channels] op=recover warn=engine channel=%s error=%s", CHANNEL, err)
                self.status.error("engine", str(err))
                await _wait(stop, delay)
                delay = min(delay * 2, MAX_BACKOFF)

    async def _poll(
        self, bot: TelegramBot, info: BotInfo, lifeline: Lifeline, token: str, stop: asyncio.Event
    ) -> None:
        offset: int | None = None
        delay = 1.0
        while not stop.is_set():
            if read_secret(self.settings.telegram_token_path) != token:
                log.info("[channels] op=token-changed channel=%s (the new bot starts)", CHANNEL)
                return
            updates = await _until_stopped(bot.updates(offset), stop)
            if updates is None:
                return
            try:
                kept = await self._keep(lifeline, updates, info)
            except RpcError as err:
                # Not kept, so not confirmed: the same updates come again on the next poll.
                log.warning(
                    "[channels] op=keep warn=engine channel=%s updates=%d retry_s=%.0f error=%s",
                    CHANNEL,
                    len(updates),
                    delay,
                    err,
                )
                self.status.error("engine", str(err))
                await _wait(stop, delay)
                delay = min(delay * 2, MAX_BACKOFF)
                continue
            delay = 1.0
            if updates:
                offset = max(update.update_id for update in updates) + 1
            for message in kept:
                lifeline.take(message)

    async def _keep(
        self, lifeline: Lifeline, updates: tuple[Update, ...], info: BotInfo
    ) -> list[dict[str, Any]]:
        """The forensic row of every message of a batch: chats side by side, each in order."""
        by_chat: dict[str, list[Inbound]] = defaultdict(list)
        for update in updates:
            inbound = inbound_of(update, info)
            if inbound is not None:
                by_chat[inbound.chat_id].append(inbound)

        slots = asyncio.Semaphore(KEEP_AT_ONCE)

        async def keep_chat(messages: list[Inbound]) -> list[dict[str, Any]]:
            kept = []
            for inbound in messages:
                async with slots:
                    kept.append(await lifeline.keep(inbound))
            return kept

        kept = await asyncio.gather(*(keep_chat(chat) for chat in by_chat.values()))
        return [message for chat in kept for message in chat]


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _until_stopped(call: Any, stop: asyncio.Event) -> tuple[Update, ...] | None:
    """Run a long poll unless ``stop`` is set first (then cancel it; None)."""
    poll = asyncio.ensure_future(call)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if poll.done():
        result: tuple[Update, ...] = poll.result()
        return result
    poll.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await poll
    return None
