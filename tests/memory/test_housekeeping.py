"""The graph-health audit of a real `maxy engine` (the real model, the session's Neo4j), read
through a real `maxy edge`'s /healthz: ingested nodes written without an embedding and a node
without an accountId are logged and shown; a reindex clears the first at once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.errors import EmbedError
from appliance.memory.graph import Graph
from appliance.memory.ingest import Ingester, IngestRequest
from tests.support.processes import Neo4jServer, get_health, wait_until
from tests.support.stacks import make_env, running_stack

MANUAL = (
    "# Boiler manual\n\nBleed the radiators every autumn.\n\n"
    "## Pressure\n\nKeep the pressure between 1 and 1.5 bar; top it up at the filling loop.\n"
)


async def _no_model(texts: Any) -> list[list[float]]:
    raise EmbedError("no model for this write: its nodes are left without an embedding")


async def ingest_unembedded(neo4j: Neo4jServer, account_id: str) -> dict[str, Any]:
    """memory-ingest with an embedder that fails: every node written without an embedding."""
    graph = Graph(neo4j.uri, "neo4j", neo4j.password)
    try:
        request = IngestRequest(title="Boiler manual", text=MANUAL, attachment_id="test:boiler")
        return await Ingester(graph, _no_model, "none").ingest(
            Caller(account_id=account_id), request
        )
    finally:
        await graph.close()


async def cypher(neo4j: Neo4jServer, statement: str, **params: Any) -> None:
    graph = Graph(neo4j.uri, "neo4j", neo4j.password)
    try:
        await graph.run(statement, params)
    finally:
        await graph.close()


def audit(port: int) -> dict[str, Any]:
    answer = get_health(port)
    assert answer is not None and answer.status_code == 200, answer and answer.text
    return answer.json().get("audit") or {}


def test_the_audit_logs_and_shows_what_lacks_an_embedding_or_an_account_until_a_reindex(
    neo4j_server: Neo4jServer, tmp_path: Path
) -> None:
    env = make_env(neo4j_server, tmp_path / "data", MAXY_GRAPH_AUDIT_INTERVAL="1")
    orphan = f"Orphan{uuid.uuid4().hex[:12]}"
    port = env.settings.port
    with running_stack(env, tmp_path / "logs", "engine", "edge") as stack:
        wait_until(lambda: "nullEmbedding" in audit(port), 60, "the first audit")
        assert audit(port)["nullEmbedding"] == {}  # a fresh account: everything embedded
        ingested = asyncio.run(ingest_unembedded(neo4j_server, env.account_id))
        assert ingested["embedded"] == 0
        asyncio.run(
            cypher(neo4j_server, f"CREATE (:{orphan} {{name: 'written around the engine'}})")
        )
        try:
            expected = {"KnowledgeDocument": 1, "Section": ingested["sections"]}
            expected["Chunk"] = ingested["chunks"]

            def found() -> bool:
                figures = audit(port)
                return figures["nullEmbedding"] == expected and orphan in figures["nullAccount"]

            wait_until(found, 60, f"the audit to see the new nodes\n{stack.output()}")
            assert audit(port)["nullAccount"][orphan] == 1
            log = stack.processes["engine"].output()
            for label, count in expected.items():
                assert f"[embed-audit] null-embedding label={label} count={count}" in log
            assert f"[account-audit] null-account label={orphan} count=1" in log

            done = stack.rpc("reindex")
            assert done["embedded"] == sum(expected.values())
            assert audit(port)["nullEmbedding"] == {}  # audited again as the reindex ended
        finally:
            asyncio.run(cypher(neo4j_server, f"MATCH (n:{orphan}) DELETE n"))
