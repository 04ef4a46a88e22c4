"""``maxy firstboot``: make a freshly flashed card ready, once, before the services start.

Run as root by a oneshot unit ordered before the role units (``RequiresMountsFor=/data``,
``ConditionPathExists=!/data/firstboot.done``). Each step is idempotent and prints one line, so a
run cut short by a power loss is finished by the next boot:

    grow      the data partition to the end of the card, then its ext4 filesystem (online)
    keys      the cookie HMAC key (0600 in the 0700 keys directory)
    neo4j     the Neo4j password (0600); Neo4j takes it as its initial password on first start
    account   the account from the preset file when there is none; its id in data_dir/account.env
              (``MAXY_ACCOUNT_ID=…``, for the units' ``EnvironmentFile=``)
    owner     data_dir and what this run made belong to ``service_user`` (only when root)
    done      the marker data_dir/firstboot.done: later runs do nothing and say so

What can refuse on bad input (the preset, the service user) is checked before the first write,
so a refused run leaves the card as it was.

Which partition grows: ``data_disk``/``data_partition`` when set; otherwise the device data_dir
is mounted from (``/proc/self/mountinfo``), looked up in sysfs, and only if it is a partition
named ``data`` (the card layout's, :mod:`appliance.ota.layout`). Anything else — a development
machine, a container, a whole-disk device — is skipped with one line. :func:`grow_partition`
works on an image file as well as on a block device (sfdisk and resize2fs both take files).

Errors::

    FirstbootError
    ├── PresetError     (the preset file is unreadable or malformed)
    ├── OwnerError      (service_user does not exist)
    └── GrowError       (sfdisk, partx or resize2fs failed, or is missing)
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from appliance.agents.store import is_slug
from appliance.core import proc
from appliance.core.accounts import ACCOUNT_FILE, DEFAULT_AGENT, create_account, list_accounts
from appliance.core.clock import TimeZoneError, load_zone
from appliance.core.config import Settings
from appliance.core.fsio import write_atomic
from appliance.core.version import build_info
from appliance.graphdb.instance import ensure_password
from appliance.ota.layout import DATA
from appliance.web.cookies import load_key

log = logging.getLogger(__name__)

MARKER = "firstboot.done"
ACCOUNT_ENV = "account.env"
MOUNTINFO = Path("/proc/self/mountinfo")
SYS = Path("/sys")
MIB = 1024 * 1024
TOOL_TIMEOUT = 600  # resize2fs on a large card takes a while
PRESET_KEYS = frozenset({"owner", "brand", "defaultAgent", "id", "timeZone"})
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class FirstbootError(Exception):
    """First boot cannot prepare the card."""


class PresetError(FirstbootError):
    """The account preset is unreadable or malformed."""


class OwnerError(FirstbootError):
    """The user the roles run as does not exist."""


class GrowError(FirstbootError):
    """Growing the data partition or its filesystem failed."""


# --- the account preset --------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    """The account a card is flashed for."""

    owner: str
    brand: dict[str, Any]
    default_agent: str
    account_id: str | None
    time_zone: str | None = None


def load_preset(path: Path) -> Preset:
    """Read and check the preset file, or raise :class:`PresetError` naming it."""
    fix = "Fix the file, or remove it and create the account with `maxy account create`."
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise PresetError(f"The account preset {path} cannot be read ({err.strerror}).") from err
    except ValueError as err:
        raise PresetError(f"The account preset {path} is not valid JSON ({err}). {fix}") from err
    if not isinstance(data, dict):
        raise PresetError(f"The account preset {path} must be a JSON object. {fix}")
    problems = []
    unknown = sorted(set(data) - PRESET_KEYS)
    if unknown:
        problems.append(
            f"unknown keys {', '.join(unknown)} (known: {', '.join(sorted(PRESET_KEYS))})"
        )
    owner = data.get("owner")
    if not isinstance(owner, str) or not owner.strip():
        problems.append('"owner" must be the owner\'s name')
    brand = data.get("brand", {})
    if not isinstance(brand, dict):
        problems.append('"brand" must be an object such as {"productName": "Maxy"}')
    elif not isinstance(brand.get("productName", ""), str):
        problems.append('"brand.productName" must be a string')
    agent = data.get("defaultAgent", DEFAULT_AGENT)
    if not isinstance(agent, str) or not is_slug(agent):
        problems.append('"defaultAgent" must be an agent slug such as "maxy"')
    account_id = data.get("id")
    if account_id is not None and not (isinstance(account_id, str) and _UUID.match(account_id)):
        problems.append('"id" must be a lower-case UUID')
    time_zone = data.get("timeZone")
    if time_zone is not None:
        try:
            time_zone = load_zone(time_zone).key
        except TimeZoneError as err:
            problems.append(f'"timeZone": {err}')
    if problems:
        raise PresetError(f"The account preset {path} is not usable: {'; '.join(problems)}. {fix}")
    assert isinstance(owner, str) and isinstance(brand, dict) and isinstance(agent, str)
    brand = {"productName": "Maxy", **brand}
    return Preset(owner.strip(), brand, agent, account_id, time_zone)


# --- where the data partition is -----------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo."""

    point: Path
    device: str  # "major:minor"
    fstype: str
    source: str


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo file, in mount order."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        if len(fields) < dash + 3:
            continue
        mounts.append(
            Mount(
                point=Path(_unescape(fields[4])),
                device=fields[2],
                fstype=fields[dash + 1],
                source=_unescape(fields[dash + 2]),
            )
        )
    return mounts


def mount_of(path: Path, mounts: Iterable[Mount]) -> Mount | None:
    """The mount ``path`` lives on: the deepest mount point above it, the last mounted there."""
    best: Mount | None = None
    for mount in mounts:
        if mount.point == path or mount.point in path.parents:
            if best is None or len(mount.point.parts) >= len(best.point.parts):
                best = mount
    return best


@dataclass(frozen=True)
class Target:
    """A partition to grow: its disk (a block device or an image file) and its number."""

    disk: Path
    number: int


def find_data_partition(
    settings: Settings, *, mountinfo: Path = MOUNTINFO, sys_root: Path = SYS
) -> Target | str:
    """The partition first boot grows, or why there is none to grow."""
    if settings.data_disk is not None:
        return Target(settings.data_disk, settings.data_partition or DATA.number)
    path = settings.data_dir.resolve()
    try:
        mount = mount_of(path, parse_mountinfo(mountinfo.read_text()))
    except OSError as err:
        return f"{mountinfo} cannot be read ({err.strerror})"
    if mount is None:
        return f"no mount in {mountinfo} holds {path}"
    block = sys_root / "dev" / "block" / mount.device
    if not (block / "partition").is_file():
        return f"{path} is on {mount.source} ({mount.fstype}), not a partition of a block device"
    number = int((block / "partition").read_text())
    disk = Path("/dev") / block.resolve().parent.name
    name = _uevent(block / "uevent").get("PARTNAME", "")
    if name != DATA.name:
        return (
            f"{path} is on partition {number} of {disk}, named {name!r}, not {DATA.name!r}; "
            "set MAXY_DATA_DISK (and MAXY_DATA_PARTITION) to grow it anyway"
        )
    if mount.fstype != "ext4":
        return f"{path} is on {mount.fstype}, not ext4"
    return Target(disk, number)


def _uevent(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


# --- growing a partition and its filesystem -------------------------------------------------


@dataclass(frozen=True)
class Grown:
    """Sizes in bytes before and after, and whether the filesystem had to grow."""

    before: int
    after: int
    filesystem_grown: bool


def _tool(args: Sequence[str], stdin: str | None = None) -> tuple[str, str]:
    """Run a partitioning tool; return its standard output and error, or raise GrowError."""
    # The tools live in sbin, which an ordinary user's PATH may lack.
    path = os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    env = {"PATH": path, "LC_ALL": "C"}
    try:
        done = proc.run(args, input=stdin, env=env, timeout=TOOL_TIMEOUT)
    except proc.ToolMissing as err:
        raise GrowError(
            f"{args[0]} is not installed. Growing the data partition needs sfdisk (fdisk), "
            "partx (util-linux) and resize2fs (e2fsprogs); the card keeps working at its "
            "flashed size."
        ) from err
    except proc.ToolTimeout as err:
        raise GrowError(f"{err}.") from err
    if done.returncode != 0:
        detail = done.detail(400)
        raise GrowError(
            f"`{' '.join(args)}` failed (exit {done.returncode}): {detail}. The card keeps "
            "working at its flashed size; the next boot tries again."
        )
    return done.stdout, done.stderr


def _partition(disk: Path, number: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The partition table of ``disk`` and its entry for partition ``number``."""
    table: dict[str, Any] = json.loads(_tool(["sfdisk", "--json", str(disk)])[0])["partitiontable"]
    for entry in table.get("partitions", []):
        # Nodes are the disk's name plus the number: sda6, mmcblk0p6, disk.img6.
        suffix = re.search(r"(\d+)$", entry["node"])
        if suffix and int(suffix.group(1)) == number and entry["node"].startswith(str(disk)):
            return table, entry
    raise GrowError(f"{disk} has no partition {number}. Check MAXY_DATA_DISK/MAXY_DATA_PARTITION.")


def _size(disk: Path) -> int:
    with disk.open("rb") as handle:  # works for block devices and files alike
        return handle.seek(0, os.SEEK_END)


def grow_partition(disk: Path, number: int) -> Grown:
    """Grow partition ``number`` of ``disk`` (a device or an image file) and its ext4 to fill it.

    The partition takes the free space after it, up to the next partition or the end of the
    disk (where a GPT's backup header is first moved, since the card is larger than the image
    was). A block device in use is told of its partition's new size with ``partx``; then
    resize2fs grows the filesystem, online when it is mounted. Less than 1 MiB of room counts as
    none, so a second call changes nothing.
    """
    table, entry = _partition(disk, number)
    sector = int(table.get("sectorsize", 512))
    start, before = int(entry["start"]), int(entry["size"])
    total = _size(disk) // sector
    limit = total - 33 if table["label"] == "gpt" else total  # 33: the backup GPT
    later = [int(e["start"]) for e in table.get("partitions", []) if int(e["start"]) > start]
    if later:
        limit = min(limit, *later)
    after = before
    if (limit - start - before) * sector >= MIB:
        if table["label"] == "gpt":
            _tool(["sfdisk", "--relocate", "gpt-bak-std", str(disk)])
        _tool(
            ["sfdisk", "--no-reread", "--no-tell-kernel", "-N", str(number), str(disk)],
            stdin=", +\n",
        )
        if disk.is_block_device():
            _tool(["partx", "--update", "--nr", str(number), str(disk)])
        table, entry = _partition(disk, number)
        after = int(entry["size"])
    if disk.is_block_device():
        output = "".join(_tool(["resize2fs", entry["node"], f"{after * sector // 1024}K"]))
    else:
        output = _resize_inside_file(disk, start * sector, after * sector)
    return Grown(before * sector, after * sector, "Nothing to do" not in output)


def _resize_inside_file(disk: Path, offset: int, size: int) -> str:
    """resize2fs a filesystem at ``offset`` in an image file, through a copy written back.

    resize2fs cuts a regular file to the new filesystem size, offset or not, so it cannot work
    in place inside a disk image: it works on a copy of the partition instead.
    """
    with tempfile.TemporaryDirectory(prefix=".grow-", dir=disk.parent) as folder:
        copy = Path(folder) / "partition.img"
        with disk.open("rb") as source, copy.open("wb") as target:
            _copy_range(source, target, offset, 0, size)
        output = "".join(_tool(["resize2fs", str(copy), f"{size // 1024}K"]))
        if "Nothing to do" not in output:
            with copy.open("rb") as source, disk.open("r+b") as target:
                _copy_range(source, target, 0, offset, copy.stat().st_size)
                target.flush()
                os.fsync(target.fileno())
    return output


def _copy_range(source: BinaryIO, target: BinaryIO, start: int, at: int, length: int) -> None:
    source.seek(start)
    target.seek(at)
    while length > 0:
        chunk = source.read(min(length, MIB))
        if not chunk:
            break
        target.write(chunk)
        length -= len(chunk)


def _mib(size: int) -> str:
    return f"{size / MIB:,.0f} MiB" if size < 10 * 1024 * MIB else f"{size / 1024 / MIB:,.1f} GiB"


def _grow_step(target: Target | str) -> str:
    if isinstance(target, str):
        return f"grow: skipped, {target}"
    grown = grow_partition(target.disk, target.number)
    where = f"partition {target.number} of {target.disk}"
    if grown.after > grown.before:
        return f"grow: {where} grown from {_mib(grown.before)} to {_mib(grown.after)}"
    if grown.filesystem_grown:
        return f"grow: {where} already filled the disk; its filesystem grown to {_mib(grown.after)}"
    return f"grow: {where} already fills the disk ({_mib(grown.after)})"


# --- the run ------------------------------------------------------------------------------


def _owner(settings: Settings) -> tuple[int, int] | None:
    """uid and gid of the service user when running as root, else None (nothing to hand over)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(settings.service_user)
    except KeyError as err:
        raise OwnerError(
            f"The user {settings.service_user!r} the roles run as does not exist. Create it "
            "(the image does), or set MAXY_SERVICE_USER."
        ) from err
    return entry.pw_uid, entry.pw_gid


def _chown_tree(paths: Iterable[Path], uid: int, gid: int) -> int:
    count = 0
    for top in paths:
        if not top.exists():
            continue
        for path in [top, *(top.rglob("*") if top.is_dir() else [])]:
            os.chown(path, uid, gid, follow_symlinks=False)
            count += 1
    return count


def run(
    settings: Settings,
    say: Callable[[str], None],
    *,
    mountinfo: Path = MOUNTINFO,
    sys_root: Path = SYS,
) -> bool:
    """Do what first boot does (see the module doc); return False if it was already done."""
    marker = settings.data_dir / MARKER
    if marker.is_file():
        when = marker.read_text().split("\n", 1)[0]
        say(f"firstboot: already done ({when}, {marker}); nothing to do")
        return False
    # Everything that can refuse is decided before the first write.
    owner = _owner(settings)
    accounts = settings.accounts_dir
    existing = sorted(accounts.glob(f"*/{ACCOUNT_FILE}")) if accounts.is_dir() else []
    preset = None
    if not existing and settings.preset_file.is_file():
        preset = load_preset(settings.preset_file)
    target = find_data_partition(settings, mountinfo=mountinfo, sys_root=sys_root)

    lines = [_grow_step(target)]
    say(lines[-1])

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    key = settings.cookie_key_path
    had_key = key.exists()
    load_key(key)
    lines.append(f"keys: {key} {'already there' if had_key else 'created (0600)'}")
    say(lines[-1])

    password = settings.neo4j_password_path
    had_password = password.exists()
    ensure_password(password)
    lines.append(
        f"neo4j: password {password} {'already there' if had_password else 'created (0600)'}"
    )
    say(lines[-1])

    made: list[Path] = []
    env_file = settings.data_dir / ACCOUNT_ENV
    if existing:
        valid = list_accounts(accounts)
        known = ", ".join(f"{a.id} ({a.owner})" for a in valid) or "none readable"
        line = f"account: exists already: {known}; the preset is not used"
        if len(valid) == 1 and not env_file.exists():
            # A run cut short between the account and its env file, or an account made by hand.
            write_atomic(env_file, f"MAXY_ACCOUNT_ID={valid[0].id}\n")
            made.append(env_file)
            line += f"; MAXY_ACCOUNT_ID in {env_file}"
        lines.append(line)
    elif preset is None:
        lines.append(
            f"account: none, and no preset at {settings.preset_file}; create one with "
            "`maxy account create --owner NAME`"
        )
    else:
        account = create_account(
            accounts,
            preset.owner,
            brand=preset.brand,
            default_agent=preset.default_agent,
            account_id=preset.account_id,
            time_zone=preset.time_zone,
        )
        write_atomic(env_file, f"MAXY_ACCOUNT_ID={account.id}\n")
        made.append(env_file)
        lines.append(
            f"account: created {account.id} for {account.owner!r} "
            f"(brand {account.brand.get('productName')!r}) from {settings.preset_file}; "
            f"MAXY_ACCOUNT_ID in {env_file}"
        )
    say(lines[-1])

    if owner is None:
        lines.append(f"owner: not root, files stay with uid {os.geteuid()}")
    else:
        uid, gid = owner
        # What the roles write to: data_dir itself, the keys, the accounts tree (an earlier run
        # cut short may have left it root's). Nothing else under data_dir is touched.
        mine = {settings.data_dir, settings.keys_dir, key, password}
        for path in mine:
            os.chown(path, uid, gid, follow_symlinks=False)
        count = len(mine) + _chown_tree([accounts, *made], uid, gid)
        lines.append(f"owner: {count} paths given to {settings.service_user} ({uid}:{gid})")
    say(lines[-1])

    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    version = build_info()["version"]
    write_atomic(marker, f"{stamp} maxy {version}\n" + "\n".join(lines) + "\n")
    say(f"done: {marker} written; later boots skip first boot")
    log.info("[firstboot] op=done marker=%s", marker)
    return True
