"""The Projects view in headless Chromium, through the real edge, app and engine.

The owner opens Projects from the sidebar: the active projects are listed worst health first,
each with its health and why; a click focuses the project's neighbourhood in the graph (its
tasks and stakeholder), a click on another swaps the focus, and the focus survives a reload.
Screenshots at the shell's breakpoints are saved under tests/artefacts/screenshots/
(``projects-<width>.png``).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.app import test_browser as shell_tests
from tests.support.processes import Neo4jServer
from tests.support.stacks import Stack, make_env, running_stack

pytestmark = pytest.mark.timeout(300)

# The shell tests' Chromium and logged-in admin tab, resolved against this module's `stack`.
browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

WAIT = 20_000  # ms; a deadline against hangs, not a timing assertion


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("projects-browser")
    env = make_env(neo4j_server, root / "data")
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        anna = running.rpc("contacts.create", {"name": "Anna Berg", "email": "anna@example.com"})
        running.rpc(
            "project.create",
            {
                "name": "Kitchen renovation",
                "phase": "active",
                "stakeholderId": anna["id"],
                "items": [
                    {"key": "m", "name": "Measure the kitchen"},
                    {"name": "Order the tiles", "dependsOn": ["m"]},
                ],
            },
        )
        running.rpc(
            "project.create",
            {"name": "Garden shed", "phase": "blocked", "items": [{"name": "Pour the base"}]},
        )
        closed = running.rpc("project.create", {"name": "Old move"})
        running.rpc("project.abandon", {"id": closed["id"], "reason": "moved already"})
        yield running


def focus_of(page: Any) -> Any:
    return page.locator("#project-canvas").get_attribute("data-focus")


def drawn(page: Any) -> list[str]:
    labels: list[str] = page.evaluate(
        "window.maxyGraph.active.nodes().map(function (n) { return n.data('label'); })"
    )
    return sorted(labels)


def test_projects_by_health_and_a_click_focuses_the_graph(
    admin: Any, base_url: str, stack: Stack
) -> None:
    admin.goto(base_url + "/")
    admin.locator('[data-nav="projects"]').click()
    admin.wait_for_url(base_url + "/admin/projects")
    assert admin.locator('[data-nav="projects"]').get_attribute("aria-current") == "page"
    rows = admin.locator("#project-list .project")
    rows.first.wait_for(state="visible", timeout=WAIT)
    assert rows.count() == 2  # the abandoned one is not active
    shed, kitchen = rows.nth(0), rows.nth(1)
    assert shed.get_attribute("data-health") == "red"
    assert "Garden shed" in shed.inner_text() and "the project is blocked" in shed.inner_text()
    assert kitchen.get_attribute("data-health") == "green"
    assert "Next: Measure the kitchen" in kitchen.inner_text()
    assert "0/2 done" in kitchen.inner_text()
    assert admin.locator("#projects-status").inner_text() == "2 active projects"
    assert "Old move" not in admin.locator("#project-list").inner_text()

    # A click focuses the project's neighbourhood: its tasks and its stakeholder.
    kitchen.click()
    kitchen_id = kitchen.get_attribute("data-id")
    admin.wait_for_function(
        "id => document.getElementById('project-canvas').getAttribute('data-focus') === id",
        arg=kitchen_id,
        timeout=WAIT,
    )
    assert kitchen.get_attribute("aria-pressed") == "true"
    assert admin.locator("#project-focus-title").inner_text() == "Kitchen renovation"
    nodes = drawn(admin)
    assert {"Kitchen renovation", "Measure the kitchen", "Order the tiles", "Anna Berg"} <= set(
        nodes
    )
    assert admin.url.endswith("/admin/projects?focus=" + kitchen_id)

    # A second click, on the other project, swaps the focus (never both at once).
    shed.click()
    shed_id = shed.get_attribute("data-id")
    admin.wait_for_function(
        "id => document.getElementById('project-canvas').getAttribute('data-focus') === id",
        arg=shed_id,
        timeout=WAIT,
    )
    assert shed.get_attribute("aria-pressed") == "true"
    assert kitchen.get_attribute("aria-pressed") == "false"
    nodes = drawn(admin)
    assert "Garden shed" in nodes and "Pour the base" in nodes
    assert "Created: blocked" in nodes  # its history, named by what changed
    assert "Kitchen renovation" not in nodes and "Measure the kitchen" not in nodes

    # The focus is in the address: a reload shows it again.
    admin.reload()
    admin.wait_for_function(
        "id => document.getElementById('project-canvas').getAttribute('data-focus') === id",
        arg=shed_id,
        timeout=WAIT,
    )
    assert focus_of(admin) == shed_id


@pytest.mark.parametrize("width", [1400, 1000, 800, 390])
def test_the_projects_view_at_each_breakpoint(
    admin: Any, base_url: str, stack: Stack, width: int
) -> None:
    admin.set_viewport_size({"width": width, "height": shell_tests.HEIGHTS[width]})
    admin.goto(base_url + "/admin/projects")
    first = admin.locator("#project-list .project").first
    first.wait_for(state="visible", timeout=WAIT)
    first.click()
    admin.wait_for_function(
        "() => document.getElementById('project-canvas').getAttribute('data-focus')",
        timeout=WAIT,
    )
    screenshot(admin, f"projects-{width}")
    list_box = admin.locator("#project-list").bounding_box()
    canvas = admin.locator("#project-canvas").bounding_box()
    assert list_box is not None and canvas is not None
    assert canvas["width"] > 200 and canvas["height"] > 200
    if width >= 1400:
        assert canvas["x"] > list_box["x"] + list_box["width"] - 1  # side by side
    else:
        assert canvas["y"] >= list_box["y"] + list_box["height"] - 1  # the focus under the list
    # Nothing is wider than the window.
    overflow = admin.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0


def test_with_no_active_project_the_view_says_how_to_start_one(
    admin: Any, base_url: str, stack: Stack
) -> None:
    # Playwright's loop runs in this thread: the engine is called from another.
    with ThreadPoolExecutor(1) as pool:
        for project in pool.submit(stack.rpc, "project.list", {}).result()["projects"]:
            pool.submit(
                stack.rpc, "project.abandon", {"id": project["id"], "reason": "clearing up"}
            ).result()
    admin.goto(base_url + "/admin/projects")
    empty = admin.locator("#projects-empty")
    empty.wait_for(state="visible", timeout=WAIT)
    assert "No active projects yet" in empty.inner_text()
    assert admin.locator("#project-list .project").count() == 0
