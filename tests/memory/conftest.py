"""Fixtures for the retrieval engine's stages against the session's real Neo4j and model."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from appliance.core.identity import Caller
from appliance.memory.embedder import Embedder
from appliance.memory.graph import Graph
from appliance.memory.schema import apply_schema
from appliance.memory.search import Searcher
from appliance.memory.write import Writer
from tests.support.processes import Neo4jServer


@dataclass
class Memory:
    """A graph, a writer and a searcher for one fresh account."""

    graph: Graph
    writer: Writer
    searcher: Searcher
    caller: Caller
    embeds: list[str]

    def other(self, **changes: object) -> Caller:
        """A caller of this account with other scopes/agent/session."""
        fields = {"account_id": self.caller.account_id, **changes}
        return Caller(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def memory(neo4j_server: Neo4jServer, embedder: Embedder) -> AsyncIterator[Memory]:
    graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
    await apply_schema(graph, embedder.dimension)
    embeds: list[str] = []

    async def embed(text: str) -> list[float]:
        embeds.append(text)
        return [float(x) for x in embedder.embed(text)]

    caller = Caller(account_id=f"test-{uuid.uuid4()}")
    yield Memory(
        graph,
        Writer(graph, embed, embedder.model_name),
        Searcher(graph, embed),
        caller,
        embeds,
    )
    await graph.run(
        "MATCH (n) WHERE n.accountId STARTS WITH $a DETACH DELETE n", {"a": caller.account_id}
    )
    await graph.close()
