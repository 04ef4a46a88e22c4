"""The Graph page's reads (sample, neighbourhood) against the real Neo4j: guards on every node."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.core.identity import Caller
from appliance.memory import explore
from appliance.memory.lifecycle import soft_delete
from appliance.memory.search import SearchRequest
from appliance.memory.write import Edge, WriteRequest
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio


async def note(
    memory: Memory, name: str, caller: Caller | None = None, text: str = "", **extra: Any
) -> str:
    props = {"name": name, **({"text": text} if text else {})}
    done = await memory.writer.write(caller or memory.caller, WriteRequest("Note", props, **extra))
    return str(done["id"])


async def person(memory: Memory, name: str, links: list[str] = ()) -> str:  # type: ignore[assignment]
    edges = [Edge("MENTIONS", to, "Note") for to in links]
    done = await memory.writer.write(
        memory.caller, WriteRequest("Person", {"name": name}, edges=edges)
    )
    return str(done["id"])


def ids(rows: list[dict[str, Any]]) -> set[str]:
    return {r["id"] for r in rows}


def searching(memory: Memory, caller: Caller | None = None) -> explore.Matches:
    """The engine's narrowing: what search finds for the text, as the Data page asks it."""

    async def matches(text: str, labels: list[str] | None, limit: int) -> list[str]:
        request = SearchRequest(query=text, labels=labels, limit=limit, expand_hops=0)
        found = await memory.searcher.search(caller or memory.caller, request)
        return [hit.node_id for hit in found.results]

    return matches


async def test_sample_returns_nodes_edges_and_categories(memory: Memory) -> None:
    boiler = await note(memory, "Boiler service in March")
    roof = await note(memory, "Roof tiles")
    anna = await person(memory, "Anna Smith", links=[boiler, roof])

    found = await explore.sample(memory.graph, memory.caller, limit=50)

    assert ids(found["nodes"]) == {boiler, roof, anna}
    titles = {n["id"]: n["title"] for n in found["nodes"]}
    assert titles[anna] == "Anna Smith"
    assert {(e["source"], e["target"], e["type"]) for e in found["edges"]} == {
        (anna, boiler, "MENTIONS"),
        (anna, roof, "MENTIONS"),
    }
    assert found["categories"] == [{"label": "Note", "count": 2}, {"label": "Person", "count": 1}]
    assert found["truncated"] is False
    for node in found["nodes"]:
        assert set(node) == {"id", "labels", "title", "scope"}


async def test_sample_filters_by_label_and_narrows_to_what_search_finds(memory: Memory) -> None:
    await note(memory, "Boiler service in March")
    await note(memory, "Roof tiles")
    # Found by its text alone: a name-only narrowing never saw it.
    valve = await note(memory, "Maintenance", text="The relief valve on the boiler drips.")
    anna = await person(memory, "Anna Boilerplate")
    matches = searching(memory)

    only_people = await explore.sample(memory.graph, memory.caller, labels=["Person"])
    assert ids(only_people["nodes"]) == {anna}
    narrowed = await explore.sample(
        memory.graph, memory.caller, q="  relief VALVE ", matches=matches
    )
    searched = await matches("relief VALVE", None, explore.MAX_MATCHES)
    assert ids(narrowed["nodes"]) == set(searched)
    assert valve in ids(narrowed["nodes"])
    notes = await explore.sample(
        memory.graph, memory.caller, labels=["Note"], q="relief valve", matches=matches
    )
    assert valve in ids(notes["nodes"]) and anna not in ids(notes["nodes"])
    assert {label for n in notes["nodes"] for label in n["labels"]} == {"Note"}
    by_id = await explore.sample(memory.graph, memory.caller, q=valve, matches=matches)
    assert valve in ids(by_id["nodes"])
    with pytest.raises(ValueError, match="needs the engine's search"):
        await explore.sample(memory.graph, memory.caller, q="valve")


async def test_sample_leaves_out_internal_records_unless_asked(memory: Memory) -> None:
    kept = await note(memory, "Dentist on Friday")
    await memory.graph.run(
        "CREATE (:ToolCall {id: $a + '-call', accountId: $a, tool: 'memory-write'}), "
        "(:Task {id: $a + '-audit', accountId: $a, name: 'memory-write Note', source: 'audit'}), "
        "(:Task {id: $a + '-real', accountId: $a, name: 'Book the dentist'})",
        {"a": memory.caller.account_id},
    )
    plain = await explore.sample(memory.graph, memory.caller)
    assert ids(plain["nodes"]) == {kept, f"{memory.caller.account_id}-real"}
    assert {c["label"] for c in plain["categories"]} == {"Note", "Task"}
    everything = await explore.sample(memory.graph, memory.caller, internal_records=True)
    assert len(everything["nodes"]) == 4
    titles = {n["title"] for n in everything["nodes"]}
    assert "Tool call: memory-write" in titles


@pytest.mark.parametrize(
    ("labels", "props", "title"),
    [
        (
            ["Chunk"],
            {"path": ["Boiler manual", "Safety"], "content": "Never..."},
            "Boiler manual \u203a Safety",
        ),
        (
            ["Chunk"],
            {"documentId": "d-1", "sectionId": "s-1", "content": "x"},
            "Part of a document",
        ),
        (
            ["Section"],
            {"path": ["Manual", "Setup", "Wiring"], "title": "Wiring"},
            "Manual \u203a Setup \u203a Wiring",
        ),
        (
            ["Message"],
            {"role": "user", "body": "Remind me  about\nthe boiler", "scope": "admin"},
            "You: Remind me about the boiler",
        ),
        (
            ["Message"],
            {"role": "user", "body": "Do you deliver?", "scope": "public"},
            "Visitor: Do you deliver?",
        ),
        (["Message"], {"role": "assistant", "body": "Yes."}, "Assistant: Yes."),
        (["Person"], {"givenName": "Anna", "familyName": "Smith"}, "Anna Smith"),
        (["ToolCall"], {"tool": "memory-write", "sessionId": "abc"}, "Tool call: memory-write"),
        (
            ["Conversation"],
            {"sessionId": "s", "agentSlug": "anna", "startedAt": "2026-03-01T10:00:00Z"},
            "Conversation with anna, 2026-03-01",
        ),
        (["Note"], {"id": "n-1", "documentId": "d", "text": "Buy bulbs"}, "Buy bulbs"),
        (["Note"], {"id": "n-1", "attachmentId": "file:/x"}, "Note"),
    ],
)
def test_display_title_is_for_a_person_never_an_id(
    labels: list[str], props: dict[str, Any], title: str
) -> None:
    assert explore.display_title(props, labels) == title


async def test_sample_limit_is_between_1_and_2000_and_reports_truncation(memory: Memory) -> None:
    await memory.graph.run(
        "UNWIND range(1, 12) AS i CREATE (:Note {id: $a + '-bulk-' + i, accountId: $a, "
        "name: 'bulk ' + i, updatedAt: datetime()})",
        {"a": memory.caller.account_id},
    )
    cut = await explore.sample(memory.graph, memory.caller, limit=5)
    assert len(cut["nodes"]) == 5 and cut["truncated"] is True
    whole = await explore.sample(memory.graph, memory.caller, limit=2000)
    assert len(whole["nodes"]) == 12 and whole["truncated"] is False
    for bad in (0, -1, 2001):
        with pytest.raises(ValueError, match="between 1 and 2000"):
            await explore.sample(memory.graph, memory.caller, limit=bad)


@pytest.mark.parametrize("labels", [["Note`) DETACH DELETE (x"], ["Not a label"], [""]])
async def test_sample_refuses_labels_that_are_not_labels(memory: Memory, labels: Any) -> None:
    with pytest.raises(ValueError, match="not a node label"):
        await explore.sample(memory.graph, memory.caller, labels=labels)


async def test_neighbourhood_shows_visible_props_and_neighbours(memory: Memory) -> None:
    boiler = await note(memory, "Boiler service in March")
    anna = await person(memory, "Anna Smith", links=[boiler])

    around = await explore.neighbourhood(memory.graph, memory.caller, boiler)

    assert around is not None
    assert around["node"]["id"] == boiler and around["node"]["title"] == "Boiler service in March"
    props = around["node"]["props"]
    assert props["name"] == "Boiler service in March" and "createdAt" in props
    assert "embedding" not in props and "accountId" not in props
    assert [(n["id"], n["type"], n["direction"]) for n in around["neighbours"]] == [
        (anna, "MENTIONS", "in")
    ]
    assert around["edges"][0]["source"] == anna and around["edges"][0]["target"] == boiler
    assert around["degree"] == 1
    labelled = await explore.neighbourhood(memory.graph, memory.caller, boiler, label="Note")
    assert labelled is not None and labelled["node"]["id"] == boiler


async def test_neighbourhood_shows_at_most_50_neighbours_and_counts_all(memory: Memory) -> None:
    hub = await note(memory, "Hub")
    await memory.graph.run(
        "MATCH (h:Note {id: $hub}) UNWIND range(1, 60) AS i "
        "CREATE (h)-[:HAS]->(:Note {id: $hub + '-' + i, accountId: $a, name: 'spoke ' + i})",
        {"hub": hub, "a": memory.caller.account_id},
    )
    around = await explore.neighbourhood(memory.graph, memory.caller, hub)
    assert around is not None
    assert len(around["neighbours"]) == explore.MAX_NEIGHBOURS == 50
    assert around["degree"] == 60


async def test_unknown_node_is_none(memory: Memory) -> None:
    assert await explore.neighbourhood(memory.graph, memory.caller, "no-such-node") is None


async def test_nothing_outside_the_guards_ever_appears(memory: Memory) -> None:
    """Other accounts, soft-deleted nodes, other scopes and untagged nodes stay invisible."""
    mine = memory.caller.account_id
    other = Caller(account_id=f"{mine}-other")  # cleaned up with this account's prefix
    seen = await note(memory, "visible garden")
    theirs = await note(memory, "their garden", caller=other)
    deleted = await note(memory, "deleted garden")
    secret = await note(memory, "admin garden", scope="admin")
    tagged = await note(memory, "bob garden", scope="public", agents=["bob"])
    public = await note(memory, "public garden", scope="public")
    # Every node linked to the visible one, even across accounts (which writes never allow).
    await memory.graph.run(
        "MATCH (s:Note {id: $seen}) MATCH (o:Note) WHERE o.id IN $others CREATE (s)-[:LINKS]->(o)",
        {"seen": seen, "others": [theirs, deleted, secret, tagged, public]},
    )
    await soft_delete(memory.graph, memory.caller, "Note", deleted)

    cases = [
        (memory.caller, {seen, secret, tagged, public}),
        (memory.other(scopes=("public",)), {seen, tagged, public}),
        (memory.other(scopes=("public",), agent="bob"), {tagged}),
    ]
    for caller, visible in cases:
        found = await explore.sample(
            memory.graph, caller, q="garden", limit=2000, matches=searching(memory, caller)
        )
        assert ids(found["nodes"]) == visible, caller
        for edge in found["edges"]:
            assert {edge["source"], edge["target"]} <= visible
        assert sum(c["count"] for c in found["categories"]) == len(visible)
        for node_id in (seen, theirs, deleted, secret, tagged, public):
            around = await explore.neighbourhood(memory.graph, caller, node_id)
            if node_id not in visible:
                assert around is None, (caller, node_id)
                continue
            assert around is not None
            assert ids(around["neighbours"]) <= visible - {node_id}
    # The visible node's neighbourhood for the admin: its visible links only.
    around = await explore.neighbourhood(memory.graph, memory.caller, seen)
    assert around is not None and ids(around["neighbours"]) == {secret, tagged, public}
    theirs_view = await explore.sample(memory.graph, other, limit=2000)
    assert ids(theirs_view["nodes"]) == {theirs}
