"""The web UI in headless Chromium, through the real edge, app and engine.

First run (PIN onboarding) into the admin shell, the shell at four widths (screenshots are saved
under tests/artefacts/screenshots/), remembered pane widths, the Data and Graph pages against
real search results, and a public agent page on a public host name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.running_app import chromium, wait_for_js
from tests.support.processes import REPO, Neo4jServer
from tests.support.stacks import PIN, Stack, add_agent, make_env, running_stack

# A request for the public host name reaches the edge on loopback, Host header intact.
PUBLIC_HOST_RULE = "--host-resolver-rules=MAP public.test 127.0.0.1"
PUBLIC_HOST = "public.test"
SCREENSHOTS = REPO / "tests" / "artefacts" / "screenshots"
BREAKDOWN = re.compile(r"^vector [01]\.\d\d · bm25 [01]\.\d\d · combined \d\.\d\d$")
HEIGHTS = {1400: 900, 1000: 800, 800: 800, 390: 844}


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("browser")
    env = make_env(neo4j_server, root / "data", MAXY_PUBLIC_HOSTNAMES=PUBLIC_HOST)
    add_agent(env, "maxy", {"displayName": "Max the Helper"})
    add_agent(env, "anna", {"displayName": "Anna the Gardener"})
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        # Something to find: written through the engine, as an agent would.
        boiler = running.rpc(
            "write",
            {"label": "Note", "properties": {"name": "Boiler service", "text": "Quokka boiler."}},
        )["id"]
        running.rpc(
            "write",
            {
                "label": "Person",
                "properties": {"name": "Anna Quokka"},
                "edges": [{"type": "MENTIONS", "toId": boiler, "toLabel": "Note"}],
            },
        )
        yield running


def edge_url(stack: Stack, host: str = "127.0.0.1") -> str:
    """The edge's address: what a browser on the LAN opens."""
    return f"http://{host}:{stack.env.settings.port}"


@pytest.fixture(scope="module")
def base_url(stack: Stack) -> str:
    return edge_url(stack)


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Any]:
    with chromium(PUBLIC_HOST_RULE) as launched:
        yield launched


@pytest.fixture(scope="module")
def admin_state(browser: Any, base_url: str) -> dict[str, Any]:
    """First run: / leads to onboarding; setting the PIN lands in the admin shell."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(base_url + "/")
    assert page.url == base_url + "/onboarding", page.url
    page.fill("#pin", PIN)
    page.fill("#confirm", PIN)
    page.click("form[data-maxy-auth=setup] button[type=submit]")
    page.locator("[data-maxy-step=claude]").wait_for(state="visible")
    page.click("[data-maxy-step=claude] [data-maxy-next]")
    page.locator("[data-maxy-step=remote]").wait_for(state="visible")
    page.click("[data-maxy-step=remote] >> text=Skip for now")
    page.locator("#sidebar").wait_for(state="visible")
    assert page.url == base_url + "/"
    state: dict[str, Any] = context.storage_state()
    context.close()
    return state


@pytest.fixture
def admin(browser: Any, admin_state: dict[str, Any]) -> Iterator[Any]:
    """A fresh tab of the logged-in admin, 1400 by 900."""
    context = browser.new_context(
        storage_state=admin_state, viewport={"width": 1400, "height": 900}
    )
    page = context.new_page()
    yield page
    context.close()


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    print(f"screenshot: {path}")
    return path


def width_of(page: Any, selector: str) -> float:
    box = page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not laid out"
    return float(box["width"])


def test_the_admin_shell_after_first_run_survives_a_reload(admin: Any, base_url: str) -> None:
    admin.goto(base_url + "/")
    assert admin.title() == "Sessions · Maxy"
    admin.reload()
    assert admin.url == base_url + "/"
    for pane in ("#sidebar", "#chat", "#artefacts"):
        assert admin.locator(pane).is_visible(), pane
    assert admin.locator("#session-empty").inner_text() == "No sessions yet"
    assert admin.locator('meta[name="maxy-csrf"]').get_attribute("content")


@pytest.mark.parametrize("width", [1400, 1000, 800, 390])
def test_the_shell_at_each_breakpoint(admin: Any, base_url: str, width: int) -> None:
    admin.set_viewport_size({"width": width, "height": HEIGHTS[width]})
    admin.goto(base_url + "/")
    admin.locator("#chat").wait_for(state="visible")
    screenshot(admin, f"shell-{width}")
    visible = {
        pane: admin.locator(pane).is_visible()
        for pane in ("#sidebar", "#chat", "#artefacts", "#drawer-toggle")
    }
    if width == 1400:
        assert visible == {
            "#sidebar": True,
            "#chat": True,
            "#artefacts": True,
            "#drawer-toggle": False,
        }
        assert width_of(admin, "#sidebar") > 200 and width_of(admin, "#artefacts") > 300
    elif width == 1000:
        assert visible == {
            "#sidebar": True,
            "#chat": True,
            "#artefacts": False,
            "#drawer-toggle": False,
        }
    elif width == 800:
        assert visible == {
            "#sidebar": True,
            "#chat": True,
            "#artefacts": False,
            "#drawer-toggle": False,
        }
        assert width_of(admin, "#sidebar") <= 80  # the icon rail
        assert not admin.locator("#sidebar .nav-item .label").first.is_visible()
    else:
        assert visible == {
            "#sidebar": False,
            "#chat": True,
            "#artefacts": False,
            "#drawer-toggle": True,
        }
        admin.click("#drawer-toggle")
        admin.locator("#sidebar").wait_for(state="visible")
        assert admin.locator("#drawer-toggle").get_attribute("aria-expanded") == "true"
        wait_for_js(admin, "document.getElementById('sidebar').getBoundingClientRect().left >= 0")
        screenshot(admin, f"shell-{width}-drawer-open")
        admin.keyboard.press("Escape")
        admin.locator("#sidebar").wait_for(state="hidden")


def test_pane_widths_are_remembered(admin: Any, base_url: str) -> None:
    admin.goto(base_url + "/")
    before = width_of(admin, "#sidebar")
    handle = admin.locator("#sidebar-resizer").bounding_box()
    assert handle is not None
    x, y = handle["x"] + handle["width"] / 2, handle["y"] + 200
    admin.mouse.move(x, y)
    admin.mouse.down()
    admin.mouse.move(x + 60, y, steps=6)
    admin.mouse.up()
    dragged = width_of(admin, "#sidebar")
    assert dragged > before + 40
    divider = admin.locator("#divider")
    divider.focus()
    artefacts = width_of(admin, "#artefacts")
    admin.keyboard.press("ArrowLeft")  # the artefact pane grows leftwards
    assert width_of(admin, "#artefacts") > artefacts
    resized = width_of(admin, "#artefacts")
    admin.reload()
    assert abs(width_of(admin, "#sidebar") - dragged) <= 2
    assert abs(width_of(admin, "#artefacts") - resized) <= 2


def test_the_data_page_shows_a_score_breakdown_and_a_neighbourhood(
    admin: Any, base_url: str
) -> None:
    admin.goto(base_url + "/admin/data")
    assert admin.title() == "Data · Maxy"
    admin.fill("#data-q", "quokka boiler")
    admin.press("#data-q", "Enter")
    first = admin.locator("[data-testid=breakdown]").first
    first.wait_for(state="visible")
    for line in admin.locator("[data-testid=breakdown]").all_inner_texts():
        assert BREAKDOWN.match(line), line
    chips = admin.locator("#data-types .chip")
    assert {"Note", "Person"} <= {c.get_attribute("data-label") for c in chips.all()}
    assert admin.locator("#vector-banner").is_hidden()
    admin.locator(".result", has_text="Anna Quokka").click()
    detail = admin.locator("#data-detail")
    detail.locator("h2", has_text="Anna Quokka").wait_for()
    detail.locator(".neighbours", has_text="Boiler service").wait_for()
    wait_for_js(admin, "document.querySelector('#data-graph canvas') !== null")
    screenshot(admin, "data-1400")
    # A type chip narrows the results to that type.
    admin.click("#data-types .chip[data-label=Person]")
    wait_for_js(
        admin,
        "[...document.querySelectorAll('.result .badge')].every(b => b.textContent === 'Person')",
    )


def test_the_vector_banner_shows_when_search_falls_back_to_keywords(
    admin: Any, base_url: str
) -> None:
    admin.goto(base_url + "/admin/data")
    # A query of control characters cannot be embedded: the engine answers keyword-only.
    admin.evaluate("document.getElementById('data-q').value = '\\u0001\\u0002'")
    admin.evaluate("document.getElementById('data-search').requestSubmit()")
    admin.locator("#vector-banner").wait_for(state="visible")
    assert "Vector ranking unavailable" in admin.locator("#vector-banner").inner_text()


def test_the_graph_page_draws_and_narrows(admin: Any, base_url: str) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/graph")
    assert admin.title() == "Graph · Maxy"
    stats = admin.locator("#graph-stats")
    expect(stats).to_have_text(re.compile(r"^2 nodes · 1 edge$"))
    wait_for_js(admin, "document.querySelector('#graph-canvas canvas') !== null")
    chips = admin.locator("#graph-categories .chip")
    assert {"Note", "Person"} <= {c.get_attribute("data-label") for c in chips.all()}
    assert admin.locator("#graph-limit").get_attribute("max") == "2000"
    screenshot(admin, "graph-1400")
    # Narrowing shows what the Data page's search finds for the words.
    found = admin.request.get(base_url + "/api/admin/search", params={"q": "boiler"}).json()
    count = len(found["results"])
    with admin.expect_response(lambda r: "q=boiler" in r.url):
        admin.fill("#graph-q", "boiler")
    expect(stats).to_have_text(re.compile(rf"^{count} nodes? · "))
    admin.fill("#graph-q", "")
    expect(stats).to_have_text(re.compile(r"^2 nodes"))
    admin.click("#graph-categories .chip[data-label=Person]")
    expect(stats).to_have_text(re.compile(r"^1 node · 0 edges$"))
    # Clicking a node opens its details beside the graph.
    wait_for_js(admin, "window.maxyGraph.active && window.maxyGraph.active.nodes().length === 1")
    at = admin.evaluate("window.maxyGraph.active.nodes()[0].renderedPosition()")
    box = admin.locator("#graph-canvas").bounding_box()
    admin.mouse.click(box["x"] + at["x"], box["y"] + at["y"])
    detail = admin.locator("#graph-detail")
    expect(detail.locator("h2")).to_have_text("Anna Quokka")
    expect(detail).to_contain_text("1 connection")


def test_a_public_agent_page_on_the_public_host(browser: Any, stack: Stack) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    public = edge_url(stack, PUBLIC_HOST)
    page.goto(public + "/")
    assert page.title() == "Max the Helper · Maxy"
    assert page.locator("#agent-name").inner_text() == "Max the Helper"
    page.goto(public + "/anna")
    assert page.locator("#agent-name").inner_text() == "Anna the Gardener"
    assert page.locator("#agent-note").is_visible()
    page.fill("#agent-message", "Hello")
    page.press("#agent-message", "Enter")
    # No Anthropic key on this stack: the chat degrades to a friendly sentence, never an error.
    page.locator("#agent-note", has_text="can't answer right now").wait_for()
    assert page.locator(".bubble.from-visitor").inner_text() == "Hello"
    screenshot(page, "agent-390")
    # Admin pages do not exist on a public host name.
    assert page.goto(public + "/admin/data").status == 404
    context.close()


# Last: "Sign out other devices" bumps the generation, so every older cookie (admin_state's) is
# rejected.
def test_sign_out_other_devices_renews_the_admin_session(admin: Any, base_url: str) -> None:
    admin.goto(base_url + "/admin/settings")
    with admin.expect_response("**/api/admin/session/rotate") as rotated:
        admin.click("#sign-out-others")
    assert rotated.value.status == 200
    admin.locator("#sign-out-message", has_text="Every other device is logged out").wait_for()
    admin.reload()
    assert admin.locator("#sidebar").is_visible()  # the new cookie keeps us logged in
