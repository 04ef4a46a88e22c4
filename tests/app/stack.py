"""Real engine + app (+ edge) processes for one test module, and ways to drive them.

A module-scoped stack keeps the page tests quick: the engine loads its model once per module.
Requests go to the app's Unix socket (httpx), or, for the browser, to the edge's TCP port.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from appliance.core.accounts import create_account
from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from tests.app.running_app import raw_request
from tests.support.processes import (
    Env,
    Neo4jServer,
    Process,
    base_environ,
    free_port,
    maxy,
    runtime_dir,
    wait_until,
)

BASE_URL = "http://maxy.local:19200"
PIN = "482613"


def make_env(neo4j: Neo4jServer, data: Path, brand: str = "Maxy", **extra: str) -> Env:
    """Settings for maxy child processes, with one account branded ``brand``."""
    runtime = runtime_dir("maxy-run-")
    account = create_account(data / "accounts", "Test Owner", product_name=brand)
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(data),
        MAXY_RUNTIME_DIR=str(runtime),
        MAXY_ACCOUNT_ID=account.id,
        MAXY_NEO4J_URI=neo4j.uri,
        MAXY_NEO4J_PASSWORD_FILE=str(neo4j.password_file),
        MAXY_HOST="127.0.0.1",
        MAXY_PORT=str(free_port()),
        **extra,
    )
    return Env(env, account.id)


def add_agent(env: Env, slug: str, config: dict[str, Any] | None = None) -> Path:
    """Create an agent folder (and its config.json) for the env's account."""
    folder = env.settings.accounts_dir / env.account_id / "agents" / slug
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


@dataclass
class Stack:
    """Running roles of one env; every process is stopped by :func:`running_stack`."""

    env: Env
    logs: Path
    processes: dict[str, Process] = field(default_factory=dict)

    def start(self, role: str) -> Process:
        process = Process(maxy(role), self.env.vars, self.logs / f"{role}.log")
        self.processes[role] = process
        return process

    def output(self) -> str:
        return "\n".join(f"--- {r}\n{p.output()}" for r, p in self.processes.items())

    def rpc(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call the engine as the account's admin."""
        caller = Caller(account_id=self.env.account_id).to_wire()
        client = RpcClient(self.env.settings.engine_socket, timeout=30)
        return asyncio.run(client.call(method, {**(params or {}), "caller": caller}))

    def engine_healthy(self) -> bool:
        try:
            return bool(self.rpc("health")["ok"])
        except RpcError:
            return False

    def app_answers(self) -> bool:
        sock = self.env.settings.app_socket
        if not sock.exists():
            return False
        try:
            status, _, _ = raw_request(sock, b"/static/css/app.css")
        except OSError:
            return False
        return status == 200

    def client(self, cookies: httpx.Cookies | None = None, /, **headers: str) -> httpx.Client:
        """An httpx client on the app's Unix socket (as a local process, unless headers say)."""
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.env.settings.app_socket)),
            base_url=BASE_URL,
            headers=headers,
            cookies=cookies,
            follow_redirects=False,
            timeout=30.0,
        )

    def admin_cookies(self) -> httpx.Cookies:
        """Log in on the LAN (setting the PIN the first time); return the login cookie."""
        with self.client() as client:
            body = {"pin": PIN, "confirm": PIN}
            answer = client.post("/api/auth/pin/setup", json=body)
            if answer.status_code == 409:
                answer = client.post("/api/auth/login", json={"pin": PIN})
            assert answer.status_code == 200, answer.text
            return httpx.Cookies(client.cookies)


@contextmanager
def running_stack(env: Env, logs: Path, *roles: str) -> Iterator[Stack]:
    """Start ``roles`` (engine first), wait until each answers, stop them all at the end."""
    logs.mkdir(parents=True, exist_ok=True)
    stack = Stack(env, logs)
    try:
        for role in roles:
            stack.start(role)
            if role == "engine":
                wait_until(stack.engine_healthy, 120, f"the engine\n{stack.output()}")
            elif role == "app":
                wait_until(stack.app_answers, 60, f"the app\n{stack.output()}")
        yield stack
    finally:
        for process in reversed(list(stack.processes.values())):
            process.stop()
