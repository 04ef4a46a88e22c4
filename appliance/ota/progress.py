"""Progress of an update, as JSON lines (for the web UI) or a terminal bar, and phase deadlines.

``--progress json`` prints one object per line on stdout::

    {"phase": "write-root", "done": 73400320, "total": 1879048192, "message": "slot b root"}

Phases, in order: ``verify``, ``backup``, ``write-boot``, ``write-root``, ``readback``, ``arm``,
``reboot``, ``done`` — or ``error`` (its message says what to do). ``maxy ota commit`` reports
``health``, ``switch``, ``done`` or ``error`` the same way. Each phase's first and last line
are always printed; lines in between at most every :data:`MIN_INTERVAL` seconds.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from appliance.ota.errors import PhaseTimeout

APPLY_PHASES = ("verify", "backup", "write-boot", "write-root", "readback", "arm", "reboot")
MIN_INTERVAL = 0.2
BAR_WIDTH = 30


class Progress(Protocol):
    """Receives ``(phase, done, total, message)`` as an update advances."""

    def __call__(self, phase: str, done: int, total: int, message: str = "") -> None: ...


class _Throttled:
    """Drop updates that come too quickly, never a phase's first or last one."""

    def __init__(self) -> None:
        self._phase = ""
        self._last = 0.0

    def due(self, phase: str, done: int, total: int) -> bool:
        now = time.monotonic()
        if phase != self._phase or done >= total or now - self._last >= MIN_INTERVAL:
            self._phase, self._last = phase, now
            return True
        return False


class JsonLines(_Throttled):
    """One JSON object per line, flushed at once (the web UI streams these)."""

    def __init__(self, out: TextIO | None = None) -> None:
        super().__init__()
        self.out = out or sys.stdout

    def __call__(self, phase: str, done: int, total: int, message: str = "") -> None:
        if not self.due(phase, done, total):
            return
        line = {"phase": phase, "done": done, "total": total, "message": message}
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()


class Bar(_Throttled):
    """A one-line progress bar per phase on stderr."""

    def __init__(self, out: TextIO | None = None) -> None:
        super().__init__()
        self.out = out or sys.stderr
        self._shown = ""

    def __call__(self, phase: str, done: int, total: int, message: str = "") -> None:
        if phase != self._shown and self._shown:
            self.out.write("\n")
        self._shown = phase
        if not self.due(phase, done, total):
            return
        share = done / total if total > 0 else 1.0
        filled = int(BAR_WIDTH * min(share, 1.0))
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        self.out.write(f"\r{phase:<10} [{bar}] {share:4.0%} {message[:60]:<60}")
        if phase in ("done", "error"):
            self.out.write("\n")
            self._shown = ""
        self.out.flush()


class Silent:
    """Discard progress."""

    def __call__(self, phase: str, done: int, total: int, message: str = "") -> None:
        return None


@dataclass
class Deadline:
    """The time limit of one phase; :meth:`check` raises once it has passed."""

    phase: str
    seconds: float
    setting: str
    started: float = field(default_factory=time.monotonic)

    @property
    def remaining(self) -> float:
        """Seconds left (never negative)."""
        return max(0.0, self.started + self.seconds - time.monotonic())

    def check(self) -> None:
        """Raise :class:`PhaseTimeout` if the phase is out of time."""
        if time.monotonic() > self.started + self.seconds:
            raise PhaseTimeout(
                f"the {self.phase} phase took longer than its limit of {self.seconds:g} s; "
                f"nothing was switched. Check the card and the network, or raise {self.setting}."
            )
