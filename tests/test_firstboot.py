"""`maxy firstboot` against a temporary data directory, and growing a partition in a disk image.

The command runs as a real subprocess. Growing uses the real sfdisk and resize2fs on an image
file standing in for the card; finding the partition reads a mountinfo file and a sysfs tree
laid out as the kernel lays out a Raspberry Pi's (the kernel's interface, the outside world).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.core.accounts import create_account, list_accounts, validate_account_id
from appliance.core.config import load_settings
from appliance.firstboot import (
    Grown,
    Target,
    find_data_partition,
    grow_partition,
    mount_of,
    parse_mountinfo,
)
from tests.support.processes import base_environ, maxy

ROOT = os.geteuid() == 0
SBIN = os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
MIB = 1024 * 1024
needs_tools = pytest.mark.skipif(
    not all(shutil.which(t, path=SBIN) for t in ("sfdisk", "mke2fs", "resize2fs", "e2fsck")),
    reason="sfdisk (fdisk) and e2fsprogs are needed to build disk images",
)


def tool(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        args,
        input=stdin,
        capture_output=True,
        text=True,
        env={"PATH": SBIN, "LC_ALL": "C"},
        check=True,
    )
    return done.stdout


# --- the command ----------------------------------------------------------------------------


@pytest.fixture
def card(tmp_path: Path) -> dict[str, str]:
    """Settings for a card whose data directory is a temporary one (grow is skipped here)."""
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(tmp_path / "data"),
        MAXY_PRESET_FILE=str(tmp_path / "preset.json"),
        # As root the files go to a user that exists everywhere; otherwise they stay ours.
        MAXY_SERVICE_USER="nobody" if ROOT else pwd.getpwuid(os.getuid()).pw_name,
    )
    found = find_data_partition(load_settings(env))
    if isinstance(found, Target):
        pytest.skip(f"{tmp_path} is on a partition named 'data' here: not growing it in a test")
    return env


def firstboot(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(maxy("firstboot"), env=env, capture_output=True, text=True, timeout=300)


def write_preset(env: dict[str, str], preset: Any) -> Path:
    path = Path(env["MAXY_PRESET_FILE"])
    path.write_text(preset if isinstance(preset, str) else json.dumps(preset))
    return path


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file's content, mode and mtime under ``folder``."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() else b""
        found[str(path)] = (content, info.st_mode, info.st_mtime_ns)
    return found


def test_first_boot_makes_keys_the_password_and_the_account_from_the_preset(
    card: dict[str, str],
) -> None:
    brand = {"productName": "Acme Home", "accent": "#336699"}
    write_preset(card, {"owner": "Ann Example", "brand": brand, "defaultAgent": "helper"})
    done = firstboot(card)
    assert done.returncode == 0, done.stderr
    steps = [line.split(":", 1)[0] for line in done.stdout.splitlines()]
    assert steps == ["grow", "keys", "neo4j", "account", "owner", "done"], done.stdout
    assert done.stdout.startswith("grow: skipped, ")  # not the card's data partition

    data = Path(card["MAXY_DATA_DIR"])
    keys = data / "keys"
    assert keys.stat().st_mode & 0o777 == 0o700
    cookie_key = keys / "cookie-hmac.key"
    password = keys / "neo4j-password"
    assert len(cookie_key.read_bytes()) == 32
    assert len(password.read_text().strip()) >= 24
    for secret in (cookie_key, password):
        assert secret.stat().st_mode & 0o777 == 0o600

    [account] = list_accounts(data / "accounts")
    assert account.owner == "Ann Example"
    assert account.brand == brand
    assert account.default_agent == "helper"
    # The units read the account id from account.env; it names the account on disk.
    env_line = (data / "account.env").read_text().strip()
    assert env_line == f"MAXY_ACCOUNT_ID={account.id}"
    assert validate_account_id(data / "accounts", env_line.split("=", 1)[1]) == account
    assert (data / "firstboot.done").is_file()

    owner = pwd.getpwnam(card["MAXY_SERVICE_USER"])
    for path in (data, keys, cookie_key, password, data / "accounts" / account.id / "account.json"):
        assert (path.stat().st_uid, path.stat().st_gid) == (owner.pw_uid, owner.pw_gid), path
    if not ROOT:
        assert "owner: not root" in done.stdout


def test_a_second_run_does_nothing_and_says_so(card: dict[str, str]) -> None:
    write_preset(card, {"owner": "Ann"})
    assert firstboot(card).returncode == 0
    data = Path(card["MAXY_DATA_DIR"])
    before = snapshot(data)
    again = firstboot(card)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("firstboot: already done (")
    assert again.stdout.strip().endswith("nothing to do")
    assert len(again.stdout.splitlines()) == 1
    assert snapshot(data) == before


def test_the_preset_can_fix_the_account_id_and_time_zone(card: dict[str, str]) -> None:
    account_id = str(uuid.uuid4())
    preset = {"owner": "Ann", "id": account_id, "brand": {"productName": "Ann's"}}
    write_preset(card, {**preset, "timeZone": "Europe/Lisbon"})
    assert firstboot(card).returncode == 0
    [account] = list_accounts(Path(card["MAXY_DATA_DIR"]) / "accounts")
    assert account.id == account_id and account.brand == {"productName": "Ann's"}
    assert account.time_zone == "Europe/Lisbon"


def test_an_existing_account_is_kept_and_the_preset_not_even_read(card: dict[str, str]) -> None:
    data = Path(card["MAXY_DATA_DIR"])
    mine = create_account(data / "accounts", "Bob", product_name="Bob's Box")
    write_preset(card, "{not json")  # would be refused if it were read
    done = firstboot(card)
    assert done.returncode == 0, done.stderr
    assert list_accounts(data / "accounts") == [mine]
    assert f"account: exists already: {mine.id} (Bob); the preset is not used" in done.stdout
    assert (data / "account.env").read_text() == f"MAXY_ACCOUNT_ID={mine.id}\n"


def test_without_a_preset_no_account_is_made_and_first_boot_still_finishes(
    card: dict[str, str],
) -> None:
    done = firstboot(card)
    assert done.returncode == 0, done.stderr
    assert "account: none, and no preset at" in done.stdout
    data = Path(card["MAXY_DATA_DIR"])
    assert not (data / "accounts").exists() and not (data / "account.env").exists()
    assert (data / "firstboot.done").is_file()


@pytest.mark.parametrize(
    ("preset", "complaint"),
    [
        ('{"owner": "Ann",', "is not valid JSON"),
        ('["Ann"]', "must be a JSON object"),
        ({"brand": {"productName": "X"}}, '"owner" must be'),
        ({"owner": "  "}, '"owner" must be'),
        ({"owner": "Ann", "colour": "red"}, "unknown keys colour"),
        ({"owner": "Ann", "brand": "Acme"}, '"brand" must be an object'),
        ({"owner": "Ann", "brand": {"productName": 7}}, '"brand.productName" must be'),
        ({"owner": "Ann", "defaultAgent": "Not A Slug"}, '"defaultAgent" must be'),
        ({"owner": "Ann", "defaultAgent": "admin"}, '"defaultAgent" must be'),
        ({"owner": "Ann", "id": "1234"}, '"id" must be a lower-case UUID'),
        ({"owner": "Ann", "timeZone": "Lisbon"}, "\"timeZone\": 'Lisbon' is not a time zone"),
    ],
)
def test_a_malformed_preset_is_refused_before_anything_is_written(
    card: dict[str, str], preset: Any, complaint: str
) -> None:
    path = write_preset(card, preset)
    data = Path(card["MAXY_DATA_DIR"])
    data.mkdir()
    done = firstboot(card)
    assert done.returncode == 1
    assert f"[firstboot] FATAL PresetError: The account preset {path}" in done.stderr
    assert complaint in done.stderr
    assert "Traceback" not in done.stderr
    assert list(data.iterdir()) == []
    assert done.stdout == ""


@pytest.mark.skipif(not ROOT, reason="only root hands files to another user")
def test_a_missing_service_user_is_refused_before_anything_is_written(
    card: dict[str, str],
) -> None:
    write_preset(card, {"owner": "Ann"})
    card["MAXY_SERVICE_USER"] = f"no-such-user-{uuid.uuid4().hex[:8]}"
    done = firstboot(card)
    assert done.returncode == 1
    assert "[firstboot] FATAL OwnerError" in done.stderr and "MAXY_SERVICE_USER" in done.stderr
    assert not Path(card["MAXY_DATA_DIR"]).exists()


# --- finding the data partition -------------------------------------------------------------

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 179:4 / / ro,relatime shared:1 - ext4 /dev/mmcblk0p4 ro
31 27 179:6 / /data rw,noatime shared:5 - ext4 /dev/mmcblk0p6 rw
35 27 0:40 / /run rw,nosuid shared:7 - tmpfs tmpfs rw,mode=755
36 27 179:2 / /boot/fw\\040a rw master:9 - vfat /dev/mmcblk0p2 rw
37 27 259:3 / /mnt/nvme rw - ext4 /dev/nvme0n1p6 rw
38 27 259:4 / /mnt/other rw - ext4 /dev/nvme0n1p7 rw
"""


def test_mountinfo_is_parsed_with_its_escapes_and_optional_fields() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert [str(m.point) for m in mounts] == [
        "/proc",
        "/",
        "/data",
        "/run",
        "/boot/fw a",
        "/mnt/nvme",
        "/mnt/other",
    ]
    boot = mounts[4]
    assert (boot.device, boot.fstype, boot.source) == ("179:2", "vfat", "/dev/mmcblk0p2")


@pytest.mark.parametrize(
    ("path", "point"),
    [
        ("/data", "/data"),
        ("/data/neo4j/store", "/data"),
        ("/database", "/"),  # a name that merely starts like a mount point
        ("/run/maxy", "/run"),
    ],
)
def test_the_deepest_mount_above_a_path_holds_it(path: str, point: str) -> None:
    mount = mount_of(Path(path), parse_mountinfo(MOUNTINFO))
    assert mount is not None and str(mount.point) == point


def test_a_later_mount_on_the_same_point_hides_the_earlier() -> None:
    text = MOUNTINFO + "40 31 0:50 / /data rw - tmpfs tmpfs rw\n"
    mount = mount_of(Path("/data/x"), parse_mountinfo(text))
    assert mount is not None and mount.fstype == "tmpfs"


def add_partition(sys_root: Path, devices: str, disk: str, part: str, dev: str, name: str) -> None:
    """Lay out a partition as sysfs does: /sys/dev/block/M:m -> ../../devices/.../disk/part."""
    folder = sys_root / devices / "block" / disk / part
    folder.mkdir(parents=True)
    number = re.search(r"(\d+)$", part).group(1)  # type: ignore[union-attr]
    (folder / "partition").write_text(f"{number}\n")
    major, minor = dev.split(":")
    lines = [f"MAJOR={major}", f"MINOR={minor}", f"DEVNAME={part}", "DEVTYPE=partition"]
    lines += [f"PARTN={number}"] + ([f"PARTNAME={name}"] if name else [])
    (folder / "uevent").write_text("\n".join(lines) + "\n")
    link = sys_root / "dev" / "block" / dev
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("../..") / devices / "block" / disk / part)


@pytest.fixture
def sys_root(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    mmc = "devices/platform/emmc2bus/fe340000.mmc/mmc_host/mmc0/mmc0:aaaa"
    add_partition(root, mmc, "mmcblk0", "mmcblk0p2", "179:2", "boot_a")
    add_partition(root, mmc, "mmcblk0", "mmcblk0p4", "179:4", "root_a")
    add_partition(root, mmc, "mmcblk0", "mmcblk0p6", "179:6", "data")
    nvme = "devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1"
    add_partition(root, nvme.rsplit("/", 1)[0], "nvme0n1", "nvme0n1p6", "259:3", "data")
    add_partition(root, nvme.rsplit("/", 1)[0], "nvme0n1", "nvme0n1p7", "259:4", "")
    (root / "dev" / "block" / "0:40").mkdir()  # not a block device: no partition file
    return root


@pytest.mark.parametrize(
    ("data_dir", "expected"),
    [
        ("/data", Target(Path("/dev/mmcblk0"), 6)),
        ("/data/deeper", Target(Path("/dev/mmcblk0"), 6)),
        ("/mnt/nvme", Target(Path("/dev/nvme0n1"), 6)),
        ("/srv/data", "is on partition 4 of /dev/mmcblk0, named 'root_a', not 'data'"),
        ("/mnt/other", "named '', not 'data'; set MAXY_DATA_DISK"),
        ("/run/maxy", "is on tmpfs (tmpfs), not a partition of a block device"),
        ("/proc/x", "is on proc (proc), not a partition of a block device"),
    ],
)
def test_the_data_partition_is_found_from_the_mount_and_sysfs(
    tmp_path: Path, sys_root: Path, data_dir: str, expected: Target | str
) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(MOUNTINFO)
    settings = load_settings({"MAXY_DATA_DIR": data_dir})
    found = find_data_partition(settings, mountinfo=mountinfo, sys_root=sys_root)
    if isinstance(expected, Target):
        assert found == expected
    else:
        assert isinstance(found, str) and expected in found


def test_a_data_partition_that_is_not_ext4_is_not_grown(tmp_path: Path, sys_root: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("31 27 179:6 / /data rw - btrfs /dev/mmcblk0p6 rw\n")
    settings = load_settings({"MAXY_DATA_DIR": "/data"})
    found = find_data_partition(settings, mountinfo=mountinfo, sys_root=sys_root)
    assert found == "/data is on btrfs, not ext4"


def test_settings_name_the_disk_explicitly(tmp_path: Path) -> None:
    unused = tmp_path / "no-mountinfo"
    settings = load_settings({"MAXY_DATA_DISK": "/dev/sdb"})
    assert find_data_partition(settings, mountinfo=unused) == Target(Path("/dev/sdb"), 6)
    settings = load_settings({"MAXY_DATA_DISK": "/dev/sdb", "MAXY_DATA_PARTITION": "3"})
    assert find_data_partition(settings, mountinfo=unused) == Target(Path("/dev/sdb"), 3)


def test_this_machine_is_not_taken_for_a_card(tmp_path: Path) -> None:
    """The real mountinfo and sysfs: a development machine's directory is never grown."""
    found = find_data_partition(load_settings({"MAXY_DATA_DIR": str(tmp_path)}))
    if isinstance(found, Target):
        pytest.skip(f"{tmp_path} really is on a partition named 'data' here")
    assert str(tmp_path) in found


# --- growing a partition inside a disk image ------------------------------------------------


def partitions(disk: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    table = json.loads(tool("sfdisk", "--json", str(disk)))["partitiontable"]
    return table, table["partitions"]


def digest(path: Path, start: int = 0, length: int | None = None) -> str:
    with path.open("rb") as handle:
        handle.seek(start)
        return hashlib.sha256(handle.read(length if length is not None else -1)).hexdigest()


def filesystem(disk: Path, offset: int) -> str:
    return f"{disk}?offset={offset}"  # how e2fsprogs opens a filesystem inside a file


@pytest.fixture(params=["gpt", "dos"])
def image(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB card image (a boot partition of random bytes, an ext4 data partition holding
    hello.txt), then enlarged to 96 MiB as if written to a bigger card."""
    disk = tmp_path / "card.img"
    with disk.open("wb") as handle:
        handle.truncate(64 * MIB)
    kind = "L" if request.param == "gpt" else "83"
    names = (", name=boot", ", name=data") if request.param == "gpt" else ("", "")
    script = (
        f"label: {request.param}\nsize=8M, type={kind}{names[0]}\nsize=16M, type={kind}{names[1]}\n"
    )
    tool("sfdisk", "-q", str(disk), stdin=script)
    _, (boot, data) = partitions(disk)
    with disk.open("r+b") as handle:
        handle.seek(boot["start"] * 512)
        handle.write(os.urandom(boot["size"] * 512))
    content = tmp_path / "content"
    content.mkdir()
    (content / "hello.txt").write_text("kept across the grow\n")
    offset = data["start"] * 512
    tool(
        "mke2fs", "-q", "-t", "ext4", "-d", str(content), "-E", f"offset={offset}", str(disk), "16M"
    )
    with disk.open("r+b") as handle:
        handle.truncate(96 * MIB)
    yield disk


@needs_tools
def test_the_data_partition_and_its_filesystem_grow_to_the_end_of_the_disk(image: Path) -> None:
    table, (boot, data) = partitions(image)
    boot_bytes = digest(image, boot["start"] * 512, boot["size"] * 512)

    grown = grow_partition(image, 2)

    table, (boot_after, data_after) = partitions(image)
    total = image.stat().st_size // 512
    last = table["lastlba"] if table["label"] == "gpt" else total - 1
    assert image.stat().st_size == 96 * MIB
    assert data_after["start"] == data["start"]
    assert data_after["start"] + data_after["size"] - 1 == last
    assert grown == Grown(16 * MIB, data_after["size"] * 512, True)
    assert boot_after == boot
    assert digest(image, boot["start"] * 512, boot["size"] * 512) == boot_bytes

    fs = filesystem(image, data["start"] * 512)
    tool("e2fsck", "-fn", fs)  # check=True: a damaged filesystem fails here
    header = tool("dumpe2fs", "-h", fs)
    blocks = int(re.search(r"Block count:\s+(\d+)", header).group(1))  # type: ignore[union-attr]
    block = int(re.search(r"Block size:\s+(\d+)", header).group(1))  # type: ignore[union-attr]
    assert blocks * block == data_after["size"] * 512 // block * block
    assert tool("debugfs", "-R", "cat /hello.txt", fs) == "kept across the grow\n"

    # Again: nothing left to grow, and not a byte of the image changes.
    whole = digest(image)
    assert grow_partition(image, 2) == Grown(grown.after, grown.after, False)
    assert digest(image) == whole


@needs_tools
def test_a_partition_grown_before_a_power_cut_gets_its_filesystem_grown(image: Path) -> None:
    tool("sfdisk", "--no-reread", "--no-tell-kernel", "-q", "-N", "2", str(image), stdin=", +\n")
    _, (_, data) = partitions(image)
    grown = grow_partition(image, 2)
    assert grown == Grown(data["size"] * 512, data["size"] * 512, True)
    fs = filesystem(image, data["start"] * 512)
    tool("e2fsck", "-fn", fs)
    assert tool("debugfs", "-R", "cat /hello.txt", fs) == "kept across the grow\n"


@needs_tools
def test_firstboot_grows_the_disk_named_in_the_settings(card: dict[str, str], image: Path) -> None:
    card.update(MAXY_DATA_DISK=str(image), MAXY_DATA_PARTITION="2")
    done = firstboot(card)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"grow: partition 2 of {image} grown from 16 MiB to ")
    _, (_, data) = partitions(image)
    tool("e2fsck", "-fn", filesystem(image, data["start"] * 512))


@needs_tools
def test_a_partition_that_is_not_there_is_a_clear_error(card: dict[str, str], image: Path) -> None:
    card.update(MAXY_DATA_DISK=str(image), MAXY_DATA_PARTITION="5")
    done = firstboot(card)
    assert done.returncode == 1
    assert f"[firstboot] FATAL GrowError: {image} has no partition 5" in done.stderr
    assert not (Path(card["MAXY_DATA_DIR"]) / "firstboot.done").exists()
