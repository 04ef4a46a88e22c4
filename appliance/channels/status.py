"""What a channel is doing, for the admin UI: ``<channels_dir>/<channel>-status.json``.

The channels role writes it when the state changes; the app reads it (Settings page, ``/bot``).
Internal errors and diagnostics go here and to the log — never to a chat::

    {"state": "no-token" | "connecting" | "polling" | "token-invalid" | "unavailable"
              | "stopped",
     "bot": {"id", "username", "name"} | null,
     "lastError": {"at", "reason", "message"} | null,
     "updatedAt": "…", "pid": …}
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.core.fsio import write_atomic

log = logging.getLogger(__name__)

STATES = ("no-token", "connecting", "polling", "token-invalid", "unavailable", "stopped")
MAX_ERROR_CHARS = 500


def path_of(channels_dir: Path, channel: str) -> Path:
    """Where one channel's status is kept."""
    return channels_dir / f"{channel}-status.json"


def now_iso() -> str:
    """Now, as the status file writes times."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Status:
    """One channel's status, as the role keeps it."""

    channels_dir: Path
    channel: str
    state: str = "stopped"
    bot: dict[str, Any] | None = None
    last_error: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def set(self, state: str, **changes: Any) -> None:
        """Change the state (and other fields); written only when something changed."""
        before = (self.state, self.bot, self.last_error)
        self.state = state
        if "bot" in changes:
            self.bot = changes["bot"]
        if before != (self.state, self.bot, self.last_error):
            self.write()

    def error(self, reason: str, message: str) -> None:
        """Keep the latest error for the admin UI (and write it)."""
        self.last_error = {"at": now_iso(), "reason": reason, "message": message[:MAX_ERROR_CHARS]}
        self.write()

    def write(self) -> None:
        """Write the file (a failure is logged: the channel goes on)."""
        data = {
            "state": self.state,
            "bot": self.bot,
            "lastError": self.last_error,
            "updatedAt": now_iso(),
            "pid": os.getpid(),
        }
        try:
            self.channels_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(path_of(self.channels_dir, self.channel), json.dumps(data) + "\n")
        except OSError as err:
            log.warning(
                "[channels] op=status warn=unwritten channel=%s error=%s", self.channel, err
            )


def read(channels_dir: Path, channel: str) -> dict[str, Any]:
    """The channel's last written status (``{"state": "stopped"}`` before any)."""
    try:
        data = json.loads(path_of(channels_dir, channel).read_text())
    except (OSError, ValueError):
        return {"state": "stopped", "bot": None, "lastError": None}
    return data if isinstance(data, dict) else {"state": "stopped", "bot": None, "lastError": None}
