"""The session manager: spawns, stops, deletes and feeds input to sessions; keeps them honest.

It also runs the scheduling plugin's due loop (:mod:`appliance.sessions.scheduler`): what is due
starts an admin turn; and the conversation recorder (:mod:`appliance.sessions.recorder`): what is
said in admin sessions is kept in the graph; and the compactor
(:mod:`appliance.sessions.compaction`): an admin session whose context passes the threshold is
asked for its briefing.

:class:`SessionManager` owns the PTY handles (by session id), the caps and the registry. Every
end path of a process — natural exit, crash, operator stop, eviction, idle reap,
``closeAfterTurn``, shutdown — goes through :meth:`PtyHandle._on_pidfd` and then
:meth:`SessionManager._on_exit`, which gives the slot back and lets the registry re-read the PID
file (deleting it if the CLI could not), so the row becomes ``archived`` or is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from appliance.core.config import Settings
from appliance.core.proc import escalate_async, signal_group, signal_process
from appliance.sessions.caps import Caps, Slot
from appliance.sessions.compaction import Compactor
from appliance.sessions.errors import (
    SessionAlive,
    SessionNotFound,
    SessionNotLive,
    SpawnFailed,
    SpawnTimeout,
)
from appliance.sessions.layout import Layout
from appliance.sessions.login import ClaudeLogin
from appliance.sessions.pty import PtyHandle
from appliance.sessions.recorder import Recorder
from appliance.sessions.registry import (
    PartialPidFile,
    PidInfo,
    Registry,
    Row,
    process_matches,
    read_pid_file,
)
from appliance.sessions.scheduler import DueLoop
from appliance.sessions.screen import explain_exit, plain_lines
from appliance.sessions.spawn import Spawner, SpawnRequest, find_claude, write_sidecar

log = logging.getLogger(__name__)

SPAWN_TIMEOUT = 30.0  # seconds for the CLI to write its PID file
SPAWN_POLL = 0.1  # the watcher usually answers first; this catches a missed event
INPUT_ACK_TIMEOUT = 10.0
AUDIT_INTERVAL = 60.0
ORPHAN_POLL = 0.05
OUTPUT_TAIL = 2000  # bytes of a failed start's output read for its cause
ORPHAN_KILL_WAIT = 5.0  # seconds a SIGKILLed orphan gets to disappear


class SessionManager:
    """All sessions of the device's account."""

    def __init__(self, settings: Settings, environ: Mapping[str, str], mcp_command: list[str]):
        self.settings = settings
        self.spawner = Spawner(settings, environ, mcp_command)
        self.layout = Layout(self.spawner.config_dir)
        self.caps = Caps(
            settings.specialist_cap,
            settings.operator_reserve,
            settings.pty_cap,
            memory_mb=settings.session_memory_mb,
        )
        self.handles: dict[str, PtyHandle] = {}
        self._slots: dict[PtyHandle, Slot] = {}
        self._ready: set[PtyHandle] = set()
        self.registry = Registry(self.layout, attached=lambda sid: sid in self.handles)
        self.registry.hooks.append(self._on_row)
        self.recorder = Recorder(
            settings.engine_socket, self.spawner.account_id, self.registry.transcript_path
        )
        self.registry.hooks.append(self.recorder.on_row)
        self.compactor = Compactor(settings, self.registry, self._submit_line)
        self.registry.hooks.append(self.compactor.on_row)
        self._closing: set[str] = set()
        self.login = ClaudeLogin(
            lambda: find_claude(settings.claude_bin, self.spawner.base_env),
            self.spawner.base_env,
            self.spawner.account_dir,
            settings.claude_token_path,
            self._stop_handle,
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[Any]] = []
        self._stop = asyncio.Event()
        # Reminders and events of the scheduling plugin, fired as admin turns.
        self.due = DueLoop(settings, self.spawner.account_id, self.spawn)

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Seed the config dir, rebuild the index from disk, start watcher, reaper and audit."""
        self.spawner.prepare()
        self.registry.rebuild()
        self._loops = [
            asyncio.create_task(self.registry.watch(self._stop), name="sessions-watch"),
            asyncio.create_task(self._reap_idle(), name="sessions-reaper"),
            asyncio.create_task(self._audit_loop(), name="sessions-audit"),
            asyncio.create_task(self.due.run(self._stop), name="sessions-scheduling"),
        ]
        counts = self.registry.counts()
        log.info(
            "[sessions] op=start config=%s rows=%s live=%s orphans=%s",
            self.layout.config_dir,
            counts["rows"],
            counts["live"],
            self.audit()["orphanLiveSessionsNoMaster"],
        )

    async def close(self) -> None:
        """Stop every session this manager holds, reap them, and log the master audit."""
        self._stop.set()
        await self.login.close()
        await self.recorder.close()
        await self.compactor.close()
        handles = list(self._slots)
        await asyncio.gather(*(self._stop_handle(h, "shutdown") for h in handles))
        for task in self._loops[1:]:
            task.cancel()
        for task in [*self._loops, *self._tasks]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        held = sum(1 for h in handles if h.holds_master())
        log.info("[manager-shutdown] op=master-audit held=%s stopped=%s", held, len(handles))

    def _track(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- lookups ---------------------------------------------------------------------------

    def resolve(self, token: str) -> str:
        """The session id of ``token``; :class:`SessionNotFound` otherwise."""
        session_id = self.registry.resolve(token)
        if session_id is None:
            raise SessionNotFound(token)
        return session_id

    def row(self, token: str) -> Row:
        """The row of ``token``."""
        return self.registry.rows[self.resolve(token)]

    def handle(self, token: str) -> PtyHandle:
        """The live PTY of ``token`` (a session, or the Connect Claude flow's id).

        :class:`SessionNotLive` if this manager holds none.
        """
        if self.login.id is not None and token == self.login.id:
            login = self.login.handle
            if login is None or not login.alive:
                raise SessionNotLive(f"The sign-in {token} has ended. Start Connect Claude again.")
            return login
        session_id = self.resolve(token)
        handle = self.handles.get(session_id)
        live = self.registry.rows[session_id]["state"] == "live"
        if handle is None or not handle.alive or handle not in self._ready or not live:
            raise SessionNotLive(f"Session {session_id} is not running under this manager.")
        return handle

    def _busy(self, slot: Slot) -> bool:
        row = self.registry.rows.get(slot.session_id or "")
        return row is not None and row["status"] == "busy"

    # --- spawn -----------------------------------------------------------------------------

    async def spawn(self, request: SpawnRequest) -> Row:
        """Start a session and answer once its PID file is there."""
        plan = self.spawner.plan(request, await self.spawner.previous_context(request))
        session_id = plan.session_id
        if request.session_id and session_id in self.registry.rows:
            raise SessionAlive(
                f"Session {session_id} exists already; resume it (resume: {session_id})."
            )
        if request.resume:
            existing = self.registry.rows.get(session_id)
            if existing is not None and existing["state"] == "live":
                raise SessionAlive(f"Session {session_id} is running; it cannot be resumed twice.")
            self._unarchive(session_id)
        slot, victim = self.caps.admit(request.specialist, self._busy)
        started = time.monotonic()
        handle: PtyHandle | None = None
        project = self.layout.project_dir(plan.cwd)
        try:
            if victim is not None and victim.handle is not None:
                log.info("[sessions] op=evict id=%s reason=specialist-cap", victim.session_id)
                await self._stop_handle(victim.handle, "evicted")
            write_sidecar(self.layout.sidecar(project, session_id), plan.sidecar)
            self.registry.handle_changes([self.layout.sidecar(project, session_id)])
            handle = PtyHandle.spawn(plan.argv, plan.cwd, plan.env, on_exit=self._on_exit)
            handle.session_id = session_id
            slot.handle = handle
            self._slots[handle] = slot
            self.handles[session_id] = handle
            info = await self._wait_ready(handle, plan.cwd)
        except BaseException:
            if handle is None:
                self.caps.release(slot)
            elif handle.alive:
                await self._stop_handle(handle, "spawn-failed")
            if session_id not in self.registry.rows:
                self.layout.sidecar(project, session_id).unlink(missing_ok=True)
            raise
        if info.session_id != session_id:  # the CLI chose the id (e.g. a forked resume)
            os.replace(
                self.layout.sidecar(project, session_id),
                self.layout.sidecar(project, info.session_id),
            )
            self.handles.pop(session_id, None)
            session_id = handle.session_id = info.session_id
            if handle.alive:
                self.handles[session_id] = handle
        slot.session_id = session_id
        if handle.alive:
            self._ready.add(handle)
        row = self.registry.refresh(session_id)
        assert row is not None
        log.info(
            "[sessions] op=spawn kind=%s id=%s pid=%s specialist=%s readyMs=%.0f",
            request.kind,
            session_id,
            handle.pid,
            request.specialist,
            (time.monotonic() - started) * 1000,
        )
        return row

    async def _wait_ready(self, handle: PtyHandle, cwd: Path) -> PidInfo:
        """Wait for the child's PID file (not a stale one of an earlier pid), or its exit.

        A CLI that ran its turn and exited cleanly before the PID file was noticed (it deletes
        the file itself) was ready all the same: its transcript shows it.
        """
        waiter = self.registry.pid_waiter(handle.pid)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SPAWN_TIMEOUT
        pid_file = self.layout.pid_file(handle.pid)
        try:
            while not waiter.done():
                if handle.exited.done():
                    expected = handle.session_id or ""
                    project = self.layout.project_dir(cwd)
                    if handle.exited.result() == 0 and (
                        self.layout.transcript(project, expected).exists()
                    ):
                        return PidInfo(handle.pid, expected, None, str(cwd), None, None, None, None)
                    tail = handle.ring.since(0)[1][-OUTPUT_TAIL:].decode(errors="replace")
                    cause, hint = explain_exit(tail)
                    code = handle.exited.result()
                    raise SpawnFailed(
                        f"claude exited with code {code} before it was ready: {cause} {hint}",
                        exitCode=code,
                        cause=cause,
                        hint=hint,
                        output="\n".join(line for line in plain_lines(tail) if line),
                    )
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise SpawnTimeout(
                        f"claude did not write {pid_file} within {SPAWN_TIMEOUT:.0f} s; stopped.",
                    )
                pending: set[asyncio.Future[Any]] = {waiter, handle.exited}
                await asyncio.wait(
                    pending,
                    timeout=min(SPAWN_POLL, remaining),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not waiter.done():
                    self.registry.handle_changes([pid_file])
            return waiter.result()
        finally:
            self.registry.drop_pid_waiter(handle.pid, waiter)

    def _unarchive(self, session_id: str) -> None:
        project = self.registry.project_of(session_id)
        if project is None:
            return
        archived = self.layout.transcript(project, session_id, archived=True)
        live = self.layout.transcript(project, session_id)
        if archived.exists() and not live.exists():
            os.replace(archived, live)
            self.registry.refresh(session_id)

    # --- exit and stop ---------------------------------------------------------------------

    def _on_exit(self, handle: PtyHandle) -> None:
        slot = self._slots.pop(handle, None)
        if slot is not None:
            self.caps.release(slot)
        self._ready.discard(handle)
        session_id = handle.session_id
        if session_id is not None and self.handles.get(session_id) is handle:
            del self.handles[session_id]
        code = handle.exited.result()
        if handle not in self._ready:
            # It may have written its PID file and died before the watcher told us: still ready.
            with contextlib.suppress(PartialPidFile):
                info = read_pid_file(self.layout.pid_file(handle.pid))
                if info is not None and info.proc_start == str(handle.start_ticks):
                    self.registry.settle_pid_waiters(info)
        log.info(
            "[sessions] op=exit id=%s pid=%s code=%s stopped=%s",
            session_id,
            handle.pid,
            code,
            handle.stopping,
        )
        # The CLI deletes its PID file on a clean exit; after a crash the registry does.
        touched = self.registry.load_pid(handle.pid)
        if session_id is not None:
            touched.add(session_id)
        for touched_id in sorted(touched):
            self.registry.refresh(touched_id)

    async def _stop_handle(self, handle: PtyHandle, reason: str) -> str | None:
        """SIGTERM the process group, SIGKILL after the grace period; wait for the reap."""
        if not handle.alive:
            return None
        handle.stopping = True
        log.info("[sessions] op=stop id=%s pid=%s reason=%s", handle.session_id, handle.pid, reason)

        async def ended(timeout: float | None) -> bool:
            try:
                await asyncio.wait_for(asyncio.shield(handle.exited), timeout)
            except TimeoutError:
                log.warning(
                    "[sessions] op=stop-escalate id=%s pid=%s grace_s=%s",
                    handle.session_id,
                    handle.pid,
                    self.settings.stop_grace,
                )
                return False
            return True

        return await escalate_async(handle.signal_group, ended, self.settings.stop_grace, None)

    async def _stop_orphan(self, info: PidInfo) -> str:
        """Stop a live session no handle holds (left by an earlier manager)."""
        loop = asyncio.get_running_loop()
        group = os.getpgid(info.pid) == info.pid

        async def ended(timeout: float | None) -> bool:
            deadline = loop.time() + (timeout or 0.0)
            # Another process: there is no event to wait on, only its /proc entry to poll.
            while process_matches(info) and loop.time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(ORPHAN_POLL)
            return not process_matches(info)

        send = signal_group(info.pid) if group else signal_process(info.pid)
        how = await escalate_async(send, ended, self.settings.stop_grace, ORPHAN_KILL_WAIT)
        if not process_matches(info):
            for touched in sorted(self.registry.load_pid(info.pid)):
                self.registry.refresh(touched)
        return how

    async def stop(self, token: str) -> dict[str, Any]:
        """Stop a session; idempotent on an ended one. The transcript is kept."""
        session_id = self.resolve(token)
        handle = self.handles.get(session_id)
        signal_name: str | None = None
        if handle is not None:
            signal_name = await self._stop_handle(handle, "operator")
        else:
            info = self.registry.pid_info(session_id)
            if info is not None and process_matches(info):
                log.info("[sessions] op=stop id=%s pid=%s reason=orphan", session_id, info.pid)
                signal_name = await self._stop_orphan(info)
        row = self.registry.rows.get(session_id)
        return {
            "id": session_id,
            "stopped": signal_name is not None,
            "signal": signal_name,
            "row": row,
        }

    async def delete(self, token: str) -> dict[str, Any]:
        """Remove an ended session's transcript, sidecar and per-session directory."""
        session_id = self.resolve(token)
        row = self.registry.rows[session_id]
        handle = self.handles.get(session_id)
        if handle is not None and row["state"] != "live":
            # Its PID file is gone and the process is on its way out: let it be reaped first.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(handle.exited), self.settings.stop_grace)
            if session_id not in self.registry.rows:
                raise SessionNotFound(token)  # it had no transcript: nothing is left to delete
            row = self.registry.rows[session_id]
        if row["state"] == "live" or session_id in self.handles:
            raise SessionAlive(
                f"Session {session_id} is running. Stop it first (POST /{session_id}/stop)."
            )
        project = self.registry.project_of(session_id)
        if project is not None:
            for archived in (False, True):
                self.layout.transcript(project, session_id, archived).unlink(missing_ok=True)
            self.layout.sidecar(project, session_id).unlink(missing_ok=True)
            shutil.rmtree(project / session_id, ignore_errors=True)
        self.registry.forget_sidecar(session_id)
        self.registry.refresh(session_id)
        log.info("[sessions] op=delete id=%s", session_id)
        return {"id": session_id, "deleted": True}

    # --- Connect Claude ------------------------------------------------------------------

    def claude_status(self) -> dict[str, Any]:
        """Whether Claude is connected, and the sign-in flow's state."""
        return {"connected": self.login.connected(), "login": self.login.status()}

    async def disconnect_claude(self) -> dict[str, Any]:
        """Remove the stored token and end every live session (they were started with it)."""
        await self.login.cancel("disconnect")
        removed = self.login.disconnect()
        handles = list(self._slots)
        await asyncio.gather(*(self._stop_handle(h, "claude-disconnected") for h in handles))
        log.info("[sessions] op=claude-disconnect removed=%s stopped=%s", removed, len(handles))
        return {**self.claude_status(), "removed": removed, "stopped": len(handles)}

    # --- input and turns -------------------------------------------------------------------

    async def submit_input(self, token: str, text: str, submit: bool) -> dict[str, Any]:
        """Write to the PTY; check in the background that a turn started."""
        handle = self.handle(token)
        session_id = handle.session_id or token
        before = self.registry.rows[session_id]["prompts"]
        data = text.encode() + (b"\r" if submit else b"")
        await handle.write(data)
        if submit:
            self._track(self._check_turn(session_id, before, time.monotonic()), "input-check")
        return {"id": session_id, "written": len(data)}

    async def _submit_line(self, token: str, text: str) -> None:
        await self.submit_input(token, text, submit=True)

    async def _check_turn(self, session_id: str, prompts_before: int, sent: float) -> None:
        """Log whether a turn started after input: status busy or a new prompt line."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INPUT_ACK_TIMEOUT
        with self.registry.watching(session_id) as changed:
            while True:
                changed.clear()
                row = self.registry.rows.get(session_id)
                waited = (time.monotonic() - sent) * 1000
                if row is not None and (row["status"] == "busy" or row["prompts"] > prompts_before):
                    log.info("[sessions] op=input-submitted id=%s ackMs=%.0f", session_id, waited)
                    return
                remaining = deadline - loop.time()
                if row is None or row["state"] != "live" or remaining <= 0:
                    log.warning(
                        "[sessions] op=input-no-turn id=%s waitedMs=%.0f state=%s",
                        session_id,
                        waited,
                        row["state"] if row else "removed",
                    )
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)

    def _on_row(self, session_id: str, old: Row | None, new: Row | None) -> None:
        handle = self.handles.get(session_id)
        if handle is not None:
            handle.last_activity = time.monotonic()
        if (
            new is not None
            and handle is not None
            and new["closeAfterTurn"]
            and new["state"] == "live"
            and new["turnEnded"]
            and session_id not in self._closing
        ):
            self._closing.add(session_id)
            log.info(
                "[sessions] op=close-after-turn id=%s stopReason=%s", session_id, new["stopReason"]
            )
            self._track(self._close(handle, session_id), "close-after-turn")

    async def _close(self, handle: PtyHandle, session_id: str) -> None:
        try:
            await self._stop_handle(handle, "close-after-turn")
        finally:
            self._closing.discard(session_id)

    # --- safeguards ------------------------------------------------------------------------

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(self.settings.idle_reap_interval)
            for slot in self.caps.idle_specialists(self.settings.idle_limit, self._busy):
                assert slot.handle is not None
                idle = time.monotonic() - slot.handle.last_activity
                log.info("[sessions] op=idle-reap id=%s idleS=%.0f", slot.session_id, idle)
                self._track(self._stop_handle(slot.handle, "idle"), "idle-reap")

    def audit(self) -> dict[str, int]:
        """Masters held, ended rows still holding one, live rows holding none."""
        rows = self.registry.rows
        held = [h for h in self._slots if h.holds_master()]
        archived_with_master = sum(
            1
            for h in held
            if h in self._ready and rows.get(h.session_id or "", {}).get("state") != "live"
        )
        orphans = sum(
            1 for sid, row in rows.items() if row["state"] == "live" and sid not in self.handles
        )
        return {
            "liveTrackers": len(held),
            "archivedWithMaster": archived_with_master,
            "orphanLiveSessionsNoMaster": orphans,
        }

    async def _audit_loop(self) -> None:
        while True:
            await asyncio.sleep(AUDIT_INTERVAL)
            self.registry.rebuild()  # heals any event the watcher missed
            counts = self.audit()
            log.info(
                "[fd-audit] op=master-reconcile liveTrackers=%s archivedWithMaster=%s "
                "orphanLiveSessionsNoMaster=%s",
                counts["liveTrackers"],
                counts["archivedWithMaster"],
                counts["orphanLiveSessionsNoMaster"],
            )

    def status(self) -> dict[str, Any]:
        """Counts for operators and tests: caps, rows, audit, this process's pid."""
        return {
            "pid": os.getpid(),
            "caps": self.caps.counts(),
            "rows": self.registry.counts(),
            "audit": self.audit(),
            "lastEventId": f"{self.registry.epoch}:{self.registry.seq}",
        }
