"""A `neo4j://` URI (a cluster's or Aura's routing scheme) works against the dev server too."""

from __future__ import annotations

import pytest

from appliance.memory.embedder import Embedder
from appliance.memory.graph import Graph
from appliance.memory.search import Searcher, SearchRequest
from appliance.memory.write import Writer, WriteRequest
from tests.memory.conftest import Memory
from tests.support.processes import Neo4jServer

pytestmark = pytest.mark.anyio


async def test_the_engine_writes_and_searches_through_a_routing_uri(
    neo4j_server: Neo4jServer, embedder: Embedder, memory: Memory
) -> None:
    routed = Graph(neo4j_server.uri.replace("bolt://", "neo4j://"), "neo4j", neo4j_server.password)

    async def embed(text: str) -> list[float]:
        return [float(x) for x in embedder.embed(text)]

    try:
        writer = Writer(routed, embed, embedder.model_name)
        done = await writer.write(
            memory.caller, WriteRequest("Preference", {"name": "Tea", "description": "Earl Grey"})
        )
        found = await Searcher(routed, embed).search(memory.caller, SearchRequest("earl grey tea"))
    finally:
        await routed.close()
    assert [hit.node_id for hit in found.results][:1] == [done["id"]]
