"""``<data_dir>/ota/state.json``: what was installed where, the pending trial, what happened.

Written only by atomic rename (temp file, fsync, rename, fsync of the directory), so a power
cut leaves either the old or the new file. The card (autoboot.txt) and the firmware are the
truth about which slot boots; this file adds what they cannot say — versions, the trial's
origin, the next signing key waiting for a commit, and a history the UI turns into sentences
such as "the update to 1.4.0 failed its health check and the device went back to 1.3.2"::

    {
      "format": 1,
      "committed": {"slot": "a", "version": "1.3.2"},
      "slots": {"a": {"version": "1.3.2"}, "b": {"version": "1.4.0", "writtenAt": "…"}},
      "trial": {"slot": "b", "version": "1.4.0", "fromSlot": "a", "fromVersion": "1.3.2",
                "armedAt": "…", "tunnelConnected": false, "nextKey": null | {"keyId", "publicKey"}},
      "history": [{"at": "…", "outcome": "committed", "version": "1.4.0", "from": "1.3.2",
                   "message": "…"}]
    }

Outcomes: ``committed``, ``health-check-failed``, ``rolled-back`` (the trial slot did not come
up or was not committed: power cut, crash, watchdog), ``apply-failed``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.core.fsio import write_atomic
from appliance.ota.errors import StateError

log = logging.getLogger(__name__)

FORMAT = 1
HISTORY_LIMIT = 50
STATE_FILE = "state.json"
LOCK_FILE = "lock"


def now() -> str:
    """The current UTC time as ISO 8601 (seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def describe(entry: dict[str, Any]) -> str:
    """One sentence on an outcome, for the UI and ``maxy ota status``."""
    version, origin = entry.get("version", "?"), entry.get("from", "?")
    outcome = entry.get("outcome")
    if outcome == "committed":
        return f"the update from {origin} to {version} was committed."
    if outcome == "health-check-failed":
        return (
            f"the update to {version} failed its health check and the device went back to "
            f"{origin} ({entry.get('message', '')})."
        )
    if outcome == "rolled-back":
        return (
            f"the update to {version} did not complete its trial boot (power cut, crash or "
            f"watchdog reset) and the device went back to {origin}."
        )
    if outcome == "apply-failed":
        return f"installing {version} failed; {origin} kept running ({entry.get('message', '')})."
    return str(entry.get("message", outcome))


class OtaState:
    """The contents of state.json, read and written whole."""

    def __init__(self, directory: Path, doc: dict[str, Any]) -> None:
        self.directory = directory
        self.doc = doc

    @classmethod
    def load(cls, directory: Path) -> OtaState:
        """Read state.json (an absent file is an empty state)."""
        path = directory / STATE_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            doc = {}
        except (OSError, ValueError) as err:
            raise StateError(
                f"{path} is unreadable ({err}); move it aside to start a fresh update history."
            ) from err
        if not isinstance(doc, dict):
            raise StateError(f"{path} is not a JSON object; move it aside.")
        doc.setdefault("format", FORMAT)
        doc.setdefault("slots", {})
        doc.setdefault("history", [])
        doc.setdefault("trial", None)
        doc.setdefault("committed", None)
        return cls(directory, doc)

    @property
    def committed(self) -> dict[str, Any] | None:
        """``{slot, version}`` of the committed slot, if recorded."""
        value = self.doc.get("committed")
        return value if isinstance(value, dict) else None

    @property
    def trial(self) -> dict[str, Any] | None:
        """The armed or running trial, if any."""
        value = self.doc.get("trial")
        return value if isinstance(value, dict) else None

    @property
    def history(self) -> list[dict[str, Any]]:
        """Outcomes, oldest first."""
        return list(self.doc.get("history") or [])

    def slot_version(self, slot: str) -> str | None:
        """The version last written to ``slot``."""
        info = self.doc["slots"].get(slot)
        return str(info["version"]) if isinstance(info, dict) and "version" in info else None

    def set_slot(self, slot: str, version: str) -> None:
        """Record that ``slot`` now holds ``version``."""
        self.doc["slots"][slot] = {"version": version, "writtenAt": now()}

    def set_committed(self, slot: str, version: str) -> None:
        """Record the committed slot."""
        self.doc["committed"] = {"slot": slot, "version": version}
        self.doc["slots"].setdefault(slot, {"version": version})

    def set_trial(self, trial: dict[str, Any] | None) -> None:
        """Record (or clear) the pending trial."""
        self.doc["trial"] = trial

    def record(self, outcome: str, version: str, origin: str, message: str = "") -> None:
        """Append an outcome to the history."""
        entry = {"at": now(), "outcome": outcome, "version": version, "from": origin}
        if message:
            entry["message"] = message
        history = [*self.history, entry][-HISTORY_LIMIT:]
        self.doc["history"] = history
        log.info("[ota] op=outcome outcome=%s version=%s from=%s", outcome, version, origin)

    def last(self) -> dict[str, Any] | None:
        """The latest outcome."""
        return self.history[-1] if self.history else None

    def save(self) -> None:
        """Replace state.json atomically."""
        target = self.directory / STATE_FILE
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(target, json.dumps(self.doc, indent=2) + "\n")
        except OSError as err:
            raise StateError(
                f"cannot write {target} ({err.strerror}); make the data directory writable "
                "for `maxy ota` (it runs as root on the device)."
            ) from err

    def to_json(self) -> dict[str, Any]:
        """The whole state (for ``--json``)."""
        return dict(self.doc)


@contextlib.contextmanager
def exclusive(directory: Path, what: str) -> Iterator[None]:
    """Hold the OTA lock: one apply or commit at a time (released if the process dies)."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise StateError(
            f"cannot use {directory} ({err.strerror}); run `maxy ota` as root, or set "
            "MAXY_DATA_DIR to a writable data directory."
        ) from err
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise StateError(
                f"another `maxy ota` command is running (lock {directory / LOCK_FILE}); wait "
                f"for it to finish before {what}."
            ) from err
        yield
    finally:
        os.close(fd)
