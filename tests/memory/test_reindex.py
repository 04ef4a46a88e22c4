"""memory-reindex against the real Neo4j and model."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from appliance.memory.chunking import content_hash
from appliance.memory.conversations import record_message
from appliance.memory.errors import ModelLoadFailed, WriteRejected
from appliance.memory.ingest import Ingester, IngestRequest
from appliance.memory.reindex import reindex, reindex_text
from appliance.memory.search import SearchRequest
from appliance.memory.write import WriteRequest
from tests.memory.conftest import Memory, together
from tests.support.processes import dev_model

pytestmark = pytest.mark.anyio

MODEL = dev_model().stem  # the model the embedder fixture loads


async def bare(memory: Memory, label: str, node_id: str, **props: Any) -> None:
    """Create a node the way an import or an older version would: no embedding at all."""
    account = props.pop("accountId", memory.caller.account_id)
    await memory.graph.run(
        f"CREATE (n:`{label}` {{id: $id, accountId: $account}}) SET n += $props",
        {"id": node_id, "account": account, "props": props},
    )


async def stored(memory: Memory, label: str, node_id: str) -> dict[str, Any]:
    rows, _ = await memory.graph.run(
        f"MATCH (n:`{label}` {{id: $id}}) RETURN properties(n) AS p", {"id": node_id}
    )
    assert len(rows) == 1
    return rows[0]["p"]  # type: ignore[no-any-return]


async def run(memory: Memory, **options: Any) -> dict[str, Any]:
    return await reindex(memory.graph, memory.caller, memory.embed_texts, MODEL, **options)


async def test_nodes_without_embeddings_get_them(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    await bare(memory, "Preference", "p1", name="Coffee", description="Oat milk flat white")
    await bare(memory, "Task", "t1", name="Renew passport", description="Before the trip")
    await bare(memory, "Report", "r1", title="Boiler", body="The boiler was serviced in May.")
    with caplog.at_level(logging.INFO, logger="appliance.memory.reindex"):
        done = await run(memory)
    assert {k: done[k] for k in ("processed", "embedded", "skipped", "stale", "total")} == {
        "processed": 3,
        "embedded": 3,
        "skipped": 0,
        "stale": 3,
        "total": 3,
    }
    assert done["dryRun"] is False and isinstance(done["ms"], int)
    for label, node_id in (("Preference", "p1"), ("Task", "t1"), ("Report", "r1")):
        props = await stored(memory, label, node_id)
        assert len(props["embedding"]) == 384 and props["embeddingModel"] == MODEL
        assert props["contentHash"] == content_hash(reindex_text(label, props))
    assert "Oat milk flat white" in memory.embeds[0]
    assert caplog.text.count("[reindex] op=embedded label=") == 3
    assert "[reindex] op=done processed=3 skipped=0 ms=" in caplog.text
    # The new vectors are searchable at once.
    hits = await memory.searcher.search(memory.caller, SearchRequest("flat white", expand_hops=0))
    assert hits.results[0].node_id == "p1" and hits.results[0].vector is not None


async def test_stale_model_or_hash_is_embedded_again_and_fresh_nodes_are_not(
    memory: Memory,
) -> None:
    for i in range(4):
        await bare(memory, "Preference", f"p{i}", name=f"Drink {i}", description="Tea, green")
    single = await memory.writer.write(memory.caller, WriteRequest("Event", {"name": "Fête"}))
    await run(memory)
    memory.embeds.clear()
    again = await run(memory)
    assert again["embedded"] == again["stale"] == 0 and again["processed"] == 5
    assert memory.embeds == []

    await memory.graph.run("MATCH (n:Preference {id: 'p1'}) SET n.embeddingModel = 'older-model'")
    await memory.graph.run("MATCH (n:Preference {id: 'p2'}) SET n.description = 'Coffee, black'")
    done = await run(memory)
    assert (done["embedded"], done["stale"], done["skipped"]) == (2, 2, 0)
    assert sorted(memory.embeds) == [
        "description: Coffee, black\nname: Drink 2",
        "description: Tea, green\nname: Drink 1",
    ]
    assert (await stored(memory, "Preference", "p1"))["embeddingModel"] == MODEL
    p2 = await stored(memory, "Preference", "p2")
    assert p2["contentHash"] == content_hash("description: Coffee, black\nname: Drink 2")
    assert (await stored(memory, "Event", single["id"]))["embeddingModel"] == MODEL


async def test_a_node_written_by_memory_write_with_several_fields_is_fresh(
    memory: Memory,
) -> None:
    props = {"name": "Tea", "description": "Green", "category": "drink"}
    await memory.writer.write(memory.caller, WriteRequest("Preference", props))
    memory.embeds.clear()
    assert (await run(memory))["embedded"] == 0


async def test_ingested_documents_are_fresh_until_their_text_changes(memory: Memory) -> None:
    ingester = Ingester(memory.graph, memory.embed_texts, MODEL)
    text = "# Boiler\n\nServiced every May by Jo.\n\n## Parts\n\nThe pump was replaced in 2025."
    await ingester.ingest(memory.caller, IngestRequest("House notes", text, "att-1"))
    # A KnowledgeDocument written by memory-write follows memory-write's text rules.
    await memory.writer.write(
        memory.caller, WriteRequest("KnowledgeDocument", {"title": "Loose", "body": "A note."})
    )
    memory.embeds.clear()
    done = await run(memory)
    assert done["processed"] >= 5 and (done["stale"], done["embedded"]) == (0, 0)
    assert memory.embeds == []

    rows, _ = await memory.graph.run(
        "MATCH (c:Chunk) WHERE c.accountId = $a AND c.content CONTAINS 'pump' "
        "SET c.content = 'The pump and the valve were replaced in 2025.' RETURN c.id AS id",
        {"a": memory.caller.account_id},
    )
    done = await run(memory)
    assert (done["stale"], done["embedded"]) == (1, 1)
    assert memory.embeds == ["The pump and the valve were replaced in 2025."]
    chunk = await stored(memory, "Chunk", rows[0]["id"])
    assert chunk["contentHash"] == content_hash(memory.embeds[0])


async def test_conversation_messages_keep_the_embedding_they_were_recorded_with(
    memory: Memory,
) -> None:
    for role, text in (("user", "When is the boiler serviced?"), ("assistant", "Every May.")):
        await record_message(
            memory.graph, memory.caller, memory.writer.embed, MODEL, "session-1", role, text
        )
    memory.embeds.clear()
    done = await run(memory, labels=["Message"])
    assert (done["processed"], done["embedded"]) == (2, 0)
    # The conversation node itself was never embedded; its timestamps are not part of its text.
    assert (await run(memory, labels=["Conversation"]))["embedded"] == 1
    await record_message(
        memory.graph, memory.caller, memory.writer.embed, MODEL, "session-1", "user", "Thanks"
    )
    memory.embeds.clear()
    done = await run(memory)
    assert (done["processed"], done["embedded"]) == (4, 0)
    assert memory.embeds == []


async def test_a_poisoned_node_is_skipped_and_the_rest_embedded(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(5):
        await bare(memory, "Task", f"t{i}", name=f"Chore {i}")
    await bare(memory, "Task", "poison", name="Chore hemlock")
    real = memory.writer.embed

    async def embed(text: str) -> list[float]:
        if "hemlock" in text:
            raise ModelLoadFailed("model made to fail on this text")
        return await real(text)

    with caplog.at_level(logging.INFO, logger="appliance.memory.reindex"):
        done = await reindex(memory.graph, memory.caller, together(embed), MODEL, batch_size=2)
    assert (done["processed"], done["embedded"], done["skipped"]) == (6, 5, 1)
    assert "[reindex] op=skip-error label=Task id=poison error=model made to fail" in caplog.text
    assert caplog.text.count("[reindex] op=embedded label=Task") == 3
    assert "[reindex] op=done processed=6 skipped=1 ms=" in caplog.text
    assert "embedding" not in await stored(memory, "Task", "poison")
    for i in range(5):
        assert len((await stored(memory, "Task", f"t{i}"))["embedding"]) == 384


async def test_a_failed_batch_write_falls_back_to_one_node_at_a_time(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        await bare(memory, "Task", f"t{i}", name=f"Errand {i}")
    await bare(memory, "Task", "odd", name="Errand unstorable")
    real = memory.writer.embed

    async def embed(text: str) -> list[float]:
        vector = await real(text)
        # Neo4j refuses a list of mixed types as a property: the whole UNWIND fails.
        return [*vector[:-1], "x"] if "unstorable" in text else vector  # type: ignore[list-item]

    with caplog.at_level(logging.INFO, logger="appliance.memory.reindex"):
        done = await reindex(memory.graph, memory.caller, together(embed), MODEL)
    assert (done["embedded"], done["skipped"]) == (3, 1)
    assert "[reindex] op=batch-write-failed label=Task n=4 fallback=per-node" in caplog.text
    assert "[reindex] op=skip-error label=Task id=odd" in caplog.text
    assert "embedding" not in await stored(memory, "Task", "odd")
    assert len((await stored(memory, "Task", "t2"))["embedding"]) == 384


async def test_deleted_other_account_and_hidden_nodes_are_untouched(memory: Memory) -> None:
    await bare(memory, "Preference", "mine", name="Mine")
    await bare(memory, "Preference", "gone", name="Gone", deletedAt="2026-01-01T00:00:00Z")
    await bare(memory, "Preference", "admin", name="Admin only", scope="admin")
    other = memory.caller.account_id + "-other"
    await bare(memory, "Preference", "theirs", name="Theirs", accountId=other)

    public = memory.other(scopes=("public",))
    done = await reindex(memory.graph, public, memory.embed_texts, MODEL)
    assert (done["total"], done["embedded"]) == (1, 1)
    assert memory.embeds == ["name: Mine"]

    done = await run(memory)
    assert (done["total"], done["embedded"]) == (2, 1)
    for node_id in ("gone", "theirs"):
        assert "embedding" not in await stored(memory, "Preference", node_id)
    assert "embedding" in await stored(memory, "Preference", "admin")


async def test_progress_rises_to_the_total(memory: Memory) -> None:
    for i in range(3):
        await bare(memory, "Preference", f"p{i}", name=f"Pref {i}")
    for i in range(2):
        await bare(memory, "Goal", f"g{i}", name=f"Goal {i}")  # Goal has no vector index
        await bare(memory, "Event", f"e{i}", name=f"Event {i}")
    calls: list[tuple[int, int, int]] = []

    async def progress(done: int, total: int, skipped: int) -> None:
        calls.append((done, total, skipped))

    result = await run(memory, batch_size=2, progress=progress)
    assert result["total"] == 5
    assert calls == [(0, 5, 0), (2, 5, 0), (4, 5, 0), (5, 5, 0)]
    assert "embedding" not in await stored(memory, "Goal", "g0")

    plain: list[int] = []
    await run(memory, progress=lambda done, total, skipped: plain.append(done))
    assert plain == [0, 2, 5]


async def test_an_empty_account_reports_zero(memory: Memory) -> None:
    calls: list[tuple[int, int, int]] = []
    done = await run(memory, progress=lambda *a: calls.append(a))
    assert (done["processed"], done["total"], done["embedded"]) == (0, 0, 0)
    assert calls == [(0, 0, 0)]


async def test_dry_run_counts_and_changes_nothing(memory: Memory) -> None:
    await bare(memory, "Preference", "new", name="New")
    await bare(memory, "Preference", "fresh", name="Fresh")
    await run(memory, labels=["Preference"])
    await bare(memory, "Preference", "later", name="Later")
    await memory.graph.run("MATCH (n:Preference {id: 'fresh'}) SET n.name = 'Renamed'")
    before = {i: await stored(memory, "Preference", i) for i in ("new", "fresh", "later")}
    memory.embeds.clear()

    done = await run(memory, dry_run=True)
    assert done["dryRun"] is True
    assert (done["stale"], done["embedded"], done["processed"]) == (2, 0, 3)
    assert memory.embeds == []
    after = {i: await stored(memory, "Preference", i) for i in ("new", "fresh", "later")}
    assert after == before


async def test_labels_narrow_the_run_and_unindexed_labels_are_refused(memory: Memory) -> None:
    await bare(memory, "Preference", "p", name="Pref")
    await bare(memory, "Task", "t", name="Task")
    done = await run(memory, labels=["Task"])
    assert (done["total"], done["embedded"]) == (1, 1)
    assert "embedding" not in await stored(memory, "Preference", "p")
    with pytest.raises(WriteRejected, match="Goal has no vector index"):
        await run(memory, labels=["Goal"])
    with pytest.raises(WriteRejected, match="batch_size"):
        await run(memory, batch_size=0)
