"""The RPC server and client over a real Unix socket."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import socket
import stat
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgpack
import pytest

from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import (
    MAX_FRAME,
    BadParams,
    RemoteError,
    RpcError,
    RpcUnavailable,
    encode_frame,
    read_frame,
)
from appliance.rpc.server import RpcServer
from tests.support.processes import runtime_dir


class Busy(Exception):
    """An answer, not a bug: listed in ``errors=``."""

    code = "busy"


class NoCode(Exception):
    """Listed in ``errors=`` but without a ``code``."""


async def echo(params: dict[str, Any]) -> Any:
    return params


async def add(params: dict[str, Any]) -> Any:
    return params["a"] + params["b"]


async def busy(params: dict[str, Any]) -> Any:
    raise Busy("the model is loading, try again")


async def no_code(params: dict[str, Any]) -> Any:
    raise NoCode("something expected")


async def needs_text(params: dict[str, Any]) -> Any:
    return params["text"]


async def bad_params(params: dict[str, Any]) -> Any:
    raise BadParams("text is needed")


async def wrong_type(params: dict[str, Any]) -> Any:
    return len(params["n"])


async def wrong_value(params: dict[str, Any]) -> Any:
    return int(params["n"])


async def after(params: dict[str, Any]) -> Any:
    await asyncio.sleep(params["delay"])
    return params["n"]


async def crash(params: dict[str, Any]) -> Any:
    raise RuntimeError("handler bug")


HANDLERS: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
    "echo": echo,
    "add": add,
    "busy": busy,
    "no_code": no_code,
    "needs_text": needs_text,
    "bad_params": bad_params,
    "wrong_type": wrong_type,
    "wrong_value": wrong_value,
    "after": after,
    "crash": crash,
}


@pytest.fixture
def socket_path() -> Iterator[Path]:
    """A socket path well under the 107-byte limit of Unix socket addresses."""
    folder = runtime_dir("maxy-rpc-")
    try:
        yield folder / "engine.sock"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@asynccontextmanager
async def serving(
    path: Path,
    handlers: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] | None = None,
) -> AsyncIterator[RpcServer]:
    rpc = RpcServer(HANDLERS if handlers is None else handlers, errors=(Busy, NoCode))
    server = await rpc.serve(path)
    try:
        yield rpc
    finally:
        server.close()
        await server.wait_closed()


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(scenario(), timeout=30)

    return asyncio.run(bounded())


async def raw_exchange(path: Path, data: bytes) -> list[dict[str, Any] | None]:
    """Send raw bytes, half-close, and read every frame the server sends back."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(data)
        await writer.drain()
        writer.write_eof()
        replies: list[dict[str, Any] | None] = []
        while (reply := await read_frame(reader)) is not None:
            replies.append(reply)
        return replies
    finally:
        writer.close()
        await writer.wait_closed()


# --- answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("add", {"a": 2, "b": 40}, 42),
        ("add", {"a": "ab", "b": "cd"}, "abcd"),
        (
            "echo",
            {"nested": {"list": [1, None, True, 2.5]}},
            {"nested": {"list": [1, None, True, 2.5]}},
        ),
        ("echo", {}, {}),
        ("echo", None, {}),
        ("needs_text", {"text": "héllo wörld"}, "héllo wörld"),
    ],
)
def test_handler_results_come_back(
    socket_path: Path, method: str, params: dict[str, Any] | None, expected: Any
) -> None:
    async def scenario() -> Any:
        async with serving(socket_path):
            return await RpcClient(socket_path).call(method, params)

    assert run(scenario) == expected


def test_packed_float32_vectors_round_trip_bit_for_bit(socket_path: Path) -> None:
    values = [0.0, -0.0, 1.0, -1.5, 1e-45, 3.4028235e38, math.inf, -math.inf, math.nan]
    values += [i / 384 for i in range(384 - len(values))]
    vector = struct.pack(f"<{len(values)}f", *values)

    async def scenario() -> Any:
        async with serving(socket_path):
            return await RpcClient(socket_path).call("echo", {"vector": vector})

    result = run(scenario)
    assert isinstance(result["vector"], bytes)
    assert result["vector"] == vector
    assert len(result["vector"]) == 384 * 4


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "code", "in_message"),
    [
        ("busy", {}, "busy", "the model is loading, try again"),
        ("no_code", {}, "error", "something expected"),
        ("bad_params", {}, "bad-request", "text is needed"),
        ("needs_text", {}, "internal", "KeyError"),
        ("wrong_type", {"n": 3}, "internal", "TypeError"),
        ("wrong_value", {"n": "three"}, "internal", "ValueError"),
        ("nope", {}, "unknown-method", "nope"),
    ],
    ids=[
        "listed-error",
        "listed-error-without-code",
        "bad-params",
        "key-error-is-a-bug",
        "type-error-is-a-bug",
        "value-error-is-a-bug",
        "unknown-method",
    ],
)
def test_errors_reach_the_client_with_their_code(
    socket_path: Path, method: str, params: dict[str, Any], code: str, in_message: str
) -> None:
    async def scenario() -> None:
        async with serving(socket_path):
            await RpcClient(socket_path).call(method, params)

    with pytest.raises(RemoteError) as caught:
        run(scenario)
    assert caught.value.code == code
    assert in_message in str(caught.value)


def test_listed_error_message_is_passed_through_unchanged(socket_path: Path) -> None:
    async def scenario() -> None:
        async with serving(socket_path):
            await RpcClient(socket_path).call("busy")

    with pytest.raises(RemoteError) as caught:
        run(scenario)
    assert str(caught.value) == "the model is loading, try again"


def test_bad_request_names_the_method(socket_path: Path) -> None:
    async def scenario() -> None:
        async with serving(socket_path):
            await RpcClient(socket_path).call("bad_params", {})

    with pytest.raises(RemoteError, match="bad_params: text is needed"):
        run(scenario)


def test_a_handler_bug_is_logged_with_its_traceback(
    socket_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with serving(socket_path):
            await RpcClient(socket_path).call("wrong_type", {"n": 3})

    with (
        caplog.at_level(logging.ERROR, logger="appliance.rpc.server"),
        pytest.raises(RemoteError) as caught,
    ):
        run(scenario)
    assert caught.value.code == "internal"
    logged = [r for r in caplog.records if "method=wrong_type" in r.getMessage()]
    assert logged and logged[0].exc_info is not None  # the traceback, not just a line


def test_unexpected_handler_exception_is_answered(socket_path: Path) -> None:
    async def scenario() -> None:
        async with serving(socket_path):
            await RpcClient(socket_path, timeout=1.0).call("crash")

    with pytest.raises(RemoteError):
        run(scenario)


# --- availability ----------------------------------------------------------------------------


def test_nothing_listening_says_the_engine_is_not_running(socket_path: Path) -> None:
    async def scenario() -> None:
        await RpcClient(socket_path).call("echo")

    with pytest.raises(RpcUnavailable, match="engine is not running") as caught:
        run(scenario)
    assert str(socket_path) in str(caught.value)


def test_stale_socket_file_says_the_engine_is_not_running(socket_path: Path) -> None:
    # A socket file left behind by a dead engine: connecting is refused.
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(socket_path))
    assert socket_path.exists()

    async def scenario() -> None:
        await RpcClient(socket_path).call("echo")

    with pytest.raises(RpcUnavailable, match="engine is not running"):
        run(scenario)


def test_slow_handler_times_out_as_unavailable(socket_path: Path) -> None:
    release = asyncio.Event()

    async def stuck(params: dict[str, Any]) -> Any:
        await release.wait()
        return "late"

    async def scenario() -> None:
        async with serving(socket_path, {"stuck": stuck}):
            try:
                await RpcClient(socket_path, timeout=0.3).call("stuck")
            finally:
                release.set()

    with pytest.raises(RpcUnavailable, match="did not answer stuck"):
        run(scenario)


def test_server_replaces_a_stale_socket_and_is_owner_only(socket_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(socket_path))

    async def scenario() -> Any:
        async with serving(socket_path):
            mode = stat.S_IMODE(os.stat(socket_path).st_mode)
            return mode, await RpcClient(socket_path).call("add", {"a": 1, "b": 1})

    assert run(scenario) == (0o600, 2)


def test_server_creates_a_private_runtime_directory(socket_path: Path) -> None:
    path = socket_path.parent / "run" / "e.sock"

    async def scenario() -> Any:
        async with serving(path):
            return await RpcClient(path).call("add", {"a": 1, "b": 2})

    assert run(scenario) == 3
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


# --- concurrency -----------------------------------------------------------------------------


def test_concurrent_calls_each_get_their_own_answer(socket_path: Path) -> None:
    async def scenario() -> list[Any]:
        async with serving(socket_path):
            client = RpcClient(socket_path)
            # Later calls finish first: answers must not be crossed.
            calls = [client.call("after", {"n": n, "delay": (20 - n) / 200}) for n in range(20)]
            return list(await asyncio.gather(*calls))

    assert run(scenario) == list(range(20))


def test_replies_on_one_connection_come_back_as_they_are_ready(socket_path: Path) -> None:
    release = asyncio.Event()

    async def slow(params: dict[str, Any]) -> Any:
        await release.wait()
        return "slow"

    async def fast(params: dict[str, Any]) -> Any:
        return "fast"

    async def scenario() -> list[dict[str, Any] | None]:
        async with serving(socket_path, {"slow": slow, "fast": fast}):
            reader, writer = await asyncio.open_unix_connection(str(socket_path))
            try:
                writer.write(encode_frame({"id": 1, "method": "slow", "params": {}}))
                writer.write(encode_frame({"id": 2, "method": "fast", "params": {}}))
                await writer.drain()
                first = await read_frame(reader)
                release.set()
                second = await read_frame(reader)
                return [first, second]
            finally:
                writer.close()
                await writer.wait_closed()

    assert run(scenario) == [{"id": 2, "result": "fast"}, {"id": 1, "result": "slow"}]


# --- malformed requests ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        ({"id": 5, "method": "echo", "params": [1, 2]}, "bad-request"),
        ({"id": 5, "method": 12, "params": {}}, "unknown-method"),
        ({"id": 5, "params": {}}, "unknown-method"),
    ],
    ids=["params-not-a-map", "method-not-text", "no-method"],
)
def test_malformed_request_gets_an_error_reply(
    socket_path: Path, request_: dict[str, Any], code: str
) -> None:
    async def scenario() -> list[dict[str, Any] | None]:
        async with serving(socket_path):
            return await raw_exchange(socket_path, encode_frame(request_))

    [reply] = run(scenario)
    assert reply is not None
    assert reply["id"] == 5
    assert reply["error"]["code"] == code


def frame_of(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


GARBAGE = [
    pytest.param(struct.pack(">I", MAX_FRAME + 1), id="oversized-header"),
    pytest.param(frame_of(msgpack.packb([1, 2, 3])), id="list-body"),
    pytest.param(frame_of(b"\xc1"), id="invalid-msgpack"),
    pytest.param(struct.pack(">I", 100) + b"\x81", id="truncated-body"),
    pytest.param(b"GET / HTTP/1.1\r\n\r\n", id="http-request"),
    pytest.param(
        frame_of(b"\x81\x91\x01\x02"),
        id="unhashable-key",
    ),
]


@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_gets_a_protocol_error_and_the_server_keeps_serving(
    socket_path: Path, garbage: bytes
) -> None:
    async def scenario() -> tuple[list[dict[str, Any] | None], Any]:
        async with serving(socket_path):
            replies = await raw_exchange(socket_path, garbage)
            after_garbage = await RpcClient(socket_path).call("add", {"a": 20, "b": 22})
            return replies, after_garbage

    replies, after_garbage = run(scenario)
    assert after_garbage == 42
    assert len(replies) == 1
    [reply] = replies
    assert reply is not None
    assert reply["id"] is None
    assert reply["error"]["code"] == "protocol-error"


def test_server_closing_without_an_answer_is_unavailable(socket_path: Path) -> None:
    # What a crashed engine looks like from the client: the kernel closes its socket.
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_frame(reader)  # take the request, then leave without a word
        writer.close()

    async def scenario() -> None:
        server = await asyncio.start_unix_server(hang_up, path=str(socket_path))
        try:
            await RpcClient(socket_path).call("echo")
        finally:
            server.close()
            await server.wait_closed()

    with pytest.raises(RpcUnavailable, match="during echo without answering"):
        run(scenario)


def test_server_dropping_the_connection_is_an_rpc_error(socket_path: Path) -> None:
    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # the request is never read: the peer sees a reset

    async def scenario() -> None:
        server = await asyncio.start_unix_server(drop, path=str(socket_path))
        try:
            await RpcClient(socket_path).call("echo", {"pad": b"x" * 100_000})
        finally:
            server.close()
            await server.wait_closed()

    with pytest.raises(RpcError):
        run(scenario)


def test_a_long_call_streams_progress_and_outlives_the_per_frame_timeout(
    socket_path: Path,
) -> None:
    from appliance.rpc.server import report_progress

    async def slow_count(params: dict[str, Any]) -> Any:
        for done in range(1, 6):
            await asyncio.sleep(0.15)  # each step is shorter than the timeout, all are longer
            await report_progress({"done": done, "total": 5})
        return "finished"

    seen: list[dict[str, Any]] = []

    async def scenario() -> Any:
        async with serving(socket_path, {"count": slow_count}):
            client = RpcClient(socket_path, timeout=0.5)
            return await client.call("count", {}, on_progress=seen.append)

    assert run(scenario) == "finished"
    assert [event["done"] for event in seen] == [1, 2, 3, 4, 5]


def test_progress_outside_a_request_is_a_no_op() -> None:
    from appliance.rpc.server import report_progress

    asyncio.run(report_progress({"done": 1}))


def test_a_call_in_flight_when_the_server_stops_is_cancelled_without_a_traceback(
    socket_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine stopping cancels each connection's task with the call it waits for: a
    stop, not an error (Python 3.11's stream callback logged the cancelled task's traceback)."""

    async def scenario() -> None:
        entered = asyncio.Event()

        async def wait_forever(params: dict[str, Any]) -> Any:
            entered.set()
            await asyncio.Event().wait()

        server = await RpcServer({"wait": wait_forever}).serve(socket_path)
        _, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(encode_frame({"id": 1, "method": "wait", "params": {}}))
        await writer.drain()
        await entered.wait()
        server.close()
        writer.close()
        await writer.wait_closed()
        # The connection's task still waits for the call: asyncio.run cancels it, as at a stop.

    with caplog.at_level(logging.ERROR):
        asyncio.run(scenario())
    assert "Exception in callback" not in caplog.text
    assert "Traceback" not in caplog.text
