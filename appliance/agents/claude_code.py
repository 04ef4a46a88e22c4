"""Public agents without an API key: each visitor message runs as a public Claude Code session.

Which path serves visitors (:func:`visitor_path`):

- ``api-key``: an Anthropic API key is stored: the gateway, the classifier and the agent call the
  Messages API (:mod:`appliance.agents.public_agent`);
- ``claude``: no key, but Claude is connected (Connect Claude): :class:`SessionAgent` asks the
  session manager for a public session (``POST /public-spawn`` — no tools but the public ones,
  the time; see :mod:`appliance.sessions.spawn`) with the agent's prompt appended to its system
  prompt, the message (and the recent conversation) as its first prompt, ``closeAfterTurn`` and
  ``hidden``;
  it follows the session's transcript (``GET /<id>/log?follow=1``) and relays each assistant
  text to the visitor, then deletes the ended session (the conversation is kept in the graph by
  :mod:`appliance.agents.visitors`);
- ``none``: neither: visitors get the friendly "can't answer right now", and the admin shell says
  that they are being turned away.

A session that cannot answer raises :class:`~appliance.agents.errors.SessionFailed` (the chat
degrades to the friendly sentence); one log line per reply: ``[public-agent] op=session-reply
agent=… id=… outcome=… ms=…``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx

from appliance.agents.anthropic_client import AnthropicClient, read_api_key
from appliance.agents.errors import SessionFailed
from appliance.agents.gateway import Screening
from appliance.agents.public_agent import HISTORY_MESSAGES, PublicAgent, Turn
from appliance.core.accounts import Account
from appliance.core.config import Settings
from appliance.core.fsio import read_secret
from appliance.web.manager_client import ManagerClient

log = logging.getLogger(__name__)

VisitorPath = Literal["api-key", "claude", "none"]
REPLY_TIMEOUT = 180.0  # seconds a session gets to start, answer and end
PENDING_POLL = 0.2  # while its transcript does not exist yet
HISTORY_CHARS = 4000

VISITOR_PATHS: dict[str, str] = {
    "api-key": "Visitors are answered through your Anthropic API key.",
    "claude": (
        "Visitors are answered through your Claude subscription (a Claude Code session per "
        "message, with no tools but telling the time). Add an Anthropic API key in Settings to "
        "answer them through the API instead."
    ),
    "none": (
        "Visitors are being turned away: no Anthropic API key is set and Claude is not "
        "connected. Connect Claude or add an API key in Settings."
    ),
}


def claude_connected(settings: Settings) -> bool:
    """True when Connect Claude stored a token (the file the manager reads at each spawn)."""
    return read_secret(settings.claude_token_path) is not None


def visitor_path(settings: Settings) -> VisitorPath:
    """How visitors are answered right now (read from the key files at each call)."""
    if read_api_key(settings) is not None:
        return "api-key"
    return "claude" if claude_connected(settings) else "none"


def session_prompt(history: Sequence[Turn], text: str) -> str:
    """The visitor's message as the session's first prompt, after the recent conversation."""
    recent = list(history)[-HISTORY_MESSAGES:]
    lines = [f"{'You' if t.role == 'assistant' else 'Visitor'}: {t.text}" for t in recent]
    earlier = "\n".join(lines)[-HISTORY_CHARS:]
    if not earlier:
        return text
    return f"Earlier in this conversation:\n{earlier}\n\nThe visitor's new message:\n{text}"


def assistant_text(entry: dict[str, Any]) -> str:
    """The text of an assistant transcript entry (raises SessionFailed for an API error)."""
    message = entry.get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    blocks = content if isinstance(content, list) else []
    text = "".join(
        block.get("text", "")
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "text"
    )
    if entry.get("isApiErrorMessage"):
        reason = "not-connected" if entry.get("error") == "authentication_failed" else "api-error"
        raise SessionFailed(reason, f"The public session could not reach Claude: {text}")
    return text


class SessionAgent(PublicAgent):
    """A public agent answered by a public Claude Code session (public tools only)."""

    def __init__(
        self, client: AnthropicClient, model: str, folder: Path, account: Account, socket: Path
    ) -> None:
        super().__init__(client, model, folder, account)
        self.socket = socket

    def _http(self) -> httpx.AsyncClient:
        return ManagerClient(self.socket, timeout=REPLY_TIMEOUT).http()

    async def reply(
        self, history: Sequence[Turn], text: str, screening: Screening, memory: str = ""
    ) -> AsyncIterator[str]:
        """Yield the session's reply, one assistant text at a time."""
        body = {
            "message": session_prompt(history, text),
            "agent": self.slug,
            "systemPrompt": self.system(screening, memory),
            "model": self.model,
            "closeAfterTurn": True,
            "hidden": True,
            "channel": "public-chat",
            "role": "visitor",
        }
        # The session is read in a task of its own, so the deadline covers it as a whole and
        # never lands in the visitor's stream while it is being written.
        pieces: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        task = asyncio.create_task(self._run(body, pieces))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REPLY_TIMEOUT
        try:
            while True:
                try:
                    item = await asyncio.wait_for(pieces.get(), max(0.0, deadline - loop.time()))
                except TimeoutError as err:
                    raise SessionFailed(
                        "timeout", "The public session did not answer in time."
                    ) from err
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(
        self, body: dict[str, Any], pieces: asyncio.Queue[str | BaseException | None]
    ) -> None:
        """Spawn, relay the transcript's assistant texts into ``pieces``, clean up."""
        started = time.monotonic()
        outcome, session_id = "failed", None
        try:
            async with self._http() as http:
                try:
                    session_id = await self._spawn(http, body)
                    async for piece in self._follow(http, session_id):
                        outcome = "answered"
                        pieces.put_nowait(piece)
                finally:
                    if session_id is not None:  # also when cancelled: the finally still runs
                        await self._clean_up(http, session_id)
                pieces.put_nowait(None)  # after the clean-up, so the reader never cuts it short
        except SessionFailed as err:
            outcome = err.reason
            pieces.put_nowait(err)
        except httpx.HTTPError as err:
            outcome = "manager-unavailable"
            pieces.put_nowait(
                SessionFailed("manager-unavailable", f"The session manager did not answer ({err}).")
            )
        except asyncio.CancelledError:
            outcome = "cancelled" if outcome == "failed" else outcome
            raise
        finally:
            log.info(
                "[public-agent] op=session-reply agent=%s id=%s outcome=%s ms=%.0f",
                self.slug,
                session_id,
                outcome,
                (time.monotonic() - started) * 1000,
            )

    async def _spawn(self, http: httpx.AsyncClient, body: dict[str, Any]) -> str:
        response = await http.post("/public-spawn", json=body)
        answer = _json(response)
        if response.status_code != 201:
            code = str(answer.get("code") or f"http-{response.status_code}")
            raise SessionFailed(code, str(answer.get("message") or code))
        return str(answer["row"]["id"])

    async def _follow(self, http: httpx.AsyncClient, session_id: str) -> AsyncIterator[str]:
        while True:
            async with http.stream("GET", f"/{session_id}/log", params={"follow": "1"}) as stream:
                if stream.status_code == 202:  # started, nothing written yet
                    await asyncio.sleep(PENDING_POLL)
                    continue
                if stream.status_code != 200:
                    raise SessionFailed(
                        f"log-http-{stream.status_code}", "The session's transcript is missing."
                    )
                async for line in stream.aiter_lines():
                    if not line.strip():
                        continue
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(entry, dict) and entry.get("type") == "assistant":
                        piece = assistant_text(entry)
                        if piece:
                            yield piece
                return

    async def _clean_up(self, http: httpx.AsyncClient, session_id: str) -> None:
        """Stop the session if it still runs and delete it: the graph keeps the conversation."""
        with contextlib.suppress(httpx.HTTPError):
            await http.post(f"/{session_id}/stop")
            await http.delete(f"/{session_id}")


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
