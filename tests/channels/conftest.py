"""The channels role against real neighbours: the engine (real Neo4j and model), the session
manager running the `claude` double, and `maxy channels` itself; only Telegram (the local Bot
API) and Anthropic (the local Messages API) are replaced, at their wire."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from appliance.channels import status
from appliance.core.fsio import write_atomic, write_secret
from appliance.rpc.protocol import RpcError
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.telegram_api import TOKEN, Delivered, FakeTelegram, Sent
from tests.support.processes import Neo4jServer, Process, wait_until
from tests.support.stacks import (
    DOUBLE,
    Stack,
    give_api_key,
    make_env,
    running_stack,
    start_manager,
)

# neonize's import, and loading its Go core, run `uname -a` through os.popen and never close the
# pipe or wait for the child (neonize/utils/platform.py). Both happen here once, with those
# ResourceWarnings ignored, before test_whatsapp needs them: otherwise filterwarnings=error
# raises them as unraisable exceptions in whichever test runs next, anywhere in the session.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ResourceWarning)
    import neonize._binder
    import neonize.aioze.client  # noqa: F401

    # The `uname` children wait in subprocess._active with their pipes until the next Popen
    # reaps them (subprocess._cleanup): reap them here, where the warnings are ignored.
    for _ in range(100):
        subprocess.run(["true"], check=True)
        if not subprocess._active:  # type: ignore[attr-defined]
            break
        time.sleep(0.05)


GATEWAY = "claude-haiku-4-5"
AGENT = "claude-sonnet-4-6"
PUBLIC_ANSWER = "Our opening hours are nine to five, Monday to Friday."
OWNER = 42  # the owner's Telegram user id (on the allow-list)


def verdict(kind: str = "CLEAN") -> Reply:
    body = {
        "verdict": kind,
        "injection": False,
        "query": None,
        "intent": "question",
        "language": "en",
        "complexity": "simple",
    }
    return Reply(text=json.dumps(body))


@dataclass
class Channels:
    """A running stack, the local Bot API and Messages API, and `maxy channels` (restartable)."""

    stack: Stack
    api: FakeTelegram
    anthropic: FakeAnthropic
    role: Process | None = None
    starts: int = 0

    @property
    def settings(self) -> Any:
        return self.stack.env.settings

    def configure(self, **config: Any) -> None:
        """Write the channel's settings file (what the Settings page saves)."""
        folder = self.settings.channels_dir
        folder.mkdir(parents=True, exist_ok=True)
        body = {"ownerIds": [str(OWNER)], "strangers": "public", "groups": {}, **config}
        write_atomic(folder / "telegram.json", json.dumps(body))  # as the Settings page saves

    def start(self, **variables: str) -> Process:
        """Start `maxy channels` and wait until it polls."""
        assert self.role is None or self.role.proc.poll() is not None, "already running"
        self.starts += 1
        env = {**self.stack.env.vars, **variables}
        self.role = Process(
            [sys.executable, "-m", "appliance", "channels"],
            env,
            self.stack.logs / f"channels-{self.starts}.log",
        )
        role = self.role
        wait_until(
            lambda: self.state() == "polling" and role.proc.poll() is None,
            60,
            f"maxy channels polling\n{role.output()}",
            0.1,
        )
        return role

    def status(self) -> dict[str, Any]:
        return status.read(self.settings.channels_dir, "telegram")

    def state(self) -> str:
        return str(self.status().get("state"))

    def stop(self) -> None:
        if self.role is not None:
            self.role.stop()

    def kill(self) -> None:
        """SIGKILL the role (no clean shutdown), as a crash or a power cut would."""
        if self.role is not None and self.role.proc.poll() is None:
            os.killpg(self.role.proc.pid, signal.SIGKILL)
            self.role.proc.wait(10)
            self.role.stop()  # reaped already: closes its log file

    def stop_sessions(self) -> None:
        """Stop every live session of the manager (earlier tests' threads hold PTY slots)."""
        sock = self.settings.manager_socket
        transport = httpx.HTTPTransport(uds=str(sock))
        with httpx.Client(transport=transport, base_url="http://m", timeout=60) as http:
            for row in http.get("/sessions").json()["rows"]:
                if row["state"] == "live":
                    http.post(f"/{row['id']}/stop")

    def output(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.stack.logs.glob("channels-*.log"))
        )

    def reply_to(self, delivered: Delivered, timeout: float = 60) -> Sent:
        """Wait for the bot's reply to one message; the reply (its first message)."""
        wait_until(
            lambda: self.api.replies_to(delivered.chat_id, delivered.message_id),
            timeout,
            f"a reply to {delivered.text!r}\n{self.output()[-4000:]}",
            0.05,
        )
        return self.api.replies_to(delivered.chat_id, delivered.message_id)[0]

    def rows(self, chat: int) -> list[dict[str, Any]]:
        """The chat's conversation in the graph (inbound and outbound, in order)."""
        for attempt in range(5):
            try:
                answer = self.stack.rpc(
                    "conversation.messages", {"sessionId": f"telegram:{chat}", "limit": 2000}
                )
                break
            except RpcError:  # the engine is busy (a burst): ask again
                if attempt == 4:
                    raise
                time.sleep(1)
        messages: list[dict[str, Any]] = answer["messages"]
        return messages

    def handled(self, chat: int, count: int, timeout: float = 60) -> None:
        """Wait until ``count`` inbound messages of a chat have reached a final state."""

        def done() -> bool:
            # Kept first, then open: read the other way round, a message kept between the two
            # reads counts as kept but not as open, and "handled" comes before its handling.
            if len([r for r in self.rows(chat) if r["role"] == "user"]) < count:
                return False
            pending = self.stack.rpc("channel.pending", {"channel": "telegram"})["messages"]
            return not [m for m in pending if m["chatId"] == str(chat)]

        wait_until(
            done, timeout, f"{count} messages of chat {chat} handled\n{self.output()[-3000:]}"
        )


@pytest.fixture(scope="module")
def channels(
    neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Channels]:
    root = tmp_path_factory.mktemp("channels")
    with FakeTelegram() as api, FakeAnthropic() as anthropic:
        anthropic.always(verdict(), model=GATEWAY)
        anthropic.always(Reply(text=PUBLIC_ANSWER), model=AGENT)
        env = make_env(
            neo4j_server,
            root / "data",
            MAXY_ANTHROPIC_BASE_URL=anthropic.url,
            MAXY_TELEGRAM_API_URL=api.url,
            MAXY_TELEGRAM_POLL_TIMEOUT="1",
            MAXY_CLAUDE_BIN=str(DOUBLE),
            MAXY_STOP_GRACE="1",
            CLAUDE_DOUBLE_PYTHON=sys.executable,
        )
        give_api_key(env)
        write_secret(env.settings.telegram_token_path, (TOKEN + "\n").encode())
        with running_stack(env, root / "logs", "engine") as stack:
            start_manager(stack)
            running = Channels(stack, api, anthropic)
            running.configure()
            try:
                yield running
            finally:
                running.stop()


def manager_row(channels: Channels, session: str) -> dict[str, Any] | None:
    """A session's row in the manager, or None when it has none."""
    sock = channels.settings.manager_socket
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://m") as http:
        answer = http.get(f"/{session}")
        if answer.status_code == 404:
            return None
        row: dict[str, Any] = answer.json()["row"]
        return row
