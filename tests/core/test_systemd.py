"""systemd's notify protocol, spoken by the real roles to a real datagram socket.

Each role is started as a subprocess with NOTIFY_SOCKET pointing at a socket this test binds (one
case in the abstract namespace) and WATCHDOG_USEC set. The socket receives the sender's
credentials (SO_PASSCRED), the way systemd checks ``NotifyAccess=main``: every message must come
from the process we started, never from a Granian worker. READY=1 must mean "answers now": the
test asks the role once, without retrying, right after READY arrives.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.core.config import load_settings
from appliance.core.systemd import Notifier
from appliance.graphdb.instance import bolt_ready
from appliance.rpc.client import RpcClient
from tests.support.processes import Env, Process, base_environ, maxy

WATCHDOG_USEC = 2_000_000  # a ping every second
WAIT = 120.0  # generous bounds for a loaded machine; nothing here asserts a duration
_UCRED = struct.Struct("iII")


@dataclass
class Message:
    lines: list[str]
    pid: int


class NotifySocket:
    """What systemd would be: a datagram socket that records messages and their senders."""

    def __init__(self, address: str) -> None:
        self.address = address  # as NOTIFY_SOCKET spells it
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.received: list[Message] = []

    def receive(self, timeout: float | None) -> Message | None:
        """The next message, or None if none arrives in time (None: do not wait at all)."""
        if timeout is None:
            self.sock.setblocking(False)
        else:
            self.sock.settimeout(timeout)
        try:
            data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(_UCRED.size))
        except (TimeoutError, BlockingIOError):
            return None
        pid = 0
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = _UCRED.unpack(payload[: _UCRED.size])[0]
        message = Message(data.decode().split("\n"), pid)
        self.received.append(message)
        return message

    def wait_for(self, line: str, process: Process | None = None) -> Message:
        """Read messages until one carries ``line``; fail with what arrived otherwise."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            message = self.receive(0.5)
            if message is not None and line in message.lines:
                return message
            if process is not None and process.proc.poll() is not None:
                break
        output = process.output() if process is not None else ""
        pytest.fail(f"no {line} (received {self.received})\n{output}")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify() -> Iterator[NotifySocket]:
    folder = tempfile.mkdtemp(prefix="maxy-notify-", dir="/tmp")  # socket paths are short
    listener = NotifySocket(os.path.join(folder, "notify.sock"))
    yield listener
    listener.close()
    os.unlink(listener.address)
    os.rmdir(folder)


@pytest.fixture
def abstract_notify() -> Iterator[NotifySocket]:
    listener = NotifySocket(f"@maxy-test-{uuid.uuid4().hex}")
    yield listener
    listener.close()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    """Start a role with the notify variables; WATCHDOG_PID is the role's own pid (via exec)."""
    started: list[Process] = []

    def start(env: dict[str, str], listener: NotifySocket, *args: str) -> Process:
        variables = {**env, "NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
        # `exec` keeps the shell's pid, so $$ is the pid of the role: what systemd sets.
        command = ["sh", "-c", 'WATCHDOG_PID=$$ exec "$0" "$@"', *maxy(*args)]
        process = Process(command, variables, tmp_path / f"{args[0]}-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in reversed(started):
        process.stop()


def pings(listener: NotifySocket, count: int, pid: int, process: Process) -> None:
    for _ in range(count):
        assert listener.wait_for("WATCHDOG=1", process).pid == pid


def stops_cleanly(listener: NotifySocket, process: Process) -> None:
    """SIGTERM to the main process only: STOPPING=1 from it, then a clean exit."""
    process.proc.send_signal(signal.SIGTERM)
    assert listener.wait_for("STOPPING=1", process).pid == process.proc.pid
    assert process.proc.wait(WAIT) == 0, process.output()


def unix_get(sock: Path, path: str) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(sock))
    with httpx.Client(transport=transport, base_url="http://localhost") as client:
        return client.get(path, timeout=10)


# --- the notifier on its own ----------------------------------------------------------------


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier.from_environ({})
    assert not notifier.enabled and notifier.watchdog_interval is None
    assert notifier.send("READY=1") is False


def test_the_variables_are_consumed_so_children_do_not_inherit_them(
    notify: NotifySocket,
) -> None:
    environ = {"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "4000000", "PATH": "/bin"}
    notifier = Notifier.from_environ(environ)
    assert environ == {"PATH": "/bin"}
    assert notifier.watchdog_interval == 2.0
    notifier.ready("test", "serving\non two lines")
    message = notify.receive(5)
    assert message is not None
    assert message.lines == ["READY=1", "STATUS=serving on two lines"]
    assert message.pid == os.getpid()


def test_a_watchdog_meant_for_another_process_is_not_fed(notify: NotifySocket) -> None:
    other_pid = str(os.getppid())
    environ = {
        "NOTIFY_SOCKET": notify.address,
        "WATCHDOG_USEC": "4000000",
        "WATCHDOG_PID": other_pid,
    }
    notifier = Notifier.from_environ(environ)
    notifier.ping()
    assert notify.receive(None) is None  # sendto is synchronous: a ping would be queued already
    notifier.status("still talking")  # other messages still go
    message = notify.receive(5)
    assert message is not None and message.lines == ["STATUS=still talking"]


def test_an_abstract_socket_is_reached(abstract_notify: NotifySocket) -> None:
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": abstract_notify.address})
    notifier.stopping("test")
    message = abstract_notify.receive(5)
    assert message is not None and message.lines == ["STOPPING=1", "STATUS=stopping"]


# --- the roles ----------------------------------------------------------------------------


def test_edge_is_ready_when_it_answers_then_pings_and_says_stopping(
    maxy_env: Env, notify: NotifySocket, launch: Any
) -> None:
    # At debug level the worker logs every request it classifies: the probe's among them.
    edge = launch({**maxy_env.vars, "MAXY_LOG_LEVEL": "debug"}, notify, "edge")
    ready = notify.wait_for("READY=1", edge)
    # Asked once, right away: the edge answers (503 without an engine, but it answers).
    response = httpx.get(f"http://127.0.0.1:{maxy_env.settings.port}/healthz", timeout=10)
    assert response.status_code in (200, 503)
    assert ready.pid == edge.proc.pid
    assert any(line.startswith("STATUS=serving on 127.0.0.1:") for line in ready.lines)
    # The worker had served a request before the main process declared the edge ready.
    output = edge.output()
    assert "[systemd] op=ready role=edge" in output
    served = output.find("[edge] op=classify peer=127.0.0.1")
    assert -1 < served < output.index("[systemd] op=ready role=edge"), output
    pings(notify, 3, edge.proc.pid, edge)
    stops_cleanly(notify, edge)


def test_app_is_ready_when_its_socket_answers(
    maxy_env: Env, notify: NotifySocket, launch: Any
) -> None:
    app = launch(maxy_env.vars, notify, "app")
    ready = notify.wait_for("READY=1", app)
    response = unix_get(maxy_env.settings.app_socket, "/login")
    assert response.status_code < 500
    assert ready.pid == app.proc.pid
    pings(notify, 3, app.proc.pid, app)
    stops_cleanly(notify, app)


def test_manager_notifies_an_abstract_socket(
    maxy_env: Env, abstract_notify: NotifySocket, launch: Any
) -> None:
    manager = launch(maxy_env.vars, abstract_notify, "manager")
    ready = abstract_notify.wait_for("READY=1", manager)
    assert unix_get(maxy_env.settings.manager_socket, "/healthz").json()["ok"] is True
    assert ready.pid == manager.proc.pid
    pings(abstract_notify, 3, manager.proc.pid, manager)
    stops_cleanly(abstract_notify, manager)


def worker_of(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_a_frozen_worker_stops_the_pings_and_a_thawed_one_resumes_them(
    maxy_env: Env, notify: NotifySocket, launch: Any
) -> None:
    manager = launch(maxy_env.vars, notify, "manager")
    notify.wait_for("READY=1", manager)
    pings(notify, 1, manager.proc.pid, manager)
    worker = worker_of(manager.proc.pid)
    os.kill(worker, signal.SIGSTOP)  # its event loop can no longer run: as good as hung
    try:
        # A probe answered just before the stop may still be reported: let it through.
        while notify.receive(WATCHDOG_USEC / 1e6) is not None:
            pass
        silent = [m for m in iter(lambda: notify.receive(WATCHDOG_USEC / 1e6), None)]
        assert not any("WATCHDOG=1" in m.lines for m in silent), silent
        assert "[systemd] op=watchdog role=manager skip=no-answer" in manager.output()
    finally:
        os.kill(worker, signal.SIGCONT)
    pings(notify, 2, manager.proc.pid, manager)


def test_engine_is_ready_once_the_model_is_loaded_and_rpc_answers(
    maxy_env: Env, notify: NotifySocket, launch: Any, model_path: Path
) -> None:
    engine = launch(maxy_env.vars, notify, "engine")
    status = notify.wait_for(f"STATUS=loading the embedding model {model_path.name}", engine)
    ready = notify.wait_for("READY=1", engine)
    assert status.pid == ready.pid == engine.proc.pid
    client = RpcClient(maxy_env.settings.engine_socket, timeout=10)
    health = asyncio.run(client.call("health"))
    assert health["embedder"]["ok"] is True
    pings(notify, 3, engine.proc.pid, engine)
    stops_cleanly(notify, engine)


@pytest.mark.slow
def test_neo4j_launcher_is_ready_when_bolt_answers(
    tmp_path: Path, notify: NotifySocket, launch: Any
) -> None:
    data = tmp_path / "data"
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(data),
        MAXY_NEO4J_URI="bolt://127.0.0.1:0",  # Neo4j binds a free port and the launcher notes it
        MAXY_NEO4J_HEAP="384m",
        MAXY_NEO4J_PAGECACHE="64m",
    )
    neo4j = launch(env, notify, "neo4j", "run")
    ready = notify.wait_for("READY=1", neo4j)
    password = (data / "keys" / "neo4j-password").read_text().strip()
    uri = load_settings(env).neo4j_address()
    assert bolt_ready(uri, "neo4j", password) is None
    assert ready.pid == neo4j.proc.pid
    java = int((data / "neo4j" / "run" / "neo4j.pid").read_text().split()[0])
    pings(notify, 2, neo4j.proc.pid, neo4j)
    stops_cleanly(notify, neo4j)
    with pytest.raises(ProcessLookupError):
        os.kill(java, 0)
    assert not (data / "neo4j" / "run" / "neo4j.pid").exists()
