"""The owner's agents through the real app and engine: the API, KNOWLEDGE.md, `maxy agents`.

Creating, editing, subscribing, making default and deleting agents change the files the public
agent reads (and nothing outside the agents folder); KNOWLEDGE.md holds exactly the public
content tagged for the agent plus its keyword subscriptions' public matches — never another
agent's, another account's, admin or shared, soft-deleted content or visitors' conversations.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.core.identity import Caller
from appliance.memory.graph import Graph
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RemoteError
from tests.app.running_app import edge_headers
from tests.support.processes import Neo4jServer, maxy, wait_until
from tests.support.stacks import Stack, make_env, running_stack

BRAND = "Gardenia"
PUBLIC = edge_headers("external", "203.0.113.9", "public")
EXTERNAL = edge_headers("external", "203.0.113.9", "admin")
REMOTE_PASSWORD = "correct horse battery"
API = "/api/admin/agents"


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("agents-admin")
    env = make_env(neo4j_server, root / "data", brand=BRAND)
    with running_stack(env, root / "logs", "engine", "app") as running:
        yield running


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    """A logged-in LAN admin whose requests carry the session's CSRF token."""
    with stack.client(stack.admin_cookies()) as client:
        client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
        yield client


def agents_dir(stack: Stack) -> Path:
    return stack.env.settings.accounts_dir / stack.env.account_id / "agents"


def create(admin: httpx.Client, slug: str, **fields: Any) -> dict[str, Any]:
    answer = admin.post(API, json={"slug": slug, **fields})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def account_json(stack: Stack) -> dict[str, Any]:
    path = stack.env.settings.accounts_dir / stack.env.account_id / "account.json"
    return dict(json.loads(path.read_text()))


# ── The API ──────────────────────────────────────────────────────────────────────────────────


def test_the_agents_page_is_the_shell_with_the_editor(admin: httpx.Client) -> None:
    answer = admin.get("/admin/agents")
    assert answer.status_code == 200
    html = answer.text
    assert f"<title>Agents · {BRAND}</title>" in html
    assert 'id="agent-form"' in html and '<script src="/static/js/agents.js"' in html
    assert 'data-nav="agents" title="Agents" aria-current="page"' in html
    assert "http://" not in html and "https://" not in html
    assert admin.get("/static/js/agents.js").status_code == 200


def test_create_edit_and_read_an_agent(stack: Stack, admin: httpx.Client) -> None:
    made = create(
        admin,
        "anna",
        displayName="Anna the Gardener",
        identity="You are Anna of {{productName}}.",
        soul="Warm, brief.",
        keywordSubscriptions=["roses"],
    )
    assert made["slug"] == "anna" and made["url"] == "/anna" and not made["isDefault"]
    assert made["identity"] == "You are Anna of {{productName}}."
    folder = agents_dir(stack) / "anna"
    assert (folder / "SOUL.md").read_text() == "Warm, brief."
    changed = admin.put(
        f"{API}/anna", json={"identity": "You are Anna, head gardener.", "description": "Roses"}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["identity"] == "You are Anna, head gardener."
    assert (folder / "IDENTITY.md").read_text() == "You are Anna, head gardener."
    assert json.loads((folder / "config.json").read_text())["description"] == "Roses"
    listed = admin.get(API).json()
    assert [a["slug"] for a in listed["agents"]] == ["anna"]
    assert "identity" not in listed["agents"][0]  # the list is a summary
    assert listed["defaultAgent"] == "maxy"
    # Visitors find it at once.
    with stack.client(**PUBLIC) as visitor:
        assert "Anna the Gardener" in visitor.get("/anna").text


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"slug": "Anna"}, 400, "invalid-agent"),
        ({"slug": "../etc"}, 400, "invalid-agent"),
        ({"slug": "admin"}, 400, "invalid-agent"),
        ({"slug": "api"}, 400, "invalid-agent"),
        (
            {"slug": "ok-name", "keywordSubscriptions": ["a", "b", "c", "d", "e", "f"]},
            400,
            "invalid-agent",
        ),
        ({"slug": "ok-name", "colour": "red"}, 400, "invalid-agent"),
        ({"slug": "ok-name", "identity": "x" * 20_001}, 400, "invalid-agent"),
        ({"slug": "ok-name", "identity": "x" * 300_000}, 413, "too-large"),
    ],
)
def test_bad_agents_are_refused_with_a_clear_error(
    stack: Stack, admin: httpx.Client, body: dict[str, Any], status: int, code: str
) -> None:
    answer = admin.post(API, json=body)
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text
    assert answer.json()["message"]
    assert not (agents_dir(stack) / "ok-name").exists()
    assert not (agents_dir(stack).parent / "etc").exists()


def test_malformed_requests(admin: httpx.Client) -> None:
    create(admin, "bert")
    assert admin.post(API, json={"slug": "bert"}).status_code == 409
    text = admin.post(API, content=b"slug=x", headers={"Content-Type": "text/plain"})
    assert (text.status_code, text.json()["code"]) == (415, "json-required")
    broken = admin.post(API, content=b"{", headers={"Content-Type": "application/json"})
    assert (broken.status_code, broken.json()["code"]) == (400, "bad-json")
    rename = admin.put(f"{API}/bert", json={"slug": "carl"})
    assert rename.status_code == 400
    for method in ("GET", "PUT", "DELETE"):
        missing = admin.request(method, f"{API}/nobody", json={})
        assert (missing.status_code, missing.json()["code"]) == (404, "no-such-agent")
    dots = admin.put(f"{API}/..", json={"identity": "x"})
    assert dots.status_code in (400, 404)


def test_the_default_agent_lives_in_account_json_and_answers_on_the_public_root(
    stack: Stack, admin: httpx.Client
) -> None:
    create(admin, "carla", displayName="Carla the Baker")
    before = account_json(stack)
    answer = admin.post(f"{API}/carla/default")
    assert answer.status_code == 200 and answer.json() == {"defaultAgent": "carla"}
    after = account_json(stack)
    assert after == {**before, "defaultAgent": "carla"}  # every other key kept
    listed = admin.get(API).json()
    assert listed["defaultAgent"] == "carla" and listed["agents"][0]["slug"] == "carla"
    with stack.client(**PUBLIC) as visitor:
        assert "Carla the Baker" in visitor.get("/").text
    refused = admin.delete(f"{API}/carla")
    assert (refused.status_code, refused.json()["code"]) == (409, "agent-conflict")
    assert admin.post(f"{API}/nobody/default").status_code == 404
    assert account_json(stack)["defaultAgent"] == "carla"


def test_delete_removes_the_agent_and_its_page(stack: Stack, admin: httpx.Client) -> None:
    create(admin, "dora", displayName="Dora")
    assert admin.delete(f"{API}/dora").json() == {"deleted": "dora"}
    assert not (agents_dir(stack) / "dora").exists()
    assert sorted(p.name for p in agents_dir(stack).iterdir() if p.name.startswith(".")) == []
    with stack.client(**PUBLIC) as visitor:
        assert visitor.get("/dora").status_code == 404


def test_changes_need_a_login_the_csrf_token_and_the_home_network(
    stack: Stack, admin: httpx.Client
) -> None:
    with stack.client() as anonymous:
        assert anonymous.get(API).status_code == 401
        assert anonymous.post(API, json={"slug": "eve"}).status_code == 401
    with stack.client(admin.cookies) as no_token:
        answer = no_token.post(API, json={"slug": "eve"})
        assert (answer.status_code, answer.json()["code"]) == (403, "csrf")
    with stack.client(**PUBLIC) as public:
        assert public.get(API).status_code == 404
    # An owner logged in over the tunnel may look, not change.
    set_password = admin.post(
        "/api/admin/settings/remote-password", json={"password": REMOTE_PASSWORD}
    )
    assert set_password.status_code == 200, set_password.text
    with stack.client(**EXTERNAL) as remote:
        login = remote.post("/api/auth/login", json={"password": REMOTE_PASSWORD})
        assert login.status_code == 200, login.text
        remote.headers["X-Maxy-CSRF"] = login.json()["csrf"]
        assert remote.get(API).status_code == 200
        for method, path in (("POST", API), ("PUT", f"{API}/anna"), ("DELETE", f"{API}/bert")):
            answer = remote.request(method, path, json={"slug": "eve", "identity": "x"})
            assert (answer.status_code, answer.json()["code"]) == (403, "lan-only"), path
        assert remote.post(f"{API}/anna/knowledge").status_code == 403
    assert not (agents_dir(stack) / "eve").exists()
    assert (agents_dir(stack) / "bert").is_dir()


# ── KNOWLEDGE.md ─────────────────────────────────────────────────────────────────────────────


def write(stack: Stack, name: str, text: str, scope: str | None, agents: list[str] | None) -> str:
    params: dict[str, Any] = {"label": "Note", "properties": {"name": name, "text": text}}
    if scope:
        params["scope"] = scope
    if agents is not None:
        params["agents"] = agents
    return str(stack.rpc("write", params)["id"])


@pytest.fixture(scope="module")
def graph(stack: Stack, neo4j_server: Neo4jServer, admin: httpx.Client) -> Iterator[None]:
    """Content for the agent "kai" and around it, each with a marker word."""
    create(admin, "kai", displayName="Kai", keywordSubscriptions=["quokkaberry"])
    write(stack, "Kai tagged", "MARK-TAGGED roses need sun", "public", ["kai"])
    write(stack, "Two agents", "MARK-SHARED-TAG both", "public", ["bert", "kai"])
    write(stack, "Other agent", "MARK-OTHER-AGENT", "public", ["bert"])
    write(stack, "Admin note", "MARK-ADMIN quokkaberry", "admin", ["kai"])
    write(stack, "Shared note", "MARK-SHARED-SCOPE quokkaberry", "shared", ["kai"])
    write(stack, "Unscoped note", "MARK-UNSCOPED quokkaberry", None, ["kai"])
    gone = write(stack, "Deleted note", "MARK-DELETED quokkaberry", "public", ["kai"])
    stack.rpc("delete", {"label": "Note", "id": gone})
    write(stack, "Subscribed note", "MARK-SUBSCRIBED quokkaberry jam", "public", None)
    write(stack, "Subscribed admin", "MARK-SUB-ADMIN quokkaberry", "admin", None)
    stack.rpc(
        "ingest",
        {
            "title": "Kai handbook",
            "text": "# Watering\n\nMARK-DOC-ONE water early.\n\n# Pruning\n\nMARK-DOC-TWO cut.",
            "attachmentId": "test:kai-handbook",
            "scope": "public",
            "agents": ["kai"],
        },
    )
    # A visitor's conversation is public and tagged for the agent: still never knowledge.
    visitor = Caller(stack.env.account_id, ("public",), "kai", "public:kai:v1")
    client = RpcClient(stack.env.settings.engine_socket, timeout=30)
    for role in ("user", "assistant"):
        asyncio.run(
            client.call(
                "conversation.record",
                {
                    "caller": visitor.to_wire(),
                    "sessionId": "public:kai:v1",
                    "role": role,
                    "text": f"MARK-VISITOR-{role} quokkaberry",
                    "agentSlug": "kai",
                    "scope": "public",
                },
            )
        )

    async def other_account() -> None:
        other = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
        try:
            await other.run(
                "CREATE (:Note {id: randomUUID(), accountId: 'another-account', name: 'Foreign', "
                "text: 'MARK-FOREIGN quokkaberry', scope: 'public', agents: ['kai']})"
            )
        finally:
            await other.close()

    asyncio.run(other_account())
    yield


MARKS_IN = ["MARK-TAGGED", "MARK-SHARED-TAG", "MARK-SUBSCRIBED", "MARK-DOC-ONE", "MARK-DOC-TWO"]
MARKS_OUT = [
    "MARK-OTHER-AGENT",
    "MARK-ADMIN",
    "MARK-SHARED-SCOPE",
    "MARK-UNSCOPED",
    "MARK-DELETED",
    "MARK-SUB-ADMIN",
    "MARK-VISITOR",
    "MARK-FOREIGN",
]


def test_knowledge_is_the_agents_public_content_and_subscription_matches(
    stack: Stack, admin: httpx.Client, graph: None
) -> None:
    folder = agents_dir(stack) / "kai"
    (folder / "KNOWLEDGE-SUMMARY.md").write_text("An old summary.")
    answer = admin.post(f"{API}/kai/knowledge")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["knowledge"]["subscribed"] == 1 and body["knowledge"]["entries"] >= 4
    # The fresh KNOWLEDGE.md is newer than the summary: it is what the agent reads now.
    assert body["agent"]["knowledge"]["source"] == "KNOWLEDGE.md"
    text = (folder / "KNOWLEDGE.md").read_text()
    for mark in MARKS_IN:
        assert mark in text, mark
    for mark in MARKS_OUT:
        assert mark not in text, mark
    assert text.startswith("# Kai: knowledge\n")
    assert "## Kai handbook" in text and text.index("MARK-DOC-ONE") < text.index("MARK-DOC-TWO")
    assert "_Matches “quokkaberry”_" in text
    # The same graph gives the same file.
    admin.post(f"{API}/kai/knowledge")
    assert (folder / "KNOWLEDGE.md").read_text() == text


def test_the_cli_regenerates_knowledge_too(stack: Stack, graph: None) -> None:
    path = agents_dir(stack) / "kai" / "KNOWLEDGE.md"
    path.unlink(missing_ok=True)
    done = subprocess.run(
        [*maxy("agents", "knowledge", "kai")],
        env=stack.env.vars,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout and "1 from keyword subscriptions" in done.stdout
    assert "MARK-SUBSCRIBED" in path.read_text() and "MARK-ADMIN" not in path.read_text()
    missing = subprocess.run(
        [*maxy("agents", "knowledge", "nobody")],
        env=stack.env.vars,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1 and "no agent called 'nobody'" in missing.stderr


def test_the_engine_never_lists_knowledge_for_a_caller_without_an_agent(stack: Stack) -> None:
    with pytest.raises(RemoteError) as refused:
        stack.rpc("agent.knowledge")
    assert refused.value.code == "bad-request"
    # A caller restricted to other scopes cannot widen itself to public content.
    narrow = Caller(stack.env.account_id, ("admin",), "kai", subscriptions=("quokkaberry",))
    client = RpcClient(stack.env.settings.engine_socket, timeout=30)
    answer = asyncio.run(client.call("agent.knowledge", {"caller": narrow.to_wire()}))
    assert answer["tagged"] == [] and answer["subscribed"] == []


def test_without_the_engine_the_knowledge_is_kept_and_the_owner_told(
    stack: Stack, admin: httpx.Client
) -> None:
    path = agents_dir(stack) / "anna" / "KNOWLEDGE.md"
    path.write_text("Kept as it was.")
    stack.processes["engine"].stop()
    try:
        answer = admin.post(f"{API}/anna/knowledge")
        assert (answer.status_code, answer.json()["code"]) == (503, "engine-unavailable")
        assert "maxy run" in answer.json()["message"]
        assert path.read_text() == "Kept as it was."
    finally:
        stack.start("engine")
        wait_until(stack.engine_healthy, 120, f"the engine again\n{stack.output()}")
