"""One ``claude`` process in a pseudo-terminal, held by the manager for its whole life.

:class:`PtyHandle` spawns with ``ptyprocess`` (the child is a session leader, so its pid is also
its process group), reads the master without blocking from the event loop into a
:class:`RingBuffer` numbered by byte offset, fans output out to terminal viewers, and learns of
the child's exit from a pidfd, so no SIGCHLD handler or polling is involved.

Exactly one place releases the master: :meth:`PtyHandle._release_master`, guarded by a flag and
reached on every end path (natural exit, crash, operator stop, shutdown) after the child has been
reaped with ``waitpid`` — no zombies and no leaked descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ptyprocess import PtyProcess

from appliance.sessions.registry import proc_stat

log = logging.getLogger(__name__)

RING_BYTES = 512 * 1024
READ_CHUNK = 64 * 1024
DEFAULT_SIZE = (40, 120)  # rows, columns


class RingBuffer:
    """At least the last ``capacity`` bytes of output; byte ``n`` of the stream has number ``n``.

    Output is kept as the chunks it was read in, so appending and dropping old output never
    copies what is kept.
    """

    def __init__(self, capacity: int = RING_BYTES) -> None:
        self.capacity = capacity
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.start = 0  # sequence number of the oldest byte kept

    @property
    def end(self) -> int:
        """Sequence number of the next byte."""
        return self.start + self._size

    def append(self, data: bytes) -> None:
        """Keep ``data``, dropping the oldest chunks the capacity no longer needs."""
        if not data:
            return
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= self.capacity:
            dropped = self._chunks.popleft()
            self._size -= len(dropped)
            self.start += len(dropped)

    def since(self, seq: int) -> tuple[int, bytes]:
        """Bytes from ``seq`` on; from the oldest kept byte if ``seq`` fell out (a resync)."""
        if seq < self.start or seq > self.end:
            seq = self.start
        skip = seq - self.start
        parts = []
        for chunk in self._chunks:
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            parts.append(chunk[skip:] if skip else chunk)
            skip = 0
        return seq, b"".join(parts)


class Viewer(Protocol):
    """A terminal client receiving output."""

    def offer(self, seq: int, data: bytes) -> None:
        """Take output starting at sequence ``seq`` without blocking."""

    def ended(self, code: int) -> None:
        """The session's process has exited."""


# Out of memory, the kernel ends the process of highest badness: its share of memory plus its
# oom_score_adj (-1000..1000). Sessions are what an owner adds, about 1 GB each with their MCP
# servers (`just bench-memory`): a third on a 4 GB Pi would otherwise have the kernel end the
# largest process, Neo4j. Set in the child before exec, so the CLI, its MCP servers and every
# command it runs inherit it; raising one's own needs no privilege.
SESSION_OOM_SCORE_ADJ = 500


def _preexec() -> None:
    # The manager may ignore or block signals; the CLI starts with the defaults.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    # Between fork and exec nothing can be logged; without /proc the session still starts.
    with contextlib.suppress(OSError):
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, str(SESSION_OOM_SCORE_ADJ).encode())
        finally:
            os.close(fd)


class PtyHandle:
    """A live child in a PTY: output ring, viewers, exit notification, signals."""

    def __init__(self, proc: PtyProcess, on_exit: Callable[[PtyHandle], None]) -> None:
        self.proc = proc
        self.pid: int = proc.pid
        self.fd: int = proc.fd
        self._on_exit = on_exit
        self._loop = asyncio.get_running_loop()
        stat = proc_stat(self.pid)
        self.start_ticks = stat[1] if stat else None
        self.ring = RingBuffer()
        self.viewers: set[Viewer] = set()
        self.active: Viewer | None = None
        self.sizes: dict[Viewer, tuple[int, int]] = {}
        self.exited: asyncio.Future[int] = self._loop.create_future()
        self.started = time.monotonic()
        self.last_activity = self.started
        self.session_id: str | None = None
        self.stopping = False
        self.master_released = False
        os.set_blocking(self.fd, False)
        self._loop.add_reader(self.fd, self._on_readable)
        self._pidfd: int | None = os.pidfd_open(self.pid)
        self._loop.add_reader(self._pidfd, self._on_pidfd)

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        on_exit: Callable[[PtyHandle], None],
        size: tuple[int, int] = DEFAULT_SIZE,
    ) -> PtyHandle:
        """Start ``argv`` in a new PTY and session."""
        proc = PtyProcess.spawn(
            list(argv), cwd=str(cwd), env=dict(env), dimensions=size, preexec_fn=_preexec
        )
        return cls(proc, on_exit)

    @property
    def alive(self) -> bool:
        """True until the child has been reaped."""
        return not self.exited.done()

    # --- output ----------------------------------------------------------------------------

    def _on_readable(self) -> None:
        # One read per wake-up, as asyncio's transports do: a flood of output then interleaves
        # with sending it to viewers, and the full PTY buffer slows the writer down.
        self._drain(reads=1)

    def _drain(self, reads: int = 1_000_000) -> None:
        for _ in range(reads):
            if self.master_released:
                return
            try:
                data = os.read(self.fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError as err:  # EIO: every slave descriptor is closed
                if err.errno != errno.EIO:
                    log.warning("[sessions] op=pty-read-error pid=%s errno=%s", self.pid, err.errno)
                self._loop.remove_reader(self.fd)
                return
            if not data:
                self._loop.remove_reader(self.fd)
                return
            seq = self.ring.end
            self.ring.append(data)
            self.last_activity = time.monotonic()
            for viewer in list(self.viewers):
                viewer.offer(seq, data)

    # --- input, size, signals --------------------------------------------------------------

    async def write(self, data: bytes, timeout: float = 10.0) -> None:
        """Write ``data`` to the PTY, waiting while the terminal's input queue is full."""
        view = memoryview(data)
        deadline = self._loop.time() + timeout
        while view:
            if self.master_released:
                raise ProcessLookupError(self.pid)
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                ready = self._loop.create_future()
                self._loop.add_writer(self.fd, ready.set_result, None)
                try:
                    await asyncio.wait_for(ready, max(0.0, deadline - self._loop.time()))
                finally:
                    if not self.master_released:
                        self._loop.remove_writer(self.fd)
                continue
            view = view[written:]
        self.last_activity = time.monotonic()

    def resize(self, rows: int, cols: int) -> None:
        """Set the terminal size (the child gets SIGWINCH)."""
        if not self.master_released and rows > 0 and cols > 0:
            with contextlib.suppress(OSError):
                self.proc.setwinsize(rows, cols)

    def signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the child's process group; False if it is gone."""
        if not self.alive:
            return False
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    # --- exit ------------------------------------------------------------------------------

    def _on_pidfd(self) -> None:
        if self._pidfd is None:
            return
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = None
        try:
            _, status = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = -1
        self._drain()  # the last words of the process are still in the master
        self._release_master()
        self.proc.terminated = True
        self.proc.exitstatus = code if code >= 0 else None
        self.proc.signalstatus = -code if code < 0 else None
        self.exited.set_result(code)
        for viewer in list(self.viewers):
            viewer.ended(code)
        self._on_exit(self)

    def _release_master(self) -> None:
        """Close the PTY master: the only place it is closed, and only once."""
        if self.master_released:
            return
        self.master_released = True
        self._loop.remove_reader(self.fd)
        self._loop.remove_writer(self.fd)
        self.proc.fileobj.close()
        # ptyprocess's own close() would sleep and signal; the child is already reaped.
        self.proc.closed = True
        self.proc.fd = -1

    def holds_master(self) -> bool:
        """True while the master descriptor is open."""
        return not self.master_released
