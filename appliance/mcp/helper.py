"""``maxy mcp-helper``: the real parent of every plugin MCP server a session starts.

``claude`` starts ``maxy mcp-helper --session ID --server NAME --log-dir DIR -- COMMAND…``; the
helper starts COMMAND with the session's stdin, relays its stdout (the MCP messages) unchanged,
tees its stderr to ``DIR/NAME.stderr`` (and on to its own stderr), and logs one line for each of
``op=spawn`` (started), ``op=boot`` (its first MCP message) and ``op=exit`` (code or signal,
lifetime, the tail of its stderr) — to its stderr and to ``DIR/helper.log``, so a server that
dies is explained after the fact. SIGTERM and SIGINT are passed on to the server; the helper
exits with the server's status.

When COMMAND is this very program's ``mcp`` (a shipped plugin's server, as every one is), the
helper does not start a second interpreter: it imports that plugin's server first, then forks,
and the child runs ``maxy mcp …`` as if started so (its argv still reads as the helper's). Parent
and child then share the interpreter and every module both hold, page for page, instead of each
holding its own: a session's nine pairs take 406 MB so, 548 apart (PSS, ``just bench-memory``).
Any other COMMAND is started as it is.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from appliance.core.fsio import ensure_private_dir
from appliance.core.logs import kv
from appliance.core.resources import self_command

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


RunSelf = Callable[[list[str]], int]  # runs `maxy ARGUMENTS` in this process: cli.main


def run(
    session: str, server: str, log_dir: Path, command: list[str], run_self: RunSelf | None = None
) -> int:
    """Run one server under the helper; return its exit status. With ``run_self``, this
    program's own ``mcp`` is forked and run by it (see the module docstring)."""
    ensure_private_dir(log_dir)
    helper_log = (log_dir / "helper.log").open("a", encoding="utf-8")

    def event(op: str, **fields: object) -> None:
        line = f"[mcp-helper] op={op} " + kv(session=session[:8], server=server, **fields)
        log.info("%s", line)
        helper_log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")
        helper_log.flush()

    started = time.monotonic()
    with (log_dir / f"{server}.stderr").open("ab") as stderr_file:
        arguments = own_server(command) if run_self is not None else None
        try:
            child: Child = (
                Forked(arguments, run_self)
                if arguments is not None and run_self is not None
                else subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            )
        except OSError as err:
            event("exit", code=127, signal="-", lifetimeMs=0, **{"stderr-tail": str(err)})
            return 127
        assert child.stdout is not None and child.stderr is not None
        mode = "fork" if arguments is not None else "exec"
        event("spawn", pid=child.pid, mode=mode, command=" ".join(command[:4]))
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


def own_server(command: list[str]) -> list[str] | None:
    """The ``maxy`` arguments when COMMAND runs this program's ``mcp``, else None."""
    own = self_command()
    if command[: len(own)] == own and command[len(own) : len(own) + 1] == ["mcp"]:
        return command[len(own) :]
    return None


class Child(Protocol):
    """What the helper needs of its server's process (a ``subprocess.Popen`` is one)."""

    pid: int
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...


class Forked:
    """``maxy ARGUMENTS`` run by a fork of this process, its stdout and stderr piped back."""

    def __init__(self, arguments: list[str], run_self: RunSelf) -> None:
        _preload(arguments)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        # Left frozen on both sides: a collection would write to every shared object's page.
        gc.freeze()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child ends in os._exit; its work is the server's
            os.close(out_read)
            os.close(err_read)
            os.dup2(out_write, 1)
            os.dup2(err_write, 2)
            os.close(out_write)
            os.close(err_write)
            os._exit(_serve(run_self, arguments))
        os.close(out_write)
        os.close(err_write)
        self.pid = pid
        self.stdout: IO[bytes] | None = os.fdopen(out_read, "rb")
        self.stderr: IO[bytes] | None = os.fdopen(err_read, "rb")

    def wait(self) -> int:
        """The child's status as ``Popen.wait`` gives it (negative: the signal that ended it)."""
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)


def _preload(arguments: list[str]) -> None:
    """Import the plugin's server before the fork, so both processes share it."""
    words = arguments[1:]
    plugin = words[words.index("--plugin") + 1] if "--plugin" in words[:-1] else "memory"
    try:
        from appliance.mcp import server  # noqa: F401
        from appliance.mcp.tools import tools_of

        tools_of(plugin)
    except Exception:  # noqa: S110 - the child names the failure where the server would
        pass


def _serve(run_self: RunSelf, arguments: list[str]) -> int:
    """In the child: run ``maxy ARGUMENTS``; its exit status."""
    code = 1
    try:
        code = run_self(arguments)
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return code


def main(
    session: str, server: str, log_dir: str, command: list[str], run_self: RunSelf | None = None
) -> int:
    """The ``maxy mcp-helper`` command (``run_self``: the CLI's ``main``)."""
    if not command:
        print("[mcp-helper] FATAL: no server command after --", file=sys.stderr)
        return 2
    os.umask(0o077)
    return run(session, server, Path(log_dir), command, run_self)
