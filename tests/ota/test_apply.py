"""`maxy ota apply` as a real process on a card image: exact slot contents, the armed trial.

The firmware is modelled by tests/ota/cards.py ``SimDevice.boot``: it reads autoboot.txt with
mtools and applies the tryboot rules, then writes the device-tree files the next boot sees.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.ota.autoboot import render
from appliance.ota.layout import SLOT_A, SLOT_B
from appliance.ota.progress import APPLY_PHASES
from tests.ota.cards import (
    Signer,
    SimDevice,
    SlotImages,
    gpt_partuuid,
    make_bundle,
    mtype_autoboot,
    mtype_cmdline,
    ota,
    progress_lines,
    read_partition,
    slot_images,
)


def test_apply_writes_exactly_the_bundle_and_arms_one_trial_boot(
    tmp_path: Path, device: SimDevice, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    new = releases["1.0.0"]
    bundle = make_bundle(tmp_path / "bundles", new, release_key)
    committed = device.slot_hashes(SLOT_A)

    done = ota(device, "apply", str(bundle), "--progress", "json", "--yes")

    assert done.returncode == 0, done.stderr
    lines = progress_lines(done.stdout)
    phases = [line["phase"] for line in lines]
    assert list(dict.fromkeys(phases)) == [*APPLY_PHASES, "done"]  # every phase, in order
    assert all(0 <= line["done"] <= line["total"] for line in lines)  # type: ignore[operator]
    # the inactive slot holds exactly the bundle's images, byte for byte
    assert read_partition(device.card, SLOT_B.boot.number) == new.boot_b.read_bytes()
    assert read_partition(device.card, SLOT_B.root.number) == new.root.read_bytes()
    # ... the boot image made for slot B: the trial starts root_b, never the old root_a
    root_b = gpt_partuuid(device.card, SLOT_B.root.number)
    assert f"root=PARTUUID={root_b}" in mtype_cmdline(device.card, SLOT_B).split()
    assert root_b != gpt_partuuid(device.card, SLOT_A.root.number)
    assert device.slot_hashes(SLOT_A) == committed  # the committed slot is untouched
    assert mtype_autoboot(device.card) == render(SLOT_A, SLOT_B)
    assert device.reboot_param.read_text() == "0 tryboot"
    assert device.reboots.read_text() == "reboot\n"
    state = device.state()
    assert state["trial"]["slot"] == "b" and state["trial"]["version"] == "1.0.0"  # type: ignore[index]
    assert state["committed"] == {"slot": "a", "version": "0.1.0"}

    # The armed reboot starts slot B once, as a trial; a second update waits for its commit.
    assert device.boot() is SLOT_B
    again = ota(device, "apply", str(bundle), "--progress", "json", "--yes")
    assert again.returncode == 1
    assert "not committed yet" in again.stderr.splitlines()[-1]
    assert progress_lines(again.stdout)[-1]["phase"] == "error"

    # A power cut during the trial: the firmware goes back to A; commit then settles the story.
    assert device.boot(power_cut=True) is SLOT_A
    settled = ota(device, "commit")
    assert settled.returncode == 0, settled.stderr
    assert "did not complete its trial boot" in settled.stdout
    status = json.loads(ota(device, "status", "--json").stdout)
    assert status["last"]["outcome"] == "rolled-back"
    assert "went back to 0.1.0" in status["last"]["text"]
    assert status["slots"]["a"]["roles"] == ["committed", "running"]
    assert device.slot_hashes(SLOT_A) == committed


def test_a_boot_image_naming_another_slots_root_is_never_armed(
    tmp_path: Path, device: SimDevice, release_key: Signer
) -> None:
    """A bundle whose slot-B boot image would start root_a: written, read back, refused."""
    wrong = slot_images(tmp_path / "wrong", "1.0.0", swapped=True)
    bundle = make_bundle(tmp_path / "bundles", wrong, release_key)
    committed, autoboot = device.slot_hashes(SLOT_A), mtype_autoboot(device.card)

    done = ota(device, "apply", str(bundle), "--progress", "json", "--yes")

    assert done.returncode == 1
    root_a = gpt_partuuid(device.card, SLOT_A.root.number)
    assert f"names {root_a} but slot b's root partition is" in done.stderr
    assert "Nothing was armed" in done.stderr.splitlines()[-1]
    assert progress_lines(done.stdout)[-1]["phase"] == "error"
    assert not device.armed() and not device.reboots.exists()
    assert mtype_autoboot(device.card) == autoboot and device.slot_hashes(SLOT_A) == committed
    assert device.boot() is SLOT_A
    assert device.state()["history"][-1]["outcome"] == "apply-failed"  # type: ignore[index]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real HTTP server on loopback serving a folder."""
    folder = tmp_path / "www"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


def test_apply_streams_a_bundle_from_a_url(
    served: tuple[str, Path],
    device: SimDevice,
    releases: dict[str, SlotImages],
    release_key: Signer,
) -> None:
    base, folder = served
    bundle = make_bundle(folder, releases["1.0.0"], release_key)
    done = ota(device, "apply", f"{base}/{bundle.name}", "--progress", "json", "--yes")
    assert done.returncode == 0, done.stderr
    assert device.slot_hashes(SLOT_B) == releases["1.0.0"].hashes(SLOT_B)
    assert device.armed()

    missing = ota(device, "apply", f"{base}/nothing.maxyupdate", "--yes", "--progress", "none")
    assert missing.returncode == 1 and "answered HTTP 404" in missing.stderr


def test_a_corrupt_bundle_ends_with_one_line_saying_what_to_do(
    tmp_path: Path, device: SimDevice, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    bundle = make_bundle(tmp_path / "bundles", releases["1.0.0"], release_key)
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside root.img.zst
    bundle.write_bytes(bytes(data))
    card = device.card.read_bytes()

    done = ota(device, "apply", str(bundle), "--progress", "json", "--yes")

    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("[ota] FATAL ") and "Download it again" in last
    error = progress_lines(done.stdout)[-1]
    assert error["phase"] == "error" and "Download it again" in str(error["message"])
    assert device.card.read_bytes() == card and not device.armed()


def test_a_failed_backup_stops_the_update_before_any_slot_byte_and_disarms_a_stale_trial(
    tmp_path: Path, device: SimDevice, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    bundle = make_bundle(tmp_path / "bundles", releases["1.0.0"], release_key)
    device.reboot_param.write_text("0 tryboot")  # left armed by an apply killed before rebooting
    card = device.card.read_bytes()

    done = ota(
        device,
        "apply",
        str(bundle),
        "--progress",
        "json",
        "--yes",
        MAXY_OTA_BACKUP="on",
        MAXY_NEO4J_VERSION="1.0.0-absent",
    )

    assert done.returncode == 1
    assert "cannot dump the graph" in done.stderr and "MAXY_OTA_BACKUP=off" in done.stderr
    phases = [line["phase"] for line in progress_lines(done.stdout)]
    assert "write-boot" not in phases and phases[-1] == "error"
    assert device.card.read_bytes() == card
    assert not device.armed(), "a stale trial must never start a slot that is being replaced"


def test_without_a_terminal_apply_needs_yes(
    tmp_path: Path, device: SimDevice, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    bundle = make_bundle(tmp_path / "bundles", releases["1.0.0"], release_key)
    card = device.card.read_bytes()
    done = ota(device, "apply", str(bundle), "--progress", "none")
    assert done.returncode == 1 and "pass --yes" in done.stderr
    assert device.card.read_bytes() == card


def test_status_before_any_update(device: SimDevice) -> None:
    done = ota(device, "status")
    assert done.returncode == 0, done.stderr
    assert "slot a (ordinary boot)" in done.stdout
    assert "default slot a, trial slot b" in done.stdout
    assert "no update yet" in done.stdout
