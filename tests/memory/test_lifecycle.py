"""Soft delete, restore and purge against the real Neo4j and model."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from appliance.core.identity import Caller
from appliance.memory import lifecycle
from appliance.memory.errors import WriteRejected
from appliance.memory.ingest import Ingester, IngestRequest
from appliance.memory.lifecycle import purge, restore, soft_delete
from appliance.memory.search import SearchRequest
from appliance.memory.write import WriteRequest
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio

TEXT = """The boiler was serviced in March.

# Heating

The thermostat schedule starts at six. The plumber's number is on the quokka magnet.

# Water

The stopcock is under the kitchen sink."""
NODES = 1 + 3 + 3 + 1  # document, three sections, one chunk each, its version


async def ingest(memory: Memory, attachment: str = "att-house") -> str:
    done = await Ingester(memory.graph, memory.embed_texts, memory.writer.model_name).ingest(
        memory.caller, IngestRequest("House notes", TEXT, attachment)
    )
    assert (done["sections"], done["chunks"]) == (3, 3)
    return str(done["documentId"])


async def states(memory: Memory, doc_id: str) -> dict[str, Any]:
    """id -> deletedAt of the document and everything under it (its version too)."""
    rows, _ = await memory.graph.run(
        "MATCH (d:KnowledgeDocument {id: $id})-[:HAS_SECTION|HAS_CHUNK|HAS_VERSION*0..2]->(n) "
        "RETURN DISTINCT n.id AS id, n.deletedAt AS deletedAt",
        {"id": doc_id},
    )
    return {r["id"]: r["deletedAt"] for r in rows}


async def found(memory: Memory, query: str, caller: Caller | None = None) -> list[str]:
    result = await memory.searcher.search(caller or memory.caller, SearchRequest(query))
    return [c.node_id for c in result.results]


async def test_soft_delete_cascades_hides_and_is_idempotent(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    doc_id = await ingest(memory)
    assert await found(memory, "quokka")
    with caplog.at_level(logging.INFO):
        done = await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", doc_id)
    assert done["changed"] == NODES and done["deletedAt"]
    assert "[graph-write] op=soft-delete label=KnowledgeDocument" in caplog.text
    marks = await states(memory, doc_id)
    assert len(marks) == NODES and set(marks.values()) == {done["deletedAt"]}
    assert await found(memory, "quokka") == []
    assert await found(memory, "house notes boiler thermostat stopcock") == []

    again = await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", doc_id)
    assert again == {**done, "changed": 0}  # the first deletedAt is kept
    assert await states(memory, doc_id) == marks


async def test_restore_undoes_only_the_cascade(memory: Memory) -> None:
    doc_id = await ingest(memory)
    rows, _ = await memory.graph.run(
        "MATCH (s:Section {documentId: $d, title: 'Water'}) RETURN s.id AS id", {"d": doc_id}
    )
    water = rows[0]["id"]
    # Deleted on its own first (with its chunk): restoring the document must not bring it back.
    assert (await soft_delete(memory.graph, memory.caller, "Section", water))["changed"] == 2
    assert (await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", doc_id))[
        "changed"
    ] == NODES - 2
    assert (await restore(memory.graph, memory.caller, "KnowledgeDocument", doc_id))[
        "changed"
    ] == NODES - 2
    marks = await states(memory, doc_id)
    assert sum(v is not None for v in marks.values()) == 2 and marks[water] is not None
    assert await found(memory, "quokka")
    still_deleted = {k for k, v in marks.items() if v is not None}
    assert not still_deleted & set(await found(memory, "stopcock"))
    assert (await restore(memory.graph, memory.caller, "Section", water))["changed"] == 2
    assert (await restore(memory.graph, memory.caller, "Section", water))["changed"] == 0
    assert all(v is None for v in (await states(memory, doc_id)).values())


async def test_any_label_can_be_soft_deleted(memory: Memory) -> None:
    note = await memory.writer.write(memory.caller, WriteRequest("Note", {"name": "Gate code"}))
    done = await soft_delete(memory.graph, memory.caller, "Note", note["id"])
    assert done["changed"] == 1
    assert note["id"] not in await found(memory, "gate code")
    assert (await restore(memory.graph, memory.caller, "Note", note["id"]))["changed"] == 1
    assert note["id"] in await found(memory, "gate code")


async def test_other_accounts_nodes_are_refused_and_unchanged(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    doc_id = await ingest(memory)
    stranger = Caller(account_id=memory.caller.account_id + "-other")
    with caplog.at_level(logging.ERROR):
        for op in (soft_delete, restore):
            with pytest.raises(WriteRejected, match="No KnowledgeDocument"):
                await op(memory.graph, stranger, "KnowledgeDocument", doc_id)
    assert "[graph-write] reject reason=invalid-account-id" in caplog.text
    assert all(v is None for v in (await states(memory, doc_id)).values())
    # Deleted, then a stranger tries to restore it: still deleted.
    await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", doc_id)
    with pytest.raises(WriteRejected):
        await restore(memory.graph, stranger, "KnowledgeDocument", doc_id)
    assert all(v is not None for v in (await states(memory, doc_id)).values())


@pytest.mark.parametrize(
    ("label", "node_id", "reason"),
    [
        ("KnowledgeDocument", "no-such-id", "No KnowledgeDocument"),
        ("NoSuchLabel", "x", "not a label"),
        ("Account", "x", "not a label"),
    ],
)
async def test_unknown_nodes_and_labels_are_refused(
    memory: Memory, label: str, node_id: str, reason: str
) -> None:
    with pytest.raises(WriteRejected, match=reason):
        await soft_delete(memory.graph, memory.caller, label, node_id)


async def test_a_caller_cannot_delete_outside_its_scopes(memory: Memory) -> None:
    note = await memory.writer.write(
        memory.caller, WriteRequest("Note", {"name": "Admin only"}, scope="admin")
    )
    public = memory.other(scopes=("public",))
    with pytest.raises(WriteRejected, match="may not change"):
        await soft_delete(memory.graph, public, "Note", note["id"])
    tagged = memory.other(agent="concierge")
    with pytest.raises(WriteRejected, match="may not change"):
        await soft_delete(memory.graph, tagged, "Note", note["id"])
    assert (await soft_delete(memory.graph, memory.caller, "Note", note["id"]))["changed"] == 1


async def test_purge_respects_the_grace_period(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    old = await ingest(memory, "att-old")
    recent = await ingest(memory, "att-recent")
    live = await ingest(memory, "att-live")
    await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", old)
    await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", recent)
    await memory.graph.run(
        "MATCH (n) WHERE n.accountId = $a AND (n.id = $d OR n.documentId = $d) "
        "SET n.deletedAt = datetime() - duration({days: 8})",
        {"a": memory.caller.account_id, "d": old},
    )
    with caplog.at_level(logging.INFO):
        assert await purge(memory.graph, grace_days=7, account_id=memory.caller.account_id) == (
            NODES
        )
    assert f"[purge] op=done deleted={NODES} grace_days=7" in caplog.text
    assert await states(memory, old) == {}
    assert len(await states(memory, recent)) == NODES
    assert len(await states(memory, live)) == NODES
    # Another account's purge leaves this one alone; a zero grace period takes the rest.
    assert await purge(memory.graph, 0, account_id=memory.caller.account_id + "-other") == 0
    assert await purge(memory.graph, 0, account_id=memory.caller.account_id) == NODES
    assert await states(memory, recent) == {} and len(await states(memory, live)) == NODES


async def test_purge_works_in_batches(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "PURGE_BATCH", 3)
    doc_id = await ingest(memory)
    await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", doc_id)
    assert await purge(memory.graph, 0, account_id=memory.caller.account_id) == NODES
    assert await states(memory, doc_id) == {}


async def test_purge_refuses_a_negative_grace_period(memory: Memory) -> None:
    with pytest.raises(ValueError, match="grace_days"):
        await purge(memory.graph, -1)
