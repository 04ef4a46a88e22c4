"""A real `maxy manager` on a Unix socket, driving the `claude` double in real PTYs.

``start_manager(**settings)`` starts one with its own data and runtime directories; the
module-scoped ``manager`` is shared by the tests that do not need special settings. Helpers talk
to it only through its HTTP, SSE and WebSocket interface, and read /proc for what the kernel says.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.core.accounts import create_account
from tests.support.processes import Process, maxy, runtime_dir, wait_until
from tests.support.sse import Event, Parser
from tests.support.stacks import answers, manager_env


class Feed:
    """An SSE client on a raw Unix socket, read in a thread; events queue in arrival order.

    A raw socket (not httpx) so that :meth:`close` really drops the connection at once, as a
    browser tab that goes away does.
    """

    def __init__(self, socket_path: Path, last_event_id: str | None = None) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self.seen: list[Event] = []
        self.content_type = ""
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.settimeout(10)
        self._sock.connect(str(socket_path))
        self._sock.settimeout(None)
        extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id else ""
        request = f"GET /events HTTP/1.1\r\nHost: manager\r\n{extra}\r\n"
        self._sock.sendall(request.encode())
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._opened.wait(10), "the feed did not open"
        assert self.status == 200, self.status

    def _body(self) -> Iterator[bytes]:
        """The response body, de-chunked, as it arrives."""
        buffer = b""

        def more() -> bytes:
            data = self._sock.recv(65536)
            if not data:
                raise EOFError
            return data

        while b"\r\n\r\n" not in buffer:
            buffer += more()
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode().split("\r\n")
        self.status = int(status_line.split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
        self.content_type = headers.get("content-type", "")
        self._opened.set()
        chunked = headers.get("transfer-encoding") == "chunked"
        while True:
            if not chunked:
                if buffer:
                    yield buffer
                buffer = more()
                continue
            while b"\r\n" not in buffer:
                buffer += more()
            size_line, buffer = buffer.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                return
            while len(buffer) < size + 2:
                buffer += more()
            yield buffer[:size]
            buffer = buffer[size + 2 :]

    def _run(self) -> None:
        self.status = 0
        parser = Parser(comments=True)
        text = ""
        try:
            for chunk in self._body():
                text += chunk.decode()
                while "\n" in text:
                    line, text = text.split("\n", 1)
                    event = parser.line(line)
                    if event is not None:
                        self.events.put(event)
        except (OSError, EOFError, ValueError):
            pass
        finally:
            self._opened.set()

    def next(self, timeout: float = 10.0, skip_comments: bool = True) -> Event:
        """The next event."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no feed event within {timeout} s; seen: {self.seen}")
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            self.seen.append(event)
            if skip_comments and event.event == "comment":
                continue
            return event

    def until(self, predicate: Callable[[Event], bool], timeout: float = 10.0) -> list[Event]:
        """Events up to and including the first that satisfies ``predicate``."""
        got: list[Event] = []
        deadline = time.monotonic() + timeout
        while True:
            event = self.next(max(0.01, deadline - time.monotonic()))
            got.append(event)
            if predicate(event):
                return got

    def drain(self, quiet: float = 0.3) -> list[Event]:
        """Events that arrive until none has for ``quiet`` seconds."""
        got: list[Event] = []
        while True:
            try:
                event = self.events.get(timeout=quiet)
            except queue.Empty:
                return got
            self.seen.append(event)
            if event.event != "comment":
                got.append(event)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)


@dataclass
class Manager:
    """A running `maxy manager` and a client for it."""

    process: Process
    env: dict[str, str]
    data_dir: Path
    runtime_dir: Path
    account_id: str
    feeds: list[Feed] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.runtime_dir / "manager.sock"

    @property
    def config_dir(self) -> Path:
        return self.data_dir / "accounts" / self.account_id / "claude"

    @property
    def account_dir(self) -> Path:
        return self.data_dir / "accounts" / self.account_id

    def client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket)),
            base_url="http://manager",
            timeout=timeout,
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self.client() as client:
            return client.request(method, path, **kwargs)

    def spawn(self, message: str | None = None, kind: str = "rc", **body: Any) -> dict[str, Any]:
        """Spawn and return the row; fail with the answer if it is not 201."""
        if message is not None:
            body["message"] = message
        response = self.request("POST", f"/{kind}-spawn", json=body)
        assert response.status_code == 201, response.text
        row: dict[str, Any] = response.json()["row"]
        return row

    def row(self, token: str) -> dict[str, Any] | None:
        response = self.request("GET", f"/{token}")
        if response.status_code == 404:
            return None
        row: dict[str, Any] = response.json()["row"]
        return row

    def wait_row(
        self, token: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
    ) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def check() -> bool:
            row = self.row(token)
            if row is not None and predicate(row):
                found.update(row)
                return True
            return False

        wait_until(check, timeout, f"row {token} to match; last {self.row(token)}", 0.05)
        return found

    def stop(self, token: str) -> dict[str, Any]:
        response = self.request("POST", f"/{token}/stop")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = self.request("GET", "/status").json()
        return body

    def feed(self, last_event_id: str | None = None) -> Feed:
        feed = Feed(self.socket, last_event_id)
        self.feeds.append(feed)
        return feed

    def output(self) -> str:
        return self.process.output()

    def stop_all(self) -> None:
        """Stop every live session (between tests sharing one manager)."""
        for row in self.request("GET", "/sessions").json()["rows"]:
            if row["state"] == "live":
                self.stop(row["id"])

    def shutdown(self) -> int:
        for feed in self.feeds:
            feed.close()
        return self.process.stop(30)


def ended(row: dict[str, Any]) -> bool:
    """The session's process is gone and reaped, its transcript kept."""
    return row["state"] == "archived" and not row["attached"]


def launch(base: Path, env: dict[str, str] | None = None, **settings: Any) -> Manager:
    """Start a manager with its own data directory under ``base``; ``env`` adds variables."""
    base.mkdir(parents=True, exist_ok=True)
    data = base / "data"
    runtime = runtime_dir("maxy-mgr-")
    account = create_account(data / "accounts", "Session Owner")
    variables = manager_env(data, runtime, account.id, env or {}, settings)
    process = Process(maxy("manager"), variables, base / f"manager-{time.monotonic_ns()}.log")
    manager = Manager(process, variables, data, runtime, account.id)
    try:
        wait_for_health(manager)
    except BaseException:
        process.stop(10)
        raise
    return manager


def wait_for_health(manager: Manager) -> None:
    def healthy() -> bool:
        if manager.process.proc.poll() is not None:
            pytest.fail(f"maxy manager exited:\n{manager.output()}")
        return answers(manager.socket)

    wait_until(healthy, 60, f"the manager to answer on {manager.socket}", 0.05)


def restart(manager: Manager, **settings: Any) -> Manager:
    """Stop a manager and start another on the same data (a manager restart), with ``settings``
    (by their names) changed."""
    manager.shutdown()
    log = manager.process.log.with_name(f"manager-{time.monotonic_ns()}.log")
    env = {**manager.env, **{f"MAXY_{name.upper()}": str(v) for name, v in settings.items()}}
    process = Process(maxy("manager"), env, log)
    again = Manager(process, env, manager.data_dir, manager.runtime_dir, manager.account_id)
    try:
        wait_for_health(again)
    except BaseException:
        process.stop(10)
        raise
    return again


@pytest.fixture
def start_manager(tmp_path: Path) -> Iterator[Callable[..., Manager]]:
    """Start managers with given settings; all are stopped when the test ends."""
    started: list[Manager] = []

    def start(env: dict[str, str] | None = None, **settings: Any) -> Manager:
        manager = launch(tmp_path / f"m{len(started)}", env, **settings)
        started.append(manager)
        return manager

    yield start
    for manager in reversed(started):
        manager.shutdown()


@pytest.fixture(scope="module")
def shared_manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    manager = launch(tmp_path_factory.mktemp("manager"))
    yield manager
    manager.shutdown()


@pytest.fixture
def manager(shared_manager: Manager) -> Iterator[Manager]:
    """The module's manager; live sessions a test leaves are stopped after it."""
    yield shared_manager
    for feed in shared_manager.feeds:
        feed.close()
    shared_manager.feeds.clear()
    shared_manager.stop_all()


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every child of ``pid``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if int(fields[1]) == pid:
            found.append((int(entry), fields[0].decode()))
    return found
