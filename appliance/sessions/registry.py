"""The row index: one row per session, rebuilt from disk and kept current by an inotify watcher.

Disk is the source of truth. A row exists while its PID file names a live process (``state:
live``) or while its transcript exists (``state: archived``). The index is rebuilt from the
files at start and on every audit; in between, ``watchfiles`` reports changed paths and only the
sessions they touch are recomputed. Each recomputation that changes a row appends one delta to a
sequence-numbered log that the SSE feed replays:

- ``row-created``: a PID file or transcript appeared for an unknown session;
- ``row-updated``: anything else changed, including a rename between ``projects/<slug>/`` and
  ``projects/<slug>/archive/`` (the rename is seen as one state of the disk, so one delta);
- ``row-archived``: the PID file is gone and the transcript stays;
- ``row-removed``: the PID file is gone and there never was a transcript, or the transcript of an
  ended session was deleted.

A PID file is believed only if its process is alive and is the process that wrote it: the CLI
records ``procStart`` (``/proc/<pid>/stat`` start time), so a reused pid is recognised; a file
that fails the check is stale and is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from appliance.sessions.layout import ARCHIVE, SIDECAR_SUFFIX, TRANSCRIPT_SUFFIX, Layout
from appliance.sessions.transcript import Transcript

log = logging.getLogger(__name__)

DELTA_LOG = 4096  # deltas kept for Last-Event-ID resume
SUBSCRIBER_BACKLOG = 10_000  # a feed client further behind than this is cut off to resync
WATCH_DEBOUNCE_MS = 50
WATCH_STEP_MS = 5

Row = dict[str, Any]
Hook = Callable[[str, Row | None, Row | None], None]


@dataclass(frozen=True)
class PidInfo:
    """The fields of a PID file the manager uses."""

    pid: int
    session_id: str
    status: str | None
    cwd: str | None
    started_at: int | None
    proc_start: str | None
    bridge_id: str | None
    name: str | None


class PartialPidFile(Exception):
    """The PID file is being written (not yet valid JSON with a pid and a sessionId)."""


def read_pid_file(path: Path) -> PidInfo | None:
    """Parse a PID file; None if it does not exist."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise PartialPidFile(str(path)) from err
    if not isinstance(data, dict):
        raise PartialPidFile(str(path))
    pid, session_id = data.get("pid"), data.get("sessionId")
    if not isinstance(pid, int) or not isinstance(session_id, str) or not session_id:
        raise PartialPidFile(str(path))

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) and value else None

    started = data.get("startedAt")
    return PidInfo(
        pid=pid,
        session_id=session_id,
        status=text("status"),
        cwd=text("cwd"),
        started_at=started if isinstance(started, int) else None,
        proc_start=text("procStart"),
        bridge_id=text("bridgeSessionId"),
        name=text("name"),
    )


def proc_stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time (clock ticks after boot), or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[19])


@cache
def _boot_time_ms() -> int:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1]) * 1000
    return 0


def process_matches(info: PidInfo) -> bool:
    """True if the PID file's process is alive and is the one that wrote the file."""
    stat = proc_stat(info.pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    ticks = stat[1]
    if info.proc_start is not None and info.proc_start.isdigit():
        return int(info.proc_start) == ticks
    if info.started_at is None:
        return True
    started_ms = _boot_time_ms() + ticks * 1000 // os.sysconf("SC_CLK_TCK")
    return started_ms <= info.started_at + 1000  # a later process reuses the pid


@dataclass(frozen=True)
class Delta:
    """One change of the index, as sent on the feed."""

    seq: int
    id: str
    event: str
    data: Row


@dataclass(eq=False)
class Subscription:
    """One feed client's queue of deltas."""

    queue: asyncio.Queue[Delta] = field(default_factory=asyncio.Queue)
    overflowed: bool = False

    def push(self, delta: Delta) -> None:
        """Queue a delta, or mark the client as too slow to follow."""
        if self.queue.qsize() >= SUBSCRIBER_BACKLOG:
            self.overflowed = True
        else:
            self.queue.put_nowait(delta)


class Registry:
    """Rows of one account's sessions, their deltas and their subscribers."""

    def __init__(self, layout: Layout, attached: Callable[[str], bool]) -> None:
        self.layout = layout
        self._attached = attached
        self.rows: dict[str, Row] = {}
        self.epoch = secrets.token_hex(4)
        self.seq = 0
        self.hooks: list[Hook] = []
        self._log: deque[Delta] = deque(maxlen=DELTA_LOG)
        self._subscribers: set[Subscription] = set()
        self._pids: dict[int, PidInfo] = {}
        self._pid_of: dict[str, int] = {}
        self._projects: dict[str, Path] = {}
        self._transcripts: dict[str, Transcript] = {}
        self._sidecars: dict[str, Row] = {}
        self._bridges: dict[str, str] = {}
        self._had_transcript: set[str] = set()
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._pid_waiters: dict[int, set[asyncio.Future[PidInfo]]] = {}

    # --- reading the disk ------------------------------------------------------------------

    def load_pid(self, pid: int) -> set[str]:
        """Re-read one PID file; return the session ids whose rows may have changed."""
        old = self._pids.get(pid)
        touched = {old.session_id} if old else set()
        path = self.layout.pid_file(pid)
        try:
            info = read_pid_file(path)
        except PartialPidFile:
            return set()  # keep what we had until the write completes
        if info is not None and not process_matches(info):
            log.info("[sessions] op=stale-pid-file pid=%s sessionId=%s", pid, info.session_id)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            info = None
        if info is None:
            self._pids.pop(pid, None)
            if old and self._pid_of.get(old.session_id) == pid:
                del self._pid_of[old.session_id]
            return touched
        if old and old.session_id != info.session_id and self._pid_of.get(old.session_id) == pid:
            del self._pid_of[old.session_id]
        self._pids[pid] = info
        self._pid_of[info.session_id] = pid
        if info.bridge_id:
            self._bridges[info.session_id] = info.bridge_id
        if info.cwd and info.session_id not in self._projects:
            self._projects[info.session_id] = self.layout.project_dir(info.cwd)
        self.settle_pid_waiters(info)
        touched.add(info.session_id)
        return touched

    def settle_pid_waiters(self, info: PidInfo) -> None:
        """Tell whoever waits for this pid's PID file that it was written."""
        for waiter in self._pid_waiters.pop(info.pid, set()):
            if not waiter.done():
                waiter.set_result(info)

    def _load_sidecar(self, session_id: str, project: Path) -> None:
        try:
            data = json.loads(self.layout.sidecar(project, session_id).read_bytes())
        except FileNotFoundError:
            self._sidecars.pop(session_id, None)
            return
        except ValueError:
            return  # being written; the next event has it whole
        if isinstance(data, dict):
            self._sidecars[session_id] = data
            self._projects.setdefault(session_id, project)

    def _scan_project(self, project: Path) -> set[str]:
        found: set[str] = set()
        for folder in (project, project / ARCHIVE):
            try:
                names = os.listdir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                if name.endswith(TRANSCRIPT_SUFFIX):
                    session_id = name[: -len(TRANSCRIPT_SUFFIX)]
                    self._projects[session_id] = project
                    found.add(session_id)
                elif folder is project and name.endswith(SIDECAR_SUFFIX):
                    session_id = name[: -len(SIDECAR_SUFFIX)]
                    self._load_sidecar(session_id, project)
                    found.add(session_id)
        return found

    def _location(self, session_id: str) -> tuple[Path, str] | None:
        project = self._projects.get(session_id)
        if project is None:
            return None
        for archived, name in ((False, "top"), (True, "archive")):
            path = self.layout.transcript(project, session_id, archived)
            if path.is_file():
                return path, name
        return None

    def transcript_path(self, session_id: str) -> Path | None:
        """Where the session's transcript is now, if anywhere."""
        where = self._location(session_id)
        return where[0] if where else None

    def had_transcript(self, session_id: str) -> bool:
        """True if this row's transcript has been seen on disk."""
        return session_id in self._had_transcript

    def project_of(self, session_id: str) -> Path | None:
        """The project directory of a session, if known."""
        return self._projects.get(session_id)

    # --- rows and deltas -------------------------------------------------------------------

    def _build(self, session_id: str) -> Row | None:
        pid = self._pid_of.get(session_id)
        info = self._pids.get(pid) if pid is not None else None
        where = self._location(session_id)
        if where is None:
            self._transcripts.pop(session_id, None)
        else:
            self._had_transcript.add(session_id)
            self._transcripts.setdefault(session_id, Transcript()).read(where[0])
        if info is None and where is None:
            return None
        transcript = self._transcripts.get(session_id)
        meta = self._sidecars.get(session_id, {})
        return {
            "id": session_id,
            "sessionId": session_id,
            "state": "live" if info else "archived",
            "pid": info.pid if info else None,
            "status": info.status if info else None,
            "bridgeId": self._bridges.get(session_id),
            "name": info.name if info else None,
            "cwd": info.cwd if info else meta.get("cwd"),
            "startedAt": meta.get("startedAt") or (info.started_at if info else None),
            "title": transcript.title if transcript else None,
            "transcript": where[1] if where else None,
            "lines": transcript.lines if transcript else 0,
            "prompts": transcript.prompts if transcript else 0,
            "turnEnded": transcript.turn_ended if transcript else False,
            "stopReason": transcript.stop_reason if transcript else None,
            "lastActivityAt": transcript.last_timestamp if transcript else None,
            "contextTokens": transcript.context_tokens if transcript else 0,
            "compactOk": transcript.compact_ok if transcript else 0,
            "compactFailed": transcript.compact_failed if transcript else 0,
            "compactError": transcript.compact_error if transcript else None,
            "kind": meta.get("kind"),
            "senderId": meta.get("senderId"),
            "role": meta.get("role"),
            "channel": meta.get("channel"),
            "url": meta.get("url"),
            "permissionMode": meta.get("permissionMode"),
            "model": meta.get("model"),
            "hidden": bool(meta.get("hidden")),
            "specialist": bool(meta.get("specialist")),
            "closeAfterTurn": bool(meta.get("closeAfterTurn")),
            "attached": self._attached(session_id),
        }

    def refresh(self, session_id: str) -> Row | None:
        """Recompute one row from disk; emit the delta if it changed."""
        old = self.rows.get(session_id)
        new = self._build(session_id)
        for event in self._watchers.get(session_id, ()):
            event.set()
        if new == old:
            return new
        if new is None:
            del self.rows[session_id]
            self._forget(session_id)
            self._emit("row-removed", {"id": session_id})
        else:
            self.rows[session_id] = new
            if old is None:
                kind = "row-created"
            elif old["state"] == "live" and new["state"] != "live":
                kind = "row-archived"
            else:
                kind = "row-updated"
            self._emit(kind, {"id": session_id, "row": new})
        for hook in self.hooks:
            hook(session_id, old, new)
        return new

    def _forget(self, session_id: str) -> None:
        self._had_transcript.discard(session_id)
        self._bridges.pop(session_id, None)
        self._transcripts.pop(session_id, None)
        if session_id not in self._sidecars:
            self._projects.pop(session_id, None)

    def forget_sidecar(self, session_id: str) -> None:
        """Drop the in-memory sidecar of a deleted session."""
        self._sidecars.pop(session_id, None)
        self._projects.pop(session_id, None)

    def _emit(self, event: str, data: Row) -> None:
        self.seq += 1
        delta = Delta(self.seq, f"{self.epoch}:{self.seq}", event, data)
        self._log.append(delta)
        for subscriber in self._subscribers:
            subscriber.push(delta)

    def handle_changes(self, paths: Iterable[Path]) -> None:
        """Apply a batch of changed paths reported by the watcher."""
        touched: set[str] = set()
        for path in paths:
            place = self.layout.classify(path)
            if place is None:
                continue
            if place.kind == "pid":
                touched |= self.load_pid(int(place.key))
            elif place.kind == "project" and place.project is not None:
                touched |= self._scan_project(place.project)
            elif place.project is not None:
                self._projects.setdefault(place.key, place.project)
                if place.kind == "sidecar":
                    self._load_sidecar(place.key, place.project)
                touched.add(place.key)
        for session_id in sorted(touched):
            self.refresh(session_id)

    def rebuild(self) -> None:
        """Re-read every PID file, transcript and sidecar; emit what differs from the index."""
        touched: set[str] = set(self.rows)
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.layout.sessions_dir):
                stem = name.removesuffix(".json")
                if name.endswith(".json") and stem.isdigit():
                    touched |= self.load_pid(int(stem))
        for pid in [p for p in self._pids if not self.layout.pid_file(p).exists()]:
            touched |= self.load_pid(pid)
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.layout.projects_dir):
                touched |= self._scan_project(self.layout.projects_dir / name)
        for session_id in sorted(touched):
            self.refresh(session_id)

    async def watch(self, stop: asyncio.Event) -> None:
        """Follow the disk until ``stop`` is set."""
        from watchfiles import awatch

        self.layout.sessions_dir.mkdir(parents=True, exist_ok=True)
        self.layout.projects_dir.mkdir(parents=True, exist_ok=True)
        async for changes in awatch(
            self.layout.sessions_dir,
            self.layout.projects_dir,
            watch_filter=None,
            debounce=WATCH_DEBOUNCE_MS,
            step=WATCH_STEP_MS,
            stop_event=stop,
            rust_timeout=1000,
        ):
            self.handle_changes(Path(path) for _, path in changes)

    # --- lookups and waiting ---------------------------------------------------------------

    def resolve(self, token: str) -> str | None:
        """The session id that ``token`` names: a sessionId, bridge id, its suffix, or pid."""
        if token in self.rows:
            return token
        if token.isdigit():
            pid = int(token)
            for session_id, row in self.rows.items():
                if row["pid"] == pid:
                    return session_id
        for session_id, row in self.rows.items():
            bridge = row.get("bridgeId")
            if bridge and token in (bridge, bridge.rsplit("_", 1)[-1]):
                return session_id
        return None

    def pid_info(self, session_id: str) -> PidInfo | None:
        """The believed PID file of a live session."""
        pid = self._pid_of.get(session_id)
        return self._pids.get(pid) if pid is not None else None

    def pid_waiter(self, pid: int) -> asyncio.Future[PidInfo]:
        """A future resolved when a valid PID file for ``pid`` is read."""
        waiter: asyncio.Future[PidInfo] = asyncio.get_running_loop().create_future()
        self._pid_waiters.setdefault(pid, set()).add(waiter)
        return waiter

    def drop_pid_waiter(self, pid: int, waiter: asyncio.Future[PidInfo]) -> None:
        """Stop waiting for ``pid``."""
        waiters = self._pid_waiters.get(pid)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._pid_waiters[pid]

    @contextlib.contextmanager
    def watching(self, session_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever the session's files are re-read."""
        event = asyncio.Event()
        self._watchers.setdefault(session_id, set()).add(event)
        try:
            yield event
        finally:
            watchers = self._watchers.get(session_id)
            if watchers is not None:
                watchers.discard(event)
                if not watchers:
                    del self._watchers[session_id]

    def subscribe(self, last_event_id: str | None) -> tuple[Subscription, list[Delta] | None]:
        """Register a feed client; return it with the deltas it missed, or None to replay."""
        subscription = Subscription()
        self._subscribers.add(subscription)
        return subscription, self.since(last_event_id)

    def unsubscribe(self, subscription: Subscription) -> None:
        """Forget a feed client."""
        self._subscribers.discard(subscription)

    def since(self, last_event_id: str | None) -> list[Delta] | None:
        """Deltas after ``last_event_id``; None when they are not all kept (replay instead)."""
        if not last_event_id:
            return None
        epoch, _, raw = last_event_id.partition(":")
        if epoch != self.epoch or not raw.isdigit():
            return None
        seq = int(raw)
        if seq > self.seq:
            return None
        oldest = self._log[0].seq if self._log else self.seq + 1
        if seq < oldest - 1:
            return None
        return [delta for delta in self._log if delta.seq > seq]

    def snapshot(self) -> tuple[str, list[Row]]:
        """The id of the last delta and every row, oldest first."""
        rows = sorted(self.rows.values(), key=lambda r: (r["startedAt"] or 0, r["id"]))
        return f"{self.epoch}:{self.seq}", rows

    def counts(self) -> dict[str, int]:
        """Rows by state, and feed clients."""
        live = sum(1 for row in self.rows.values() if row["state"] == "live")
        return {
            "rows": len(self.rows),
            "live": live,
            "archived": len(self.rows) - live,
            "subscribers": len(self._subscribers),
        }
