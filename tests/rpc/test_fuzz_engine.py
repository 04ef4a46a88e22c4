"""Bad input on the engine RPC: every method with wrongly typed, missing and nested params, and
raw frames that are not frames, against a real `maxy engine` (real Neo4j, real model).

Every refusal is an error with a stable code (``bad-request`` or one of the engine's own), never
``internal`` (a bug) and never a hang; raw garbage closes that one connection and the engine
keeps serving. Oversized and deeply nested params are refused the same way (or, past what
msgpack itself unpacks, close that one connection). Counts per method are printed (`-s`).
"""

from __future__ import annotations

import socket
import struct
from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.rpc.engine import METHODS
from appliance.rpc.protocol import RemoteError
from tests.support.processes import Neo4jServer
from tests.support.stacks import Stack, make_env, running_stack

pytestmark = pytest.mark.timeout(900)

EXAMPLES_PER_METHOD = 15
NAMES = sorted(method.name for method in METHODS)

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # what msgpack can carry
    | st.floats()
    | st.text(max_size=30)
    | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=15,
)
keys = st.sampled_from(
    [
        "text",
        "texts",
        "query",
        "label",
        "properties",
        "id",
        "title",
        "limit",
        "scopes",
        "edges",
        "name",
        "slug",
        "mode",
        "weights",
        "depth",
        "nodeId",
        "conversationId",
    ]
)
params = st.dictionaries(keys | st.text(max_size=8), values, max_size=5)


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("rpc-fuzz")
    env = make_env(neo4j_server, root / "data")
    with running_stack(env, root / "logs", "engine") as running:
        yield running


def test_every_method_refuses_bad_params_with_a_stable_code(stack: Stack) -> None:
    counts: Counter[tuple[str, str]] = Counter()
    internal: list[str] = []

    @settings(
        max_examples=EXAMPLES_PER_METHOD * len(NAMES),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(name=st.sampled_from(NAMES), sent=params)
    def one(name: str, sent: dict[str, Any]) -> None:
        if name == "reindex":
            sent = {**sent, "label": 7}  # always refused: a real reindex is a long job
        if name == "backup.create":
            sent = {**sent, "includeKeys": [7]}  # always refused: a real backup is a long job
        try:
            stack.rpc(name, sent)
            counts[(name, "ok")] += 1
        except RemoteError as err:
            counts[(name, err.code)] += 1
            if err.code == "internal":
                internal.append(f"{name}({sent!r}): {err}")

    one()
    assert {name for name, _ in counts} == set(NAMES), set(NAMES) - {name for name, _ in counts}
    for (name, code), count in sorted(counts.items()):
        print(f"[fuzz] {name:24} {code:16} {count}")
    print(f"[fuzz] methods={len(NAMES)} calls={sum(counts.values())} internal={len(internal)}")
    assert internal == [], "\n".join(internal[:10])
    assert stack.engine_healthy()


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x00\x00\x05hello",  # a frame whose body is not msgpack
        struct.pack(">I", 3) + msgpack.packb([1, 2, 3]),  # msgpack, not a map
        struct.pack(">I", 0xFFFFFFF0),  # a length past the limit
        msgpack.packb({"id": 1, "method": "health"}),  # no length prefix
        struct.pack(">I", 9) + msgpack.packb({"id": 1}),  # a map without a method
    ],
)
def test_raw_garbage_ends_one_connection_and_the_engine_keeps_serving(
    stack: Stack, raw: bytes
) -> None:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(15)
        conn.connect(str(stack.env.settings.engine_socket))
        conn.sendall(raw)
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(65536):  # an error frame or nothing, then the end: never a hang
            pass
    assert stack.engine_healthy()


def _nest(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("method", "sent"),
    [
        ("search", {"query": _nest(400)}),  # nested as deep as msgpack packs by default
        ("write", {"label": "Note", "properties": {"name": _nest(400)}}),
        ("embed", {"texts": ["word"] * 100_000}),  # past the 256 a call takes
        ("search", {"query": "x" * 20_000_000}),  # a 20 MB query
        ("write", {"label": "Note", "properties": {f"p{i}": i for i in range(50_000)}}),
        ("write", {"label": "Note", "properties": {"name": "x" * 20_000_000}}),
        ("write", {"label": "Note", "properties": {"tags": ["t"] * 500_000}}),
        (
            "write",
            {
                "label": "Note",
                "edges": [{"type": "KNOWS", "toId": "x", "toLabel": "Person"}] * 100_000,
            },
        ),
    ],
    ids=[
        "nested-query",
        "nested-property",
        "many-texts",
        "huge-query",
        "many-properties",
        "huge-property",
        "long-list",
        "many-edges",
    ],
)
def test_oversized_and_nested_params_are_refused_with_a_stable_code(
    stack: Stack, method: str, sent: dict[str, Any]
) -> None:
    try:
        stack.rpc(method, sent)
    except RemoteError as err:
        assert err.code != "internal", err
    assert stack.engine_healthy()


def test_params_nested_past_what_msgpack_unpacks_end_one_connection(stack: Stack) -> None:
    params = b"\x91" * 100_000 + b"\x01"  # [[[…[1]…]]], a hundred thousand deep
    body = b"\x83" + b"".join(
        msgpack.packb(part) for part in ("id", 1, "method", "search", "params")
    )
    body += params
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(15)
        conn.connect(str(stack.env.settings.engine_socket))
        conn.sendall(struct.pack(">I", len(body)) + body)
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(65536):
            pass
    assert stack.engine_healthy()
