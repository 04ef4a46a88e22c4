"""The physical-access reset of a forgotten PIN (image/rootfs/usr/lib/maxy/reset-pin), run as the
pre-init runs it, on real FAT filesystems made with mkfs.vfat and read back with mtools: a file
maxy-reset-pin on a card's FAT drive clears the PIN (the first page asks for a new one), logs
every device out and is consumed; without it nothing changes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.web import cookies
from appliance.web.credentials import Credentials
from image.tools import fat_list, make_fat
from tests.support.processes import REPO

ROOTFS = REPO / "image" / "rootfs"
SCRIPT = ROOTFS / "usr" / "lib" / "maxy" / "reset-pin"
PREINIT = ROOTFS / "usr" / "lib" / "maxy" / "preinit"
PIN = "482613"


def fat(tmp_path: Path, name: str, *files: str) -> Path:
    """A small FAT image holding autoboot.txt and ``files`` (empty), as a card's drive does."""
    tree = tmp_path / f"{name}-files"
    tree.mkdir()
    (tree / "autoboot.txt").write_text("[all]\ntryboot_a_b=1\nboot_partition=2\n")
    for file in files:
        (tree / file).write_bytes(b"")
    image = tmp_path / f"{name}.img"
    make_fat(image, 16, name, "1234abcd", tree)
    return image


def data_dir(tmp_path: Path) -> Path:
    """A data directory with a PIN, a remote password, a cookie key and one earlier rotation."""
    data = tmp_path / "data"
    keys = data / "keys"
    credentials = Credentials(keys)
    credentials.set_pin(PIN, first=True)
    credentials.set_remote_password("a long remote password")
    cookies.load_key(keys / "cookie-hmac.key")
    cookies.bump_generation(keys)
    return data


def reset(data: Path, *devices: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), str(data), *map(str, devices)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("name", ["maxy-reset-pin", "maxy-reset-pin.txt", "MAXY-RESET-PIN.TXT"])
def test_the_reset_file_clears_the_pin_and_logs_every_device_out(tmp_path: Path, name: str) -> None:
    data = data_dir(tmp_path)
    keys = data / "keys"
    key = cookies.load_key(keys / "cookie-hmac.key")
    before = cookies.read_generation(keys)
    old_cookie = cookies.sign(key, cookies.issue("lan", before))
    bootconfig = fat(tmp_path, "BOOTCONFIG")
    boot_b = fat(tmp_path, "BOOT_B", name, "cmdline.txt")

    done = reset(data, bootconfig, boot_b)
    assert done.returncode == 0, done.stderr
    assert f"the admin PIN was cleared (reset file on {boot_b})" in done.stderr

    credentials = Credentials(keys)
    assert not credentials.has_pin()  # onboarding asks for a new one
    assert credentials.has_remote_password()  # everything else is kept
    assert cookies.read_generation(keys) == before + 1
    assert cookies.verify(key, old_cookie, "lan", generation=before + 1) is None
    assert (keys / "session-generation").stat().st_mode & 0o777 == 0o600
    # The file is consumed; the drive's other files stay.
    assert fat_list(boot_b) == ["autoboot.txt", "cmdline.txt"]
    assert fat_list(bootconfig) == ["autoboot.txt"]
    # A second boot does nothing more.
    again = reset(data, bootconfig, boot_b)
    assert again.returncode == 0 and again.stderr == ""
    assert cookies.read_generation(keys) == before + 1


def test_without_the_file_nothing_changes(tmp_path: Path) -> None:
    data = data_dir(tmp_path)
    keys = data / "keys"
    generation = cookies.read_generation(keys)
    lookalike = fat(tmp_path, "BOOT_A", "maxy-reset-pin.md", "reset-pin")
    done = reset(data, lookalike, tmp_path / "no-such-device")
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
    assert Credentials(keys).check_pin(PIN)
    assert cookies.read_generation(keys) == generation
    assert fat_list(lookalike) == ["autoboot.txt", "maxy-reset-pin.md", "reset-pin"]


def test_without_the_data_partition_the_file_waits_for_the_next_boot(tmp_path: Path) -> None:
    drive = fat(tmp_path, "BOOTCONFIG", "maxy-reset-pin")
    done = reset(tmp_path / "unmounted", drive)
    assert done.returncode == 0
    assert "is the data partition mounted?" in done.stderr
    assert fat_list(drive) == ["autoboot.txt", "maxy-reset-pin"]


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_the_new_generation_file_belongs_to_the_service_user(tmp_path: Path) -> None:
    data = data_dir(tmp_path)
    keys = data / "keys"
    for path in (keys, *keys.iterdir()):
        os.chown(path, 990, 990)
    assert reset(data, fat(tmp_path, "BOOT_A", "maxy-reset-pin")).returncode == 0
    info = (keys / "session-generation").stat()
    assert (info.st_uid, info.st_gid) == (990, 990)  # the app can still read it


def test_the_pre_init_runs_the_reset_once_data_is_mounted() -> None:
    script = PREINIT.read_text()
    assert os.access(SCRIPT, os.X_OK) and os.access(PREINIT, os.X_OK)
    mount, reset_call, init = (
        script.index('mount -t ext4 -o rw,noatime "$dev" /data'),
        script.index("/usr/lib/maxy/reset-pin /data $fat"),
        script.index('exec /sbin/init "$@"'),
    )
    assert mount < reset_call < init
    assert "for number in 1 2 3; do" in script  # bootconfig, boot_a, boot_b
    assert subprocess.run(["sh", "-n", str(PREINIT)], check=False).returncode == 0
