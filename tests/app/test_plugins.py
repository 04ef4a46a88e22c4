"""The Plugins page and its API, served by a real `maxy app` (Granian, Unix socket).

No Neo4j, no engine and no session manager: the routes read the plugin roots and account.json.
The account is branded "Hearth", so every text with ``{{productName}}`` must show that name and
never a fallback. Account plugins are written on disk, as the owner or ``store-skill`` would.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.plugins.resolver import account_root, core_root
from tests.app.running_app import edge_headers
from tests.plugins.test_resolver import plugin
from tests.support.stacks import Stack, app_env, running_stack

pytestmark = pytest.mark.timeout(120)

BRAND = "Hearth"
LAN = edge_headers()
PUBLIC = edge_headers(network="external", ip="203.0.113.9", role="public")
CORE = sorted(p.name for p in core_root().iterdir() if (p / "PLUGIN.md").is_file())
GARDEN = """tools:
  - {name: plant-find, public: true}
  - {name: plant-water, public: false}
mcp:
  command: [maxy, mcp, --plugin, garden]
skills: [pruning]
agents: [gardener]
enhances: [personal-assistant]
"""
GARDEN_FILES = {
    "skills/pruning/SKILL.md": "---\nname: pruning\n---\nPrune for {{productName}}.\n",
    "agents/gardener.md": "---\nname: gardener\ndescription: Tends the garden.\n---\nGo.\n",
}
ROUTES = [
    ("GET", "/admin/plugins"),
    ("GET", "/api/admin/plugins"),
    ("PUT", "/api/admin/plugins/memory"),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("plugins")
    with running_stack(app_env(root, brand=BRAND), root / "logs", "app") as running:
        yield running


@pytest.fixture(scope="module")
def login(stack: Stack) -> httpx.Cookies:
    return stack.admin_cookies()


@pytest.fixture
def admin(stack: Stack, login: httpx.Cookies) -> Iterator[httpx.Client]:
    """A logged-in LAN client with its CSRF header; no account plugin is left after a test."""
    with stack.client(login, **LAN) as client:
        client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
        yield client
    shutil.rmtree(plugins_dir(stack), ignore_errors=True)
    data = account_file(stack)
    data.pop("enabledPlugins", None)
    account_path(stack).write_text(json.dumps(data))


def plugins_dir(stack: Stack) -> Path:
    return account_root(stack.env.settings, stack.env.account_id)


def account_path(stack: Stack) -> Path:
    return stack.env.settings.accounts_dir / stack.env.account_id / "account.json"


def account_file(stack: Stack) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(account_path(stack).read_text())
    return data


def listed(client: httpx.Client) -> dict[str, Any]:
    answer = client.get("/api/admin/plugins")
    assert answer.status_code == 200, answer.text
    assert "{{productName}}" not in answer.text and "Maxy" not in answer.text
    body: dict[str, Any] = answer.json()
    return body


def by_name(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in body["plugins"]}


def switch(client: httpx.Client, name: str, on: Any) -> httpx.Response:
    return client.put(f"/api/admin/plugins/{name}", json={"enabled": on})


def test_without_login_nothing_answers_but_the_login(stack: Stack, login: httpx.Cookies) -> None:
    with stack.client(**LAN) as anonymous:
        for method, path in ROUTES:
            answer = anonymous.request(method, path, json={"enabled": False})
            if path.startswith("/admin/"):
                assert answer.status_code == 303, path
                assert answer.headers["location"] == "/login?next=%2Fadmin%2Fplugins"
            else:
                assert answer.status_code == 401, (path, answer.text)
                assert answer.json()["code"] == "login-required"
    with stack.client(login, **PUBLIC) as visitor:
        for method, path in ROUTES:
            assert visitor.request(method, path, json={}).status_code == 404, path


def test_every_core_plugin_is_listed_locked_on_with_the_brand_filled_in(
    admin: httpx.Client,
) -> None:
    body = listed(admin)
    plugins = by_name(body)
    assert sorted(plugins) == CORE and "memory" in plugins
    for name in CORE:
        assert plugins[name]["root"] == "core", name
        assert plugins[name]["locked"] is True and plugins[name]["enabled"] is True, name
        assert plugins[name]["missing"] is False, name
    memory = plugins["memory"]
    tools = {t["name"]: t["public"] for t in memory["tools"]}
    assert tools["memory-search"] is False and "memory-delete" in tools
    assert "librarian" in memory["agents"]
    assert plugins["maxy-guide"]["description"].startswith(f"The user guide to {BRAND} ")
    assert plugins["maxy-guide"]["publicEmbed"] is True
    assert body["missingPlugins"] == []
    assert "next session" in body["note"]


def test_an_account_plugin_is_listed_turned_on_then_off(admin: httpx.Client, stack: Stack) -> None:
    plugin(plugins_dir(stack), "garden", GARDEN, GARDEN_FILES)
    garden = by_name(listed(admin))["garden"]
    assert garden == {
        "name": "garden",
        "description": f"A plugin of the owner's for {BRAND}.",
        "root": "account",
        "bundle": None,
        "locked": False,
        "tools": [
            {"name": "plant-find", "public": True},
            {"name": "plant-water", "public": False},
        ],
        "skills": ["pruning"],
        "agents": ["gardener"],
        "enhances": ["personal-assistant"],
        "publicEmbed": False,
        "sha": garden["sha"],
        "enabled": False,
        "missing": False,
    }

    on = switch(admin, "garden", True)
    assert on.status_code == 200, on.text
    assert on.json()["changed"] is True and on.json()["plugin"]["enabled"] is True
    assert on.json()["message"].startswith("garden is now on. Changes take effect from the next")
    stored = account_file(stack)
    assert stored["enabledPlugins"] == ["garden"]
    assert stored["brand"] == {"productName": BRAND}  # the rest of account.json is kept
    assert by_name(listed(admin))["garden"]["enabled"] is True
    again = switch(admin, "garden", True)
    assert again.status_code == 200 and again.json()["changed"] is False
    assert again.json()["message"].startswith("garden was already on.")

    off = switch(admin, "garden", False)
    assert off.status_code == 200, off.text
    assert off.json()["changed"] is True and off.json()["plugin"]["enabled"] is False
    assert "next session" in off.json()["message"]
    assert account_file(stack)["enabledPlugins"] == []
    assert by_name(listed(admin))["garden"]["enabled"] is False
    assert "[plugins] op=switch plugin=garden enabled=False changed=True" in stack.output()


def test_a_core_plugin_cannot_be_turned_off(admin: httpx.Client, stack: Stack) -> None:
    before = account_path(stack).read_bytes()
    for on in (False, True):
        answer = switch(admin, "memory", on)
        assert answer.status_code == 409, answer.text
        assert answer.json() == {
            "code": "plugin-locked",
            "message": f"memory is built into {BRAND} and always on; only the other plugins "
            "can be turned off.",
        }
    assert account_path(stack).read_bytes() == before
    assert by_name(listed(admin))["memory"]["enabled"] is True


@pytest.mark.parametrize(
    ("name", "body", "status", "code", "words"),
    [
        ("nursery", {"enabled": True}, 404, "no-such-plugin", "There is no plugin 'nursery'"),
        ("Bad_Name", {"enabled": True}, 404, "no-such-plugin", "There is no plugin 'Bad_Name'"),
        ("garden", {"enabled": "yes"}, 400, "bad-request", '{"enabled": true}'),
        ("garden", {}, 400, "bad-request", '{"enabled": false}'),
        ("garden", [True], 400, "bad-json", "must be a JSON object"),
    ],
)
def test_a_bad_change_says_what_is_wrong_and_changes_nothing(
    admin: httpx.Client, stack: Stack, name: str, body: Any, status: int, code: str, words: str
) -> None:
    plugin(plugins_dir(stack), "garden", GARDEN, GARDEN_FILES)
    before = account_path(stack).read_bytes()
    answer = admin.put(f"/api/admin/plugins/{name}", json=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["code"] == code and words in answer.json()["message"], answer.text
    assert account_path(stack).read_bytes() == before


def test_a_change_needs_the_csrf_header_and_json(admin: httpx.Client, stack: Stack) -> None:
    plugin(plugins_dir(stack), "garden", GARDEN, GARDEN_FILES)
    token = admin.headers.pop("X-Maxy-CSRF")
    forged = switch(admin, "garden", True)
    assert forged.status_code == 403 and forged.json()["code"] == "csrf"
    admin.headers["X-Maxy-CSRF"] = token
    form = admin.put("/api/admin/plugins/garden", data={"enabled": "true"})
    assert form.status_code == 415 and form.json()["code"] == "json-required"
    assert "enabledPlugins" not in account_file(stack)


def test_a_plugin_turned_on_but_gone_is_named_and_can_be_turned_off(
    admin: httpx.Client, stack: Stack
) -> None:
    data = account_file(stack)
    data["enabledPlugins"] = ["vanished"]
    account_path(stack).write_text(json.dumps(data))
    assert listed(admin)["missingPlugins"] == ["vanished"]
    page = admin.get("/admin/plugins")
    assert 'data-missing="vanished"' in page.text and "Turned on, but gone" in page.text
    answer = switch(admin, "vanished", False)
    assert answer.status_code == 200, answer.text
    assert answer.json()["plugin"] is None and answer.json()["changed"] is True
    assert answer.json()["missingPlugins"] == []
    assert account_file(stack)["enabledPlugins"] == []
    assert switch(admin, "vanished", True).status_code == 404  # nothing to turn on


def test_refused_plugins_are_reported_not_hidden(admin: httpx.Client, stack: Stack) -> None:
    plugin(plugins_dir(stack), "loose", "tools:\n  - {name: dig}\n")  # tools, no server
    answer = admin.get("/api/admin/plugins")
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "plugins-refused"
    message = answer.json()["message"]
    assert "boot-failed reason=mcp-allowlist-without-server loose" in message
    assert "No session starts until this is fixed" in message
    page = admin.get("/admin/plugins")
    assert page.status_code == 200 and 'data-testid="plugins-error"' in page.text
    assert "mcp-allowlist-without-server loose" in page.text
    assert switch(admin, "loose", True).json()["code"] == "plugins-refused"


def test_the_page_shows_each_plugin_under_its_root_in_the_brand(
    admin: httpx.Client, stack: Stack
) -> None:
    plugin(plugins_dir(stack), "garden", GARDEN, GARDEN_FILES)
    page = admin.get("/admin/plugins")
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-store"
    html = page.text
    assert f"<title>Plugins · {BRAND}</title>" in html
    assert "Maxy" not in html and "{{productName}}" not in html
    nav = html.split('data-nav="plugins"')[1].split("</a>")[0]
    assert 'aria-current="page"' in nav
    assert "/static/js/plugins.js" in html and "/static/css/plugins.css" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # nothing remote
    core = html.split('aria-labelledby="plugins-core"')[1].split("</section>")[0]
    assert core.count('data-testid="plugin-locked"') == len(CORE)
    assert 'data-testid="plugin-toggle"' not in core
    garden = html.split('data-plugin="garden"')[1].split("</article>")[0]
    assert 'data-plugin-toggle="garden"' in garden and " checked" not in garden
    assert 'data-tool="plant-find" data-public="true"' in garden and ">public</span>" in garden
    assert 'data-tool="plant-water" data-public="false"' in garden
    for shown in ("gardener", "personal-assistant", "pruning", f"for {BRAND}."):
        assert shown in garden, shown
    assert "Changes take effect from the next session" in html
