"""Connecting Claude: the CLI's long-lived-token flow (``claude setup-token``) in a PTY.

The flow is one more kind of session the manager holds, on the same machinery as the others: a
:class:`~appliance.sessions.pty.PtyHandle`, its ring buffer, and the terminal bridge, so the
browser shows it in xterm.js at ``WS /<login id>/terminal``. It runs with a fresh, empty
``CLAUDE_CONFIG_DIR`` of its own (``<account>/claude-login``), so it never appears among the
sessions and starts from the CLI's welcome. The CLI prints a sign-in URL; the owner opens it,
signs in with their Claude subscription and pastes the code it shows into the terminal. The CLI
then prints the token once: :class:`TokenCatcher` (a viewer of the PTY like a browser tab) reads
it from the output, :class:`ClaudeLogin` stores it 0600 at ``keys/claude-oauth-token`` and stops
the process. Every session spawned later gets it as ``CLAUDE_CODE_OAUTH_TOKEN``.

States, as ``GET /claude`` reports them::

    starting           the process runs; no sign-in URL yet
    waiting-for-code   the URL is shown (``url``); ``error`` holds the CLI's last OAuth error
    connected          the token is stored
    failed             the process ended without a token (``message`` says how)
    cancelled          the owner (or a new flow, or the manager's shutdown) stopped it
    expired            nobody finished it within :data:`LOGIN_TIMEOUT` seconds

Neither the token nor the URL (it carries the flow's one-time state) is ever logged.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from appliance.core.fsio import read_secret, write_secret
from appliance.sessions import screen
from appliance.sessions.errors import SpawnFailed
from appliance.sessions.pty import PtyHandle

log = logging.getLogger(__name__)

LOGIN_TIMEOUT = 15 * 60.0  # seconds a sign-in may wait for its code
CAPTURE_BYTES = 256 * 1024  # output kept for reading the URL and the token
DONE_GRACE = 2.0  # seconds the CLI gets to exit by itself after printing the token
PREFIX = "login-"
# What a login must not inherit: the manager's own credentials would confuse the CLI.
_DROPPED = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")


class TokenCatcher:
    """A viewer of the login's PTY that reads the URL, errors and token out of its output."""

    def __init__(self, on_url: Callable[[], None], on_token: Callable[[str], None]) -> None:
        self.on_url = on_url
        self.on_token = on_token
        self.text = ""
        self.url: str | None = None
        self.error: str | None = None
        self.captured = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def offer(self, seq: int, data: bytes) -> None:
        """Read a piece of output."""
        self.text = (self.text + self._decoder.decode(data))[-CAPTURE_BYTES:]
        self._read(finished=False)

    def ended(self, code: int) -> None:
        """The process exited: whatever it printed last is whole now."""
        self.text += self._decoder.decode(b"", final=True)
        self._read(finished=True)

    def _read(self, finished: bool) -> None:
        if self.captured:
            return
        if self.url is None:
            self.url = screen.oauth_url(self.text)
            if self.url is not None:
                self.on_url()
        self.error = screen.oauth_error(self.text)
        token = screen.oauth_token(self.text, finished)
        if token is not None:
            self.captured, self.error = True, None
            self.text = ""  # the token is kept in one place only: its file
            self.on_token(token)


class ClaudeLogin:
    """At most one ``claude setup-token`` at a time, and what became of the last one."""

    def __init__(
        self,
        claude: Callable[[], str],
        base_env: Mapping[str, str],
        account_dir: Path,
        token_path: Path,
        stop: Callable[[PtyHandle, str], Any],
    ) -> None:
        self._claude = claude
        self.base_env = {k: v for k, v in base_env.items() if k not in _DROPPED}
        self.account_dir = account_dir
        self.config_dir = account_dir / "claude-login"
        self.token_path = token_path
        self._stop = stop
        self.id: str | None = None
        self.handle: PtyHandle | None = None
        self.catcher: TokenCatcher | None = None
        self.state = "none"
        self.message: str | None = None
        self.started_at: int | None = None
        self.exit_code: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def running(self) -> bool:
        """True while the process lives."""
        return self.handle is not None and self.handle.alive

    def connected(self) -> bool:
        """True when a token is stored."""
        return read_secret(self.token_path) is not None

    def status(self) -> dict[str, Any]:
        """The flow, as ``GET /claude`` shows it (no token, ever)."""
        catcher = self.catcher
        return {
            "id": self.id,
            "state": self.state,
            "url": catcher.url if catcher and self.state == "waiting-for-code" else None,
            "error": catcher.error if catcher and self.running else None,
            "message": self.message,
            "startedAt": self.started_at,
            "exitCode": self.exit_code,
            "running": self.running,
        }

    async def start(self) -> dict[str, Any]:
        """Start a sign-in (or return the one running); raise ClaudeNotFound without a CLI."""
        if self.running:
            return self.status()
        argv = [self._claude(), "setup-token"]
        shutil.rmtree(self.config_dir, ignore_errors=True)
        self.config_dir.mkdir(parents=True, mode=0o700)
        env = dict(self.base_env, CLAUDE_CONFIG_DIR=str(self.config_dir))
        self.id = PREFIX + secrets.token_hex(8)
        self.state, self.message, self.exit_code = "starting", None, None
        self.started_at = int(time.time() * 1000)
        self.catcher = TokenCatcher(self._url_shown, self._captured)
        try:
            handle = PtyHandle.spawn(argv, self.account_dir, env, on_exit=self._on_exit)
        except OSError as err:
            self.state = "failed"
            self.message = (
                f"claude setup-token could not be started ({err}). Check MAXY_CLAUDE_BIN."
            )
            raise SpawnFailed(self.message) from err
        handle.session_id = self.id
        handle.viewers.add(self.catcher)
        self.handle = handle
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(LOGIN_TIMEOUT, self._expire)
        log.info("[sessions] op=claude-login-start id=%s pid=%s", self.id, handle.pid)
        return self.status()

    def _url_shown(self) -> None:
        if self.state == "starting":
            self.state = "waiting-for-code"

    def _captured(self, token: str) -> None:
        write_secret(self.token_path, (token + "\n").encode())
        self.state, self.message = "connected", None
        log.info("[sessions] op=claude-connected id=%s file=%s", self.id, self.token_path)
        handle = self.handle
        if handle is not None:
            asyncio.get_running_loop().call_later(DONE_GRACE, self._finish, handle)

    def _finish(self, handle: PtyHandle) -> None:
        if handle.alive:
            self._track(self._stop(handle, "claude-login-done"))

    def _expire(self) -> None:
        handle = self.handle
        if handle is not None and handle.alive and self.state != "connected":
            self.state = "expired"
            self.message = (
                f"Nobody finished the sign-in within {LOGIN_TIMEOUT / 60:.0f} minutes; it was "
                "stopped. Start Connect Claude again."
            )
            log.info("[sessions] op=claude-login-expired id=%s", self.id)
            self._track(self._stop(handle, "claude-login-expired"))

    def _track(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_exit(self, handle: PtyHandle) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        code = handle.exited.result()
        self.exit_code = code
        if self.state in ("starting", "waiting-for-code"):
            catcher = self.catcher
            said = screen.explain_exit(catcher.text if catcher else "")[0]
            error = catcher.error if catcher else None
            self.state = "failed"
            self.message = (
                f"claude setup-token exited with code {code} before Claude was connected: "
                f"{error or said} Start Connect Claude again."
            )
        log.info(
            "[sessions] op=claude-login-exit id=%s pid=%s code=%s state=%s",
            self.id,
            handle.pid,
            code,
            self.state,
        )
        if self.handle is handle:
            self.handle = None  # the ring (it held the token) goes with it

    async def cancel(self, reason: str = "cancelled") -> dict[str, Any]:
        """Stop a running sign-in; idempotent."""
        handle = self.handle
        if handle is not None and handle.alive:
            if self.state in ("starting", "waiting-for-code"):
                self.state, self.message = "cancelled", "The sign-in was cancelled."
            await self._stop(handle, f"claude-login-{reason}")
        return self.status()

    def disconnect(self) -> bool:
        """Remove the stored token; True if there was one."""
        try:
            os.unlink(self.token_path)
        except FileNotFoundError:
            return False
        if self.state == "connected":
            self.state = "none"
        log.info("[sessions] op=claude-disconnected file=%s", self.token_path)
        return True

    async def close(self) -> None:
        """Stop the flow at shutdown."""
        await self.cancel("shutdown")
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
