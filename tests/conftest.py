"""Shared fixtures: a real Neo4j server, the real GGUF model, real `maxy` processes.

The test session starts its own Neo4j (from the cached jars, on a free port, in a temporary
home) once, and stops it at the end. Nothing here fakes our own code.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from appliance.accounts import create_account
from appliance.config import Settings, load_settings
from appliance.graphdb.instance import Neo4jInstance, running, stop_process_group
from appliance.memory.embedder import Embedder

REPO = Path(__file__).resolve().parent.parent


def real_claude() -> str | None:
    """The real Claude Code CLI: `claude` on PATH, else the one the bootstrap cached."""
    cached = Path(base_environ()["MAXY_CACHE_DIR"]) / "bin" / "claude"
    return shutil.which("claude") or (str(cached) if os.access(cached, os.X_OK) else None)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def base_environ() -> dict[str, str]:
    """The environment of this process without any MAXY_* setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAXY_")}
    env["MAXY_CACHE_DIR"] = os.environ.get(
        "MAXY_CACHE_DIR", str(Path("~/.cache/maxy").expanduser())
    )
    return env


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


@pytest.fixture(scope="session")
def neo4j_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Neo4jServer]:
    """Start a real Neo4j for the whole session."""
    data = tmp_path_factory.mktemp("neo4j-data")
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(data),
        MAXY_NEO4J_URI=f"bolt://127.0.0.1:{free_port()}",
        MAXY_NEO4J_HEAP="384m",
        MAXY_NEO4J_PAGECACHE="64m",
    )
    settings = load_settings(env)
    instance = Neo4jInstance.from_settings(settings, env)
    with running(instance) as proc:
        yield Neo4jServer(settings.neo4j_uri, settings.neo4j_password_path, instance, proc)


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The development GGUF, built by `just bootstrap`."""
    path = load_settings(base_environ()).embed_model_path
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `just bootstrap` (the test command does it).")
    return path


@pytest.fixture(scope="session")
def embedder(model_path: Path) -> Iterator[Embedder]:
    """The real model loaded in this process."""
    model = Embedder(model_path, max_chars=8000)
    yield model
    model.close()


@dataclass
class Env:
    """A complete settings environment for `maxy` child processes."""

    vars: dict[str, str]
    account_id: str

    @property
    def settings(self) -> Settings:
        return load_settings(self.vars)


@pytest.fixture
def maxy_env(neo4j_server: Neo4jServer, tmp_path: Path) -> Env:
    """Settings for a `maxy` process using the session Neo4j, with one account on disk."""
    data = tmp_path / "data"
    # Unix socket paths are short (107 bytes): keep the runtime dir near the root.
    runtime = Path(tempfile.mkdtemp(prefix="maxy-run-", dir="/tmp"))
    account = create_account(data / "accounts", "Test Owner")
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(data),
        MAXY_RUNTIME_DIR=str(runtime),
        MAXY_ACCOUNT_ID=account.id,
        MAXY_NEO4J_URI=neo4j_server.uri,
        MAXY_NEO4J_PASSWORD_FILE=str(neo4j_server.password_file),
        MAXY_HOST="127.0.0.1",
        MAXY_PORT=str(free_port()),
    )
    return Env(env, account.id)


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
        stop_process_group(self.proc, timeout)
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


@pytest.fixture
def start_maxy(tmp_path: Path) -> Iterator[object]:
    """Start `maxy` subcommands; every one is stopped when the test ends."""
    started: list[Process] = []

    def start(env: Env | dict[str, str], *args: str) -> Process:
        variables = env.vars if isinstance(env, Env) else env
        process = Process(maxy(*args), variables, tmp_path / f"{args[0]}-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in reversed(started):
        process.stop()


def get_health(port: int) -> httpx.Response | None:
    """GET /healthz, or None if nothing answers."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=6.0)
    except httpx.TransportError:
        return None
