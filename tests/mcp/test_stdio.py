"""`maxy mcp`'s own stdio protocol (appliance/mcp/stdio.py), line by line, from a real process.

The SDK's client (test_server.py) and the real CLI (tests/sessions/test_real_cli.py) show that
clients get on with it; these show the edges: bad lines, versions, concurrent calls, a cancelled
call, stray output and the end of input. The engine is a Unix socket that accepts and never
answers, so a tool call hangs the way it would on a stuck engine.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tests.support.processes import base_environ, runtime_dir

INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"},
}


class Client:
    """A `maxy mcp` child and its lines, read on a thread so a missing answer cannot hang us."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        assert process.stdin is not None and process.stdout is not None
        self.stdin: IO[bytes] = process.stdin
        self.lines: list[bytes] = []
        self.arrived = threading.Condition()
        threading.Thread(target=self._read, args=(process.stdout,), daemon=True).start()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in iter(stdout.readline, b""):
            with self.arrived:
                self.lines.append(line)
                self.arrived.notify_all()

    def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.stdin.write(data)
        self.stdin.flush()

    def request(self, request_id: int, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def answer(self, request_id: int | None, timeout: float = 30) -> dict[str, Any]:
        """The answer to ``request_id`` (every line must be one JSON message)."""

        def found() -> dict[str, Any] | None:
            for line in self.lines:
                message: dict[str, Any] = json.loads(line)
                if message.get("id") == request_id:
                    return message
            return None

        with self.arrived:
            assert self.arrived.wait_for(lambda: found() is not None, timeout), self.lines
        answer = found()
        assert answer is not None and answer["jsonrpc"] == "2.0"
        return answer


@pytest.fixture
def silent_engine() -> Iterator[Path]:
    """A runtime folder whose engine socket accepts connections and never answers."""
    folder = runtime_dir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "engine.sock"))
    listener.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield folder
    listener.close()
    for connection in held:
        connection.close()


def start(command: list[str], runtime: Path, tmp_path: Path) -> Client:
    env = {
        **base_environ(),
        "MAXY_DATA_DIR": str(tmp_path / "data"),
        "MAXY_RUNTIME_DIR": str(runtime),
        "ACCOUNT_ID": "acct-stdio",
    }
    with (tmp_path / "stderr.log").open("wb") as stderr:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
        )
    return Client(process)


@pytest.fixture
def client(silent_engine: Path, tmp_path: Path) -> Iterator[Client]:
    started = start([sys.executable, "-m", "appliance", "mcp"], silent_engine, tmp_path)
    yield started
    started.close()


def test_the_handshake_lists_tools_and_refuses_what_it_does_not_speak(client: Client) -> None:
    client.request(0, "server/discover", {})
    assert client.answer(0)["error"]["code"] == -32601  # the stateless era's probe: fall back
    client.request(1, "initialize", INITIALIZE)
    result = client.answer(1)["result"]
    assert result["protocolVersion"] == "2025-06-18"
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "maxy-memory"
    assert "memory graph" in result["instructions"]
    client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    client.request(2, "initialize", {**INITIALIZE, "protocolVersion": "2099-01-01"})
    assert client.answer(2)["result"]["protocolVersion"] == "2025-11-25"  # our newest
    client.request(3, "ping")
    assert client.answer(3)["result"] == {}
    client.request(4, "tools/list")
    tools = {tool["name"]: tool for tool in client.answer(4)["result"]["tools"]}
    assert tools["memory-search"]["inputSchema"]["type"] == "object"
    assert tools["memory-search"]["_meta"]["anthropic/alwaysLoad"] is True
    client.request(5, "resources/list")
    assert client.answer(5)["error"] == {
        "code": -32601,
        "message": "Method not found",
        "data": "resources/list",
    }


def test_bad_lines_get_errors_and_the_server_carries_on(client: Client) -> None:
    client.send(b"this is not json\n")
    client.send(b"\n")  # a blank line is nothing
    client.send(b"[1, 2]\n")
    client.request(1, "ping")
    client.answer(1)
    unanswerable = [json.loads(line) for line in client.lines if json.loads(line)["id"] is None]
    assert [m["error"]["code"] for m in unanswerable] == [-32700, -32600]
    client.request(2, "tools/call", {"arguments": {}})
    assert client.answer(2)["error"]["code"] == -32602
    client.request(3, "tools/call", {"name": "memory-search", "arguments": "everything"})
    assert client.answer(3)["error"]["code"] == -32602
    client.request(4, "tools/list", ["not", "an", "object"])
    assert client.answer(4)["error"]["code"] == -32602
    client.request(5, "tools/call", {"name": "no-such-tool", "arguments": {}})
    result = client.answer(5)["result"]
    assert result["isError"] is True and "no-such-tool" in result["content"][0]["text"]
    assert client.process.poll() is None


def test_calls_run_at_once_a_cancelled_one_gets_no_answer_and_the_rest_go_on(
    client: Client,
) -> None:
    client.request(1, "initialize", INITIALIZE)
    client.answer(1)
    # Both wait on the engine, which never answers; a ping passes them both.
    client.request(2, "tools/call", {"name": "memory-search", "arguments": {"query": "a"}})
    client.request(3, "tools/call", {"name": "memory-search", "arguments": {"query": "b"}})
    client.request(4, "ping")
    assert client.answer(4)["result"] == {}
    client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
    client.request(5, "ping")
    assert client.answer(5)["result"] == {}
    assert all(json.loads(line).get("id") not in (2, 3) for line in client.lines)
    # The end of input ends the server at once, the call still waiting included.
    client.stdin.close()
    assert client.process.wait(15) == 0
    assert all(json.loads(line).get("id") not in (2, 3) for line in client.lines)


def test_stray_output_of_a_tool_never_reaches_the_protocol(
    silent_engine: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    program = (
        "from appliance.mcp import stdio\n"
        "class Noisy:\n"
        "    name, version, instructions = 'noisy', '1', None\n"
        "    def list_tools(self):\n"
        "        print('listing', flush=True)\n"
        "        return []\n"
        "    async def call_tool(self, name, arguments):\n"
        "        print('calling', name, flush=True)\n"
        "        import os; os.write(1, b'raw bytes on fd 1\\n')\n"
        "        return {'content': [{'type': 'text', 'text': 'done'}], 'isError': False}\n"
        "stdio.serve(Noisy())\n"
    )
    noisy = start([sys.executable, "-c", program], silent_engine, tmp_path)
    request.addfinalizer(noisy.close)
    noisy.request(1, "tools/list")
    assert noisy.answer(1)["result"] == {"tools": []}
    noisy.request(2, "tools/call", {"name": "x"})
    assert noisy.answer(2)["result"]["content"][0]["text"] == "done"
    noisy.stdin.close()
    assert noisy.process.wait(15) == 0
    assert len(noisy.lines) == 2  # only the two answers, each parsed as JSON above
    stderr = (tmp_path / "stderr.log").read_text()
    assert "listing" in stderr and "calling x" in stderr and "raw bytes on fd 1" in stderr
