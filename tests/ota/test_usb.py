"""The USB watcher: real stick images (FAT via mtools, ext4 via debugfs), real signed bundles,
real udev device objects.

What this VM cannot do is a real USB hot-plug: there is no USB controller and no udevd (no
/run/udev), so no event carries ``ID_BUS=usb``. The filter is tested on pyudev devices read from
this machine's sysfs (the virtio disk, loop devices) and on devices built by pyudev from a udev
event environment, exactly what udev hands a program for a USB stick. The watch loop itself is
tested with real kernel uevents: attaching a stick image to a loop device (root only).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pyudev

from appliance.core.fsio import sha256_file
from appliance.ota import offers, usb
from appliance.ota.offers import UpdatePaths
from appliance.ota.usb import StickError, Watcher, filesystem_of, is_usb_storage, list_bundles
from tests.ota.sticks import (
    STICKS,
    Keys,
    ext4_stick,
    fat_stick,
    flip_byte,
    make_bundle,
    make_keys,
    scanner,
)
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def bundle(keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bundle(tmp_path_factory.mktemp("bundle"), keys)


@pytest.fixture
def paths(tmp_path: Path) -> UpdatePaths:
    return UpdatePaths(tmp_path / "data" / "updates")


def incoming(paths: UpdatePaths) -> list[str]:
    return sorted(p.name for p in paths.incoming.iterdir()) if paths.incoming.is_dir() else []


# ── Reading sticks ──────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("fs", ["vfat", "ext4"])
def test_a_bundle_on_a_stick_is_copied_verified_and_offered(
    fs: str, bundle: Path, keys: Keys, paths: UpdatePaths, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not an update")
    stick = STICKS[fs](tmp_path / "stick.img", [bundle, notes])
    before = sha256_file(stick)

    found = scanner(paths, keys).scan(stick, "/dev/sda1 (SanDisk Cruzer Blade)")

    assert len(found) == 1
    offer = found[0]
    assert offer.verified and offer.error is None
    assert (offer.name, offer.version, offer.boards) == (bundle.name, "1.4.0", ("x86-64",))
    assert offer.sha256 == sha256_file(bundle) and offer.size == bundle.stat().st_size
    assert offer.source == "/dev/sda1 (SanDisk Cruzer Blade)"
    copied = paths.bundle(offer)
    assert copied.read_bytes() == bundle.read_bytes()
    assert incoming(paths) == [copied.name]  # no temporary copy left behind
    assert offers.load_offers(paths) == [offer]
    stored = json.loads(paths.offers.read_text())["offers"][0]
    assert stored["verified"] is True and stored["sha256"] == offer.sha256
    assert sha256_file(stick) == before, "the stick must only be read"


def test_odd_but_valid_names_are_found(
    bundle: Path, keys: Keys, paths: UpdatePaths, tmp_path: Path
) -> None:
    shouting = tmp_path / "UPDATE.MAXYUPDATE"
    shutil.copy(bundle, shouting)
    spaced = tmp_path / "maxy 1.4 (final).maxyupdate"
    shutil.copy(bundle, spaced)
    assert [e.name for e in list_bundles(fat_stick(tmp_path / "f.img", [shouting]), "vfat")] == [
        "UPDATE.MAXYUPDATE"
    ]
    found = scanner(paths, keys).scan(ext4_stick(tmp_path / "e.img", [spaced]))
    assert [(o.name, o.verified) for o in found] == [(spaced.name, True)]


def _payload_offset(bundle: Path) -> int:
    with tarfile.open(bundle) as tar:
        return tar.getmember("root.img.zst").offset_data + 100


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("manifest-bit-flip", "manifest.json"),
        ("payload-bit-flip", "does not match the hash its manifest signs"),
        ("untrusted-key", "does not trust"),
        ("other-board", "rpi5"),
        ("downgrade", "1.3.2"),
        ("not-a-bundle", "not a .maxyupdate bundle"),
    ],
)
def test_a_bad_bundle_is_offered_as_refused_with_the_reason(
    case: str, reason: str, keys: Keys, paths: UpdatePaths, tmp_path: Path
) -> None:
    folder = tmp_path / "made"
    if case == "untrusted-key":
        bad = make_bundle(folder, keys, signer=keys.stranger)
    elif case == "other-board":
        bad = make_bundle(folder, keys, boards=("rpi5",))
    elif case == "downgrade":
        bad = make_bundle(folder, keys, version="1.2.0")
    elif case == "not-a-bundle":
        folder.mkdir()
        bad = folder / "holiday.maxyupdate"
        bad.write_bytes(os.urandom(5000))
    else:
        bad = make_bundle(folder, keys)
        flip_byte(bad, 512 + 30 if case == "manifest-bit-flip" else _payload_offset(bad))
    stick = fat_stick(tmp_path / "stick.img", [bad])

    found = scanner(paths, keys).scan(stick, "/dev/sdb1")

    assert len(found) == 1
    offer = found[0]
    assert not offer.verified
    assert offer.error and reason in offer.error, offer.error
    assert offer.sha256 == sha256_file(bad)
    assert incoming(paths) == [], "a refused bundle is not kept"
    assert offers.load_offers(paths) == [offer]


def test_a_stick_without_bundles_offers_nothing(
    keys: Keys, paths: UpdatePaths, tmp_path: Path
) -> None:
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(b"\xff\xd8" + os.urandom(3000))
    nearly = tmp_path / "update.maxyupdate.txt"
    nearly.write_text("x")
    for fs, make in STICKS.items():
        assert scanner(paths, keys).scan(make(tmp_path / f"{fs}.img", [photo, nearly])) == []
    assert not paths.offers.exists() and incoming(paths) == []


@pytest.mark.parametrize("kind", ["swap", "blank"])
def test_other_filesystems_are_ignored_with_a_log_line(
    kind: str, keys: Keys, paths: UpdatePaths, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    image = tmp_path / "other.img"
    image.write_bytes(bytes(8 * 1024 * 1024))
    if kind == "swap":
        subprocess.run(["mkswap", str(image)], check=True, capture_output=True)
    caplog.set_level(logging.INFO, logger="appliance.ota.usb")
    assert scanner(paths, keys).scan(image) == []
    fs = "swap" if kind == "swap" else "none"
    assert f"[ota-usb] op=ignore device={image} fs={fs} reason=unsupported-filesystem" in (
        caplog.text
    )
    assert not paths.offers.exists()
    with pytest.raises(StickError, match="FAT32 or ext4"):
        list_bundles(image, "exfat")


def test_limits_refuse_before_copying(
    bundle: Path, keys: Keys, paths: UpdatePaths, tmp_path: Path
) -> None:
    stick = fat_stick(tmp_path / "stick.img", [bundle])
    size = bundle.stat().st_size
    [big] = scanner(paths, keys, max_bytes=size - 1).scan(stick)
    assert not big.verified and "updates are at most" in (big.error or "")
    [full] = scanner(paths, keys, reserve_bytes=1 << 60).scan(stick)
    assert not full.verified and "Not enough free space" in (full.error or "")
    assert incoming(paths) == []


def test_the_same_stick_twice_is_one_offer_and_only_the_newest_are_kept(
    keys: Keys, paths: UpdatePaths, tmp_path: Path
) -> None:
    bundles = [
        make_bundle(tmp_path / f"b{i}", keys, version=f"1.4.{i}", name=f"maxy-1.4.{i}.maxyupdate")
        for i in range(4)
    ]
    scan = scanner(paths, keys, keep=3)
    first = fat_stick(tmp_path / "one.img", [bundles[0]])
    scan.scan(first)
    scan.scan(first)  # plugged in again
    assert [o.version for o in offers.load_offers(paths)] == ["1.4.0"]
    for i, made in enumerate(bundles[1:], start=1):
        scan.scan(ext4_stick(tmp_path / f"s{i}.img", [made]))
    kept = offers.load_offers(paths)
    assert [o.version for o in kept] == ["1.4.3", "1.4.2", "1.4.1"]
    assert incoming(paths) == sorted(paths.bundle(o).name for o in kept)


def test_a_listing_that_lies_about_the_size_stops_the_copy(
    bundle: Path, keys: Keys, paths: UpdatePaths, tmp_path: Path
) -> None:
    from appliance.ota.usb import Entry, copy_bundle

    stick = fat_stick(tmp_path / "stick.img", [bundle])
    with pytest.raises(StickError, match="longer than its listing"):
        copy_bundle(stick, "vfat", Entry(bundle.name, 1000), paths.incoming)
    assert incoming(paths) == []
    assert filesystem_of(stick) == "vfat"


# ── Which udev devices count as USB mass storage ────────────────────────────────────────────


PROBE = """
import json, pyudev
from appliance.ota.usb import describe, is_usb_storage
device = pyudev.Devices.from_environment(pyudev.Context())
print(json.dumps([device.subsystem, device.action, is_usb_storage(device), describe(device)]))
"""


def verdict_for_udev_event(props: dict[str, str]) -> list[Any]:
    """Build the device the way a program udev runs does (pyudev, from the event's environment;
    libudev does that once per process, hence a child process) and ask the filter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ID_", "DEV"))}
    env.update({"ACTION": "add", "SUBSYSTEM": "block", "SEQNUM": "4711", **props})
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True, cwd=REPO
    )
    answer: list[Any] = json.loads(done.stdout)
    return answer


USB_PATH = "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/host6/target6:0:0/6:0:0:0/block/sdb"
USB = {
    "ID_BUS": "usb",
    "ID_USB_DRIVER": "usb-storage",
    "ID_VENDOR": "SanDisk",
    "ID_MODEL": "Cruzer_Blade",
}


@pytest.mark.parametrize(
    ("props", "wanted"),
    [
        (
            {
                **USB,
                "DEVTYPE": "partition",
                "DEVNAME": "/dev/sdb1",
                "DEVPATH": USB_PATH + "/sdb1",
                "ID_FS_TYPE": "vfat",
            },
            True,
        ),
        (
            {
                **USB,
                "DEVTYPE": "disk",
                "DEVNAME": "/dev/sdb",
                "DEVPATH": USB_PATH,
                "ID_FS_TYPE": "vfat",
            },
            True,
        ),  # a stick formatted without a partition table
        (
            {
                **USB,
                "DEVTYPE": "disk",
                "DEVNAME": "/dev/sdb",
                "DEVPATH": USB_PATH,
                "ID_PART_TABLE_TYPE": "dos",
            },
            False,
        ),  # its partitions get their own events
        (
            {
                **USB,
                "DEVTYPE": "disk",
                "DEVNAME": "/dev/sr0",
                "DEVPATH": USB_PATH,
                "ID_TYPE": "cd",
                "ID_CDROM": "1",
            },
            False,
        ),
        (
            {
                "ID_BUS": "ata",
                "DEVTYPE": "partition",
                "DEVNAME": "/dev/sda1",
                "DEVPATH": "/devices/pci0000:00/ata1/host0/block/sda/sda1",
            },
            False,
        ),
        (
            {
                "DEVTYPE": "partition",
                "DEVNAME": "/dev/mmcblk0p6",
                "DEVPATH": "/devices/platform/emmc2bus/mmc0/block/mmcblk0/mmcblk0p6",
            },
            False,
        ),
    ],
    ids=[
        "usb-partition",
        "usb-superfloppy",
        "usb-partitioned-disk",
        "usb-cdrom",
        "sata",
        "sd-card",
    ],
)
def test_only_usb_mass_storage_is_read(props: dict[str, str], wanted: bool) -> None:
    subsystem, action, verdict, described = verdict_for_udev_event(props)
    assert (subsystem, action, verdict) == ("block", "add", wanted)
    if wanted:
        assert described == f"{props['DEVNAME']} (SanDisk Cruzer Blade)"


def test_this_machines_own_disks_are_not_usb_sticks() -> None:
    context = pyudev.Context()
    disks = list(context.list_devices(subsystem="block"))
    assert disks, "sysfs lists no block device"
    assert not [d.device_node for d in disks if is_usb_storage(d)]


# ── The watch loop, on real kernel uevents (a stick image on a loop device) ────────────────


def _losetup(*args: str) -> str:
    return subprocess.run(
        ["losetup", *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def loop_node() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("attaching a loop device needs root and losetup (the CI VM has both)")
    node = _losetup("--find")
    yield node
    subprocess.run(["losetup", "-d", node], capture_output=True, check=False)


def test_the_watcher_offers_a_stick_that_appears_and_one_present_at_start(
    loop_node: str, bundle: Path, keys: Keys, paths: UpdatePaths, tmp_path: Path
) -> None:
    stick = fat_stick(tmp_path / "stick.img", [bundle])
    # The kernel's own uevents (no udevd here, so no ID_BUS): accept just our loop device.
    watcher = Watcher(
        scanner(paths, keys), accept=lambda d: d.device_node == loop_node, source="kernel"
    )
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, kwargs={"stop": stop, "poll": 0.2})
    thread.start()
    try:
        _losetup(loop_node, str(stick))  # plugged in while watching
        wait_until(lambda: offers.load_offers(paths), 60, "an offer from the loop device")
        [offer] = offers.load_offers(paths)
        assert offer.verified and offer.source == loop_node
        _losetup("-d", loop_node)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()

    # Present before the watcher starts: found by its first scan.
    paths.offers.unlink()
    _losetup(loop_node, str(stick))
    stop = threading.Event()
    again = Watcher(
        scanner(paths, keys), accept=lambda d: d.device_node == loop_node, source="kernel"
    )
    thread = threading.Thread(target=again.run, kwargs={"stop": stop, "poll": 0.2})
    thread.start()
    try:
        wait_until(lambda: offers.load_offers(paths), 60, "an offer from the first scan")
    finally:
        stop.set()
        thread.join(30)
    assert [o.sha256 for o in offers.load_offers(paths)] == [offer.sha256]


# ── The newest backup onto the stick ────────────────────────────────────────────────────────


def _read_off(stick: Path, fs: str, name: str) -> bytes:
    where = f"/maxy-backups/{name}"
    command = (
        ["mcopy", "-n", "-i", str(stick), f"::{where}", "-"]
        if fs == "vfat"
        else ["debugfs", "-R", f"cat {where}", str(stick)]
    )
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1", "MTOOLSRC": "/dev/null"}
    return subprocess.run(command, check=True, capture_output=True, env=env).stdout


@pytest.mark.parametrize("fs", ["vfat", "ext4"])
def test_the_newest_backup_is_copied_onto_a_stick_once(
    fs: str,
    keys: Keys,
    paths: UpdatePaths,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    backups = tmp_path / "backups"
    backups.mkdir()
    old = backups / "maxy-backup-20261201T030000Z.tar"
    new = backups / "maxy-backup-20261202T030000Z.tar"
    old.write_bytes(os.urandom(1000))
    new.write_bytes(os.urandom(300_000))
    (backups / ".maxy-backup-20261203T030000Z.tar.part").write_bytes(b"half")
    stick = STICKS[fs](tmp_path / "stick.img", [])
    watcher = scanner(paths, keys)
    watcher.backups = backups

    with caplog.at_level(logging.INFO, logger="appliance.ota.usb"):
        assert watcher.scan(stick, "/dev/sda1") == []  # no update on it: still gets the backup
        assert _read_off(stick, fs, new.name) == new.read_bytes()
        watcher.scan(stick, "/dev/sda1")  # plugged in again: already there
    lines = [r.getMessage() for r in caplog.records if "[backup-usb]" in r.getMessage()]
    assert [line.split()[1] for line in lines] == ["op=copy", "op=skip"], lines
    assert usb.stick_backups(stick, fs) == {new.name: new.stat().st_size}


@pytest.mark.parametrize("fs", ["vfat", "ext4"])
def test_a_backup_that_does_not_fit_leaves_nothing_on_the_stick(
    fs: str, keys: Keys, paths: UpdatePaths, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backups = tmp_path / "backups"
    backups.mkdir()
    (backups / "maxy-backup-20261202T030000Z.tar").write_bytes(os.urandom(48 * 1024 * 1024))
    stick = STICKS[fs](tmp_path / "stick.img", [], size_mib=40)
    watcher = scanner(paths, keys)
    watcher.backups = backups

    with caplog.at_level(logging.INFO, logger="appliance.ota.usb"):
        watcher.scan(stick, "/dev/sda1")
    assert any("[backup-usb] op=failed" in r.getMessage() for r in caplog.records)
    assert usb.stick_backups(stick, fs) in ({}, None)
