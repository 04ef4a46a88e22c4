"""The memory views in headless Chromium, through the real edge, app and engine, at the shell's
breakpoints: People and Tasks are the Graph filtered to their label (the audit trail's Tasks left
out), the Data page titles results for a person (a chunk as "Document, then Section") and shows
labelled fields, hides internal records until asked, and lets the owner add a note, edit it,
make it public for an agent and delete it with an undo; the Graph's narrowing finds what the
Data page's search finds, not only names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.app import test_browser as shell_tests
from tests.app.running_app import wait_for_js
from tests.support.processes import Neo4jServer
from tests.support.stacks import Stack, add_agent, make_env, running_stack

pytestmark = pytest.mark.timeout(300)

browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

WAIT = 30_000  # ms; a deadline against hangs, not a timing assertion
HEIGHTS = shell_tests.HEIGHTS
CHUNK_TITLE = "Boiler manual \u203a Safety"


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("memory-browser")
    env = make_env(neo4j_server, root / "data")
    add_agent(env, "anna", {"displayName": "Anna the Gardener"})
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        rpc = running.rpc
        people = [
            rpc("write", {"label": "Person", "properties": {"name": name}})["id"]
            for name in ("Anna Quokka", "Bert Plumber")
        ]
        rpc(
            "write",
            {
                "label": "Task",
                "properties": {"name": "Book the boiler service", "status": "open"},
                "edges": [{"type": "FOR", "toId": people[1], "toLabel": "Person"}],
            },
        )
        rpc(
            "write",
            {
                "label": "Note",
                "properties": {"name": "Maintenance", "text": "The pressure relief valve drips."},
            },
        )
        rpc(
            "ingest",
            {
                "title": "Boiler manual",
                "text": "Read me first.\n\n# Safety\n\nNever open the casing while it runs.",
                "attachmentId": "boiler-manual",
            },
        )
        rpc(
            "audit.record",
            {
                "tool": "memory-write",
                "input": {"label": "Note"},
                "startedAt": "2026-01-01T10:00:00+00:00",
                "endedAt": "2026-01-01T10:00:01+00:00",
                "ms": 1000,
                "durable": True,
            },
        )
        yield running


def stats_count(page: Any) -> int:
    text = page.locator("#graph-stats").inner_text()
    found = re.match(r"^(\d+) nodes?", text)
    assert found, text
    return int(found.group(1))


@pytest.mark.parametrize("width", [1400, 1000, 800, 390])
@pytest.mark.parametrize(
    ("section", "label", "titles"),
    [
        ("people", "Person", {"Anna Quokka", "Bert Plumber"}),
        ("tasks", "Task", {"Book the boiler service"}),
    ],
)
def test_people_and_tasks_are_the_graph_filtered_to_their_label(
    admin: Any, base_url: str, section: str, label: str, titles: set[str], width: int
) -> None:
    from playwright.sync_api import expect

    admin.set_viewport_size({"width": width, "height": HEIGHTS[width]})
    admin.goto(base_url + f"/admin/{section}")
    assert admin.title() == f"{section.capitalize()} · Maxy"
    expect(admin.locator("#graph-stats")).to_have_text(
        re.compile(rf"^{len(titles)} nodes? · "), timeout=WAIT
    )
    chip = admin.locator(f"#graph-categories .chip[data-label={label}]")
    expect(chip).to_have_attribute("aria-pressed", "true")
    wait_for_js(
        admin,
        f"window.maxyGraph.active && window.maxyGraph.active.nodes().length === {len(titles)}",
    )
    drawn = admin.evaluate("window.maxyGraph.active.nodes().map(n => n.data('node').title)")
    assert set(drawn) == titles  # the audit trail's "memory-write: Note" task is not among them
    nav = admin.locator(f'[data-nav="{section}"]')
    assert nav.get_attribute("aria-current") == "page"
    screenshot(admin, f"{section}-{width}")


@pytest.mark.parametrize("width", [1400, 1000, 800, 390])
def test_the_data_page_titles_results_and_shows_labelled_fields(
    admin: Any, base_url: str, width: int
) -> None:
    from playwright.sync_api import expect

    admin.set_viewport_size({"width": width, "height": HEIGHTS[width]})
    admin.goto(base_url + "/admin/data?q=never%20open%20the%20casing")
    result = admin.locator(".result", has_text=CHUNK_TITLE).first
    expect(result).to_be_visible(timeout=WAIT)
    for title in admin.locator(".result-title").all_inner_texts():
        assert not re.fullmatch(r"[0-9a-f-]{36}(:[sc]:.*)?", title), title
    result.click()
    fields = admin.locator("#data-detail [data-testid=fields]")
    expect(fields.locator("dt").first).to_have_text("Where", timeout=WAIT)
    expect(fields).to_contain_text("Never open the casing")
    expect(fields.locator("dd[data-field=scope]")).to_have_text("Only you")
    dts = fields.locator("dt").all_inner_texts()
    assert not {"documentId", "sectionId", "content", "summary", "path"} & set(dts), dts
    expect(admin.locator("#data-detail a", has_text="Open the document")).to_be_visible()
    screenshot(admin, f"data-{width}")


def test_internal_records_show_only_when_asked(admin: Any, base_url: str) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/data?q=memory-write%20note")
    status = admin.locator("#data-status")
    expect(status).to_contain_text("hidden (tick Show internal records)", timeout=WAIT)
    assert admin.locator(".result", has_text="memory-write: Note").count() == 0
    admin.check("#data-internal")
    expect(admin.locator(".result", has_text="memory-write: Note")).to_be_visible(timeout=WAIT)


def test_the_owner_adds_edits_shares_and_deletes_a_note(admin: Any, base_url: str) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/data")
    admin.click("#add-note")
    admin.fill("#note-title", "Wisteria")
    admin.fill("#note-text", "Prune the wisteria in July.")
    admin.click("[data-testid=note-form] button[type=submit]")
    detail = admin.locator("#data-detail")
    expect(detail.locator("h2")).to_have_text("Wisteria", timeout=WAIT)
    expect(detail.locator("dd[data-field=text]")).to_have_text("Prune the wisteria in July.")

    detail.locator("#node-edit").click()
    admin.fill("#edit-text", "Prune the wisteria in August, after it flowers.")
    detail.locator("[data-testid=edit-form] button[type=submit]").click()
    expect(detail.locator("dd[data-field=text]")).to_have_text(
        "Prune the wisteria in August, after it flowers.", timeout=WAIT
    )

    detail.locator("#node-scope").click()
    admin.check("#scope-public")
    admin.check("#agent-anna")
    screenshot(admin, "data-scope-1400")
    detail.locator("[data-testid=scope-form] button[type=submit]").click()
    expect(detail.locator("dd[data-field=scope]")).to_have_text("Public, for anna", timeout=WAIT)

    admin.fill("#data-q", "wisteria august")
    admin.press("#data-q", "Enter")
    row = admin.locator(".result", has_text="Wisteria")
    expect(row).to_be_visible(timeout=WAIT)
    row.click()
    expect(detail.locator("h2")).to_have_text("Wisteria", timeout=WAIT)
    detail.locator("#node-delete").click()
    expect(admin.locator("[data-testid=deleted]")).to_contain_text(
        "Deleted “Wisteria”", timeout=WAIT
    )
    expect(row).to_be_hidden()
    screenshot(admin, "data-deleted-1400")
    admin.click("[data-testid=undo-delete]")
    expect(detail.locator("h2")).to_have_text("Wisteria", timeout=WAIT)
    expect(row).to_be_visible()


def test_the_graph_narrows_to_what_search_finds_not_only_names(admin: Any, base_url: str) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/graph")
    expect(admin.locator("#graph-stats")).to_have_text(re.compile(r"^\d+ nodes"), timeout=WAIT)
    with admin.expect_response(lambda r: "/api/admin/graph?" in r.url and "q=relief" in r.url):
        admin.fill("#graph-q", "relief valve")
    expect(admin.locator("#graph-stats")).to_have_text(re.compile(r"^\d+ nodes?"), timeout=WAIT)
    drawn = {
        n["id"]: n["title"]
        for n in admin.evaluate("window.maxyGraph.active.nodes().map(n => n.data('node'))")
    }
    searched = admin.request.get(
        base_url + "/api/admin/search", params={"q": "relief valve", "limit": "20"}
    ).json()
    listed = {r["id"]: r["title"] for r in searched["results"]}
    assert set(drawn) == set(listed), (drawn, listed, searched["hiddenInternal"])
    assert stats_count(admin) == len(drawn)
    screenshot(admin, "graph-narrowed-1400")
