"""schema/schema.cypher against the session's real Neo4j."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from appliance.memory.errors import SchemaDimensionMismatch
from appliance.memory.graph import Graph
from appliance.memory.schema import (
    REBUILD_COMMAND,
    apply_schema,
    declared_fulltext_indexes,
    declared_vector_indexes,
    fulltext_indexes,
    read_statements,
    vector_index_dimensions,
)
from tests.support.processes import Env, Neo4jServer, maxy

pytestmark = pytest.mark.anyio

VECTOR_LABELS = [
    "Question",
    "DefinedTerm",
    "Review",
    "Service",
    "Person",
    "LocalBusiness",
    "PriceSpecification",
    "Task",
    "CreativeWork",
    "DigitalDocument",
    "KnowledgeDocument",
    "Section",
    "Chunk",
    "Conversation",
    "Message",
    "Event",
    "Workflow",
    "Preference",
    "Report",
    "Project",
]


async def snapshot(graph: Graph) -> list[tuple[Any, ...]]:
    indexes, _ = await graph.run(
        "SHOW INDEXES YIELD name, type, labelsOrTypes, properties, options, state "
        "RETURN name, type, labelsOrTypes, properties, options ORDER BY name"
    )
    constraints, _ = await graph.run(
        "SHOW CONSTRAINTS YIELD name, type, labelsOrTypes, properties RETURN * ORDER BY name"
    )
    return [tuple(sorted(str(r.items()) for r in rows)) for rows in (indexes, constraints)]


@pytest.fixture
async def graph(neo4j_server: Neo4jServer) -> Any:
    g = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
    await apply_schema(g, 384)
    yield g
    await g.close()


async def test_applying_the_schema_twice_is_a_no_op(graph: Graph) -> None:
    before = await snapshot(graph)
    report = await apply_schema(graph, 384)
    assert report.statements == len(read_statements())
    assert not report.changed
    assert (report.indexes_added, report.constraints_added) == (0, 0)
    assert await snapshot(graph) == before


async def test_every_vector_index_has_the_model_dimension(graph: Graph) -> None:
    rows, _ = await graph.run(
        "SHOW VECTOR INDEXES YIELD name, labelsOrTypes, properties, options, state "
        "RETURN name, labelsOrTypes[0] AS label, properties, options"
    )
    by_label = {row["label"]: row for row in rows}
    assert sorted(by_label) == sorted(VECTOR_LABELS)
    for row in by_label.values():
        config = row["options"]["indexConfig"]
        assert config["vector.dimensions"] == 384
        assert config["vector.similarity_function"] == "COSINE"
        # accountId is an in-index filter property: SEARCH … WHERE n.accountId = $a works.
        assert row["properties"] == ["embedding", "accountId"]


async def test_entity_search_covers_the_operator_labels_and_text_properties(
    graph: Graph,
) -> None:
    rows, _ = await graph.run(
        "SHOW FULLTEXT INDEXES YIELD name, labelsOrTypes, properties "
        "WHERE name = 'entity_search' RETURN labelsOrTypes, properties"
    )
    assert len(rows) == 1
    labels, props = set(rows[0]["labelsOrTypes"]), set(rows[0]["properties"])
    assert len(labels) >= 40
    assert set(VECTOR_LABELS) <= labels
    assert {"Organization", "UserProfile", "EmailMessage", "Note"} <= labels
    assert {
        "name",
        "firstName",
        "lastName",
        "givenName",
        "familyName",
        "title",
        "summary",
        "body",
        "content",
        "description",
        "headline",
        "email",
        "subject",
        "bodyPreview",
        "keywords",
        "compiledTruth",
    } <= props


async def test_entity_search_stems_english_and_drops_stop_words(graph: Graph) -> None:
    available, _ = await graph.run(
        "CALL db.index.fulltext.listAvailableAnalyzers() YIELD analyzer RETURN analyzer"
    )
    assert "english" in {r["analyzer"] for r in available}
    assert (await fulltext_indexes(graph))["entity_search"].analyzer == "english"


async def test_an_entity_search_of_another_analyzer_is_rebuilt_on_upgrade(graph: Graph) -> None:
    # The index as releases before issue 21 created it: the default analyzer, fewer properties.
    await graph.run("DROP INDEX entity_search IF EXISTS")
    await graph.run(
        "CREATE FULLTEXT INDEX entity_search FOR (n:Note) ON EACH [n.title] "
        "OPTIONS {indexConfig: {`fulltext.analyzer`: 'standard-no-stop-words'}}"
    )
    await graph.run(
        "CREATE (:Note {id: randomUUID(), accountId: 'acc-ft', title: 'Swept wings at the tips'})"
    )
    try:
        report = await apply_schema(graph, 384)
        assert report.fulltext_rebuilt == ["entity_search"]
        shape = (await fulltext_indexes(graph))["entity_search"]
        assert shape == declared_fulltext_indexes(read_statements())["entity_search"]
        assert shape.analyzer == "english" and "content" in shape.properties
        await graph.run("CALL db.awaitIndexes(60)")
        rows, _ = await graph.run(  # stemmed: "wing" and "tip" find "wings" and "tips"
            "CALL db.index.fulltext.queryNodes('entity_search', 'wing tip') YIELD node "
            "WHERE node.accountId = 'acc-ft' RETURN node.title AS title"
        )
        assert [r["title"] for r in rows] == ["Swept wings at the tips"]
        assert (await apply_schema(graph, 384)).fulltext_rebuilt == []  # in shape: kept
    finally:
        await graph.run("MATCH (n:Note {accountId: 'acc-ft'}) DETACH DELETE n")


async def test_vector_search_filters_by_account_inside_the_index(graph: Graph) -> None:
    vector = [1.0] + [0.0] * 383
    await graph.run(
        "UNWIND ['acc-a', 'acc-b'] AS acc CREATE (:Preference {id: randomUUID(), "
        "accountId: acc, name: 'test-pref', embedding: $v})",
        {"v": vector},
    )
    try:
        rows: list[dict[str, Any]] = []
        for _ in range(50):  # vector indexes are eventually consistent
            rows, _summary = await graph.run(
                "CYPHER 25 MATCH (n:Preference) SEARCH n IN (VECTOR INDEX preference_embedding "
                "FOR $v WHERE n.accountId = $a LIMIT 10) SCORE AS s RETURN n.accountId AS acc",
                {"v": vector, "a": "acc-a"},
            )
            if rows:
                break
        assert [r["acc"] for r in rows] == ["acc-a"]
    finally:
        await graph.run("MATCH (n:Preference {name: 'test-pref'}) DETACH DELETE n")


async def test_a_dimension_mismatch_is_reported_with_the_command_that_fixes_it(
    graph: Graph, maxy_env: Env
) -> None:
    await graph.run("DROP INDEX report_embedding IF EXISTS")
    await graph.run(
        "CYPHER 25 CREATE VECTOR INDEX report_embedding FOR (n:Report) ON n.embedding "
        "WITH [n.accountId] OPTIONS {indexConfig: {`vector.dimensions`: 8, "
        "`vector.similarity_function`: 'cosine'}}"
    )
    await graph.run(
        "CREATE (:Report {id: 'stale-report', accountId: 'x', title: 'old', "
        "embedding: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], embeddingModel: 'old-model'})"
    )
    try:
        with pytest.raises(SchemaDimensionMismatch) as caught:
            await apply_schema(graph, 384)
        assert "report_embedding=8" in str(caught.value)
        assert REBUILD_COMMAND in str(caught.value)

        # The command the message names fixes it.
        done = subprocess.run(
            maxy("engine", "--rebuild-vector-indexes"),
            env=maxy_env.vars,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "rebuilt report_embedding" in done.stdout
        assert "cleared 1 embeddings" in done.stdout
        assert (await vector_index_dimensions(graph))["report_embedding"] == 384
        rows, _ = await graph.run("MATCH (n:Report {id: 'stale-report'}) RETURN n.embedding AS e")
        assert rows == [{"e": None}]
    finally:
        await graph.run("MATCH (n:Report {id: 'stale-report'}) DETACH DELETE n")
        await apply_schema(graph, 384)


def test_the_schema_declares_one_vector_index_per_indexed_label() -> None:
    names = declared_vector_indexes(read_statements())
    assert len(names) == len(VECTOR_LABELS) == len(set(names))
