"""The one subprocess runner and the one process-group stop, on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

import pytest

from appliance.core.proc import (
    ToolMissing,
    ToolTimeout,
    on_first_stop_signal,
    pid_alive,
    run,
    stop_group,
    stop_signals_once,
)


def test_run_captures_output_and_a_non_zero_exit_is_not_an_error() -> None:
    done = run([sys.executable, "-c", "import sys; print('out'); sys.exit('bad')"], timeout=30)
    assert done.returncode == 1 and done.stdout == "out\n" and done.detail() == "bad"


def test_a_missing_program_is_tool_missing() -> None:
    with pytest.raises(ToolMissing, match="/nonexistent/tool"):
        run(["/nonexistent/tool"], timeout=5)


def test_a_timeout_kills_the_whole_group_even_a_grandchild_holding_the_pipe() -> None:
    # The child starts a grandchild that keeps stdout open and prints its pid, then hangs.
    script = (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(g.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    started = time.monotonic()
    with pytest.raises(ToolTimeout, match="did not finish within 1 s"):
        run([sys.executable, "-c", script], timeout=1)
    assert time.monotonic() - started < 60  # not the grandchild's two minutes


def test_stop_group_escalates_to_sigkill_for_a_child_that_ignores_sigterm() -> None:
    ignoring = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(1, flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", ignoring], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None and proc.stdout.readline()  # the handler is installed
    assert stop_group(proc, grace=0.5) == "SIGKILL"
    assert not pid_alive(proc.pid) and proc.returncode == -9
    assert stop_group(proc, grace=0.5) is None  # already gone: nothing to do
    proc.stdout.close()


def test_stop_group_ends_a_well_behaved_child_with_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    assert stop_group(proc, grace=30) == "SIGTERM" and proc.returncode == -15


class _Server:
    """Granian's startup-hook registration, and nothing else."""

    def __init__(self) -> None:
        self.hooks: list[Callable[[], None]] = []

    def on_startup(self, hook: Callable[[], None]) -> None:
        self.hooks.append(hook)


@pytest.fixture
def stop_handlers() -> Iterator[None]:
    """The test may replace SIGTERM's and SIGINT's handlers: pytest's come back after it."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_stop_signal_never_waits_on_a_lock_its_own_thread_holds(stop_handlers: None) -> None:
    """Granian's handler sets an Event under a lock that is not reentrant. A signal delivered
    while the main thread held that lock (in the handler of an earlier signal, or in the Event's
    own wait) ran the handler inside it, and the process waited on itself for ever."""
    lock = threading.Lock()  # the Event's
    entries: list[str] = []

    def granian_like(signum: int, frame: FrameType | None) -> None:
        if not lock.acquire(timeout=2):  # Granian's Event waits without a timeout
            entries.append("blocked on its own lock")
            return
        try:
            entries.append("stopping")
            os.kill(os.getpid(), signal.SIGTERM)  # the next signal, while the lock is held
            sum(range(10_000))  # Python runs a pending handler between bytecodes
        finally:
            lock.release()

    signal.signal(signal.SIGTERM, granian_like)
    server = _Server()
    stop_signals_once(server)
    for hook in server.hooks:  # Granian runs its startup hooks after installing its handler
        hook()
    with lock:  # the main thread inside the Event's wait, as the first signal comes
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(10_000))
    deadline = time.monotonic() + 10
    while not entries and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)  # and another signal after: dropped as well
    sum(range(10_000))
    time.sleep(0.1)
    assert entries == ["stopping"]


class _Event(threading.Event):
    """A real Event whose ``set`` gives up after 2 s on its own lock instead of waiting for ever."""

    def __init__(self, entries: list[str]) -> None:
        super().__init__()
        self.entries = entries
        self.cond: threading.Condition = vars(self)["_cond"]  # the Event's own (private)

    def set(self) -> None:
        if not self.cond.acquire(timeout=2):
            self.entries.append("blocked on its own lock")
            return
        self.cond.release()
        super().set()
        self.entries.append("stopping")


def test_a_stop_callback_may_set_the_event_the_main_thread_waits_on(stop_handlers: None) -> None:
    """The Neo4j launcher's main thread lives in ``stop.wait``, and its SIGTERM handler called
    ``stop.set()``: a signal that came while the main thread held the Event's lock (entering or
    leaving the wait) left the launcher waiting on itself, and ``maxy neo4j run`` never
    stopped. The callback now runs on a thread of its own, once."""
    entries: list[str] = []
    stop = _Event(entries)
    on_first_stop_signal(lambda signum, frame: stop.set())
    with stop.cond:  # the main thread inside the Event's wait, as the signal comes
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(10_000))  # Python runs a pending handler between bytecodes
    assert stop.wait(10)
    os.kill(os.getpid(), signal.SIGINT)  # a later signal is dropped
    sum(range(10_000))
    time.sleep(0.1)
    assert entries == ["stopping"]
