"""Compaction briefings: an admin session near the end of its context leaves a briefing behind.

The registry calls :meth:`Compactor.on_row` whenever a row changes. When a live admin session
this manager holds (not a specialist, not one closed after its turn) has ended its turn and the
context its transcript shows (``contextTokens``: the last assistant message's usage, see
:mod:`appliance.sessions.transcript`) has passed ``MAXY_COMPACT_THRESHOLD`` of
``MAXY_CONTEXT_WINDOW``, the manager types one turn into the session through the same input route
the web UI and the channels use (:meth:`SessionManager.submit_input`): an instruction to call the
admin plugin's ``session-compact`` tool with a structured briefing (what was asked, what was
done, decisions, work in progress, what the owner shared about themselves). The tool writes it to
the graph (the engine's ``briefing.write``), and the next admin session's ``<previous-context>``
starts with the newest one (:mod:`appliance.memory.briefings`).

Then it waits, at most ``MAXY_COMPACT_TIMEOUT`` seconds, for the transcript to show the tool's
result. One line for each outcome::

    [compaction-start] session=… tokens=… window=… percent=…
    [compaction-summary-captured] session=… tokens=… ms=…
    [compaction-failed] session=… reason=tool-error|input|session-ended error=…
    [compaction-timeout] session=… waitedMs=…

One compaction at a time per session; after one (whatever its outcome) the session is not asked
again until its context drops below the threshold and passes it anew, so a refused or ignored
request is retried at the next crossing, never in a loop. A failed compaction loses nothing: the
session keeps running, its transcript is only appended to by the CLI, and nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from appliance.core.config import Settings
from appliance.core.logs import kv
from appliance.sessions.errors import SessionError
from appliance.sessions.registry import Registry, Row

log = logging.getLogger(__name__)

Submit = Callable[[str, str], Awaitable[Any]]

INSTRUCTION = (
    "This session's context is {percent}% full. Before it is compacted, call the "
    "session-compact tool now with a briefing of this session for the next one: what the owner "
    "asked, what was done, the decisions made, the work still in progress, and what the owner "
    "shared about themselves. Then answer with one short line."
)


@dataclass
class _Session:
    """What the compactor knows of one session."""

    armed: bool = True  # below the threshold since the last request (or never asked)
    task: asyncio.Task[None] | None = None


def eligible(row: Row) -> bool:
    """A live admin session of the owner's, held by this manager, that takes typed turns."""
    return (
        row.get("kind") == "admin"
        and row.get("state") == "live"
        and bool(row.get("attached"))
        and not row.get("specialist")
        and not row.get("role")
        and not row.get("closeAfterTurn")
    )


class Compactor:
    """Asks admin sessions past the context threshold for their compaction briefing."""

    def __init__(self, settings: Settings, registry: Registry, submit: Submit) -> None:
        self.window = settings.context_window
        self.limit = int(settings.context_window * settings.compact_threshold)
        self.timeout = settings.compact_timeout
        self.registry = registry
        self.submit = submit
        self._sessions: dict[str, _Session] = {}
        self._closed = False

    def on_row(self, session_id: str, old: Row | None, new: Row | None) -> None:
        """Registry hook: start a compaction when a session crosses the threshold."""
        if new is None or new.get("state") != "live":
            ended = self._sessions.get(session_id)
            if ended is not None and (ended.task is None or ended.task.done()):
                del self._sessions[session_id]  # a resumed session starts armed again
            return
        if self._closed or not eligible(new):
            return
        watched = self._sessions.setdefault(session_id, _Session())
        if watched.task is not None and not watched.task.done():
            return  # one at a time; the running one follows the row itself
        if new.get("contextTokens", 0) < self.limit:
            watched.armed = True
            return
        if not watched.armed or not new.get("turnEnded") or new.get("status") != "idle":
            return
        watched.armed = False
        watched.task = asyncio.get_running_loop().create_task(
            self._compact(session_id, new), name=f"compaction-{session_id}"
        )

    async def close(self) -> None:
        """Stop asking; cancel the compactions running now (their sessions keep running)."""
        self._closed = True
        tasks = [w.task for w in self._sessions.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _compact(self, session_id: str, row: Row) -> None:
        tokens = int(row.get("contextTokens", 0))
        percent = round(100 * tokens / self.window)
        log.info(
            "[compaction-start] %s",
            kv(session=session_id, tokens=tokens, window=self.window, percent=percent),
        )
        ok, failed = int(row.get("compactOk", 0)), int(row.get("compactFailed", 0))
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        with self.registry.watching(session_id) as changed:
            try:
                await self.submit(session_id, INSTRUCTION.format(percent=percent))
            except (SessionError, OSError) as err:
                log.warning(
                    "[compaction-failed] %s", kv(session=session_id, reason="input", error=err)
                )
                return
            while True:
                changed.clear()
                now = self.registry.rows.get(session_id)
                if now is None or now.get("state") != "live":
                    log.warning(
                        "[compaction-failed] %s", kv(session=session_id, reason="session-ended")
                    )
                    return
                if now.get("compactOk", 0) > ok:
                    log.info(
                        "[compaction-summary-captured] %s",
                        kv(
                            session=session_id,
                            tokens=tokens,
                            ms=round((time.monotonic() - started) * 1000),
                        ),
                    )
                    return
                if now.get("compactFailed", 0) > failed:
                    log.warning(
                        "[compaction-failed] %s",
                        kv(
                            session=session_id,
                            reason="tool-error",
                            error=(now.get("compactError") or "")[:200],
                        ),
                    )
                    return
                remaining = deadline - loop.time()
                if remaining <= 0:
                    log.warning(
                        "[compaction-timeout] %s",
                        kv(session=session_id, waitedMs=round((time.monotonic() - started) * 1000)),
                    )
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
