"""``maxy engine``: load the embedding model and the Neo4j pool once, serve them over RPC.

Start-up order: the model loads first (a missing model is fatal: nothing works without it), the
RPC socket opens, then the schema is applied in the background, retried with backoff while Neo4j
is unreachable. ``health`` answers at once whatever Neo4j's state, so the edge can report it.

RPC methods:

- ``health`` → ``{ok, account, neo4j: {ok, ms|error}, embedder: {ok, model, dimension},
  schema: {state: pending|applied|mismatch|failed, error}}``
- ``embed`` ``{texts: [str]}`` → ``{model, dimension, vectors: bytes}`` (packed float32, one
  vector after another)
"""

from __future__ import annotations

import asyncio
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from appliance.accounts import Account
from appliance.config import Settings
from appliance.memory.embedder import Embedder
from appliance.memory.errors import EngineError, GraphError, SchemaDimensionMismatch
from appliance.memory.graph import Graph
from appliance.memory.schema import apply_schema
from appliance.rpc.server import RpcServer

log = logging.getLogger(__name__)

HEALTH_QUERY_TIMEOUT = 2.0
MAX_TEXTS_PER_CALL = 256


def read_password(settings: Settings) -> str:
    """Read the Neo4j password file, failing with what to do."""
    path = settings.neo4j_password_path
    try:
        return path.read_text().strip()
    except FileNotFoundError as err:
        raise GraphError(
            f"The Neo4j password file {path} does not exist. Start Neo4j once with `maxy run` "
            "or `maxy neo4j start` (which generates it), or set MAXY_NEO4J_PASSWORD_FILE."
        ) from err


class Engine:
    """The retrieval engine process: embedder + graph + RPC handlers."""

    def __init__(self, settings: Settings, account: Account, embedder: Embedder) -> None:
        self.settings = settings
        self.account = account
        self.embedder = embedder
        self.graph = Graph(settings.neo4j_uri, settings.neo4j_user, read_password(settings))
        # llama.cpp is not thread-safe: one worker thread owns every embed call.
        self._embed_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self.schema_state = "pending"
        self.schema_error: str | None = None

    @property
    def handlers(self) -> dict[str, Any]:
        """RPC method table."""
        return {"health": self.health, "embed": self.embed}

    async def embed(self, params: dict[str, Any]) -> dict[str, Any]:
        """Embed a list of texts; vectors come back as packed float32 bytes."""
        texts = params["texts"]
        if not isinstance(texts, list) or not all(isinstance(t, str | bytes) for t in texts):
            raise ValueError("texts must be a list of strings")
        if len(texts) > MAX_TEXTS_PER_CALL:
            raise ValueError(f"at most {MAX_TEXTS_PER_CALL} texts per call")
        loop = asyncio.get_running_loop()
        vectors = await loop.run_in_executor(self._embed_thread, self.embedder.embed_many, texts)
        packed = np.stack(vectors).astype("<f4").tobytes() if vectors else b""
        return {
            "model": self.embedder.model_name,
            "dimension": self.embedder.dimension,
            "vectors": packed,
        }

    async def health(self, params: dict[str, Any]) -> dict[str, Any]:
        """Report Neo4j, the embedder and the schema."""
        try:
            ms = await asyncio.wait_for(self.graph.ping(), HEALTH_QUERY_TIMEOUT)
            neo4j: dict[str, Any] = {"ok": True, "ms": round(ms, 1)}
        except TimeoutError:
            neo4j = {"ok": False, "error": f"no answer within {HEALTH_QUERY_TIMEOUT:.0f} s"}
        except GraphError as err:
            neo4j = {"ok": False, "error": str(err)}
        embedder = {
            "ok": True,
            "model": self.embedder.model_name,
            "dimension": self.embedder.dimension,
        }
        schema = {"state": self.schema_state, "error": self.schema_error}
        ok = neo4j["ok"] and self.schema_state == "applied"
        return {
            "ok": ok,
            "account": self.account.id,
            "neo4j": neo4j,
            "embedder": embedder,
            "schema": schema,
        }

    async def ensure_schema(self) -> None:
        """Apply the schema, retrying while Neo4j is unreachable."""
        delay = 0.5
        while True:
            try:
                await apply_schema(self.graph, self.embedder.dimension)
            except SchemaDimensionMismatch as err:
                self.schema_state, self.schema_error = "mismatch", str(err)
                return
            except GraphError as err:
                self.schema_error = str(err)
                log.warning("[schema] op=apply warn=retry in_s=%.1f error=%s", delay, err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            self.schema_state, self.schema_error = "applied", None
            return

    async def run(self) -> None:
        """Serve until SIGTERM or SIGINT."""
        server = RpcServer(self.handlers, errors=(EngineError,))
        listener = await server.serve(self.settings.engine_socket)
        schema_task = asyncio.create_task(self.ensure_schema())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info(
            "[engine] op=ready account=%s socket=%s", self.account.id, self.settings.engine_socket
        )
        try:
            await stop.wait()
        finally:
            schema_task.cancel()
            listener.close()
            await listener.wait_closed()
            await self.graph.close()
            self._embed_thread.shutdown(wait=True)
            self.settings.engine_socket.unlink(missing_ok=True)
            log.info("[engine] op=stop")
