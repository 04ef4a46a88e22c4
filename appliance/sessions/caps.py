"""Safeguards on how many sessions run: specialist cap, operator reserve, total cap, idle reaper.

Every spawn takes a :class:`Slot` before its process starts, in one synchronous step, so
concurrent spawns see each other and the caps hold exactly:

- total: at most ``pty_cap`` slots of any kind (``pty-cap-reached``);
- operator reserve: specialists never take the last ``operator_reserve`` slots
  (``operator-slots-reserved``);
- specialists: at most ``specialist_cap``; one more evicts the oldest idle specialist, whose slot
  it takes over, or is refused with ``specialist-cap-reached`` when every specialist is busy or
  still starting;
- memory: a spawn that evicts nobody needs ``memory_mb`` of the kernel's MemAvailable, after
  ``memory_mb`` for each session still starting (``memory-low``). A session with its MCP servers
  takes about 1 GB (`just bench-memory`): refusing it with a clear answer beats the kernel's
  out-of-memory killer ending one (a session, see ``SESSION_OOM_SCORE_ADJ``) mid-turn.

The idle reaper stops a specialist that has been silent (no output, input or file change) for
``idle_limit`` seconds; a busy one is never stopped.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.sessions.errors import CapRefused
from appliance.sessions.pty import PtyHandle

_tokens = itertools.count(1)


def available_mb() -> int | None:
    """What the kernel can give without swapping (MemAvailable), in MB; None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        return None
    return None


@dataclass(eq=False)
class Slot:
    """A place for one session, from admission until its process is reaped."""

    specialist: bool
    token: int = field(default_factory=lambda: next(_tokens))
    created: float = field(default_factory=time.monotonic)
    handle: PtyHandle | None = None
    session_id: str | None = None
    evicted: bool = False


class Caps:
    """The slots in use and the admission rules."""

    def __init__(
        self, specialist_cap: int, operator_reserve: int, total_cap: int, memory_mb: int = 0
    ) -> None:
        self.specialist_cap = specialist_cap
        self.operator_reserve = operator_reserve
        self.total_cap = total_cap
        self.memory_mb = memory_mb
        self.slots: set[Slot] = set()

    def _counted(self) -> list[Slot]:
        return [slot for slot in self.slots if not slot.evicted]

    def admit(self, specialist: bool, busy: Callable[[Slot], bool]) -> tuple[Slot, Slot | None]:
        """Take a slot, or raise :class:`CapRefused`; also return a specialist to evict."""
        counted = self._counted()
        victim: Slot | None = None
        if specialist:
            specialists = [slot for slot in counted if slot.specialist]
            if len(specialists) >= self.specialist_cap:
                idle = [
                    slot
                    for slot in specialists
                    if slot.session_id is not None
                    and slot.handle is not None
                    and slot.handle.alive
                    and not slot.handle.stopping
                    and not busy(slot)
                ]
                if not idle:
                    raise CapRefused(
                        "specialist-cap-reached",
                        f"All {self.specialist_cap} specialist sessions are busy. "
                        "Try again when one finishes, or raise MAXY_SPECIALIST_CAP.",
                        cap=self.specialist_cap,
                    )
                victim = min(idle, key=lambda slot: slot.created)
            elif len(counted) >= self.total_cap - self.operator_reserve:
                raise CapRefused(
                    "operator-slots-reserved",
                    f"The last {self.operator_reserve} of {self.total_cap} session slots are kept "
                    "for the operator. Stop a session or lower MAXY_OPERATOR_RESERVE.",
                    cap=self.total_cap,
                    reserve=self.operator_reserve,
                )
        elif len(counted) >= self.total_cap:
            raise CapRefused(
                "pty-cap-reached",
                f"{self.total_cap} sessions are running, the most allowed. "
                "Stop one, or raise MAXY_PTY_CAP.",
                cap=self.total_cap,
            )
        if victim is None and self.memory_mb:
            self._check_memory(counted)
        if victim is not None:
            victim.evicted = True
        slot = Slot(specialist)
        self.slots.add(slot)
        return slot, victim

    def _check_memory(self, counted: list[Slot]) -> None:
        """Refuse a spawn the free memory cannot hold (see the module docstring)."""
        free = available_mb()
        if free is None:
            return
        starting = sum(1 for slot in counted if slot.session_id is None)
        left = free - starting * self.memory_mb
        if left < self.memory_mb:
            pending = f", less {starting} session(s) still starting" if starting else ""
            raise CapRefused(
                "memory-low",
                f"A session needs about {self.memory_mb} MB of free memory; {left} MB is left "
                f"({free} MB free{pending}). Stop one of the {len(counted)} sessions, or lower "
                "MAXY_SESSION_MEMORY_MB (0 turns this check off).",
                free=free,
                need=self.memory_mb,
                starting=starting,
            )

    def release(self, slot: Slot) -> None:
        """Give a slot back (its process is reaped, or it never started)."""
        self.slots.discard(slot)

    def counts(self) -> dict[str, int]:
        """Slots in use, by kind."""
        counted = self._counted()
        return {
            "total": len(counted),
            "specialists": sum(1 for slot in counted if slot.specialist),
            "evicting": len(self.slots) - len(counted),
            "totalCap": self.total_cap,
            "specialistCap": self.specialist_cap,
            "operatorReserve": self.operator_reserve,
        }

    def idle_specialists(self, limit: float, busy: Callable[[Slot], bool]) -> list[Slot]:
        """Specialists silent for at least ``limit`` seconds and not busy."""
        now = time.monotonic()
        return [
            slot
            for slot in self._counted()
            if slot.specialist
            and slot.handle is not None
            and slot.handle.alive
            and not slot.handle.stopping
            and slot.session_id is not None
            and now - slot.handle.last_activity >= limit
            and not busy(slot)
        ]
