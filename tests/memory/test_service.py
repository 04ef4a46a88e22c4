"""`maxy engine` as a real process: RPC health and embeddings over its Unix socket."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.memory.embedder import Embedder
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RemoteError, RpcError
from tests.support.processes import Env, wait_until


def call(env: Env, method: str, params: dict[str, Any] | None = None) -> Any:
    client = RpcClient(env.settings.engine_socket, timeout=10)
    return asyncio.run(client.call(method, params))


def engine_healthy(env: Env) -> bool:
    try:
        return bool(call(env, "health")["ok"])
    except RpcError:
        return False


@pytest.fixture
def engine(maxy_env: Env, start_maxy: Any) -> Env:
    process = start_maxy(maxy_env, "engine")
    wait_until(lambda: engine_healthy(maxy_env), 90, f"engine health\n{process.output()}")
    return maxy_env


def test_health_reports_neo4j_embedder_and_schema(engine: Env, model_path: Path) -> None:
    health = call(engine, "health")
    assert health["ok"] is True
    assert health["account"] == engine.account_id
    assert health["neo4j"]["ok"] is True
    # The development model in the form this CPU embeds fastest (embedder.fastest_form).
    model = model_path.name.removesuffix(".gguf")
    assert health["embedder"] == {"ok": True, "model": model, "dimension": 384}
    assert health["schema"] == {"state": "applied", "error": None}


def test_embeddings_travel_as_packed_float32(engine: Env, embedder: Embedder) -> None:
    texts = ["the spare key is under the blue pot", "Mach number effects on lift"]
    reply = call(engine, "embed", {"texts": texts})
    assert reply["dimension"] == 384
    assert isinstance(reply["vectors"], bytes)
    vectors = np.frombuffer(reply["vectors"], dtype="<f4").reshape(len(texts), 384)
    for got, text in zip(vectors, texts, strict=True):
        assert float(np.dot(got, embedder.embed(text))) > 0.99999


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"texts": [""]}, "empty-text"),
        ({}, "bad-request"),
        ({"texts": "not a list"}, "bad-request"),
        ({"texts": ["x"] * 257}, "bad-request"),
    ],
)
def test_bad_embed_requests_get_coded_errors(engine: Env, params: Any, code: str) -> None:
    with pytest.raises(RemoteError) as caught:
        call(engine, "embed", params)
    assert caught.value.code == code


def test_the_socket_is_owner_only(engine: Env) -> None:
    mode = engine.settings.engine_socket.stat().st_mode & 0o777
    assert mode == 0o600
