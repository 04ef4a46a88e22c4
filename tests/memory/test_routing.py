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


async def test_a_write_transaction_joins_the_chain_the_reads_wait_for(
    neo4j_server: Neo4jServer, memory: Memory
) -> None:
    # Views read with Graph.read, which a cluster routes to a reader: that reader waits for the
    # driver's bookmarks, so a write made in Graph.transaction must add its own to them, or a view
    # read just after it (a project's, a task's) could miss it.
    routed = Graph(neo4j_server.uri.replace("bolt://", "neo4j://"), "neo4j", neo4j_server.password)
    chain = routed._driver.execute_query_bookmark_manager
    probe = {"account": memory.caller.account_id, "id": "routing-probe"}
    try:
        before = await chain.get_bookmarks()
        async with routed.transaction() as tx:
            await tx.run("CREATE (:Preference {accountId: $account, id: $id})", probe)
        after = await chain.get_bookmarks()
        rows, _ = await routed.read("MATCH (n:Preference {id: $id}) RETURN n.id AS id", probe)
    finally:
        await routed.run("MATCH (n:Preference {id: $id}) DETACH DELETE n", probe)
        await routed.close()
    assert after != before
    assert rows == [{"id": "routing-probe"}]
