"""Subprocesses: the one runner with a timeout, the one process-group stop.

:func:`run` starts the program in its own process group, so a timeout kills what it started
too (a grandchild holding the output pipe open would otherwise keep ``communicate`` waiting).
:func:`escalate` is the one stop policy, SIGTERM, a grace period, then SIGKILL, for a
process group (:func:`stop_group`) or one process, blocking or awaited (:func:`escalate_async`).

Errors::

    ToolError
    ├── ToolMissing     the program could not be started (not installed, not executable)
    └── ToolTimeout     it did not finish in time (its process group was killed)
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)


class ToolError(Exception):
    """A program could not be run to completion."""


class ToolMissing(ToolError):
    """The program could not be started."""


class ToolTimeout(ToolError):
    """The program did not finish within its timeout."""


@dataclass(frozen=True)
class Completed:
    """A finished program: its exit status and what it printed (decoded, errors replaced)."""

    args: tuple[str, ...]
    returncode: int
    stdout_bytes: bytes
    stderr_bytes: bytes

    @property
    def stdout(self) -> str:
        """Standard output as text."""
        return self.stdout_bytes.decode(errors="replace")

    @property
    def stderr(self) -> str:
        """Standard error as text."""
        return self.stderr_bytes.decode(errors="replace")

    def detail(self, limit: int = 300) -> str:
        """The end of what it said (stderr, else stdout) on one line, for an error message."""
        return " ".join((self.stderr or self.stdout).split())[-limit:]


PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (even by SIGKILL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, sig)


def die_with_server() -> None:
    """In a server's worker process (Granian forks one per role): end when the server ends.

    Without this a role killed with SIGKILL leaves its worker running, still holding the socket
    and the memory. Called by each role's application factory; a no-op outside a worker. The
    signal is SIGKILL: a worker whose server is gone has nobody to report to, and the app's
    worker was seen to catch SIGTERM and never finish. (A normal stop never gets here: the server
    stops its workers itself.)
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent.pid:  # the server died before the line above
        os.kill(os.getpid(), signal.SIGKILL)


def stop_signals_once(server: Any) -> None:
    """Let a Granian server's main process act on its first SIGTERM/SIGINT, off the signal path.

    Granian's handler sets a ``threading.Event`` under a lock that is not reentrant, and Python
    runs a handler in the main thread wherever it is: a signal arriving while that thread holds
    the lock (in the handler of an earlier signal, or in the Event's own ``wait``) made the
    main process wait on its own lock for ever (seen under a flood of SIGTERM, and once when a
    killed ``maxy run`` left ``maxy app`` running). So the first signal's handlers (Granian's,
    and any a startup hook chained before this one) run on a thread of their own, and later
    signals are dropped: the stop is under way, and Granian kills a worker past its timeout.
    Register it after every other startup hook.
    """

    def on_startup() -> None:
        fired = threading.Lock()
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            _first_only(signum, fired, previous if callable(previous) else None)

    server.on_startup(on_startup)


def on_first_stop_signal(act: Callable[[int, FrameType | None], object]) -> None:
    """Call ``act`` at the process's first SIGTERM or SIGINT, on a thread of its own; later
    signals are dropped. For a handler that sets a ``threading.Event`` the main thread waits
    on (the Neo4j launcher's): run in the signal handler, ``set`` would wait for ever on the
    Event's lock whenever the signal came while the main thread held it (see
    :func:`stop_signals_once`)."""
    fired = threading.Lock()
    for signum in (signal.SIGTERM, signal.SIGINT):
        _first_only(signum, fired, act)


def _first_only(
    signum: int, fired: threading.Lock, act: Callable[[int, FrameType | None], object] | None
) -> None:
    def handler(received: int, frame: FrameType | None) -> None:
        if not fired.acquire(blocking=False) or act is None:
            return
        threading.Thread(
            target=act, args=(received, frame), name="stop-signal", daemon=True
        ).start()

    signal.signal(signum, handler)


def run(
    args: Sequence[str | Path],
    *,
    timeout: float,
    input: bytes | str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Completed:
    """Run a program to completion, capturing its output; a non-zero exit is not an error.

    Raises :class:`ToolMissing` when it cannot start and :class:`ToolTimeout` (after killing
    its process group) when it runs past ``timeout`` seconds.
    """
    argv = tuple(str(a) for a in args)
    data = input.encode() if isinstance(input, str) else input
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if data is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as err:
        raise ToolMissing(f"{argv[0]} could not be started ({err.strerror or err})") from err
    try:
        out, err_out = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        _kill_group(proc)
        raise ToolTimeout(f"`{' '.join(argv)}` did not finish within {timeout:g} s") from err
    except BaseException:
        _kill_group(proc)
        raise
    return Completed(argv, proc.returncode, out, err_out)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


Send = Callable[[signal.Signals], object]


def escalate(
    send: Send, gone: Callable[[float | None], bool], grace: float, kill_wait: float | None
) -> str:
    """SIGTERM, wait up to ``grace`` s for ``gone``, then SIGKILL and wait up to ``kill_wait``.

    The one stop policy: ``send`` delivers a signal (to a group or one process), ``gone(t)``
    waits up to ``t`` seconds (None: until it ends) and says whether the process has ended.
    Returns the signal that ended it.
    """
    send(signal.SIGTERM)
    if gone(grace):
        return "SIGTERM"
    send(signal.SIGKILL)
    gone(kill_wait)
    return "SIGKILL"


async def escalate_async(
    send: Send,
    gone: Callable[[float | None], Awaitable[bool]],
    grace: float,
    kill_wait: float | None,
) -> str:
    """:func:`escalate` for an event loop: ``gone`` is awaited instead of blocking."""
    send(signal.SIGTERM)
    if await gone(grace):
        return "SIGTERM"
    send(signal.SIGKILL)
    await gone(kill_wait)
    return "SIGKILL"


def signal_group(pid: int) -> Send:
    """A ``send`` for :func:`escalate` that signals ``pid``'s process group (a gone one: no-op)."""

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)

    return send


def signal_process(pid: int) -> Send:
    """A ``send`` for :func:`escalate` that signals the one process ``pid`` (a gone one: no-op)."""

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    return send


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def poll_until(done: Callable[[], bool], interval: float = 0.2) -> Callable[[float | None], bool]:
    """A ``gone`` for :func:`escalate` that polls ``done`` every ``interval`` seconds."""

    def gone(timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(interval)
        return True

    return gone


def stop_group(proc: subprocess.Popen[bytes], grace: float) -> str | None:
    """SIGTERM ``proc``'s process group, SIGKILL it after ``grace`` seconds; wait for the reap.

    Returns the signal that ended it, None if it had already exited. ``proc`` must lead its
    own group (started with ``start_new_session=True``).
    """
    if proc.poll() is not None:
        return None

    def gone(timeout: float | None) -> bool:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("[process] op=stop warn=sigkill pid=%s", proc.pid)
            return False
        return True

    return escalate(signal_group(proc.pid), gone, grace, kill_wait=None)
