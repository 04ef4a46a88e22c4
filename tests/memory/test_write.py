"""memory-write against the real Neo4j and model."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from appliance.memory.errors import ModelLoadFailed, WriteRejected
from appliance.memory.write import Edge, Writer, WriteRequest
from tests.memory.conftest import Memory
from tests.support.processes import dev_model

MODEL = dev_model().stem  # the model the embedder fixture loads

pytestmark = pytest.mark.anyio


async def node(memory: Memory, label: str, node_id: str) -> dict[str, Any]:
    rows, _ = await memory.graph.run(
        f"MATCH (n:`{label}` {{id: $id}}) RETURN properties(n) AS p", {"id": node_id}
    )
    assert len(rows) == 1
    return rows[0]["p"]  # type: ignore[no-any-return]


async def test_a_write_stamps_the_account_and_embeds(memory: Memory) -> None:
    done = await memory.writer.write(
        memory.caller,
        WriteRequest("Preference", {"name": "Coffee", "description": "Oat milk flat white"}),
    )
    assert done["created"] and done["embedded"] and done["warnings"] == []
    props = await node(memory, "Preference", done["id"])
    assert props["accountId"] == memory.caller.account_id
    assert len(props["embedding"]) == 384
    assert props["embeddingModel"] == MODEL
    assert len(props["contentHash"]) == 64


async def test_an_unchanged_node_is_not_embedded_again(memory: Memory) -> None:
    request = WriteRequest("Preference", {"name": "Tea", "description": "Green, no sugar"})
    first = await memory.writer.write(memory.caller, request)
    request.id = first["id"]
    second = await memory.writer.write(memory.caller, request)
    assert second == {**first, "created": False}
    assert len(memory.embeds) == 1
    request.properties["description"] = "Black, one sugar"
    await memory.writer.write(memory.caller, request)
    assert len(memory.embeds) == 2


async def test_another_accounts_id_is_refused_loudly(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    request = WriteRequest("Note", {"name": "x", "accountId": "someone-else"})
    with caplog.at_level(logging.ERROR), pytest.raises(WriteRejected, match="refused"):
        await memory.writer.write(memory.caller, request)
    assert "[graph-write] reject reason=invalid-account-id" in caplog.text
    rows, _ = await memory.graph.run("MATCH (n:Note {name: 'x'}) RETURN n")
    assert rows == []


async def test_merging_onto_another_accounts_node_is_refused(memory: Memory) -> None:
    theirs = memory.other(account_id=memory.caller.account_id + "-other")
    done = await memory.writer.write(theirs, WriteRequest("Note", {"name": "theirs"}))
    with pytest.raises(WriteRejected):
        await memory.writer.write(
            memory.caller, WriteRequest("Note", {"name": "mine now"}, id=done["id"])
        )
    assert (await node(memory, "Note", done["id"]))["name"] == "theirs"


async def test_a_failed_embed_never_aborts_the_write(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(text: str) -> list[float]:
        raise ModelLoadFailed("model made to fail")

    writer = Writer(memory.graph, broken, MODEL)
    with caplog.at_level(logging.WARNING):
        done = await writer.write(memory.caller, WriteRequest("Task", {"name": "kept anyway"}))
    assert done["embedded"] is False and done["warnings"] == ["embed-failed"]
    assert "[graph-write] warn reason=embed-failed" in caplog.text
    props = await node(memory, "Task", done["id"])
    assert props["name"] == "kept anyway" and "embedding" not in props
    # A later reindex, with the model working again, embeds it.
    from appliance.memory.reindex import reindex

    result = await reindex(memory.graph, memory.caller, memory.embed_texts, MODEL)
    assert (result["embedded"], result["skipped"]) == (1, 0), result
    props = await node(memory, "Task", done["id"])
    assert len(props["embedding"]) == 384 and props["embeddingModel"] == MODEL


async def test_people_need_provenance(memory: Memory, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        orphan = await memory.writer.write(memory.caller, WriteRequest("Person", {"name": "Al"}))
    assert orphan["warnings"] == ["missing-provenance"]
    assert "[graph-write] warn reason=missing-provenance" in caplog.text

    task = await memory.writer.write(memory.caller, WriteRequest("Task", {"name": "Import"}))
    person = await memory.writer.write(
        memory.caller, WriteRequest("Person", {"name": "Bo"}, produced_by=task["id"])
    )
    assert person["warnings"] == []
    rows, _ = await memory.graph.run(
        "MATCH (t:Task {id: $t})-[:PRODUCED]->(p:Person {id: $p}) RETURN count(*) AS n",
        {"t": task["id"], "p": person["id"]},
    )
    assert rows[0]["n"] == 1

    # The session node from the caller's environment counts as provenance too.
    session = await memory.writer.write(
        memory.caller, WriteRequest("Conversation", {"name": "chat"})
    )
    in_session = memory.other(session_id=session["id"])
    assert (await memory.writer.write(in_session, WriteRequest("Person", {"name": "Cy"})))[
        "warnings"
    ] == []


async def test_edges_link_only_inside_the_account(memory: Memory) -> None:
    project = await memory.writer.write(memory.caller, WriteRequest("Project", {"name": "Shed"}))
    task = await memory.writer.write(
        memory.caller,
        WriteRequest(
            "Task", {"name": "Buy wood"}, edges=[Edge("PART_OF", project["id"], "Project")]
        ),
    )
    rows, _ = await memory.graph.run(
        "MATCH (:Task {id: $t})-[:PART_OF]->(:Project {id: $p}) RETURN count(*) AS n",
        {"t": task["id"], "p": project["id"]},
    )
    assert rows[0]["n"] == 1
    stranger = memory.other(account_id=memory.caller.account_id + "-x")
    theirs = await memory.writer.write(stranger, WriteRequest("Project", {"name": "Theirs"}))
    with pytest.raises(WriteRejected, match="No Project"):
        await memory.writer.write(
            memory.caller,
            WriteRequest(
                "Task", {"name": "Sneak"}, edges=[Edge("PART_OF", theirs["id"], "Project")]
            ),
        )


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (WriteRequest("NoSuchLabel", {"name": "x"}), "not a label"),
        # The audit trail and accounts are never written by agents.
        (WriteRequest("ToolCall", {"tool": "memory-search"}), "not a label"),
        (WriteRequest("Account", {"name": "x"}), "not a label"),
        (WriteRequest("Note", {"bad key": "x"}), "not a valid property name"),
        (WriteRequest("Note", {"nested": {"a": 1}}), "must be a string"),
        (WriteRequest("Note", {f"p{i}": i for i in range(300)}), "at most 256 properties"),
        (WriteRequest("Note", {"name": "x" * 1_000_001}), "too large for a node"),
        (WriteRequest("Note", {"tags": ["t"] * 10_001}), "too large for a node"),
        (WriteRequest("Note", {"name": "x"}, scope="secret"), "scope must be one of"),
        (WriteRequest("Note", {"name": "x"}, edges=[Edge("bad-type", "1", "Note")]), "not valid"),
    ],
)
async def test_malformed_writes_are_refused_and_write_nothing(
    memory: Memory, request_: WriteRequest, reason: str
) -> None:
    with pytest.raises(WriteRejected, match=reason):
        await memory.writer.write(memory.caller, request_)
    rows, _ = await memory.graph.run(
        "MATCH (n) WHERE n.accountId = $a RETURN count(n) AS n", {"a": memory.caller.account_id}
    )
    assert rows[0]["n"] == 0
