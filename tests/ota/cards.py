"""Real card images for the OTA tests, and a model of the firmware that boots them.

A card is a disk-image FILE laid out like the device's SD card (appliance/ota/layout.py), with
small partitions so a run takes a second: ``sfdisk`` writes the GPT, ``mkfs.vfat`` + ``mcopy``
(mtools) make the FAT filesystems (autoboot.txt exactly as the image builder writes it),
``mke2fs -d`` the ext4 root filesystems. Nothing is mounted. :class:`SimDevice` adds what the
running device has around its card: the firmware's device-tree state (real big-endian files),
systemd's reboot parameter file, the trust dir and the data dir.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from appliance.core.fsio import sha256_hex
from appliance.ota.autoboot import DEFAULT_CONTENT, select_boot
from appliance.ota.bundle import create_bundle
from appliance.ota.keys import generate_key
from appliance.ota.layout import (
    MIB,
    PARTITIONS,
    SLOT_A,
    SLOTS,
    TYPE_FAT,
    TYPE_LINUX,
    Slot,
    other,
    partuuid,
)
from tests.support.processes import base_environ

sha256 = sha256_hex  # the card tests' name for it (tests.ota.* import it from here)

MTOOLS = {**os.environ, "MTOOLS_SKIP_CHECK": "1", "MTOOLSRC": "/dev/null"}
SECTOR = 512
# The layout override of the tests: tiny partitions, same numbers, names and filesystems.
SMALL_MIB = {"bootconfig": 2, "boot_a": 4, "boot_b": 4, "root_a": 8, "root_b": 8, "data": 1}
BOARD = "rpi4"
BOOTLOADER_DATE = datetime(2024, 3, 1, tzinfo=UTC)
RUNNING_VERSION = "0.1.0"  # appliance.core.version.__version__: what the test tree "runs"


def run(*command: str, env: Mapping[str, str] | None = None) -> str:
    """Run a tool; its stdout, or an assertion with its stderr."""
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
    return done.stdout


def fat_image(
    path: Path, size_mib: int, files: Mapping[str, bytes], bits: int | None = None
) -> Path:
    """A FAT filesystem image holding ``files`` (made by mkfs.vfat and mcopy)."""
    path.write_bytes(b"")
    os.truncate(path, size_mib * MIB)
    run("mkfs.vfat", *(("-F", str(bits)) if bits else ()), "-i", "4d415859", str(path))
    scratch = path.with_name(path.name + ".files")
    scratch.mkdir()
    for name, data in files.items():
        (scratch / name).write_bytes(data)
        run("mcopy", "-i", str(path), str(scratch / name), f"::/{name}", env=MTOOLS)
    shutil.rmtree(scratch)
    return path


def ext4_image(path: Path, size_mib: int, files: Mapping[str, bytes]) -> Path:
    """An ext4 filesystem image populated from a directory (``mke2fs -d``)."""
    tree = path.with_name(path.name + ".tree")
    for name, data in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    run(
        "mke2fs",
        "-q",
        "-F",
        "-t",
        "ext4",
        "-E",
        "root_owner=0:0",
        "-d",
        str(tree),
        str(path),
        f"{size_mib}M",
    )
    shutil.rmtree(tree)
    return path


@dataclass(frozen=True)
class SlotImages:
    """The boot images (one per slot) and the root image of one release."""

    version: str
    boot_a: Path
    boot_b: Path
    root: Path

    def boot(self, slot: Slot) -> Path:
        """The boot image made for ``slot`` (its cmdline.txt names the slot's root)."""
        return self.boot_a if slot is SLOT_A else self.boot_b

    def hashes(self, slot: Slot) -> tuple[str, str]:
        """What ``slot`` holds once this release is written into it."""
        return sha256(self.boot(slot).read_bytes()), sha256(self.root.read_bytes())


def cmdline(slot: Slot, root: str | None = None) -> bytes:
    """A slot's cmdline.txt as the image builder writes it: its own root by PARTUUID."""
    return f"console=tty0 root=PARTUUID={root or partuuid(slot.root)} ro rootwait\n".encode()


def slot_images(
    folder: Path, version: str, sizes: Mapping[str, int] = SMALL_MIB, *, swapped: bool = False
) -> SlotImages:
    """Boot (FAT, one per slot) and root (ext4) images of ``version``, exactly partition-sized.

    ``swapped``: each boot image names the OTHER slot's root (a wrongly made bundle).
    """
    folder.mkdir(parents=True, exist_ok=True)
    kernel = os.urandom(64 * 1024)
    boots = {}
    for slot in SLOTS:
        names = other(slot) if swapped else slot
        boots[slot.name] = fat_image(
            folder / f"boot_{slot.name}-{version}.img",
            sizes["boot_a"],
            {
                "config.txt": b"arm_64bit=1\nkernel=vmlinuz\n",
                "cmdline.txt": cmdline(names),
                "version.txt": version.encode() + b"\n",
                "vmlinuz": kernel,
            },
        )
    root = ext4_image(
        folder / f"root-{version}.img",
        sizes["root_a"],
        {
            "etc/maxy-version": version.encode() + b"\n",
            "usr/bin/maxy": os.urandom(512 * 1024),
        },
    )
    return SlotImages(version, boots["a"], boots["b"], root)


def sfdisk_script(sizes: Mapping[str, int]) -> str:
    """The GPT of the card, partitions in layout order, MiB-aligned."""
    lines = ["label: gpt", "unit: sectors", "first-lba: 2048", ""]
    start = MIB // SECTOR
    for part in PARTITIONS:
        size = sizes[part.name] * MIB // SECTOR
        kind = TYPE_FAT if part.fs == "vfat" else TYPE_LINUX
        lines.append(
            f"start={start}, size={size}, type={kind}, "
            f"uuid={partuuid(part).upper()}, name={part.name}"
        )
        start += size
    return "\n".join(lines) + "\n"


def partition_table(card: Path) -> dict[int, tuple[int, int]]:
    """``{number: (offset, size)}`` in bytes, as sfdisk reads the card."""
    table = json.loads(run("sfdisk", "--json", str(card)))["partitiontable"]
    return {
        int(p["node"].rsplit(str(card), 1)[1] or 0): (p["start"] * SECTOR, p["size"] * SECTOR)
        for p in table["partitions"]
    }


def build_card(
    path: Path,
    a: SlotImages,
    b: SlotImages | None = None,
    *,
    sizes: Mapping[str, int] = SMALL_MIB,
    autoboot: bytes = DEFAULT_CONTENT,
    fat_bits: int | None = None,
) -> Path:
    """A whole card: GPT, bootconfig with autoboot.txt, slot A (and B) written, data empty."""
    total = (sum(sizes.values()) + 2) * MIB
    path.write_bytes(b"")
    os.truncate(path, total)
    done = subprocess.run(
        ["sfdisk", "--quiet", str(path)],
        input=sfdisk_script(sizes),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    bootconfig = fat_image(
        path.with_name(path.name + ".bootconfig"),
        sizes["bootconfig"],
        {"autoboot.txt": autoboot},
        bits=fat_bits,
    )
    table = partition_table(path)
    images = {1: bootconfig, 2: a.boot_a, 4: a.root}
    if b is not None:
        images.update({3: b.boot_b, 5: b.root})
    with path.open("r+b") as card:
        for number, image in images.items():
            data = image.read_bytes()
            assert len(data) <= table[number][1], f"image {image} does not fit partition {number}"
            card.seek(table[number][0])
            card.write(data)
    bootconfig.unlink()
    return path


def read_partition(card: Path, number: int) -> bytes:
    offset, size = partition_table(card)[number]
    with card.open("rb") as handle:
        handle.seek(offset)
        return handle.read(size)


def mtype_cmdline(card: Path, slot: Slot) -> str:
    """The slot's cmdline.txt as mtools (not our parser) reads it from its boot partition."""
    offset = partition_table(card)[slot.boot.number][0]
    return run("mtype", "-i", f"{card}@@{offset}", "::/cmdline.txt", env=MTOOLS)


def gpt_partuuid(card: Path, number: int) -> str:
    """A partition's PARTUUID as sfdisk reads the card, lower case."""
    table = json.loads(run("sfdisk", "--json", str(card)))["partitiontable"]
    for part in table["partitions"]:
        if part["node"].removeprefix(str(card)) == str(number):
            return str(part["uuid"]).lower()
    raise KeyError(number)


def mtype_autoboot(card: Path) -> bytes:
    """autoboot.txt as mtools (not our parser) reads it from partition 1."""
    offset = partition_table(card)[1][0]
    done = subprocess.run(
        ["mtype", "-i", f"{card}@@{offset}", "::/autoboot.txt"],
        capture_output=True,
        env=MTOOLS,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


@dataclass
class SimDevice:
    """A card plus the state around it that a running device has."""

    root: Path
    card: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def firmware(self) -> Path:
        return self.root / "firmware"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def trust(self) -> Path:
        return self.root / "trust"

    @property
    def reboot_param(self) -> Path:
        return self.root / "run" / "reboot-param"

    @property
    def reboots(self) -> Path:
        return self.root / "reboots.log"

    def set_firmware(
        self, partition: int, tryboot: bool = False, built: datetime | None = BOOTLOADER_DATE
    ) -> None:
        """Write the firmware's device-tree files as the Pi bootloader does."""
        self.firmware.mkdir(parents=True, exist_ok=True)
        (self.firmware / "partition").write_bytes(u32(partition))
        (self.firmware / "tryboot").write_bytes(u32(1 if tryboot else 0))
        stamp = self.firmware / "build-timestamp"
        if built is None:
            stamp.unlink(missing_ok=True)
        else:
            stamp.write_bytes(u32(int(built.timestamp())))

    def armed(self) -> bool:
        return self.reboot_param.is_file() and self.reboot_param.read_text() == "0 tryboot"

    def boot(self, *, power_cut: bool = False) -> Slot:
        """What the firmware does at the next start: returns the slot it boots."""
        tryboot = self.armed() and not power_cut
        slot = select_boot(mtype_autoboot(self.card), tryboot)
        self.reboot_param.unlink(missing_ok=True)  # /run is a tmpfs
        self.set_firmware(slot.boot_partition, tryboot)
        return slot

    def slot_hashes(self, slot: Slot) -> tuple[str, str]:
        return (
            sha256(read_partition(self.card, slot.boot.number)),
            sha256(read_partition(self.card, slot.root.number)),
        )

    def state(self) -> dict[str, object]:
        path = self.data / "ota" / "state.json"
        return json.loads(path.read_text()) if path.is_file() else {}


def make_device(root: Path, a: SlotImages, b: SlotImages | None = None, /, **env: str) -> SimDevice:
    """A device running slot A in an ordinary boot, trusting ``root/trust``."""
    root.mkdir(parents=True, exist_ok=True)
    device = SimDevice(root, build_card(root / "card.img", a, b))
    device.trust.mkdir(exist_ok=True)
    device.reboot_param.parent.mkdir(parents=True, exist_ok=True)
    device.set_firmware(SLOT_A.boot_partition)
    device.env = {
        **base_environ(),
        "MAXY_DATA_DIR": str(device.data),
        "MAXY_OTA_DEVICE": str(device.card),
        "MAXY_OTA_TRUST_DIR": str(device.trust),
        "MAXY_OTA_FIRMWARE_DIR": str(device.firmware),
        "MAXY_OTA_REBOOT_PARAM": str(device.reboot_param),
        "MAXY_OTA_REBOOT_COMMAND": f"sh -c 'echo reboot >> {device.reboots}'",
        "MAXY_OTA_BOARD": BOARD,
        "MAXY_OTA_BACKUP": "off",
        **env,
    }
    return device


@dataclass(frozen=True)
class Signer:
    """A signing key and its public half."""

    private: Path
    public: Path


def make_signer(folder: Path, name: str) -> Signer:
    folder.mkdir(parents=True, exist_ok=True)
    private = folder / f"{name}.pem"
    return Signer(private, generate_key(private))


def trust(device: SimDevice, signer: Signer) -> None:
    shutil.copy(signer.public, device.trust / signer.public.name)


def make_bundle(
    folder: Path,
    images: SlotImages,
    signer: Signer,
    *,
    version: str | None = None,
    boards: tuple[str, ...] = (BOARD,),
    min_bootloader: str = "2023-01-01",
    next_key: Signer | None = None,
) -> Path:
    """A real .maxyupdate of ``images``."""
    version = version or images.version
    return create_bundle(
        folder / f"maxy-{version}-{'-'.join(boards)}.maxyupdate",
        version=version,
        boards=boards,
        boot_images={"a": images.boot_a, "b": images.boot_b},
        root_image=images.root,
        signing_key=signer.private,
        min_bootloader=min_bootloader,
        next_key=next_key.public if next_key else None,
    )


def maxy_ota(*args: str) -> list[str]:
    return [sys.executable, "-m", "appliance", "ota", *args]


def ota(
    device: SimDevice, *args: str, timeout: float = 300, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run ``maxy ota ARGS`` as a real process against the device."""
    return subprocess.run(
        maxy_ota(*args),
        env={**device.env, **extra},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def progress_lines(stdout: str) -> list[dict[str, object]]:
    """Every line of ``--progress json`` output, parsed (each must be one JSON object)."""
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    for line in lines:
        assert set(line) == {"phase", "done", "total", "message"}, line
    return lines
