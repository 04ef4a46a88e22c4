"""``maxy mcp-helper``: the real parent of every plugin MCP server a session starts.

``claude`` starts ``maxy mcp-helper --session ID --server NAME --log-dir DIR -- COMMAND…``; the
helper starts COMMAND with the session's stdin, relays its stdout (the MCP messages) unchanged,
tees its stderr to ``DIR/NAME.stderr`` (and on to its own stderr), and logs one line for each of
``op=spawn`` (started), ``op=boot`` (its first MCP message) and ``op=exit`` (code or signal,
lifetime, the tail of its stderr) — to its stderr and to ``DIR/helper.log``, so a server that
dies is explained after the fact. SIGTERM and SIGINT are passed on to the server; the helper
exits with the server's status.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO

from appliance.core.fsio import ensure_private_dir
from appliance.core.logs import kv

log = logging.getLogger(__name__)

TAIL_LINES = 5


class _Tee:
    """Copy the server's stderr to a file and to ours, keeping the last lines."""

    def __init__(self, source: IO[bytes], file: IO[bytes]) -> None:
        self.source, self.file = source, file
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    def run(self) -> None:
        for line in iter(self.source.readline, b""):
            self.file.write(line)
            self.file.flush()
            sys.stderr.buffer.write(line)
            sys.stderr.flush()
            self.tail.append(line.decode(errors="replace").rstrip())


def _relay(source: IO[bytes], on_first: Callable[[], None]) -> None:
    out = sys.stdout.buffer
    first = True
    for line in iter(source.readline, b""):
        out.write(line)
        out.flush()
        if first:
            first = False
            on_first()


def run(session: str, server: str, log_dir: Path, command: list[str]) -> int:
    """Run one server under the helper; return its exit status."""
    ensure_private_dir(log_dir)
    helper_log = (log_dir / "helper.log").open("a", encoding="utf-8")

    def event(op: str, **fields: object) -> None:
        line = f"[mcp-helper] op={op} " + kv(session=session[:8], server=server, **fields)
        log.info("%s", line)
        helper_log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")
        helper_log.flush()

    started = time.monotonic()
    with (log_dir / f"{server}.stderr").open("ab") as stderr_file:
        try:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as err:
            event("exit", code=127, signal="-", lifetimeMs=0, **{"stderr-tail": str(err)})
            return 127
        assert child.stdout is not None and child.stderr is not None
        event("spawn", pid=child.pid, command=" ".join(command[:4]))
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda n, _f: child.send_signal(n))
        tee = _Tee(child.stderr, stderr_file)

        def booted() -> None:
            event("boot", ms=round((time.monotonic() - started) * 1000))

        threads = [
            threading.Thread(target=tee.run, daemon=True),
            threading.Thread(target=_relay, args=(child.stdout, booted), daemon=True),
        ]
        for thread in threads:
            thread.start()
        code = child.wait()
        for thread in threads:
            thread.join(timeout=2)
    lifetime = round((time.monotonic() - started) * 1000)
    name = signal.Signals(-code).name if code < 0 else "-"
    event(
        "exit",
        code=code if code >= 0 else "-",
        signal=name,
        lifetimeMs=lifetime,
        **{"stderr-tail": " | ".join(tee.tail) or "-"},
    )
    helper_log.close()
    return 128 - code if code < 0 else code


def main(session: str, server: str, log_dir: str, command: list[str]) -> int:
    """The ``maxy mcp-helper`` command."""
    if not command:
        print("[mcp-helper] FATAL: no server command after --", file=sys.stderr)
        return 2
    os.umask(0o077)
    return run(session, server, Path(log_dir), command)
