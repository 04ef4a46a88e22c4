"""The frozen `maxy` (dist/maxy, or MAXY_BINARY) runs every role with nothing of the source tree.

One `maxy run` from the binary — its own Neo4j, engine, manager, app and edge — serves the smoke
tests; the failure tests start the binary alone and expect one clear line and a non-zero exit.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import TextContent

from tests.support.processes import (
    REPO,
    Process,
    base_environ,
    get_health,
    held_port,
    private_neo4j,
    runtime_dir,
    wait_until,
)

pytestmark = pytest.mark.slow

DOUBLE = REPO / "tests" / "sessions" / "claude"


def run_binary(
    binary: Path, env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the frozen binary to completion."""
    return subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def fresh_env(binary: Path, base: Path) -> dict[str, str]:
    """Settings for a `maxy` with its own data directory and one account (made by the binary)."""
    data = base / "data"
    data.mkdir(parents=True)
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(data),
        # Unix socket paths are short (107 bytes): keep the runtime dir near the root.
        MAXY_RUNTIME_DIR=str(runtime_dir("maxy-bin-")),
        MAXY_HOST="127.0.0.1",
        MAXY_PORT=str(held_port()),
        **private_neo4j(),
    )
    created = run_binary(binary, env, "account", "create", "--owner", "Frozen Owner")
    assert created.returncode == 0, created.stderr
    env["MAXY_ACCOUNT_ID"] = created.stdout.strip()
    return env


@dataclass
class Stack:
    """A `maxy run` from the frozen binary."""

    binary: Path
    env: dict[str, str]
    process: Process
    record: Path

    @property
    def port(self) -> int:
        return int(self.env["MAXY_PORT"])

    @property
    def manager_socket(self) -> Path:
        return Path(self.env["MAXY_RUNTIME_DIR"]) / "manager.sock"

    def manager(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        transport = httpx.HTTPTransport(uds=str(self.manager_socket))
        with httpx.Client(transport=transport, base_url="http://manager", timeout=30) as client:
            return client.request(method, path, **kwargs)


@pytest.fixture(scope="module")
def stack(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`dist/maxy run` serving a free port, healthy, with the `claude` double as its CLI."""
    base = tmp_path_factory.mktemp("frozen")
    env = fresh_env(binary, base)
    record = base / "claude-record"
    env.update(
        MAXY_CLAUDE_BIN=str(DOUBLE),
        MAXY_STOP_GRACE="1",
        CLAUDE_DOUBLE_PYTHON=sys.executable,
        CLAUDE_DOUBLE_RECORD=str(record),
    )
    process = Process([str(binary), "run"], env, base / "run.log")
    try:
        port = int(env["MAXY_PORT"])
        wait_until(
            lambda: (r := get_health(port)) is not None and r.status_code == 200,
            240,
            f"`maxy run` from the binary to be healthy\n{process.output()}",
            0.5,
        )
        yield Stack(binary, env, process, record)
    finally:
        code = process.stop()
        shutil.rmtree(env["MAXY_RUNTIME_DIR"], ignore_errors=True)
    assert code == 0, process.output()
    assert "Traceback" not in process.output(), process.output()


def test_version_carries_the_build_metadata(binary: Path) -> None:
    done = run_binary(binary, base_environ(), "version", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert info["frozen"] is True
    assert info["version"] == project["version"]
    assert info["buildDate"]
    if (REPO / ".git").exists() and shutil.which("git"):
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert info["gitRevision"] == head


def test_run_is_healthy_on_a_real_neo4j(stack: Stack) -> None:
    body = get_health(stack.port).json()  # type: ignore[union-attr]
    assert body["status"] == "healthy"
    assert body["neo4j"]["ok"] and body["embedder"]["ok"]
    assert body["embedder"]["dimension"] == 384


def test_web_assets_are_inside_the_binary(stack: Stack) -> None:
    base = f"http://127.0.0.1:{stack.port}"
    # No PIN yet: the first LAN visit is the onboarding page, rendered from a shipped template.
    page = httpx.get(f"{base}/onboarding", timeout=10)
    assert page.status_code == 200 and "<html" in page.text.lower()
    vendored = httpx.get(f"{base}/static/vendor/cytoscape/dist/cytoscape.min.js", timeout=10)
    assert vendored.status_code == 200 and len(vendored.content) > 100_000


def test_memory_ingest_then_search_through_the_engine(stack: Stack, tmp_path: Path) -> None:
    note = tmp_path / "kettle.md"
    note.write_text("# Kitchen\n\nThe blue kettle lives in the cupboard above the sink.\n")
    ingested = run_binary(stack.binary, stack.env, "memory", "ingest", str(note))
    assert ingested.returncode == 0, ingested.stderr
    found = run_binary(stack.binary, stack.env, "memory", "search", "where is the kettle", "--json")
    assert found.returncode == 0, found.stderr
    results = json.loads(found.stdout)["results"]
    assert any("blue kettle" in str(r["props"].get("content", "")) for r in results), results


def test_manager_spawns_and_stops_the_claude_double(stack: Stack) -> None:
    spawned = stack.manager("POST", "/rc-spawn", json={"message": "hello"})
    assert spawned.status_code == 201, spawned.text
    row = spawned.json()["row"]
    stopped = stack.manager("POST", f"/{row['id']}/stop")
    assert stopped.status_code == 200, stopped.text

    def ended() -> bool:
        now = stack.manager("GET", f"/{row['id']}").json()["row"]
        return bool(now["state"] == "archived" and not now["attached"])

    wait_until(ended, 30, "the stopped session to be archived")


def recorded_session(stack: Stack) -> dict[str, Any]:
    """Spawn an admin session and return what the double recorded: argv, env, cwd."""
    spawned = stack.manager("POST", "/rc-spawn", json={"message": "tools please"})
    assert spawned.status_code == 201, spawned.text
    row = spawned.json()["row"]
    try:
        path = stack.record / f"{row['sessionId']}.json"
        wait_until(path.is_file, 10, f"the double's record {path}")
        info: dict[str, Any] = json.loads(path.read_text())
    finally:
        stack.manager("POST", f"/{row['id']}/stop")
    return info


def test_sessions_start_with_an_environment_free_of_the_bootloader(stack: Stack) -> None:
    env = recorded_session(stack)["env"]
    assert not [k for k in env if k.startswith("_PYI_")]
    assert "_MEI" not in env.get("LD_LIBRARY_PATH", "")


@pytest.mark.anyio
async def test_mcp_started_as_a_session_would_lists_the_memory_tools(stack: Stack) -> None:
    info = recorded_session(stack)
    argv = info["argv"]
    config = json.loads(argv[argv.index("--mcp-config") + 1])["mcpServers"]["memory"]
    assert config["command"] == str(stack.binary)
    # Exactly what the CLI does: its own environment plus the server's, then the command.
    params = StdioServerParameters(
        command=config["command"], args=config["args"], env={**info["env"], **config["env"]}
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        written = await session.call_tool(
            "memory-write",
            {"label": "Preference", "properties": {"name": "Tea", "description": "Earl Grey"}},
        )
        assert not written.is_error, written.content
        found = await session.call_tool("memory-search", {"query": "which tea"})
    assert {"memory-search", "memory-write", "memory-ingest"} <= tools
    answer = found.content[0]
    assert isinstance(answer, TextContent), answer
    assert "Earl Grey" in answer.text


@pytest.mark.anyio
async def test_the_frozen_scheduling_server_reads_times_in_words_and_zones(stack: Stack) -> None:
    """dateparser's language data and tzdata's zones are inside the binary."""
    info = recorded_session(stack)
    argv = info["argv"]
    config = json.loads(argv[argv.index("--mcp-config") + 1])["mcpServers"]["scheduling"]
    params = StdioServerParameters(
        command=config["command"], args=config["args"], env={**info["env"], **config["env"]}
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        resolved = await session.call_tool(
            "time-resolve", {"text": "demain à 9h", "timeZone": "Pacific/Auckland"}
        )
    assert not resolved.is_error, resolved.content
    answer = resolved.content[0]
    assert isinstance(answer, TextContent), answer
    assert re.search(r"T09:00:00\+1[23]:00", answer.text), answer.text  # New Zealand's offsets


def test_doctor_reports_every_check(stack: Stack) -> None:
    done = run_binary(stack.binary, stack.env, "doctor")
    lines = done.stdout.splitlines()
    assert any(line.startswith("ok") and "java" in line for line in lines), done.stdout
    assert any(line.startswith("ok") and "embedding model" in line for line in lines)
    assert any(line.startswith("ok") and "engine" in line for line in lines)
    # The driver's Rust extension is inside the binary (searches decode their rows with it).
    assert any(line.startswith("ok") and "neo4j driver" in line for line in lines), done.stdout
    assert any(line.startswith("ok") and "more session(s)" in line for line in lines), done.stdout


# Failures: one clear line and a non-zero exit.


def fatal_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one FATAL line of a failed run (and no traceback)."""
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    fatal = [line for line in done.stderr.splitlines() if " FATAL " in line]
    assert len(fatal) == 1, done.stderr
    return fatal[0]


def confined(script: str) -> list[str]:
    """Run ``script`` ("$@" is the command) in private user and mount namespaces."""
    return ["unshare", "--map-root-user", "--mount", "sh", "-euc", script, "sh"]


@pytest.fixture(scope="module")
def namespaces() -> None:
    """Skip, saying why, where unprivileged user and mount namespaces are not available."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is missing: cannot hide Java or make a mount read-only")
    probe = subprocess.run(confined("true"), capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available here: {probe.stderr.strip()}")


def test_missing_java(binary: Path, tmp_path: Path, namespaces: None) -> None:
    env = fresh_env(binary, tmp_path)
    env["JAVA_HOME"] = str(tmp_path / "no-java")
    env["PATH"] = "/usr/bin:/bin"
    # /usr/lib/jvm is where Java is looked for after JAVA_HOME: an empty tmpfs hides it.
    hide_jvm = 'if [ -d /usr/lib/jvm ]; then mount -t tmpfs none /usr/lib/jvm; fi; exec "$@"'
    done = subprocess.run(
        [*confined(hide_jvm), str(binary), "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = fatal_line(done)
    assert "JavaNotFound" in line and "Java 21 or newer" in line and "JAVA_HOME" in line


def test_missing_model(binary: Path, tmp_path: Path) -> None:
    env = fresh_env(binary, tmp_path)
    env["MAXY_EMBED_MODEL"] = "/nonexistent/model.gguf"
    for role in ("run", "engine"):
        line = fatal_line(run_binary(binary, env, role))
        assert "ModelMissing" in line and "/nonexistent/model.gguf does not exist" in line


def test_unwritable_data_directory(binary: Path, tmp_path: Path, namespaces: None) -> None:
    env = fresh_env(binary, tmp_path)
    # Read-only even for root: a read-only bind mount of the data directory.
    read_only = 'mount --bind "$MAXY_DATA_DIR" "$MAXY_DATA_DIR"\n'
    read_only += 'mount -o remount,bind,ro "$MAXY_DATA_DIR"\nexec "$@"'
    done = subprocess.run(
        [*confined(read_only), str(binary), "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = fatal_line(done)
    assert "is not writable" in line and env["MAXY_DATA_DIR"] in line and "MAXY_DATA_DIR" in line


def test_port_taken(binary: Path, tmp_path: Path) -> None:
    env = fresh_env(binary, tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env["MAXY_PORT"] = str(port)
        for role in ("run", "edge"):
            line = fatal_line(run_binary(binary, env, role))
            assert f"Port {port} is already in use" in line and "MAXY_PORT" in line
