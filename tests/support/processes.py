"""Processes for tests: `maxy` children that are always stopped, waits, ports, environments.

Runtime folders (Unix socket paths must stay short, so they live in /tmp rather than under
pytest's tmp_path) come from :func:`runtime_dir` and are removed at the end of each test module.

Children bind their own ports, with no window between choosing a port and binding it: a
Granian role gets a port the test holds (:func:`held_port`, kept until the module ends), and a
server that cannot bind beside a hold (Neo4j, llama.cpp's server, qemu) is told port 0 and
asked which one it got (:func:`port_of`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.core.config import Settings, load_settings
from appliance.core.ports import listening_ports
from appliance.core.proc import stop_group
from appliance.graphdb.instance import Neo4jInstance
from appliance.memory.embedder import configured_model

_RUNTIME_DIRS: list[Path] = []
_HELD_PORTS: list[socket.socket] = []


def runtime_dir(prefix: str = "maxy-run-") -> Path:
    """A short-path folder for a test's sockets, removed at the end of its module."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    _RUNTIME_DIRS.append(folder)
    return folder


def remove_runtime_dirs() -> None:
    """Remove every folder :func:`runtime_dir` made (conftest calls it after each module)."""
    while _RUNTIME_DIRS:
        shutil.rmtree(_RUNTIME_DIRS.pop(), ignore_errors=True)


REPO = Path(__file__).resolve().parents[2]


def real_claude() -> str | None:
    """The real Claude Code CLI: `claude` on PATH, else the one the bootstrap cached."""
    cached = Path(base_environ()["MAXY_CACHE_DIR"]) / "bin" / "claude"
    return shutil.which("claude") or (str(cached) if os.access(cached, os.X_OK) else None)


def held_port() -> int:
    """A port of the kernel's choice that nobody else can take until the test module ends.

    The hold binds without listening and with ``SO_REUSEPORT``, so a Granian role (which sets
    it too) binds the same port beside it.
    """
    hold = socket.socket()
    hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    hold.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(hold)
    return int(hold.getsockname()[1])


def release_ports() -> None:
    """Close every :func:`held_port` hold (conftest calls it after each module)."""
    while _HELD_PORTS:
        _HELD_PORTS.pop().close()


def port_of(proc: subprocess.Popen[Any], timeout: float = 60.0) -> int:
    """The port a server started with port 0 listens on, once it does."""
    found: set[int] = set()

    def listening() -> bool:
        assert proc.poll() is None, f"{proc.args!r} exited with {proc.returncode}"
        found.update(listening_ports(proc.pid))
        return bool(found)

    wait_until(listening, timeout, f"a listening port of {proc.args!r}", 0.1)
    return min(found)


def private_neo4j(heap: str = "384m", pagecache: str = "64m") -> dict[str, str]:
    """Settings for a Neo4j of a child's own (port 0: it binds one), with a test-sized memory."""
    return {
        "MAXY_NEO4J_URI": "bolt://127.0.0.1:0",
        "MAXY_NEO4J_HEAP": heap,
        "MAXY_NEO4J_PAGECACHE": pagecache,
    }


def base_environ() -> dict[str, str]:
    """The environment of this process without any MAXY_* setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAXY_")}
    env["MAXY_CACHE_DIR"] = os.environ.get(
        "MAXY_CACHE_DIR", str(Path("~/.cache/maxy").expanduser())
    )
    return env


def dev_model() -> Path:
    """The development GGUF the engine loads on this machine (embedder.configured_model): its
    f16 file, or its bf16 form on a CPU that multiplies bf16 natively."""
    return configured_model(load_settings(base_environ()))


@dataclass
class Neo4jServer:
    """The session's Neo4j."""

    uri: str
    password_file: Path
    instance: Neo4jInstance
    proc: subprocess.Popen[bytes]

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()


@dataclass
class Env:
    """A complete settings environment for `maxy` child processes."""

    vars: dict[str, str]
    account_id: str

    @property
    def settings(self) -> Settings:
        return load_settings(self.vars)


def maxy(*args: str) -> list[str]:
    """Command line of the `maxy` program from this source tree."""
    return [sys.executable, "-m", "appliance", *args]


class Process:
    """A `maxy` child process that is always stopped at the end of its test."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            args, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        stop_group(self.proc, timeout)
        self._out.close()
        return self.proc.returncode


def wait_until(predicate: object, timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout`` seconds."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


async def wait_until_async(
    predicate: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.02
) -> None:
    """:func:`wait_until` for a coroutine predicate, polled without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


def get_health(port: int) -> httpx.Response | None:
    """GET /healthz, or None if nothing answers."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=6.0)
    except httpx.TransportError:
        return None


def health_status(port: int) -> int | None:
    """The status of GET /healthz on the edge at ``port``, or None if nothing answers."""
    response = get_health(port)
    return response.status_code if response is not None else None


def neo4j_pid(home: Path) -> int | None:
    """The pid of the Java server its launcher or supervisor recorded in a Neo4j home."""
    try:
        return int((home / "run" / "neo4j.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def process_table() -> dict[int, tuple[int, list[str]]]:
    """pid -> (parent pid, argv) of every process, from /proc."""
    found: dict[int, tuple[int, list[str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_bytes()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(raw[raw.rindex(b")") + 2 :].split()[1])
        found[int(entry)] = (parent, [a.decode(errors="replace") for a in argv if a])
    return found


def process_tree(
    pid: int,
    table: dict[int, tuple[int, list[str]]],
    skip: Callable[[list[str]], bool] | None = None,
) -> list[int]:
    """``pid`` and every process below it in ``table`` (from :func:`process_table`), leaving
    out any process whose argv ``skip`` accepts, and everything below it."""
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        if skip is not None and current != pid and skip(table.get(current, (0, []))[1]):
            continue
        found.append(current)
        frontier += children.get(current, [])
    return found


def _status_mb(path: str, field: str) -> float:
    """A ``Field: N kB`` line of a /proc file, in MB (0 once the process is gone)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB (0 once it is gone)."""
    return _status_mb(f"/proc/{pid}/status", "VmRSS:")


def pss_mb(pid: int) -> float:
    """Proportional memory of ``pid`` in MB: its own pages and its share of every page it
    shares (so a sum over processes counts a shared page once); 0 once it is gone."""
    return _status_mb(f"/proc/{pid}/smaps_rollup", "Pss:")


def open_fds(pid: int) -> int:
    """How many descriptors ``pid`` holds, from /proc."""
    return len(os.listdir(f"/proc/{pid}/fd"))
