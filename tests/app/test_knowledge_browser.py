"""The upload component, Forget with Undo and the versions dialog in headless Chromium, through
the real edge, app and engine: what the owner sees on the Data and Artefacts pages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.app import test_browser as shell_tests
from tests.support import documents
from tests.support.processes import Neo4jServer
from tests.support.stacks import Stack, make_env, running_stack

pytestmark = pytest.mark.timeout(900)

# The shell tests' Chromium and logged-in admin tab, resolved against this module's `stack`.
browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

WAIT = 240_000  # ms; a deadline against hangs (embedding on a loaded machine), not a timing check


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("knowledge-browser")
    env = make_env(neo4j_server, root / "data")
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        yield running


def choose(page: Any, name: str, data: bytes, mime: str = "application/octet-stream") -> None:
    """Pick a file with the component's file picker."""
    picker = page.locator('[data-testid="upload-input"]')
    picker.set_input_files({"name": name, "mimeType": mime, "buffer": data})


def drop(page: Any, name: str, text: str) -> None:
    """Drop a file on the component, as a drag from the desktop does."""
    transfer = page.evaluate_handle(
        "([name, text]) => { const t = new DataTransfer();"
        " t.items.add(new File([text], name, {type: 'text/markdown'})); return t; }",
        [name, text],
    )
    page.locator('[data-testid="upload"]').dispatch_event("drop", {"dataTransfer": transfer})


def item(page: Any, name: str) -> Any:
    return page.locator(".upload-item", has_text=name).first


def finished(page: Any, name: str) -> str:
    """The line the upload of ``name`` ends with."""
    row = item(page, name)
    row.locator('.upload-status[role="status"], .upload-status[role="alert"]').wait_for(
        timeout=WAIT
    )
    return str(row.locator(".upload-status").inner_text())


def search(page: Any, query: str) -> None:
    page.fill("#data-q", query)
    page.press("#data-q", "Enter")
    page.locator("#data-status", has_text=re.compile("result|Nothing found")).wait_for(
        timeout=30_000
    )


def test_dropping_and_choosing_files_on_the_data_page(admin: Any, base_url: str) -> None:
    admin.goto(base_url + "/admin/data")
    component = admin.locator('[data-testid="upload"]')
    assert component.is_visible()
    assert "up to 50 MB" in component.inner_text()
    drop(admin, "wombat-care.md", "# Wombat care\n\nThe wombat sleeps in the burrow by the gate.")
    assert finished(admin, "wombat-care.md").startswith("Added “Wombat care”:")
    choose(admin, "Garden Book.pdf", documents.book(2), "application/pdf")
    assert "Added “The Garden Book”" in finished(admin, "Garden Book.pdf")
    choose(admin, "locked.pdf", documents.encrypted(documents.book(1)), "application/pdf")
    refused = finished(admin, "locked.pdf")
    assert "protected by a password" in refused
    assert item(admin, "locked.pdf").get_attribute("data-state") == "failed"
    choose(admin, "holiday.zip", b"PK\x03\x04")
    assert "not a kind of file" in finished(admin, "holiday.zip")
    screenshot(admin, "data-upload")
    search(admin, "wombat burrow gate")
    assert admin.locator('#data-results [data-testid="row-versions"]').count() >= 1


def test_forget_with_undo_on_a_result_row(admin: Any, base_url: str) -> None:
    admin.goto(base_url + "/admin/data")
    drop(admin, "pangolin.md", "# Pangolin\n\nThe pangolin visits the compost heap at night.")
    finished(admin, "pangolin.md")
    search(admin, "pangolin compost heap")
    # The document's own row (its sections and chunks have rows of their own).
    document = admin.locator(".badge", has_text=re.compile("^KnowledgeDocument$"))
    row = admin.locator("#data-results li", has=document, has_text="angolin").first
    row_id = row.locator("button.result").get_attribute("data-id")
    row = admin.locator("#data-results li", has=admin.locator(f'button[data-id="{row_id}"]'))
    row.locator('[data-testid="row-forget"]').click()
    row.locator('[data-testid="forgotten"], .alert').first.wait_for(timeout=30_000)
    assert "Forgotten" in row.inner_text(), row.inner_html()
    search(admin, "pangolin compost heap")  # gone from search at once
    assert admin.locator("#data-results li", has_text="angolin").count() == 0
    # Forget again from a fresh search, then Undo brings it back.
    search(admin, "wombat burrow gate")
    row = admin.locator("#data-results li", has_text="ombat").first
    row.locator('[data-testid="row-forget"]').click()
    row.locator('[data-testid="row-undo"]').click()
    row.locator('[data-testid="row-forget"]').wait_for(state="visible", timeout=30_000)
    search(admin, "wombat burrow gate")
    assert admin.locator("#data-results li", has_text="ombat").count() >= 1


def test_a_documents_versions_from_its_row(admin: Any, base_url: str) -> None:
    admin.goto(base_url + "/admin/data")
    drop(admin, "tuatara.md", "# Tuatara\n\nThe tuatara basks on the north wall.")
    finished(admin, "tuatara.md")
    drop(admin, "tuatara.md", "# Tuatara\n\nThe tuatara basks on the south wall.")
    admin.locator(".upload-item", has_text="version 2").wait_for(timeout=WAIT)
    search(admin, "tuatara basks wall")
    row = admin.locator("#data-results li", has_text="uatara").first
    row.locator('[data-testid="row-versions"]').first.click()
    dialog = admin.locator('[data-testid="versions"]')
    dialog.locator('[data-testid="versions-list"] li').nth(1).wait_for(timeout=30_000)
    assert dialog.locator('[data-testid="versions-list"] li').count() == 2
    dialog.locator('li[data-version="2"] button', has_text="Changes").click()
    diff = dialog.locator('[data-testid="version-diff"]')
    diff.wait_for(timeout=30_000)
    assert "-The tuatara basks on the north wall." in diff.inner_text()
    assert "+The tuatara basks on the south wall." in diff.inner_text()
    screenshot(admin, "versions")
    dialog.locator('li[data-version="1"] [data-testid="version-restore"]').click()
    dialog.locator("p[role=status]", has_text="Restored version 1 as version 3").wait_for(
        timeout=WAIT
    )
    assert dialog.locator('[data-testid="versions-list"] li').count() == 3


def test_the_artefacts_page_takes_uploads_too(admin: Any, base_url: str) -> None:
    admin.goto(base_url + "/admin/artefacts")
    data = documents.docx([(1, "Axolotl tank"), (0, "Change a third of the water weekly.")])
    choose(admin, "axolotl.docx", data)
    assert "Added “Axolotl tank”" in finished(admin, "axolotl.docx")
    screenshot(admin, "artefacts-upload")
