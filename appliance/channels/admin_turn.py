"""The owner's message on a channel, as a turn of their admin Claude Code session.

Each sender on the allow-list has one admin session, its id derived from the account, the
channel and the sender (:func:`thread_id`, a UUID 5): the same thread after every restart of the
channels role, of the manager, of the device. :meth:`AdminTurns.start`

- types the message into that session through the manager's input route when it is live;
- otherwise starts it through ``/rc-spawn`` with the message as its first prompt — ``sessionId``
  the first time, ``resume`` when its transcript exists (the manager had stopped it) — with the
  channel's instructions appended to its system prompt.

Before either, it counts the user prompts already in the transcript, so the relay
(:meth:`AdminTurns.relay`) knows which prompt is this message's: the first later one with the
same text (the owner may also type into the same session from the web shell). It follows the
transcript (``GET /<id>/log?follow=1``) from there and hands over each assistant text of the
turn until the turn ends. What it saw decides how a turn that ran out of time is attributed:
``no-turn`` when the prompt never appeared, ``relay-missed`` when it did but the end of the turn
was not seen. An API error the CLI wrote as the turn's answer is raised as
:class:`~appliance.agents.errors.SessionFailed` (its text is never relayed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from appliance.agents.claude_code import assistant_text
from appliance.sessions.transcript import TERMINAL_STOP_REASONS, is_prompt
from appliance.web.manager_client import ManagerClient, ManagerError, ManagerRefused

log = logging.getLogger(__name__)

THREADS = uuid.UUID("5b0f6f2e-4a0c-4c1e-9d55-6d61787920f1")  # the namespace of thread ids
PENDING_POLL = 0.2
RELAY_TIMEOUT = 30.0  # seconds one read of the followed transcript may wait for a line


def thread_id(account_id: str, channel: str, sender_id: str) -> str:
    """The admin session of one sender on one channel: always the same id."""
    return str(uuid.uuid5(THREADS, f"{account_id}:{channel}:{sender_id}"))


def typed(text: str) -> str:
    """The message as one line of input (a newline would submit it early)."""
    return " ⏎ ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def prompt_text(entry: dict[str, Any]) -> str:
    """The text of a user prompt line."""
    message = entry.get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def same_prompt(written: str, sent: str) -> bool:
    """True when the transcript's prompt is the text that was sent (spacing aside)."""
    a, b = " ".join(written.split()), " ".join(sent.split())
    return a == b or (len(b) > 40 and a.startswith(b[:40]))


def count_prompts(transcript: str) -> int:
    """How many user prompts a transcript holds."""
    count = 0
    for line in transcript.splitlines():
        entry = _entry(line)
        if entry is not None and entry.get("type") == "user" and is_prompt(entry):
            count += 1
    return count


def _entry(line: str) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


@dataclass(frozen=True)
class Turn:
    """One message typed into (or starting) a session."""

    session_id: str
    prompts_before: int
    text: str
    started: bool = False  # a new or resumed session took it as its first prompt


@dataclass
class Seen:
    """What the relay saw of a turn."""

    prompt: bool = False
    prompt_at: float | None = None
    ended: bool = False
    pieces: int = 0


class AdminTurns:
    """Owner turns on one channel, through the session manager."""

    def __init__(
        self, manager: ManagerClient, account_id: str, channel: str, instructions: str
    ) -> None:
        self.manager = manager
        self.account_id = account_id
        self.channel = channel
        self.instructions = instructions

    async def _row(self, session_id: str) -> dict[str, Any] | None:
        try:
            return await self.manager.row(session_id)
        except ManagerRefused as err:
            if err.status == 404:
                return None
            raise

    async def start(
        self,
        sender_id: str,
        text: str,
        counted: Callable[[int], Awaitable[None]] | None = None,
    ) -> Turn:
        """Put ``text`` to the sender's admin session (raises :class:`ManagerError`).

        ``counted`` is given the number of prompts before it, before it is typed: the caller
        keeps it, so after a restart :meth:`typed_already` can tell whether it was.
        """
        session_id = thread_id(self.account_id, self.channel, sender_id)
        line = typed(text)
        row = await self._row(session_id)
        before = count_prompts(await self.manager.transcript(session_id)) if row else 0
        if counted is not None:
            await counted(before)
        if row is not None and row["state"] == "live":
            await self.manager.input(session_id, line)
            return Turn(session_id, before, line)
        body: dict[str, Any] = {
            "message": line,
            "channel": self.channel,
            "senderId": sender_id,
            "systemPrompt": self.instructions,
        }
        body["resume" if row is not None else "sessionId"] = session_id
        try:
            spawned = await self.manager.spawn(body)
        except ManagerRefused as err:
            if err.code != "session-alive":
                raise
            # Started meanwhile (the manager found it): type into it instead.
            await self.manager.input(session_id, line)
            return Turn(session_id, before, line)
        log.info(
            "[channels] op=thread-start channel=%s sender=%s session=%s how=%s",
            self.channel,
            sender_id,
            spawned["id"],
            "resume" if row is not None else "new",
        )
        return Turn(str(spawned["id"]), before, line, started=True)

    async def typed_already(self, sender_id: str, before: int, text: str) -> Turn | None:
        """The turn of ``text`` when its session holds it after its ``before`` earlier prompts
        (the role stopped between typing it and noting so): relayed, never typed twice."""
        session_id = thread_id(self.account_id, self.channel, sender_id)
        if await self._row(session_id) is None:
            return None
        line = typed(text)
        prompts = 0
        for raw in (await self.manager.transcript(session_id)).splitlines():
            entry = _entry(raw)
            if entry is None or entry.get("type") != "user" or not is_prompt(entry):
                continue
            prompts += 1
            if prompts > before and same_prompt(prompt_text(entry), line):
                return Turn(session_id, before, line)
        return None

    async def relay(
        self,
        turn: Turn,
        on_text: Callable[[str], Awaitable[None]],
        seen: Seen,
    ) -> None:
        """Follow the turn's transcript, handing over each assistant text, until it ends.

        Returns when the turn ended (``seen.ended``) or the session stopped being live; the
        caller bounds it in time. Raises SessionFailed for an API error answer.
        """
        async with self.manager.http(timeout=RELAY_TIMEOUT) as http:
            while not seen.ended:
                finished = await self._follow_once(http, turn, on_text, seen)
                if finished:
                    return

    async def _follow_once(
        self,
        http: httpx.AsyncClient,
        turn: Turn,
        on_text: Callable[[str], Awaitable[None]],
        seen: Seen,
    ) -> bool:
        """One follow of the transcript; True when there is nothing more to wait for."""
        prompts = 0
        try:
            async with http.stream(
                "GET", f"/{turn.session_id}/log", params={"follow": "1"}
            ) as stream:
                if stream.status_code == 202:  # started, nothing written yet
                    await asyncio.sleep(PENDING_POLL)
                    return False
                if stream.status_code != 200:
                    raise ManagerError(
                        f"The transcript of {turn.session_id} cannot be followed "
                        f"(HTTP {stream.status_code})."
                    )
                async for line in stream.aiter_lines():
                    entry = _entry(line)
                    if entry is None or entry.get("isSidechain"):
                        continue
                    kind = entry.get("type")
                    if kind == "user" and is_prompt(entry):
                        prompts += 1
                        if seen.prompt:
                            return True  # the next prompt: this turn is over
                        if prompts > turn.prompts_before and same_prompt(
                            prompt_text(entry), turn.text
                        ):
                            seen.prompt, seen.prompt_at = True, time.monotonic()
                    elif kind == "assistant" and seen.prompt:
                        piece = assistant_text(entry)  # SessionFailed for an API error
                        if piece.strip():
                            seen.pieces += 1
                            await on_text(piece)
                        message = entry.get("message") or {}
                        if message.get("stop_reason") in TERMINAL_STOP_REASONS:
                            seen.ended = True
                            return True
        except httpx.HTTPError as err:
            raise ManagerError(f"The session manager stopped answering ({err}).") from err
        # The stream ended: the session is no longer live; nothing more will be written.
        return True
