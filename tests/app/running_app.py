"""A real `maxy app` child process on its Unix socket, and ways to talk to it.

`start_app(start_maxy, env)` waits until the app answers. `client(...)` is an httpx client over
the socket; `edge_headers(...)` are the X-Maxy-* headers the edge would add (the contract in
appliance/web/client.py). `raw_request(...)` sends a request target byte for byte, so paths
reach the server exactly as written (httpx would normalise dot segments).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import Env, Process, wait_until
from tests.support.stacks import BASE_URL, app_answers


@dataclass
class RunningApp:
    env: Env
    process: Process
    socket: Path

    @property
    def settings(self) -> Any:
        return self.env.settings

    def client(self, **headers: str) -> httpx.Client:
        """An httpx client over the app's socket (no redirects followed, no cookie carry-over)."""
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket)),
            base_url=BASE_URL,
            headers=headers,
            follow_redirects=False,
            timeout=20.0,
        )

    def output(self) -> str:
        return self.process.output()


def edge_headers(
    network: str = "lan", ip: str = "192.168.1.20", role: str = "admin"
) -> dict[str, str]:
    """What the edge adds to a request it classified."""
    return {"X-Maxy-Network": network, "X-Maxy-Client-IP": ip, "X-Maxy-Host-Role": role}


def start_app(start_maxy: Any, env: Env) -> RunningApp:
    """Start `maxy app` and wait until it answers on its socket."""
    process = start_maxy(env, "app")
    sock = env.settings.app_socket
    wait_until(lambda: app_answers(sock), 60, f"the app on {sock}\n{process.output()}")
    return RunningApp(env, process, sock)


class TcpToUnix:
    """A loopback TCP port piping bytes to and from a Unix socket (a browser cannot dial one).

    Not the edge: no classification headers are added, so the app sees a local process.
    """

    def __init__(self, unix_path: Path) -> None:
        self.unix_path = unix_path
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(str(self.unix_path))
            self._open += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self.listener.close()
        self._thread.join(timeout=5)
        for conn in self._open:
            conn.close()


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium(*extra_args: str) -> Iterator[Any]:
    """Debian's Chromium, headless, driven by Playwright (never a downloaded browser)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, *extra_args]
        )
        try:
            yield browser
        finally:
            browser.close()


def wait_for_js(page: Any, expression: str, arg: Any = None, timeout: float = 30.0) -> None:
    """Poll ``expression`` (or a function of ``arg``) in ``page`` until it is truthy.

    Playwright's own ``wait_for_function`` polls inside the page with ``eval``, which the pages'
    Content-Security-Policy forbids (no 'unsafe-eval'); ``page.evaluate`` runs through the
    DevTools protocol, which the policy does not govern.
    """
    wait_until(
        lambda: bool(page.evaluate(expression, arg)),
        timeout,
        f"{expression} in {page.url}",
        interval=0.05,
    )
