"""The Updates page in headless Chromium, through the real edge and app.

The owner finds an update that the USB scanner offered from a real stick image, presses
Install, cancels once, then confirms; the request reaches the disk only after the confirmation.
The test then does what the root path unit does on the device — runs `maxy ota run-request` —
and the page shows the run's progress lines as they are appended.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.ota import offers
from appliance.ota.offers import Offer, UpdatePaths
from appliance.ota.usb import scanner_from_settings
from tests.app import test_browser as shell_tests
from tests.ota import cards
from tests.ota.cards import make_device, make_signer, slot_images, trust
from tests.ota.sticks import fat_stick
from tests.support.processes import maxy, wait_until
from tests.support.stacks import Stack, app_env, running_stack

pytestmark = pytest.mark.timeout(240)

# The shell tests' Chromium and logged-in admin tab, resolved against this module's `stack`.
browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

WAIT = 20_000  # ms; a deadline against hangs, not a timing assertion


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("updates-browser")
    # A simulated device (card image, firmware state, reboot command) sharing the app's data dir.
    device = make_device(root, slot_images(root / "a", cards.RUNNING_VERSION))
    signer = make_signer(root / "keys", "release")
    trust(device, signer)
    ota = {k: v for k, v in device.env.items() if k.startswith("MAXY_OTA_")}
    env = app_env(root, **ota)
    assert env.settings.data_dir == device.data
    bundle = cards.make_bundle(root / "bundles", slot_images(root / "b", "1.4.0"), signer)
    stick = fat_stick(root / "stick.img", [bundle])
    found = scanner_from_settings(env.settings).scan(stick, "/dev/sda1 (SanDisk Cruzer Blade)")
    assert [o.verified for o in found] == [True], found
    with running_stack(env, root / "logs", "app", "edge") as running:
        yield running


def paths_of(stack: Stack) -> UpdatePaths:
    return UpdatePaths.from_settings(stack.env.settings)


def the_offer(stack: Stack) -> Offer:
    [offer] = offers.load_offers(paths_of(stack))
    return offer


def run_request(stack: Stack) -> subprocess.CompletedProcess[str]:
    """What maxy-ota-request.service runs when the request file appears."""
    return subprocess.run(
        maxy("ota", "run-request"),
        env=stack.env.vars,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_owner_installs_an_offered_update_after_confirming(
    admin: Any, base_url: str, stack: Stack
) -> None:
    paths = paths_of(stack)
    offer = the_offer(stack)
    admin.goto(base_url + "/admin/updates")
    assert admin.title() == "Updates · Maxy"
    assert admin.locator('[data-nav="updates"]').get_attribute("aria-current") == "page"
    row = admin.locator(f'li.offer[data-offer="{offer.id}"]')
    row.wait_for(timeout=WAIT)
    assert "Maxy 1.4.0" in row.inner_text()
    assert "Verified" in row.inner_text() and "SanDisk Cruzer Blade" in row.inner_text()
    assert admin.locator("#updates-empty").is_hidden()
    screenshot(admin, "updates-offer")

    # Install opens the confirmation; Cancel leaves nothing behind.
    row.locator('[data-testid="install"]').click()
    dialog = admin.locator('[data-testid="confirm-dialog"]')
    dialog.wait_for(state="visible", timeout=WAIT)
    assert "Install Maxy 1.4.0" in dialog.inner_text()
    screenshot(admin, "updates-confirm")
    admin.locator("#updates-cancel").click()
    dialog.wait_for(state="hidden", timeout=WAIT)
    assert not paths.request.exists()

    # Install, then "Install and restart": now the request is written.
    row.locator('[data-testid="install"]').click()
    dialog.wait_for(state="visible", timeout=WAIT)
    admin.locator('[data-testid="confirm-install"]').click()
    dialog.wait_for(state="hidden", timeout=WAIT)
    wait_until(paths.request.exists, 20, "the install request")
    request = json.loads(paths.request.read_text())
    assert request["offer"] == offer.id and request["sha256"] == offer.sha256
    progress = admin.locator('[data-testid="progress"]')
    progress.wait_for(state="visible", timeout=WAIT)
    admin.locator('[data-testid="install"]').first.wait_for(timeout=WAIT)
    assert admin.locator('[data-testid="install"]').first.is_disabled()

    # Root's side: the path unit starts run-request; its lines appear on the page.
    done = run_request(stack)
    assert not paths.request.exists()
    lines = [json.loads(line) for line in paths.progress.read_text().splitlines()]
    assert lines[0]["phase"] == "start", (lines, done.stderr)
    # One row per phase, in order, each showing its latest line.
    phases = list(dict.fromkeys(line["phase"] for line in lines))
    latest = {line["phase"]: line for line in lines}
    rows = admin.locator('[data-testid="progress-log"] li')
    admin.locator(f'[data-testid="progress-log"] li[data-phase="{phases[-1]}"]').wait_for(
        timeout=WAIT
    )
    assert [rows.nth(i).get_attribute("data-phase") for i in range(rows.count())] == phases
    for i, name in enumerate(phases):
        assert latest[name]["message"] in rows.nth(i).inner_text(), name
    assert f"Installing Maxy 1.4.0 from {offer.name}." in rows.first.inner_text()
    assert (
        admin.locator('[data-testid="progress-phase"]').inner_text()
        == (latest[phases[-1]]["message"])
    )
    assert done.returncode == 0, done.stderr
    assert lines[-1]["phase"] in ("done", "reboot")
    assert "error" not in [line["phase"] for line in lines]
    bar = admin.locator("#updates-bar")
    assert bar.get_attribute("value") == bar.get_attribute("max")  # the last phase is complete
    screenshot(admin, "updates-progress")


def test_the_page_without_offers_says_how_to_get_one(
    admin: Any, base_url: str, stack: Stack
) -> None:
    paths = paths_of(stack)
    saved = paths.offers.read_text()
    paths.offers.unlink()
    try:
        admin.goto(base_url + "/admin/updates")
        empty = admin.locator('[data-testid="updates-empty"]')
        empty.wait_for(timeout=WAIT)
        assert ".maxyupdate" in empty.inner_text() and "FAT32 or ext4" in empty.inner_text()
        assert admin.locator("li.offer").count() == 0
    finally:
        paths.offers.write_text(saved)
