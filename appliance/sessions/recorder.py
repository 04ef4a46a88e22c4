"""The owner's own conversations: admin sessions' turns kept as Conversation and Message nodes.

The manager already follows every transcript; the registry calls :meth:`Recorder.on_row`
whenever a row changes. For an admin session (its sidecar's ``kind``) the recorder reads the
transcript's new complete lines and records, in order, what the owner said (role ``user``) and
the assistant's text (role ``assistant``) through the engine's ``conversation.record`` at scope
``admin``, so ``conversation-search`` finds what the owner said, not only visitors' words
(:func:`appliance.sessions.transcript.said` decides which lines count).

Each message is keyed by its transcript line's ``uuid``; the engine records a key once. So a
transcript read again — after a manager restart, when the row index is rebuilt — records nothing
twice. The first read of a session after a start asks the engine for the session's last recorded
key and sends only the lines after it (a restart does not resend whole histories; should that
key not be in the transcript, everything is sent and the engine skips what it has).

While the engine is unreachable nothing is lost: the read position stays where it was and the
session is tried again on its next change or after :data:`RETRY_S` seconds
(``[recorder] warn reason=engine-unavailable`` once per outage). A message the engine refuses
(the owner deleted that conversation, say) is skipped with one ``[recorder] warn
reason=refused`` line; what follows is still recorded. One line per pass that recorded
something: ``[recorder] op=record session=… recorded=… known=…``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RemoteError, RpcError
from appliance.sessions.registry import Row
from appliance.sessions.transcript import Lines, said

log = logging.getLogger(__name__)

ENGINE_TIMEOUT = 30.0  # a message is embedded while we wait
RETRY_S = 30.0
SCOPE = "admin"


@dataclass
class Said:
    """One message to record: its transcript line's uuid, who said it and what."""

    key: str
    role: str
    text: str


@dataclass
class _Followed:
    """How far one session's transcript has been recorded."""

    lines: Lines = field(default_factory=Lines)
    resumed: bool = False  # the engine's last key was asked for (once per start)
    task: asyncio.Task[None] | None = None
    again: bool = False  # the transcript changed while a pass ran
    retry: asyncio.TimerHandle | None = None


def messages_in(lines: list[bytes]) -> list[Said]:
    """The messages of transcript lines, in order (lines without a uuid are skipped)."""
    out: list[Said] = []
    for raw in lines:
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("uuid"), str):
            continue
        found = said(entry)
        if found is not None:
            out.append(Said(entry["uuid"], *found))
    return out


def after(messages: list[Said], last_key: str | None) -> list[Said]:
    """The messages after the one keyed ``last_key`` (all of them when it is not among them)."""
    keys = [m.key for m in messages]
    if last_key is None or last_key not in keys:
        return messages
    return messages[keys.index(last_key) + 1 :]


class Recorder:
    """Records the admin sessions' transcripts of one account into its graph."""

    def __init__(
        self, engine_socket: Path, account_id: str, transcript_of: Callable[[str], Path | None]
    ) -> None:
        self.engine = RpcClient(engine_socket, timeout=ENGINE_TIMEOUT)
        self.caller = Caller(account_id=account_id).to_wire()
        self.transcript_of = transcript_of
        self._followed: dict[str, _Followed] = {}
        self._unavailable = False
        self._closed = False

    def on_row(self, session_id: str, old: Row | None, new: Row | None) -> None:
        """Registry hook: an admin session's transcript may have grown."""
        if new is None:
            self._forget(session_id)
            return
        if new.get("kind") == "admin" and new.get("transcript"):
            self.wake(session_id)

    def wake(self, session_id: str) -> None:
        """Record what is new in the session's transcript (once more if a pass is running)."""
        if self._closed:
            return
        followed = self._followed.setdefault(session_id, _Followed())
        if followed.retry is not None:
            followed.retry.cancel()
            followed.retry = None
        if followed.task is not None and not followed.task.done():
            followed.again = True
            return
        followed.task = asyncio.get_running_loop().create_task(
            self._drain(session_id, followed), name=f"recorder-{session_id}"
        )

    def _forget(self, session_id: str) -> None:
        followed = self._followed.pop(session_id, None)
        if followed is not None and followed.retry is not None:
            followed.retry.cancel()

    async def close(self) -> None:
        """Stop recording: cancel retries and wait for the passes running now."""
        self._closed = True
        tasks = []
        for followed in self._followed.values():
            if followed.retry is not None:
                followed.retry.cancel()
            if followed.task is not None:
                followed.task.cancel()
                tasks.append(followed.task)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _drain(self, session_id: str, followed: _Followed) -> None:
        while True:
            followed.again = False
            try:
                await self._pass(session_id, followed)
            except RpcError as err:
                if not self._unavailable:
                    log.warning(
                        "[recorder] warn reason=engine-unavailable session=%s error=%s",
                        session_id,
                        getattr(err, "code", None) or type(err).__name__,
                    )
                self._unavailable = True
                loop = asyncio.get_running_loop()
                followed.retry = loop.call_later(RETRY_S, self.wake, session_id)
                return
            self._unavailable = False
            if not followed.again:
                return

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        return await self.engine.call(method, {**params, "caller": self.caller})

    async def _pass(self, session_id: str, followed: _Followed) -> None:
        """Record the transcript's new messages; an unreachable engine leaves the position."""
        path = self.transcript_of(session_id)
        if path is None:
            return
        last_key: str | None = None
        if not followed.resumed:
            answer = await self._call(
                "conversation.messages", {"sessionId": session_id, "limit": 1}
            )
            latest = answer.get("messages") or []
            last_key = latest[-1].get("key") if latest else None
        position = (followed.lines.offset, followed.lines.inode)
        lines = await asyncio.to_thread(followed.lines.read, path)
        pending = messages_in(lines)
        if not followed.resumed:
            pending = after(pending, last_key)
        recorded = known = 0
        try:
            for message in pending:
                try:
                    answer = await self._call(
                        "conversation.record",
                        {
                            "sessionId": session_id,
                            "role": message.role,
                            "text": message.text,
                            "key": message.key,
                            "scope": SCOPE,
                        },
                    )
                except RemoteError as err:
                    if err.code not in ("write-rejected", "bad-request"):
                        raise
                    log.warning(
                        "[recorder] warn reason=refused session=%s key=%s error=%s",
                        session_id,
                        message.key,
                        err,
                    )
                    continue
                if answer.get("created", True):
                    recorded += 1
                else:
                    known += 1
        except BaseException:
            # Read again from where this pass began: the engine skips what it already has.
            followed.lines.offset, followed.lines.inode = position
            raise
        followed.resumed = True
        if recorded or known:
            log.info(
                "[recorder] op=record session=%s recorded=%d known=%d",
                session_id,
                recorded,
                known,
            )
