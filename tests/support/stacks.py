"""The stacks tests start: real `maxy` roles for one account, and ways to drive them.

``running_stack(env, logs, *roles)`` starts roles (engine first) and waits until each answers;
``make_env`` (with the session Neo4j), ``app_env`` (the app and edge alone, no Neo4j),
``sessions_env`` (the app beside a manager running the `claude` double, no Neo4j) and
``account_env`` (any other mix) make their settings;
``supervised_stack`` runs everything under `maxy run` with a Neo4j of its own. A
module-scoped stack keeps page tests quick: the engine loads its model once per module. Requests
go to the app's Unix socket (httpx, or :func:`raw_request` byte for byte), or to the edge's TCP
port.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
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
from tests.support.processes import (
    REPO,
    Env,
    Neo4jServer,
    Process,
    base_environ,
    health_status,
    held_port,
    maxy,
    private_neo4j,
    runtime_dir,
    wait_until,
)

BASE_URL = "http://maxy.local:19200"
HOST = "maxy.local:19200"
PIN = "482613"
DOUBLE = REPO / "tests" / "sessions" / "claude"  # the `claude` test double


def account_env(data: Path, runtime: Path, account_id: str, **extra: str) -> dict[str, str]:
    """The environment of a `maxy` child for one account, on loopback at a free port."""
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(data),
        MAXY_RUNTIME_DIR=str(runtime),
        MAXY_ACCOUNT_ID=account_id,
        MAXY_HOST="127.0.0.1",
        MAXY_PORT=str(held_port()),
        **extra,
    )
    return env


def neo4j_vars(neo4j: Neo4jServer) -> dict[str, str]:
    """The settings that point a child at the session's Neo4j."""
    return {"MAXY_NEO4J_URI": neo4j.uri, "MAXY_NEO4J_PASSWORD_FILE": str(neo4j.password_file)}


def manager_env(
    data: Path, runtime: Path, account_id: str, extra: dict[str, str], settings: dict[str, Any]
) -> dict[str, str]:
    """The environment of a `maxy manager` that runs the double; settings by their names."""
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(data),
        MAXY_RUNTIME_DIR=str(runtime),
        MAXY_ACCOUNT_ID=account_id,
        MAXY_CLAUDE_BIN=str(DOUBLE),
        MAXY_STOP_GRACE="1",
        MAXY_LOG_LEVEL="INFO",
        CLAUDE_DOUBLE_PYTHON=sys.executable,
    )
    env.update({f"MAXY_{name.upper()}": str(value) for name, value in settings.items()})
    env.update(extra)
    return env


def answers(path: Path) -> bool:
    """True if an HTTP server answers 200 to GET /healthz on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(5)
        try:
            probe.connect(str(path))
            probe.sendall(b"GET /healthz HTTP/1.0\r\nHost: manager\r\n\r\n")
            return probe.recv(64).split(b"\r\n")[0].endswith(b" 200 OK")
        except OSError:
            return False


def edge_answers(port: int) -> bool:
    """True once `maxy edge` on ``port`` answers its own /api/admin/version (401: no login)."""
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/api/admin/version", timeout=5)
        return answer.status_code in (200, 401)
    except httpx.TransportError:
        return False


def app_answers(sock: Path) -> bool:
    """True once `maxy app` serves its static files on ``sock``."""
    if not sock.exists():
        return False
    try:
        status, _, _ = raw_request(sock, b"/static/css/app.css")
    except OSError:
        return False
    return status == 200


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)


def raw_request(
    target: Path | tuple[str, int],
    path: bytes,
    headers: dict[str, str] | None = None,
    method: bytes = b"GET",
) -> tuple[int, dict[str, str], bytes]:
    """Send ``method path HTTP/1.1`` as is to a Unix socket or (host, port); return the answer."""
    if isinstance(target, Path):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address: Any = str(target)
    else:
        conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address = target
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: " + HOST.encode(), b"Connection: close"]
    lines += [f"{name}: {value}".encode("latin-1") for name, value in (headers or {}).items()]
    with conn:
        conn.settimeout(20)
        conn.connect(address)
        conn.sendall(b"\r\n".join(lines) + b"\r\n\r\n")
        data = bytearray()
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    if parsed.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    return int(status_line.split(" ")[1]), parsed, body


def make_env(neo4j: Neo4jServer, data: Path, brand: str = "Maxy", **extra: str) -> Env:
    """Settings for maxy child processes, with one account branded ``brand``."""
    account = create_account(data / "accounts", "Test Owner", product_name=brand)
    env = account_env(data, runtime_dir("maxy-run-"), account.id, **neo4j_vars(neo4j), **extra)
    return Env(env, account.id)


def app_env(root: Path, brand: str = "Maxy", **extra: str) -> Env:
    """Settings for an app (and edge) with one account branded ``brand`` and no Neo4j."""
    account = create_account(root / "data" / "accounts", "Test Owner", product_name=brand)
    env = account_env(root / "data", runtime_dir("maxy-run-"), account.id, **extra)
    return Env(env, account.id)


def give_api_key(env: Env, key: str = "sk-ant-test-key") -> None:
    """Store the account's Anthropic API key where the app and engine read it."""
    keys = env.settings.keys_dir
    keys.mkdir(parents=True, exist_ok=True)
    (keys / "anthropic-api-key").write_text(key + "\n")


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

    def supervised_pid(self, role: str) -> int | None:
        """The pid `maxy run` last started ``role`` with (from its log), if it did."""
        starts = re.findall(rf"op=start child={role} pid=(\d+)", self.processes["run"].output())
        return int(starts[-1]) if starts else None

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
        return app_answers(self.env.settings.app_socket)

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
    port = env.settings.port

    def edge_up() -> bool:
        return edge_answers(port)

    try:
        for role in roles:
            stack.start(role)
            if role == "engine":
                wait_until(stack.engine_healthy, 120, f"the engine\n{stack.output()}")
            elif role == "app":
                wait_until(stack.app_answers, 60, f"the app\n{stack.output()}")
            elif role == "edge":
                wait_until(edge_up, 60, f"the edge\n{stack.output()}")
        yield stack
    finally:
        for process in reversed(list(stack.processes.values())):
            process.stop()


def sessions_env(root: Path) -> Env:
    """Settings shared by the app, the edge and the manager (which runs the double)."""
    runtime = runtime_dir("maxy-run-")
    account = create_account(root / "data" / "accounts", "Test Owner")
    extra = {"MAXY_HOST": "127.0.0.1", "MAXY_PORT": str(held_port())}
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
    env = sessions_env(root)
    env.vars.update(variables)
    with running_stack(env, root / "logs", *roles) as running:
        start_manager(running)
        yield running


@contextmanager
def supervised_stack(root: Path, *, data: Path | None = None, **variables: str) -> Iterator[Stack]:
    """`maxy run` for a fresh account: its own Neo4j and every role under the development
    supervisor, waited for until the edge's /healthz answers 200; stopped at the end. The data
    directory (Neo4j's store with it) is ``data``, or ``root/data``; the test's logs stay in
    ``root/logs``."""
    data = data or root / "data"
    account = create_account(data / "accounts", "Test Owner")
    env = account_env(data, runtime_dir("maxy-run-"), account.id, **private_neo4j(), **variables)
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stack = Stack(Env(env, account.id), logs)
    run = stack.processes["run"] = Process(maxy("run"), env, logs / "run.log")
    port = stack.env.settings.port
    try:
        wait_until(lambda: health_status(port) == 200, 300, f"maxy run\n{run.output()}", 0.25)
        yield stack
    finally:
        run.stop()
