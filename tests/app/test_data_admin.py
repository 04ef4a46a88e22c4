"""The Data page's changes through a real `maxy app` in front of a real `maxy engine`: add a note,
edit a node's text (search finds the new words), make it public for an agent (that agent's
search finds it, another's does not), delete it and undo; conversation records and a document's
parts are never edited; search and the graph leave internal records out unless asked."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient
from tests.support.processes import Neo4jServer
from tests.support.stacks import Stack, add_agent, make_env, running_stack

MEMORY = "/api/admin/memory"


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("data-admin")
    env = make_env(neo4j_server, root / "data")
    add_agent(env, "anna", {"displayName": "Anna the Gardener"})
    add_agent(env, "bert", {"displayName": "Bert"})
    with running_stack(env, root / "logs", "engine", "app") as running:
        yield running


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    """A logged-in LAN admin whose requests carry the session's CSRF token."""
    with stack.client(stack.admin_cookies()) as client:
        client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
        yield client


def agent_search(stack: Stack, agent: str, query: str) -> list[str]:
    """What a public agent's search finds (the ids), as the gateway asks."""
    caller = Caller(account_id=stack.env.account_id, scopes=("public",), agent=agent).to_wire()
    client = RpcClient(stack.env.settings.engine_socket, timeout=30)
    found = asyncio.run(client.call("search", {"query": query, "caller": caller}))
    return [hit["id"] for hit in found["results"]]


def search(admin: httpx.Client, query: str, **params: str) -> dict[str, Any]:
    answer = admin.get("/api/admin/search", params={"q": query, **params})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_add_edit_share_and_delete_a_note(stack: Stack, admin: httpx.Client) -> None:
    added = admin.post(f"{MEMORY}/notes", json={"text": "The wisteria needs pruning in July."})
    assert added.status_code == 201, added.text
    node = added.json()["node"]
    assert node["title"] == "The wisteria needs pruning in July." and node["labels"] == ["Note"]
    assert node["props"]["scope"] == "admin"
    note = node["id"]
    assert note in [r["id"] for r in search(admin, "wisteria pruning")["results"]]

    edited = admin.patch(
        f"{MEMORY}/nodes/{note}",
        json={"label": "Note", "title": "Wisteria", "text": "Prune the wisteria in August."},
    )
    assert edited.status_code == 200, edited.text
    props = edited.json()["node"]["props"]
    assert (props["name"], props["text"], props["scope"]) == (
        "Wisteria",
        "Prune the wisteria in August.",
        "admin",
    )
    hit = next(r for r in search(admin, "wisteria August")["results"] if r["id"] == note)
    assert hit["title"] == "Wisteria" and "August" in hit["snippet"]

    # Public for Anna: her search finds it, Bert's does not.
    assert note not in agent_search(stack, "anna", "wisteria")
    shared = admin.patch(
        f"{MEMORY}/nodes/{note}", json={"label": "Note", "scope": "public", "agents": ["anna"]}
    )
    assert shared.status_code == 200, shared.text
    assert shared.json()["node"]["props"]["agents"] == ["anna"]
    assert shared.json()["node"]["props"]["text"] == "Prune the wisteria in August."
    assert note in agent_search(stack, "anna", "wisteria")
    assert note not in agent_search(stack, "bert", "wisteria")
    private = admin.patch(f"{MEMORY}/nodes/{note}", json={"label": "Note", "scope": "admin"})
    assert "agents" not in private.json()["node"]["props"]
    assert note not in agent_search(stack, "anna", "wisteria")

    deleted = admin.delete(f"{MEMORY}/nodes/{note}", params={"label": "Note"})
    assert deleted.status_code == 200 and deleted.json()["changed"] == 1
    assert note not in [r["id"] for r in search(admin, "wisteria August")["results"]]
    assert admin.get(f"/api/admin/graph/node/{note}").status_code == 404
    restored = admin.post(f"{MEMORY}/nodes/{note}/restore", json={"label": "Note"})
    assert restored.status_code == 200 and restored.json()["changed"] == 1
    assert note in [r["id"] for r in search(admin, "wisteria August")["results"]]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"text": "   "}, "Write the note's text"),
        ({"text": "x", "scope": "everyone"}, "scope must be one of"),
        ({"text": "x", "scope": "public"}, "Choose the agent"),
        ({"text": "x", "scope": "public", "agents": ["nobody"]}, "no agent called 'nobody'"),
        ({"text": "x" * 20_001}, "longer than 20,000"),
        ({"text": 5}, "text must be text"),
    ],
)
def test_a_bad_note_is_refused_saying_why(admin: httpx.Client, body: Any, needle: str) -> None:
    answer = admin.post(f"{MEMORY}/notes", json=body)
    assert answer.status_code == 400, answer.text
    assert needle in answer.json()["message"]


def test_records_and_document_parts_are_not_edited_here(stack: Stack, admin: httpx.Client) -> None:
    said = stack.rpc(
        "conversation.record",
        {"sessionId": "s-data", "role": "user", "text": "Call the plumber", "scope": "admin"},
    )
    message = said["messageId"]
    answer = admin.patch(f"{MEMORY}/nodes/{message}", json={"label": "Message", "text": "x"})
    assert (answer.status_code, answer.json()["code"]) == (409, "read-only")
    doc = stack.rpc(
        "ingest",
        {"title": "Shed", "text": "# Tools\n\nThe saw hangs left.", "attachmentId": "shed"},
    )["documentId"]
    chunk = stack.rpc("search", {"query": "saw hangs", "labels": ["Chunk"]})["results"][0]
    answer = admin.patch(f"{MEMORY}/nodes/{chunk['id']}", json={"label": "Chunk", "text": "x"})
    assert (answer.status_code, answer.json()["code"]) == (409, "read-only")
    assert "edit the document in Artefacts" in answer.json()["message"]
    # A document changes scope whole: its chunks follow.
    shared = admin.patch(
        f"{MEMORY}/nodes/{doc}",
        json={"label": "KnowledgeDocument", "scope": "public", "agents": ["anna"]},
    )
    assert shared.status_code == 200, shared.text
    assert chunk["id"] in agent_search(stack, "anna", "where does the saw hang")
    unknown = admin.patch(f"{MEMORY}/nodes/no-such-node", json={"label": "Note", "text": "x"})
    assert unknown.status_code == 404


def test_internal_records_are_left_out_unless_asked(stack: Stack, admin: httpx.Client) -> None:
    stack.rpc(
        "audit.record",
        {
            "tool": "memory-write",
            "input": {"label": "Note", "properties": {"name": "Kumquat tree"}},
            "output": {"id": "x"},
            "startedAt": "2026-01-01T10:00:00+00:00",
            "endedAt": "2026-01-01T10:00:01+00:00",
            "ms": 1000,
            "durable": True,
            "produced": [],
        },
    )
    plain = search(admin, "memory-write kumquat")
    assert all("ToolCall" not in r["labels"] for r in plain["results"])
    assert plain["hiddenInternal"] >= 1
    everything = search(admin, "memory-write kumquat", internal="1")
    assert any(r["title"].startswith("memory-write") for r in everything["results"])
    assert everything["hiddenInternal"] == 0
    graph = admin.get("/api/admin/graph", params={"labels": "Task"}).json()
    assert all(not n["title"].startswith("memory-write") for n in graph["nodes"])
    with_internal = admin.get("/api/admin/graph", params={"labels": "Task", "internal": "1"})
    assert any(n["title"].startswith("memory-write") for n in with_internal.json()["nodes"])
