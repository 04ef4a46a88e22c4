"""The due loop: the scheduling plugin's reminders and events fire as admin turns.

The session manager runs it (it is the process that starts sessions). At start, and then every
``MAXY_SCHEDULE_INTERVAL`` seconds (sooner when the next item is due sooner), it asks the engine
to claim what is due (``schedule.claim``: each item once, however many times it was due while
the device was off — the engine has already moved it to its next time) and starts an admin
session for each, with the item as its message and ``closeAfterTurn``: the turn runs, the
session ends and stays in the admin shell's session list (channel ``scheduling``). Then it tells
the engine how that went (``schedule.fired``: a spawn that failed is tried again shortly).

While the engine is unreachable (it starts after the manager, or restarts) the loop waits and
asks again; ``[scheduling] warn reason=engine-unavailable`` is logged once per outage. Log lines:
``[scheduling] op=catch-up fired=N`` after the first pass that reached the engine, and one
``[scheduling] op=fire id=… kind=… due=… missed=… session=…`` (or ``error=…``) per firing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from appliance.core.accounts import AccountError
from appliance.core.clock import Clock, utc_now
from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.sessions.errors import SessionError
from appliance.sessions.registry import Row
from appliance.sessions.spawn import SpawnRequest

log = logging.getLogger(__name__)

ENGINE_TIMEOUT = 10.0
CHANNEL = "scheduling"
MIN_WAIT = 1.0  # seconds between passes, however soon the next item is due

Spawn = Callable[[SpawnRequest], Awaitable[Row]]


def _when(iso: str) -> str:
    moment = datetime.fromisoformat(iso)
    return f"{moment:%A} {moment.day} {moment:%B %Y, %H:%M}"


def turn_message(item: dict[str, Any]) -> str:
    """The first message of the admin turn a due item starts."""
    zone = item.get("timeZone") or "UTC"
    if item["kind"] == "event":
        lines = [f"Event soon: {item['name']}", f"It starts {_when(item['occurrence'])} ({zone})."]
        if item.get("location"):
            lines[-1] = lines[-1][:-1] + f", at {item['location']}."
    else:
        lines = [f"Reminder due: {item['name']}", f"It was due {_when(item['dueAt'])} ({zone})."]
    missed = int(item.get("missed") or 0)
    if missed:
        lines.append(
            f"It also came due {missed} more time{'s' if missed > 1 else ''} while the device was "
            "off or busy; this one turn stands for all of them."
        )
    if item.get("description"):
        lines.append(str(item["description"]))
    if item.get("rrule"):
        following = f"; next: {_when(item['next'])}" if item.get("next") else ""
        lines.append(f"It repeats ({item['rrule']}){following}.")
    lines.append(
        f"(Scheduled {item['kind']} {item['id']}. Do what it asks if you can; otherwise tell the "
        "owner about it plainly.)"
    )
    return "\n".join(lines)


class DueLoop:
    """Claims due items from the engine and starts a turn for each."""

    def __init__(
        self, settings: Settings, account_id: str, spawn: Spawn, clock: Clock = utc_now
    ) -> None:
        self.interval = settings.schedule_interval
        self.engine = RpcClient(settings.engine_socket, timeout=ENGINE_TIMEOUT)
        self.caller = Caller(account_id=account_id).to_wire()
        self.spawn = spawn
        self.clock = clock
        self.fired = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Pass over what is due until ``stop`` is set."""
        caught_up = False
        unavailable = False
        while not stop.is_set():
            try:
                wait = await self.check(stop)
            except RpcError as err:
                if not unavailable:
                    log.warning(
                        "[scheduling] warn reason=engine-unavailable error=%s",
                        getattr(err, "code", None) or type(err).__name__,
                    )
                unavailable, wait = True, self.interval
            else:
                unavailable = False
                if not caught_up:
                    log.info("[scheduling] op=catch-up fired=%d", self.fired)
                    caught_up = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def check(self, stop: asyncio.Event) -> float:
        """Fire everything due now; return the seconds until the next pass."""
        while True:
            answer = await self.engine.call(
                "schedule.claim", {"caller": self.caller, "now": self.clock().isoformat()}
            )
            due: list[dict[str, Any]] = answer.get("due") or []
            for item in due:
                if stop.is_set():
                    break
                await self.fire(item)
            if not due or stop.is_set():
                break
        wait = self.interval
        if answer.get("nextDueAt"):
            until = datetime.fromisoformat(answer["nextDueAt"]) - self.clock()
            wait = min(wait, until.total_seconds())
        return max(wait, MIN_WAIT)

    async def fire(self, item: dict[str, Any]) -> None:
        """Start the admin turn of one claimed item and tell the engine how it went."""
        session: str | None = None
        error: str | None = None
        request = SpawnRequest(
            kind="admin",
            message=turn_message(item),
            close_after_turn=True,
            channel=CHANNEL,
            sender_id=str(item["id"]),
        )
        try:
            row = await self.spawn(request)
            session = str(row["id"])
        except (SessionError, AccountError, OSError) as err:
            error = f"{getattr(err, 'code', type(err).__name__)}: {err}"
        self.fired += 1
        log.info(
            "[scheduling] op=fire id=%s kind=%s due=%s missed=%s attempt=%s session=%s error=%s",
            item["id"],
            item["kind"],
            item.get("dueAt"),
            item.get("missed", 0),
            item.get("attempt", 1),
            session,
            error,
        )
        params = {"caller": self.caller, "id": item["id"], "now": self.clock().isoformat()}
        try:
            await self.engine.call(
                "schedule.fired", {**params, "sessionId": session, "error": error}
            )
        except RpcError as err:
            log.warning(
                "[scheduling] warn reason=fired-unrecorded id=%s error=%s",
                item["id"],
                getattr(err, "code", None) or type(err).__name__,
            )
