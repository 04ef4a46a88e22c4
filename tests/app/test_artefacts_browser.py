"""The Artefacts view in headless Chromium, through the real edge, app and engine, at the shell's
breakpoints: a row opens in the artefact pane (a sheet over the page where there is no room for
the pane), a document saves itself as the owner types and is ingested again, an agent's SOUL.md
too, a specialist is read-only, a PDF shows inline where the browser has a viewer and offers a
Download where it has none, and a row with nothing to read says why in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.core.documents import read_text, text_path
from tests.app import test_browser as shell_tests
from tests.app.test_artefacts import HANDBOOK, PDF
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


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("artefacts-browser")
    env = make_env(neo4j_server, root / "data")
    anna = add_agent(env, "anna", {"displayName": "Anna the Gardener"})
    (anna / "IDENTITY.md").write_text("You are Anna, who knows the garden.\n")
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        account = env.settings.accounts_dir / env.account_id
        (account / "attachments").mkdir()
        (account / "attachments" / "brochure.pdf").write_bytes(PDF)
        for title, text, attachment in (
            ("Garden handbook", HANDBOOK, "handbook"),
            ("Brochure", "Seeds and bulbs.", f"file:{account / 'attachments' / 'brochure.pdf'}"),
            ("Old notes", "Written before texts were kept.", "old-notes"),
        ):
            done = running.rpc("ingest", {"title": title, "text": text, "attachmentId": attachment})
            if title == "Old notes":
                text_path(account, done["documentId"]).unlink()
        yield running


def account_dir(stack: Stack) -> Path:
    return stack.env.settings.accounts_dir / stack.env.account_id


def open_row(page: Any, name: str) -> None:
    page.locator(".artefact-row", has_text=name).first.click()


@pytest.mark.parametrize("width", [1400, 1000, 800, 390])
def test_a_document_opens_in_the_pane_at_each_breakpoint(
    admin: Any, base_url: str, width: int
) -> None:
    from playwright.sync_api import expect

    admin.set_viewport_size({"width": width, "height": HEIGHTS[width]})
    admin.goto(base_url + "/admin/artefacts")
    assert admin.title() == "Artefacts · Maxy"
    expect(admin.locator("#artefact-documents .artefact-row")).to_have_count(3, timeout=WAIT)
    rows = admin.locator("#artefact-agents .artefact-row").all_inner_texts()
    assert any("Anna the Gardener · IDENTITY.md" in row for row in rows)
    open_row(admin, "Garden handbook")
    pane = admin.locator("#artefacts")
    expect(pane).to_be_visible(timeout=WAIT)
    expect(admin.locator("#artefact-title")).to_have_text("Garden handbook", timeout=WAIT)
    expect(admin.locator("#artefact-text")).to_have_value(HANDBOOK, timeout=WAIT)
    box = pane.bounding_box()
    assert box is not None and box["width"] >= min(width, 240)
    if width <= 1080:  # a sheet over the page, closed with its button
        assert box["x"] + box["width"] >= width - 1
    screenshot(admin, f"artefacts-{width}")
    if width <= 1080:
        admin.click("#artefact-close")
        expect(pane).to_be_hidden(timeout=WAIT)
        assert admin.url == base_url + "/admin/artefacts"


def test_a_document_saves_itself_as_the_owner_types(
    admin: Any, base_url: str, stack: Stack
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/artefacts")
    open_row(admin, "Garden handbook")
    editor = admin.locator("#artefact-text")
    expect(editor).to_have_value(HANDBOOK, timeout=WAIT)
    document_id = admin.evaluate("new URL(location.href).searchParams.get('open').split(':')[1]")
    editor.press("End")
    editor.press("Control+End")
    editor.type("\n\n# Shed\n\nThe spare key hides under the zanzibar pot.")
    expect(admin.locator("#artefact-state")).to_have_text("Saved", timeout=WAIT)
    kept = read_text(account_dir(stack), document_id)
    assert kept is not None and kept.endswith("The spare key hides under the zanzibar pot.")
    found = admin.request.get(
        base_url + "/api/admin/search", params={"q": "zanzibar pot spare key", "types": "Chunk"}
    ).json()
    assert found["results"][0]["title"] == "Garden handbook \u203a Shed"
    assert "zanzibar" in found["results"][0]["snippet"]
    admin.reload()  # ?open= reopens it, with the saved text
    expect(admin.locator("#artefact-text")).to_have_value(kept, timeout=WAIT)


def test_an_agents_soul_saves_and_a_specialist_is_read_only(
    admin: Any, base_url: str, stack: Stack
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/artefacts")
    open_row(admin, "Anna the Gardener · SOUL.md")
    expect(admin.locator("[data-testid=artefact-banner]")).to_have_text(
        "No SOUL.md yet: what you type here creates it.", timeout=WAIT
    )
    admin.locator("#artefact-text").fill("Warm, brief, and fond of compost.")
    expect(admin.locator("#artefact-state")).to_have_text("Saved", timeout=WAIT)
    soul = account_dir(stack) / "agents" / "anna" / "SOUL.md"
    assert soul.read_text() == "Warm, brief, and fond of compost."
    open_row(admin, "librarian")
    expect(admin.locator("#artefact-state")).to_have_text("Read-only", timeout=WAIT)
    expect(admin.locator("pre#artefact-text")).to_contain_text("name: librarian", timeout=WAIT)
    assert admin.locator("textarea#artefact-text").count() == 0
    screenshot(admin, "artefact-specialist-1400")


def test_a_pdf_shows_inline_where_the_browser_can_and_downloads_where_it_cannot(
    admin: Any, base_url: str, browser: Any, admin_state: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    admin.add_init_script(
        "Object.defineProperty(navigator, 'pdfViewerEnabled', {get: () => false})"
    )
    admin.goto(base_url + "/admin/artefacts")
    open_row(admin, "Brochure")
    expect(admin.locator("[data-testid=artefact-banner]")).to_have_text(
        "This browser cannot show PDFs here: download it to read it.", timeout=WAIT
    )
    link = admin.locator("[data-testid=artefact-download]")
    with admin.expect_download() as downloaded:
        link.click()
    assert Path(downloaded.value.path()).read_bytes() == PDF
    assert downloaded.value.suggested_filename == "brochure.pdf"
    screenshot(admin, "artefact-pdf-download-1400")

    context = browser.new_context(
        storage_state=admin_state, viewport={"width": 1400, "height": 900}
    )
    try:
        page = context.new_page()
        page.add_init_script(
            "Object.defineProperty(navigator, 'pdfViewerEnabled', {get: () => true})"
        )
        page.goto(base_url + "/admin/artefacts")
        with page.expect_response(lambda r: r.url.endswith("/file")) as served:
            open_row(page, "Brochure")
        assert served.value.status == 200
        assert served.value.headers["content-type"] == "application/pdf"
        frame = page.locator("iframe[data-testid=artefact-pdf]")
        expect(frame).to_be_visible(timeout=WAIT)
        assert (frame.get_attribute("src") or "").endswith("/file")
        screenshot(page, "artefact-pdf-inline-1400")
    finally:
        context.close()


def test_a_row_with_nothing_to_read_says_why_in_one_line(admin: Any, base_url: str) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/artefacts")
    open_row(admin, "Old notes")
    banner = admin.locator("[data-testid=artefact-banner]")
    expect(banner).to_contain_text("No readable file:", timeout=WAIT)
    assert "\n" not in banner.inner_text()
    assert admin.locator("#artefact-text").count() == 0
    screenshot(admin, "artefact-missing-1400")
