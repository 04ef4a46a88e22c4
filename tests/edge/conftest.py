"""The real edge (`maxy edge` under Granian) in front of the test upstream on a Unix socket.

One edge per test module (it does not need Neo4j: nothing here asks the engine). The upstream
(tests/edge/upstream.py, served by Granian on ``settings.app_socket``) is restarted before any
test that finds it dead, so tests may kill it.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.core.accounts import create_account
from appliance.core.config import load_settings
from tests.support.processes import Process, maxy, runtime_dir, wait_until
from tests.support.stacks import account_env, edge_answers

ADMIN_HOST = "admin.example.test"
PUBLIC_HOST = "public.example.test"
TRUSTED_PROXY = "127.0.0.3"  # a loopback address the tests connect from to play a proxy


@dataclass
class Stack:
    """A running edge and the upstream app behind it."""

    vars: dict[str, str]
    logs: Path
    edge: Process | None = None
    app: Process | None = None
    started: int = 0

    @property
    def port(self) -> int:
        return int(self.vars["MAXY_PORT"])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def socket(self) -> Path:
        return load_settings(self.vars).app_socket

    def state(self) -> dict[str, Any]:
        """What the upstream has seen (asked directly over its socket)."""
        transport = httpx.HTTPTransport(uds=str(self.socket))
        with httpx.Client(transport=transport, base_url="http://app", timeout=10) as client:
            body: dict[str, Any] = client.get("/_state").json()
            return body

    def app_client(self) -> httpx.AsyncClient:
        """A client of the upstream's own socket (to publish events, release streams)."""
        transport = httpx.AsyncHTTPTransport(uds=str(self.socket))
        return httpx.AsyncClient(transport=transport, base_url="http://app", timeout=10)

    def app_alive(self) -> bool:
        # A plain socket first: httpx leaks its socket when a Unix connect fails.
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return "requests" in self.state()

    def start_app(self) -> None:
        self.started += 1
        log = self.logs / f"upstream-{self.started}.log"
        args = [sys.executable, "-m", "tests.edge.upstream", str(self.socket)]
        self.app = Process(args, self.vars, log)
        wait_until(self.app_alive, 30, f"the test upstream on {self.socket}\n{self.app.output()}")

    def kill_app(self) -> None:
        """Kill the upstream's whole process group at once, as a crash would."""
        assert self.app is not None
        os.killpg(self.app.proc.pid, signal.SIGKILL)
        self.app.stop()
        self.app = None

    def edge_output(self) -> str:
        assert self.edge is not None
        return self.edge.output()


@contextmanager
def edge_stack(
    home: Path, owner: str = "Edge Owner", brand: str = "Maxy", **settings: str
) -> Iterator[Stack]:
    """The test upstream on the app's socket and a real `maxy edge` in front of it."""
    # Unix socket paths are short (107 bytes): keep the runtime dir near the root.
    runtime = runtime_dir("maxy-edge-")
    account = create_account(home / "data" / "accounts", owner, product_name=brand)
    env = account_env(home / "data", runtime, account.id, MAXY_LOG_LEVEL="DEBUG", **settings)
    stack = Stack(env, home)
    try:
        stack.start_app()
        stack.edge = Process(maxy("edge"), env, home / "edge.log")
        wait_until(lambda: edge_answers(stack.port), 30, f"the edge\n{stack.edge.output()}")
        yield stack
    finally:
        for process in (stack.edge, stack.app):
            if process is not None:
                process.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Start the upstream and `maxy edge` once per module."""
    with edge_stack(
        tmp_path_factory.mktemp("edge"),
        brand="Testbrand",
        MAXY_ADMIN_HOSTNAMES=ADMIN_HOST,
        MAXY_PUBLIC_HOSTNAMES=PUBLIC_HOST,
        MAXY_TRUSTED_PROXIES=TRUSTED_PROXY,
        MAXY_LAN_HOSTNAMES="app.lan",
    ) as stack:
        yield stack


@pytest.fixture
def edge(stack: Stack) -> Stack:
    """The module's stack with its upstream running (restarted if a test killed it)."""
    if stack.app is None or stack.app.proc.poll() is not None:
        stack.start_app()
    return stack
