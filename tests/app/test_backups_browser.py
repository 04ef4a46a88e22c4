"""The Backups page in headless Chromium, through the real edge, app and engine: Back up now
lists the new archive, Download gives the archive, Restore asks for its name and brings the
graph back as it was; a damaged archive is refused with the reason, and changing anything needs
the CSRF header."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.app import test_browser as shell_tests
from tests.support.processes import Neo4jServer
from tests.support.stacks import Stack, make_env, running_stack

pytestmark = pytest.mark.timeout(300)

browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

WAIT = 60_000  # ms; a deadline against hangs, not a timing assertion


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("backups-browser")
    env = make_env(neo4j_server, root / "data")
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        running.rpc("write", {"label": "Note", "properties": {"name": "Kept", "text": "Keep me."}})
        yield running


def _rpc(stack: Stack, method: str, params: dict[str, Any]) -> Any:
    """Call the engine from a thread of its own (Playwright's loop runs in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(stack.rpc, method, params).result()


def _titles(stack: Stack) -> set[str]:
    found = _rpc(stack, "graph.sample", {"labels": ["Note"], "limit": 50})
    return {str(node["title"]) for node in found["nodes"]}


def test_the_owner_backs_up_downloads_and_restores(admin: Any, base_url: str, stack: Stack) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/admin/backups")
    assert admin.title() == "Backups · Maxy"
    expect(admin.locator("[data-testid=backups-empty]")).to_be_visible(timeout=WAIT)
    expect(admin.locator("[data-testid=backups-schedule]")).to_contain_text("every night at 03:00")
    admin.click("[data-testid=backups-create]")
    expect(admin.locator("[data-testid=backups-status]")).to_contain_text("Backed up", timeout=WAIT)
    row = admin.locator("[data-testid=backup]")
    expect(row).to_have_count(1)
    name = row.get_attribute("data-name")
    assert name and name.startswith("maxy-backup-")
    screenshot(admin, "backups-1400")

    download = admin.request.get(base_url + f"/api/admin/backups/{name}")
    assert download.status == 200
    with tarfile.open(fileobj=io.BytesIO(download.body())) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert manifest["format"] == "maxy-backup" and manifest["graph"]["labels"]["Note"] >= 1

    # Written after the backup: the restore takes the graph back to before it.
    _rpc(stack, "write", {"label": "Note", "properties": {"name": "Later", "text": "Gone soon."}})
    assert {"Kept", "Later"} <= _titles(stack)

    row.locator("[data-testid=backup-restore]").click()
    dialog = admin.locator("[data-testid=restore-dialog]")
    expect(dialog).to_be_visible()
    go = dialog.locator("[data-testid=restore-go]")
    expect(go).to_be_disabled()
    admin.fill("[data-testid=restore-confirm-name]", "not the name")
    expect(go).to_be_disabled()
    admin.fill("[data-testid=restore-confirm-name]", name)
    screenshot(admin, "backups-restore-dialog-1400")
    go.click()
    expect(admin.locator("[data-testid=backups-status]")).to_contain_text(
        f"Restored {name}", timeout=WAIT
    )
    titles = _titles(stack)
    assert "Kept" in titles and "Later" not in titles


def test_a_damaged_archive_is_refused_and_changes_need_csrf(
    admin: Any, base_url: str, stack: Stack
) -> None:
    from playwright.sync_api import expect

    folder = stack.env.settings.backups_path
    good = _rpc(stack, "backup.create", {})["name"]
    bad = "maxy-backup-20000101T000000Z.tar"
    shutil.copy(folder / good, folder / bad)
    with tarfile.open(folder / bad) as tar:
        offset = tar.getmember("graph/nodes.msgpack.gz").offset_data
    data = bytearray((folder / bad).read_bytes())
    data[offset + 20] ^= 0xFF
    (folder / bad).write_bytes(bytes(data))
    before = _titles(stack)

    admin.goto(base_url + "/admin/backups")
    row = admin.locator(f"[data-testid=backup][data-name='{bad}']")
    row.locator("[data-testid=backup-restore]").click()
    admin.fill("[data-testid=restore-confirm-name]", bad)
    admin.locator("[data-testid=restore-go]").click()
    error = admin.locator("[data-testid=backups-error]")
    expect(error).to_contain_text("corrupt", timeout=WAIT)
    expect(error).to_contain_text(bad)
    assert _titles(stack) == before

    no_csrf = admin.request.post(
        base_url + f"/api/admin/backups/{good}/restore", data={"confirm": good}
    )
    assert no_csrf.status == 403 and no_csrf.json()["code"] == "csrf"
    traversal = admin.request.get(base_url + "/api/admin/backups/..%2F..%2Fkeys%2Fcookie-hmac.key")
    assert traversal.status == 404
