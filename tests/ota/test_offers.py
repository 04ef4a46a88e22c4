"""Offers and install requests: the owner's confirmation is the only way to an install, and
``maxy ota run-request`` refuses anything stale, repeated, changed or not verified.

Offers here are real: a real signed bundle on a real FAT stick image, found by the USB scanner.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from appliance.core.config import load_settings
from appliance.ota import offers
from appliance.ota.layout import SLOT_B
from appliance.ota.offers import (
    Offer,
    RequestRefused,
    UpdatePaths,
    check_request,
    run_active,
    run_lock,
    run_request,
    write_request,
)
from appliance.ota.usb import scanner_from_settings
from tests.ota import cards
from tests.ota.cards import (
    SimDevice,
    SlotImages,
    make_device,
    make_signer,
    maxy_ota,
    slot_images,
    trust,
)
from tests.ota.sticks import Keys, fat_stick, flip_byte, make_bundle, make_keys, scanner

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def stick(keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("stick")
    good = make_bundle(folder, keys)
    bad = make_bundle(folder, keys, name="other-board.maxyupdate", boards=("rpi5",))
    return fat_stick(folder / "stick.img", [good, bad])


@pytest.fixture
def paths(tmp_path: Path) -> UpdatePaths:
    return UpdatePaths(tmp_path / "updates")


@pytest.fixture
def offered(paths: UpdatePaths, keys: Keys, stick: Path) -> dict[str, Offer]:
    """The stick's two offers, as the watcher records them: one verified, one refused."""
    found = scanner(paths, keys).scan(stick, "/dev/sda1")
    return {
        "good": next(o for o in found if o.verified),
        "refused": next(o for o in found if not o.verified),
    }


def progress_lines(paths: UpdatePaths) -> list[dict[str, Any]]:
    if not paths.progress.exists():
        return []
    return [json.loads(line) for line in paths.progress.read_text().splitlines()]


def iso(moment: datetime) -> str:
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_no_request_means_nothing_to_do(paths: UpdatePaths, offered: dict[str, Offer]) -> None:
    assert run_request(paths) == 0
    assert progress_lines(paths) == []
    assert not run_active(paths) and not offers.request_pending(paths)


def test_a_refused_offer_cannot_even_be_requested(
    paths: UpdatePaths, offered: dict[str, Offer]
) -> None:
    with pytest.raises(RequestRefused, match="rpi5"):
        write_request(paths, offered["refused"], offers.new_nonce())
    assert not paths.request.exists()


def test_a_file_changed_after_verification_is_refused_before_apply(
    paths: UpdatePaths, offered: dict[str, Offer]
) -> None:
    good = offered["good"]
    write_request(paths, good, offers.new_nonce())
    assert offers.request_pending(paths)
    flip_byte(paths.bundle(good), 2000)

    assert run_request(paths) == 1

    [line] = progress_lines(paths)
    assert line["phase"] == "error"
    assert "changed after it was verified" in line["message"]
    assert "Nothing was installed" in line["message"]
    assert not paths.request.exists(), "a request is taken once, refused or not"


def _request(chosen: Offer, **changes: Any) -> dict[str, Any]:
    request = {
        "offer": chosen.id,
        "nonce": offers.new_nonce(),
        "sha256": chosen.sha256,
        "bootId": offers.boot_id(),
        "requestedAt": offers.now_iso(),
    }
    request.update(changes)
    return request


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        # Offsets from the moment the test runs (collection may be many minutes earlier).
        ({"requestedAt": timedelta(minutes=-11)}, "stale"),
        ({"requestedAt": timedelta(minutes=5)}, "stale"),
        ({"requestedAt": "yesterday"}, "stale"),
        ({"bootId": "0f0f0f0f-0000-4000-8000-000000000000"}, "before Maxy restarted"),
        ({"nonce": ""}, "no valid nonce"),
        ({"nonce": "../../etc/passwd"}, "no valid nonce"),
        ({"offer": "0123456789abcdef"}, "no longer offered"),
        ({"offer": "../../x"}, "no longer offered"),
        ({"sha256": "0" * 64}, "offer changed after it was confirmed"),
    ],
    ids=[
        "old",
        "future",
        "no-time",
        "other-boot",
        "no-nonce",
        "odd-nonce",
        "unknown-offer",
        "odd-offer",
        "other-sha",
    ],
)
def test_requests_that_are_not_fresh_and_exact_are_refused(
    paths: UpdatePaths, offered: dict[str, Offer], changes: dict[str, Any], reason: str
) -> None:
    now = datetime.now(UTC)
    changes = {k: iso(now + v) if isinstance(v, timedelta) else v for k, v in changes.items()}
    offers.write_json_atomic(paths.request, _request(offered["good"], **changes))
    assert run_request(paths) == 1
    lines = progress_lines(paths)
    assert [line["phase"] for line in lines] == ["error"], lines
    assert reason in lines[0]["message"]
    assert not paths.request.exists()


def test_a_request_for_the_refused_offer_is_refused(
    paths: UpdatePaths, offered: dict[str, Offer]
) -> None:
    offers.write_json_atomic(paths.request, _request(offered["refused"]))
    assert run_request(paths) == 1
    [line] = progress_lines(paths)
    assert line["phase"] == "error" and "rpi5" in line["message"]


@pytest.mark.parametrize("kind", ["garbage", "symlink", "list"])
def test_an_unreadable_request_is_refused_and_removed(
    paths: UpdatePaths, offered: dict[str, Offer], tmp_path: Path, kind: str
) -> None:
    paths.requests.mkdir(parents=True, exist_ok=True)
    if kind == "garbage":
        paths.request.write_bytes(b"\x00{not json")
    elif kind == "list":
        paths.request.write_text("[]")
    else:
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps(_request(offered["good"])))
        os.symlink(target, paths.request)
    assert run_request(paths) == 1
    [line] = progress_lines(paths)
    assert line["phase"] == "error" and "Confirm again" in line["message"]
    assert not paths.request.exists() and not paths.request.is_symlink()


def test_a_request_is_carried_out_once(paths: UpdatePaths, offered: dict[str, Offer]) -> None:
    request = _request(offered["good"])
    assert check_request(paths, request, datetime.now(UTC).timestamp()) == offered["good"]
    with pytest.raises(RequestRefused, match="already carried out once"):
        check_request(paths, request, datetime.now(UTC).timestamp())


def test_a_second_run_waits_for_none_and_is_refused(
    paths: UpdatePaths, offered: dict[str, Offer]
) -> None:
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with run_lock(paths):
            holding.set()
            release.wait(60)

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert holding.wait(30)
        assert run_active(paths)
        write_request(paths, offered["good"], offers.new_nonce())
        assert run_request(paths) == 1
    finally:
        release.set()
        other.join(30)
    [line] = progress_lines(paths)
    assert line["phase"] == "error" and "Another update is being installed" in line["message"]
    assert not run_active(paths)


def test_offers_survive_a_damaged_file(paths: UpdatePaths, offered: dict[str, Offer]) -> None:
    assert {o.id for o in offers.load_offers(paths)} == {o.id for o in offered.values()}
    data = json.loads(paths.offers.read_text())
    data["offers"].append({"id": "not-an-id", "name": "x"})
    data["offers"].append("junk")
    paths.offers.write_text(json.dumps(data))
    assert {o.id for o in offers.load_offers(paths)} == {o.id for o in offered.values()}
    paths.offers.write_text("{")
    assert offers.load_offers(paths) == []


def test_a_request_nobody_took_in_time_no_longer_blocks_the_page(
    paths: UpdatePaths, offered: dict[str, Offer]
) -> None:
    write_request(paths, offered["good"], offers.new_nonce())
    assert offers.request_pending(paths)
    old = paths.request.stat().st_mtime - offers.REQUEST_TTL_S - 5
    os.utime(paths.request, (old, old))
    assert not offers.request_pending(paths)


# ── End to end: stick → offer → confirmed request → run-request → apply on a card image ────


def _run_request(device: SimDevice) -> subprocess.CompletedProcess[str]:
    """What maxy-ota-request.service runs when the app wrote a request."""
    return subprocess.run(
        maxy_ota("run-request"),
        env=device.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def device_with_offer(tmp_path: Path) -> tuple[SimDevice, Offer, SlotImages]:
    """A simulated device (card image, firmware state) and a verified offer of 1.4.0 for it."""
    device = make_device(tmp_path / "device", slot_images(tmp_path / "a", cards.RUNNING_VERSION))
    signer = make_signer(tmp_path / "keys", "release")
    trust(device, signer)
    new = slot_images(tmp_path / "b", "1.4.0")
    bundle = cards.make_bundle(tmp_path / "bundles", new, signer)
    stick = fat_stick(tmp_path / "stick.img", [bundle])
    # The scanner exactly as `maxy ota watch-usb` builds it from the device's settings.
    [offer] = scanner_from_settings(load_settings(device.env)).scan(stick, "/dev/sda1")
    assert offer.verified, offer.error
    return device, offer, new


def test_a_confirmed_offer_is_installed_with_its_progress_recorded(
    device_with_offer: tuple[SimDevice, Offer, SlotImages],
) -> None:
    device, offer, new = device_with_offer
    paths = UpdatePaths(device.data / "updates")
    write_request(paths, offer, offers.new_nonce())

    done = _run_request(device)

    assert done.returncode == 0, done.stderr
    lines = progress_lines(paths)
    assert len({line["run"] for line in lines}) == 1
    assert all(line["offer"] == offer.id and line["version"] == "1.4.0" for line in lines)
    phases = [line["phase"] for line in lines]
    assert phases[0] == "start"
    for phase in ("verify", "write-boot", "write-root", "readback", "arm", "reboot"):
        assert phase in phases, phases
    assert "error" not in phases
    assert device.slot_hashes(SLOT_B) == new.hashes(SLOT_B), "slot B holds exactly the bundle"
    assert device.armed() and "reboot" in device.reboots.read_text()
    assert not paths.request.exists()


def test_a_copy_changed_after_the_offer_never_reaches_the_card(
    device_with_offer: tuple[SimDevice, Offer, SlotImages],
) -> None:
    device, offer, _ = device_with_offer
    paths = UpdatePaths(device.data / "updates")
    before = device.slot_hashes(SLOT_B)
    write_request(paths, offer, offers.new_nonce())
    flip_byte(paths.bundle(offer), 700)

    done = _run_request(device)

    assert done.returncode == 1
    [line] = progress_lines(paths)
    assert line["phase"] == "error" and "changed after it was verified" in line["message"]
    assert device.slot_hashes(SLOT_B) == before and not device.armed()
    assert not device.reboots.exists()
