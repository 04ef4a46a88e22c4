"""Versions of a KnowledgeDocument, against the real Neo4j and model: kept by every ingest that
changes it, in the ingest's one transaction; listed, diffed and restored through the document."""

from __future__ import annotations

import asyncio

import pytest

from appliance.memory import versions
from appliance.memory.errors import NotFound, WriteRejected
from appliance.memory.ingest import Ingester, IngestRequest
from appliance.memory.lifecycle import restore, soft_delete
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio

FIRST = (
    "# Heating\n\nThe boiler is serviced in March.\n\n# Water\n\nThe stopcock is under the sink."
)
SECOND = FIRST.replace("March", "October") + "\n\n# Roof\n\nTiles were replaced in 2021."


def ingester(memory: Memory) -> Ingester:
    return Ingester(memory.graph, memory.embed_texts, memory.writer.model_name)


async def ingest(memory: Memory, text: str, title: str = "House notes") -> dict[str, object]:
    return await ingester(memory).ingest(memory.caller, IngestRequest(title, text, "att-house"))


async def test_each_change_is_a_version_and_the_same_text_again_is_not(memory: Memory) -> None:
    one = await ingest(memory, FIRST)
    assert one["version"] == 1
    two = await ingest(memory, SECOND)
    assert two["version"] == 2 and two["documentId"] == one["documentId"]
    again = await ingest(memory, SECOND)
    assert again["version"] == 2
    renamed = await ingest(memory, SECOND, title="Home notes")
    assert renamed["version"] == 3
    doc = str(one["documentId"])
    listed = await versions.listing(memory.graph, memory.caller, doc)
    assert listed["current"] == 3 and listed["attachmentId"] == "att-house"
    assert [v["number"] for v in listed["versions"]] == [3, 2, 1]
    assert [v["source"] for v in listed["versions"]] == ["ingest"] * 3
    assert "text" not in listed["versions"][0]


async def test_a_version_shows_its_text_and_its_diff(memory: Memory) -> None:
    doc = str((await ingest(memory, FIRST))["documentId"])
    await ingest(memory, SECOND)
    shown = await versions.show(memory.graph, memory.caller, doc, 2)
    assert shown["text"] == SECOND and shown["against"] == 1 and not shown["truncated"]
    assert (
        "-The boiler is serviced in March.\n+The boiler is serviced in October.\n" in shown["diff"]
    )
    assert "+# Roof\n" in shown["diff"] and shown["diff"].startswith(
        "--- version 1\n+++ version 2\n"
    )
    first = await versions.show(memory.graph, memory.caller, doc, 1)
    assert first["against"] is None and first["diff"].startswith("--- nothing\n")
    cut = await versions.show(memory.graph, memory.caller, doc, 2, against=1, max_chars=20)
    assert cut["truncated"] and len(cut["text"]) == 20
    with pytest.raises(NotFound, match="has no version 7"):
        await versions.show(memory.graph, memory.caller, doc, 7)


async def test_versions_stay_inside_the_account_and_go_with_a_deleted_document(
    memory: Memory,
) -> None:
    doc = str((await ingest(memory, FIRST))["documentId"])
    stranger = memory.other(account_id=memory.caller.account_id + "-other")
    with pytest.raises(NotFound, match="No document"):
        await versions.listing(memory.graph, stranger, doc)
    await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", doc)
    rows, _ = await memory.graph.run(
        "MATCH (d:KnowledgeDocument {id: $d})-[:HAS_VERSION]->(v) "
        "RETURN v.deletedAt = d.deletedAt AS same",
        {"d": doc},
    )
    assert rows == [{"same": True}]
    with pytest.raises(NotFound):
        await versions.listing(memory.graph, memory.caller, doc)
    await restore(memory.graph, memory.caller, "KnowledgeDocument", doc)
    assert [
        v["number"] for v in (await versions.listing(memory.graph, memory.caller, doc))["versions"]
    ] == [1]


async def test_a_failed_ingest_leaves_the_graph_and_its_versions_as_they_were(
    memory: Memory,
) -> None:
    doc = str((await ingest(memory, FIRST))["documentId"])
    before, _ = await memory.graph.run(
        "MATCH (d:KnowledgeDocument {id: $d})-[*1..2]->(n) RETURN count(n) AS n, "
        "collect(n.id) AS ids",
        {"d": doc},
    )
    # A chunk id of the new text already taken by another account: the Chunk level is refused
    # after the document and its sections were written in the same transaction.
    from appliance.memory.chunking import content_hash

    piece = "Tiles were replaced in 2021."
    taken = f"{doc}:c:{content_hash(piece)[:20]}"
    await memory.graph.run(
        "CREATE (:Chunk {id: $id, accountId: $other})",
        {"id": taken, "other": memory.caller.account_id + "-other"},
    )
    with pytest.raises(WriteRejected, match="belong to another account"):
        await ingest(memory, SECOND)
    after, _ = await memory.graph.run(
        "MATCH (d:KnowledgeDocument {id: $d})-[*1..2]->(n) RETURN count(n) AS n, "
        "collect(n.id) AS ids",
        {"d": doc},
    )
    assert after == before
    listed = await versions.listing(memory.graph, memory.caller, doc)
    assert listed["current"] == 1 and len(listed["versions"]) == 1
    await memory.graph.run("MATCH (c:Chunk {id: $id}) DELETE c", {"id": taken})


async def test_a_round_of_several_documents_numbers_each_version_as_alone(
    memory: Memory,
) -> None:
    shared = ingester(memory)

    def request(attachment: str, text: str) -> IngestRequest:
        return IngestRequest("House notes", text, attachment)

    await asyncio.gather(
        shared.ingest(memory.caller, request("att-same", FIRST)),
        shared.ingest(memory.caller, request("att-changed", FIRST)),
    )
    # A new document, an unchanged one and a changed one, committed together (versions.record
    # takes them in one statement) or apart: each numbered as if it were alone.
    done = await asyncio.gather(
        shared.ingest(memory.caller, request("att-new", FIRST)),
        shared.ingest(memory.caller, request("att-same", FIRST)),
        shared.ingest(memory.caller, request("att-changed", SECOND)),
    )
    assert [d["version"] for d in done] == [1, 1, 2]
    listed = await versions.listing(memory.graph, memory.caller, str(done[2]["documentId"]))
    assert listed["current"] == 2 and [v["number"] for v in listed["versions"]] == [2, 1]
    same = await versions.listing(memory.graph, memory.caller, str(done[1]["documentId"]))
    assert same["current"] == 1 and len(same["versions"]) == 1

    # And in one statement for certain: the changed one again, the unchanged one kept.
    def kept(document: dict[str, object], text: str) -> versions.NewVersion:
        return versions.NewVersion(
            memory.caller,
            str(document["documentId"]),
            "House notes",
            text,
            source="ingest",
            scope=None,
            agents=None,
        )

    async with memory.graph.transaction() as tx:
        numbers = await versions.record(tx, [kept(done[2], FIRST), kept(done[1], FIRST)])
    assert numbers == [(3, True), (1, False)]
