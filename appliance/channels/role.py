"""``maxy channels``: the channels' own role — Telegram's long poll, WhatsApp's linked device,
and the inbound lifeline both feed.

Why a role of its own (not a task of the app): the lifeline must keep polling while the web UI
restarts, and a burst of messages (twenty people at once) must not share an event loop with the
pages and the admin shell; a crash or a kill of this process loses nothing (every message is
kept before its update is confirmed) and is restarted by systemd (``maxy-channels.service``) or
``maxy run``. It needs no socket: the app reads its status file, the owner's tools send through
the same outbound gate themselves (:mod:`appliance.mcp.telegram`).

It talks to the engine (forensic rows, the public agents' memory), the session manager (the
owner's admin turns), the Anthropic API (gateway, public agents) and Telegram. Under systemd it
is ``Type=notify``: READY once it runs, watchdog pings from its own event loop.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from appliance.agents.answering import Answering
from appliance.channels.status import Status
from appliance.channels.telegram.channel import TelegramChannel
from appliance.core.accounts import Account, validate_account_id
from appliance.core.config import Settings
from appliance.core.systemd import Notifier
from appliance.rpc.client import RpcClient
from appliance.web.manager_client import ManagerClient

log = logging.getLogger(__name__)

ENGINE_TIMEOUT = 30.0
MANAGER_TIMEOUT = 60.0  # a spawn waits for the CLI's PID file (the manager's own limit is 30 s)


async def whatsapp(
    settings: Settings, account: Account, engine: RpcClient, stop: asyncio.Event
) -> None:
    """WhatsApp's linked device, unless its library cannot be loaded here (then Telegram goes on
    and the reason is in the log and on the Settings page)."""
    try:
        from appliance.channels.whatsapp.channel import WhatsAppChannel
    except (ImportError, OSError) as err:  # the Go core or libmagic missing on this system
        log.error("[channels] op=start error=whatsapp-unavailable: %s", err)
        Status(settings.channels_dir, "whatsapp").error(
            "library", f"WhatsApp cannot run on this device: {err}"
        )
        return
    manager = ManagerClient(settings.manager_socket, timeout=MANAGER_TIMEOUT)
    answering = Answering(settings, account, engine)
    try:
        await WhatsAppChannel(settings, account, engine, manager, answering).run(stop)
    finally:
        await answering.aclose()


async def run(settings: Settings, notifier: Notifier | None = None) -> None:
    """Serve every channel until SIGTERM or SIGINT."""
    account = validate_account_id(settings.accounts_dir, settings.account_id)
    engine = RpcClient(settings.engine_socket, timeout=ENGINE_TIMEOUT)
    manager = ManagerClient(settings.manager_socket, timeout=MANAGER_TIMEOUT)
    answering = Answering(settings, account, engine)
    telegram = TelegramChannel(settings, account, engine, manager, answering)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("[channels] op=start account=%s channels=telegram,whatsapp", account.id)
    notifier = notifier or Notifier.disabled()
    try:
        async with notifier.serving("channels", "serving Telegram and WhatsApp"):
            await asyncio.gather(telegram.run(stop), whatsapp(settings, account, engine, stop))
    finally:
        await answering.aclose()
    log.info("[channels] op=stop")
