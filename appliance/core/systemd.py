"""systemd's notify protocol, spoken without libsystemd: ready, status, stopping, watchdog.

On the device every long-running role is a ``Type=notify`` unit with ``WatchdogSec=``. systemd
gives the process ``NOTIFY_SOCKET`` (a Unix datagram socket; a leading ``@`` names one in the
abstract namespace) and, with a watchdog, ``WATCHDOG_USEC`` and ``WATCHDOG_PID``. The process
sends newline-separated ``KEY=VALUE`` lines, one datagram per message::

    READY=1       the role serves: systemd starts the units ordered after it
    STATUS=…      one line that ``systemctl status`` shows
    STOPPING=1    a stop was requested and shutdown has begun
    WATCHDOG=1    still alive; no ping for WATCHDOG_USEC and systemd kills and restarts the unit

Where each role observes readiness and liveness honestly:

- engine (asyncio): READY once the model is loaded and the RPC socket listens; the pings are a
  task on the engine's own event loop (:meth:`Notifier.serving`), so a blocked loop stops them.
- edge, app, manager (Granian): the application runs in a worker process, but systemd accepts
  notifications only from the unit's main process (``NotifyAccess=main``; ``WATCHDOG_PID``
  names it), which is Granian's parent. The parent cannot see the worker's event loop, so it
  asks the served socket instead (:func:`watch_granian`): READY after the first HTTP answer, and
  WATCHDOG=1 only after each later answer. A worker whose loop hangs stops answering and so
  stops the pings — what a timer inside the loop would give — and a wedged accept path or a
  dead worker stops them too, which such a timer would not notice.
- neo4j (``maxy neo4j run``): READY once Bolt answers a query; a ping after each answered query.

Without ``NOTIFY_SOCKET`` (development, tests, ``maxy run``) every call is a no-op. Sending is
best effort: a failed send logs one warning line and the role carries on. Nothing here raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import os
import signal
import socket
import threading
from collections.abc import AsyncIterator, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

#: The variables systemd sets; read once and removed so child processes do not inherit them.
ENV_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")

#: Ask the role once, within a timeout in seconds: None when it answered, else why not.
Probe = Callable[[float], str | None]

# Readiness polling: quick at first (a role is often up within a second), then once a second.
_READY_POLL_FIRST = 0.05
_READY_POLL_MAX = 1.0
_PROBE_TIMEOUT_MAX = 5.0


@dataclass(frozen=True)
class Notifier:
    """Where and whether to send notifications; build with :meth:`from_environ`."""

    address: str | None  # a filesystem path, or "\\0name" for the abstract namespace
    watchdog_usec: int | None  # None: no watchdog for this process
    pid: int  # the process that read the environment; a forked child stays silent

    @classmethod
    def disabled(cls) -> Notifier:
        """A notifier that never sends (development, tests)."""
        return cls(None, None, os.getpid())

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str]) -> Notifier:
        """Read systemd's variables and remove them from ``environ`` (as libsystemd can)."""
        raw_socket, raw_usec, raw_pid = (environ.pop(name, "") for name in ENV_VARS)
        pid = os.getpid()
        address: str | None = None
        if raw_socket.startswith("/"):
            address = raw_socket
        elif raw_socket.startswith("@") and len(raw_socket) > 1:
            address = "\0" + raw_socket[1:]
        elif raw_socket:
            log.warning("[systemd] op=notify warn=unsupported-socket socket=%s", raw_socket)
        usec: int | None = None
        if address is not None and raw_usec:
            try:
                usec = int(raw_usec)
            except ValueError:
                log.warning("[systemd] op=watchdog warn=bad-usec value=%r", raw_usec)
            if usec is not None and usec <= 0:
                usec = None
            # WATCHDOG_PID names the process the watchdog is for; anyone else must not ping.
            if usec is not None and raw_pid and raw_pid.strip() != str(pid):
                log.info("[systemd] op=watchdog skip=other-pid watchdog_pid=%s", raw_pid)
                usec = None
        return cls(address, usec, pid)

    @property
    def enabled(self) -> bool:
        """Whether systemd listens (NOTIFY_SOCKET was set)."""
        return self.address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between pings (half of WATCHDOG_USEC), or None without a watchdog."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 2_000_000

    def send(self, *lines: str) -> bool:
        """Send one message of ``KEY=VALUE`` lines; return whether it left."""
        if self.address is None or os.getpid() != self.pid:
            return False
        # A fresh socket per message: no lock shared with signal handlers, nothing to leak.
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(lines).encode(), self.address)
        except OSError as err:
            log.warning("[systemd] op=notify warn=send-failed error=%s", err)
            return False
        return True

    def ready(self, role: str, status: str) -> None:
        """Tell systemd the role serves."""
        if self.send("READY=1", f"STATUS={_one_line(status)}"):
            log.info("[systemd] op=ready role=%s status=%r", role, status)

    def status(self, text: str) -> None:
        """Set the line ``systemctl status`` shows."""
        self.send(f"STATUS={_one_line(text)}")

    def stopping(self, role: str) -> None:
        """Tell systemd shutdown has begun."""
        if self.send("STOPPING=1", "STATUS=stopping"):
            log.info("[systemd] op=stopping role=%s", role)

    def ping(self) -> None:
        """Feed the watchdog."""
        if self.watchdog_usec is not None:
            self.send("WATCHDOG=1")

    @contextlib.asynccontextmanager
    async def serving(self, role: str, status: str) -> AsyncIterator[None]:
        """READY now, watchdog pings from this event loop while inside, STOPPING on the way out."""
        self.ready(role, status)
        task = asyncio.create_task(self._watchdog()) if self.watchdog_usec else None
        try:
            yield
        finally:
            self.stopping(role)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _watchdog(self) -> None:
        interval = self.watchdog_interval or 0.0
        while True:
            self.ping()
            await asyncio.sleep(interval)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- Granian roles: observe the worker from the main process ------------------------------------


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix stream socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(self.timeout)
            sock.connect(str(self.path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


def http_probe(
    path: str, *, uds: Path | None = None, host: str = "127.0.0.1", port: int = 0
) -> Probe:
    """A probe that GETs ``path`` over ``uds`` or ``host:port``; any answer below 500 passes."""

    def probe(timeout: float) -> str | None:
        conn: http.client.HTTPConnection
        if uds is not None:
            conn = _UnixHTTPConnection(uds, timeout)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", path, headers={"Host": "localhost", "Connection": "close"})
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as err:
            return f"{type(err).__name__}: {err}"
        finally:
            conn.close()
        if response.status >= 500:
            return f"HTTP {response.status}"
        return None

    return probe


def watch_granian(server: Any, notifier: Notifier, role: str, probe: Probe, where: str) -> None:
    """Report a Granian server's readiness, liveness and stopping from its main process."""
    if not notifier.enabled:
        return
    stop = threading.Event()

    def on_startup() -> None:
        # Granian has just installed its own SIGTERM/SIGINT handlers: run ours first, then its.
        for signum in (signal.SIGTERM, signal.SIGINT):
            _chain_stop(signum, notifier, role, stop)
        thread = threading.Thread(
            target=_probe_loop,
            args=(notifier, role, probe, where, stop),
            name=f"systemd-{role}",
            daemon=True,
        )
        thread.start()

    server.on_startup(on_startup)


def _chain_stop(signum: int, notifier: Notifier, role: str, stop: threading.Event) -> None:
    previous = signal.getsignal(signum)

    def handler(received: int, frame: FrameType | None) -> None:
        if os.getpid() == notifier.pid and not stop.is_set():
            stop.set()
            notifier.stopping(role)
        if callable(previous):
            previous(received, frame)

    signal.signal(signum, handler)


def _probe_loop(
    notifier: Notifier,
    role: str,
    probe: Probe,
    where: str,
    stop: threading.Event,
) -> None:
    interval = notifier.watchdog_interval
    timeout = min(_PROBE_TIMEOUT_MAX, interval / 2) if interval else _PROBE_TIMEOUT_MAX
    delay = _READY_POLL_FIRST
    while probe(timeout) is not None:
        if stop.wait(delay):
            return
        delay = min(delay * 2, _READY_POLL_MAX)
    if stop.is_set():
        return
    notifier.ready(role, f"serving on {where}")
    if interval is None:
        return
    notifier.ping()
    while not stop.wait(interval):
        reason = probe(timeout)
        if stop.is_set():
            return
        if reason is None:
            notifier.ping()
        else:
            log.warning("[systemd] op=watchdog role=%s skip=no-answer reason=%r", role, reason)
