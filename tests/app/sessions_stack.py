"""The app beside a real `maxy manager` that runs the `claude` test double, and an SSE reader.

No Neo4j and no engine: nothing on the session routes asks them, so these stacks start in seconds.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from appliance.accounts import create_account
from tests.app.stack import Stack, running_stack
from tests.conftest import Env, Process, free_port, wait_until
from tests.sessions.conftest import answers, manager_env


def sessions_env(root: Path) -> Env:
    """Settings shared by the app, the edge and the manager (which runs the double)."""
    runtime = Path(tempfile.mkdtemp(prefix="maxy-run-", dir="/tmp"))
    account = create_account(root / "data" / "accounts", "Test Owner")
    extra = {"MAXY_HOST": "127.0.0.1", "MAXY_PORT": str(free_port())}
    return Env(manager_env(root / "data", runtime, account.id, extra, {}), account.id)


def start_manager(stack: Stack) -> Process:
    """Start `maxy manager` and wait until it answers on its socket."""
    process = stack.start("manager")
    sock = stack.env.settings.manager_socket

    def healthy() -> bool:
        assert process.proc.poll() is None, f"maxy manager exited:\n{process.output()}"
        return answers(sock)

    wait_until(healthy, 60, f"the manager on {sock}", 0.05)
    return process


@contextmanager
def sessions_stack(root: Path, *roles: str, **variables: str) -> Iterator[Stack]:
    """``roles`` (app, edge) and a manager running the double, for one fresh account."""
    from tests.app.test_browser import _edge_serves

    env = sessions_env(root)
    env.vars.update(variables)
    try:
        with running_stack(env, root / "logs", *roles) as running:
            if "edge" in roles:
                port = env.settings.port
                wait_until(lambda: _edge_serves(port), 60, f"the edge\n{running.output()}")
            start_manager(running)
            yield running
    finally:
        shutil.rmtree(env.settings.runtime_dir, ignore_errors=True)


@dataclass
class Event:
    """One Server-Sent Event."""

    event: str
    id: str | None
    data: Any


async def sse_events(response: httpx.Response) -> AsyncIterator[Event]:
    """The events of a streamed ``text/event-stream`` response, as they arrive."""
    fields: dict[str, str] = {}
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                payload = json.loads("\n".join(data))
                yield Event(fields.get("event", "message"), fields.get("id"), payload)
            fields, data = {}, []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value.removeprefix(" "))
            else:
                fields[name] = value.removeprefix(" ")
