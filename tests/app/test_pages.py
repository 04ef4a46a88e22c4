"""The admin pages, their JSON APIs, /static and the public agent pages, served by a real
`maxy app` (Granian, Unix socket) in front of a real `maxy engine`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.app.pages import SECTIONS
from tests.app.running_app import edge_headers
from tests.support.processes import Neo4jServer
from tests.support.stacks import Stack, add_agent, make_env, raw_request, running_stack

BRAND = "Acme Home"
BREAKDOWN = re.compile(r"^vector [01]\.\d\d · bm25 [01]\.\d\d · combined \d\.\d\d$")
# What the edge adds for a visitor on a public host name, and for the owner on the LAN.
PUBLIC = edge_headers("external", "203.0.113.9", "public")
LAN = edge_headers("lan", "192.168.1.20", "admin")


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("pages")
    env = make_env(neo4j_server, root / "data", brand=BRAND)
    add_agent(env, "anna", {"displayName": "Anna the Gardener", "description": "Garden help"})
    add_agent(env, "plain")
    with running_stack(env, root / "logs", "engine", "app") as running:
        yield running


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    """A logged-in LAN admin client."""
    with stack.client(stack.admin_cookies()) as client:
        yield client


@pytest.fixture(scope="module")
def nodes(stack: Stack) -> dict[str, str]:
    """A small graph written through the engine: a person who mentions two notes."""
    text = "The quokka boiler was serviced in March by Anna."
    boiler = stack.rpc(
        "write", {"label": "Note", "properties": {"name": "Boiler service", "text": text}}
    )["id"]
    roof = stack.rpc("write", {"label": "Note", "properties": {"name": "Roof tiles"}})["id"]
    anna = stack.rpc(
        "write",
        {
            "label": "Person",
            "properties": {"name": "Anna Quokka"},
            "edges": [
                {"type": "MENTIONS", "toId": boiler, "toLabel": "Note"},
                {"type": "MENTIONS", "toId": roof, "toLabel": "Note"},
            ],
        },
    )["id"]
    return {"boiler": boiler, "roof": roof, "anna": anna}


def title(html: str) -> str:
    found = re.search(r"<title>(.*?)</title>", html, re.S)
    assert found, html[:500]
    return found.group(1).strip()


# ── Admin pages ─────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("path", "page"),
    [("/", "Sessions"), ("/admin/data", "Data"), ("/admin/graph", "Graph")]
    + [(f"/admin/{name}", label) for name, (label, _) in SECTIONS.items()],
)
def test_admin_pages_render_the_shell_with_a_branded_title(
    admin: httpx.Client, path: str, page: str
) -> None:
    answer = admin.get(path)
    assert answer.status_code == 200, answer.text[:500]
    html = answer.text
    assert title(html) == f"{page} · {BRAND}"
    for pane in ('id="sidebar"', 'id="chat"', 'id="artefacts"', 'id="drawer-toggle"'):
        assert pane in html
    assert re.search(r'<meta name="maxy-csrf" content="[^"]+">', html)
    assert '<script src="/static/js/session.js"' in html
    assert answer.headers["cache-control"] == "no-store"
    assert "https://" not in html and "http://" not in html  # nothing from a CDN


def test_the_sessions_list_is_empty_until_the_session_manager_exists(admin: httpx.Client) -> None:
    html = admin.get("/").text
    assert "No sessions yet" in html
    for tab in ("Active", "Archived", "All"):
        assert f'data-filter="{tab.lower()}">{tab}</button>' in html
    assert 'id="live-dot"' in html and 'id="new-session"' in html and 'id="mode-trigger"' in html


def test_the_current_section_is_marked_in_the_navigation(admin: httpx.Client) -> None:
    html = admin.get("/admin/people").text
    assert re.search(r'data-nav="people"[^>]*aria-current="page"', html)
    assert not re.search(r'data-nav="tasks"[^>]*aria-current="page"', html)


def test_unknown_admin_pages_are_a_404_page(admin: httpx.Client) -> None:
    answer = admin.get("/admin/nope/deeper")
    assert answer.status_code == 404
    assert title(answer.text) == f"Not found · {BRAND}"
    assert admin.get("/admin").headers["location"] == "/"


def test_graph_and_data_pages_load_the_vendored_cytoscape(admin: httpx.Client) -> None:
    for path in ("/admin/data", "/admin/graph"):
        found = re.search(r'src="(/static/vendor/cytoscape/[^"]+)"', admin.get(path).text)
        assert found, path
        script = admin.get(found.group(1))
        assert script.status_code == 200, "cytoscape is not vendored: run build/vendor.py"
        assert "cytoscape" in script.text[:2000]


# ── JSON APIs ───────────────────────────────────────────────────────────────────────────────


def test_search_has_one_breakdown_line_per_result(
    admin: httpx.Client, nodes: dict[str, str]
) -> None:
    answer = admin.get("/api/admin/search", params={"q": "quokka boiler"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["results"], body
    for result in body["results"]:
        assert BREAKDOWN.match(result["breakdown"]), result["breakdown"]
        trace = result["trace"]
        assert result["breakdown"] == (
            f"vector {trace['vector'] or 0:.2f} · bm25 {trace['keyword'] or 0:.2f} · "
            f"combined {trace['score']:.2f}"
        )
    top = {r["id"]: r for r in body["results"]}
    assert top[nodes["boiler"]]["title"] == "Boiler service"
    assert "quokka boiler" in top[nodes["boiler"]]["snippet"]
    labels = {t["label"] for t in body["types"]}
    assert {"Note", "Person"} <= labels
    assert body["keywordOnly"] is False
    for result in body["results"]:
        assert "embedding" not in str(result) and "accountId" not in str(result)


def test_a_query_the_model_cannot_embed_is_answered_by_keywords_only(admin: httpx.Client) -> None:
    # Control characters clean to nothing: the engine cannot embed them and says keywordOnly,
    # the flag the pages turn into the "Vector ranking unavailable" banner.
    body = admin.get("/api/admin/search", params={"q": "\x01\x02"}).json()
    assert body["keywordOnly"] is True and body["results"] == []


def test_search_types_filter_the_results(admin: httpx.Client, nodes: dict[str, str]) -> None:
    body = admin.get("/api/admin/search", params={"q": "quokka", "types": "Person"}).json()
    assert body["results"] and all("Person" in r["labels"] for r in body["results"])
    assert nodes["anna"] in {r["id"] for r in body["results"]}


@pytest.mark.parametrize(
    ("path", "params", "needle"),
    [
        ("/api/admin/search", {}, "q is empty"),
        ("/api/admin/search", {"q": "   "}, "q is empty"),
        ("/api/admin/search", {"q": "x" * 501}, "longer than 500"),
        ("/api/admin/search", {"q": "a", "types": "Note,bad label"}, "not a node label"),
        ("/api/admin/search", {"q": "a", "limit": "0"}, "from 1 to 100"),
        ("/api/admin/search", {"q": "a", "limit": "many"}, "from 1 to 100"),
        ("/api/admin/graph", {"limit": "2001"}, "from 1 to 2000"),
        ("/api/admin/graph", {"limit": "0"}, "from 1 to 2000"),
        ("/api/admin/graph", {"labels": "Note`) DETACH DELETE (n"}, "not a node label"),
        ("/api/admin/graph/node/x", {"label": "no label"}, "not a node label"),
    ],
)
def test_bad_parameters_are_a_400_saying_what_is_wrong(
    admin: httpx.Client, path: str, params: dict[str, str], needle: str
) -> None:
    answer = admin.get(path, params=params)
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "bad-request" and needle in body["message"], body


def test_graph_returns_nodes_edges_and_categories(
    admin: httpx.Client, nodes: dict[str, str]
) -> None:
    body = admin.get("/api/admin/graph", params={"limit": "2000"}).json()
    ids = {n["id"] for n in body["nodes"]}
    assert set(nodes.values()) <= ids
    pairs = {(e["source"], e["target"]) for e in body["edges"]}
    assert (nodes["anna"], nodes["boiler"]) in pairs and (nodes["anna"], nodes["roof"]) in pairs
    assert {c["label"] for c in body["categories"]} >= {"Note", "Person"}
    narrowed = admin.get("/api/admin/graph", params={"q": "roof", "labels": "Note"}).json()
    assert [n["id"] for n in narrowed["nodes"]] == [nodes["roof"]]
    one = admin.get("/api/admin/graph", params={"limit": "1"}).json()
    assert len(one["nodes"]) == 1 and one["truncated"] is True


def test_a_node_comes_with_its_neighbourhood(admin: httpx.Client, nodes: dict[str, str]) -> None:
    answer = admin.get(f"/api/admin/graph/node/{nodes['anna']}", params={"label": "Person"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["node"]["title"] == "Anna Quokka"
    assert "embedding" not in body["node"]["props"] and "accountId" not in body["node"]["props"]
    assert {n["id"] for n in body["neighbours"]} == {nodes["boiler"], nodes["roof"]}
    assert body["degree"] == 2


def test_deleted_and_unknown_nodes_are_a_404(
    stack: Stack, admin: httpx.Client, nodes: dict[str, str]
) -> None:
    gone = stack.rpc("write", {"label": "Note", "properties": {"name": "Old shed"}})["id"]
    assert admin.get(f"/api/admin/graph/node/{gone}").status_code == 200
    stack.rpc("delete", {"label": "Note", "id": gone})
    for node_id in (gone, "no-such-node"):
        answer = admin.get(f"/api/admin/graph/node/{node_id}")
        assert answer.status_code == 404
        assert answer.json()["code"] == "not-found"
    around = admin.get(f"/api/admin/graph/node/{nodes['anna']}").json()
    assert gone not in {n["id"] for n in around["neighbours"]}


def test_health_is_the_engines(admin: httpx.Client, stack: Stack) -> None:
    body = admin.get("/api/admin/health").json()
    assert body["engine"] == {"ok": True}
    assert body["embedder"]["ok"] is True and body["account"] == stack.env.account_id


def test_remote_access_state_is_shown_in_the_shell(admin: httpx.Client, stack: Stack) -> None:
    config = stack.env.settings.cloudflared_config
    assert admin.get("/api/admin/tunnel").json()["configured"] is False
    assert 'data-testid="tunnel-status"' in admin.get("/").text
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "tunnel: 6ff42ae2-765d-4adf-8112-31c55c1551ef\n"
        "credentials-file: /data/cloudflared/6ff42ae2.json\n"
        "ingress:\n"
        "  - hostname: maxy.example.com\n"
        "    service: http://localhost:19200\n"
        "  - service: http_status:404\n"
    )
    try:
        state = admin.get("/api/admin/tunnel").json()
        # Configured, but no cloudflared runs here: not connected, and no secret in the answer.
        assert state["configured"] is True and state["hostnames"] == 1
        assert state["connected"] is False and "credentials" not in str(state)
    finally:
        config.unlink()


def test_an_unreachable_engine_is_a_503_that_says_what_to_do(
    neo4j_server: Neo4jServer, tmp_path: Path
) -> None:
    env = make_env(neo4j_server, tmp_path / "data")
    with running_stack(env, tmp_path / "logs", "app") as alone:
        with alone.client(alone.admin_cookies()) as client:
            for path in ("/api/admin/search?q=boiler", "/api/admin/graph", "/api/admin/health"):
                answer = client.get(path)
                assert answer.status_code == 503, path
                body = answer.json()
                assert body["code"] == "engine-unavailable"
                assert "maxy run" in body["message"]
            # The pages themselves still render: the banner and errors come from the API.
            assert client.get("/admin/data").status_code == 200


# ── Static files ────────────────────────────────────────────────────────────────────────────


def test_own_assets_revalidate_and_vendored_ones_are_cached_long(stack: Stack) -> None:
    with stack.client() as client:
        css = client.get("/static/css/app.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert css.headers["cache-control"] == "no-cache"
        again = client.get("/static/css/app.css", headers={"if-none-match": css.headers["etag"]})
        assert again.status_code == 304
        vendored = client.get("/static/vendor/cytoscape/dist/cytoscape.min.js")
        assert vendored.status_code == 200, "run build/vendor.py"
        assert vendored.headers["cache-control"] == "public, max-age=31536000, immutable"


@pytest.mark.parametrize(
    "target",
    [
        b"/static/../pages.py",
        b"/static/..%2fpages.py",
        b"/static/%2e%2e/pages.py",
        b"/static/%2e%2e%2fpages.py",
        b"/static/css/../../pages.py",
        b"/static/css/..%2f..%2fmain.py",
        b"/static//etc/passwd",
        b"/static/%2fetc%2fpasswd",
        b"/static/..%5cpages.py",
        b"/static/vendor/../../../config.py",
    ],
)
def test_static_never_serves_outside_its_folder(stack: Stack, target: bytes) -> None:
    status, _, body = raw_request(stack.env.settings.app_socket, target)
    assert status in (400, 404), (target, status)
    assert b"from __future__" not in body and b"root:x:0:0" not in body


# ── Public pages ────────────────────────────────────────────────────────────────────────────


def test_an_agent_page_shows_its_display_name(stack: Stack) -> None:
    with stack.client(**PUBLIC) as client:
        answer = client.get("/anna")
    assert answer.status_code == 200
    html = answer.text
    assert title(html) == f"Anna the Gardener · {BRAND}"
    assert 'id="agent-message"' in html and 'id="agent-note"' in html
    assert "Garden help" in html
    assert "session.js" not in html and "maxy-csrf" not in html


def test_an_agent_without_config_is_named_by_its_slug(stack: Stack) -> None:
    with stack.client(**PUBLIC) as client:
        assert title(client.get("/plain").text) == f"plain · {BRAND}"


@pytest.mark.parametrize(
    "path", ["/nobody", "/Anna", "/anna_x", "/" + "a" * 41, "/favicon.ico", "/onboarding-x"]
)
def test_unknown_or_invalid_slugs_are_a_404_page(stack: Stack, path: str) -> None:
    with stack.client(**PUBLIC) as client:
        answer = client.get(path)
    assert answer.status_code == 404
    assert "Page not found" in answer.text


def test_reserved_words_are_never_agents(stack: Stack) -> None:
    for word in ("admin", "api", "static", "sites", "login", "onboarding", "healthz"):
        add_agent(stack.env, word, {"displayName": f"Impostor {word}"})
    with stack.client(**PUBLIC) as client:
        for word in ("admin", "api", "static", "sites", "login", "onboarding", "healthz", "bot"):
            assert "Impostor" not in client.get(f"/{word}").text, word


def test_the_public_root_is_the_default_agent_and_the_admin_root_is_the_shell(
    stack: Stack,
) -> None:
    add_agent(stack.env, "maxy", {"displayName": "Max the Helper"})
    with stack.client(**PUBLIC) as client:
        public = client.get("/")
    assert public.status_code == 200 and title(public.text) == f"Max the Helper · {BRAND}"
    with stack.client(stack.admin_cookies(), **LAN) as client:
        admin = client.get("/")
    assert admin.status_code == 200 and 'id="sidebar"' in admin.text


def test_bot_lists_the_agents_default_first(stack: Stack) -> None:
    add_agent(stack.env, "maxy", {"displayName": "Max the Helper"})
    with stack.client(**PUBLIC) as client:
        html = client.get("/bot").text
    names = re.findall(r"<strong>(.*?)</strong>", html)
    assert names[0] == "Max the Helper"
    assert "Anna the Gardener" in names and "plain" in names
    assert title(html) == f"Talk to us · {BRAND}"


def test_public_pages_do_not_reach_admin_apis(stack: Stack) -> None:
    with stack.client(**PUBLIC) as client:
        for path in ("/admin/data", "/api/admin/search?q=boiler", "/api/admin/graph"):
            assert client.get(path).status_code == 404, path
