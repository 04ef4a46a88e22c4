"""The card's partition layout, shared by the image builder and ``maxy ota``.

One GPT disk, the same on a Raspberry Pi 4/5 and on an x86-64 mini PC::

    #1 bootconfig  FAT   autoboot.txt (the firmware's A/B selector)
    #2 boot_a      FAT   slot A: kernel, initramfs, config.txt, cmdline.txt
    #3 boot_b      FAT   slot B
    #4 root_a      ext4  slot A root filesystem, mounted read-only
    #5 root_b      ext4  slot B root filesystem
    #6 data        ext4  /data, survives every update, grown on first boot

A slot is a (boot, root) pair; the firmware picks the slot by the boot partition's number
(``boot_partition=2`` is slot A, ``3`` is slot B) and that slot's ``cmdline.txt`` names its root
by PARTUUID. Every card has the same PARTUUIDs (:func:`partuuid`), so a boot image made for slot
B names root_b on every card ever flashed; an update carries one boot image per slot.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

MIB = 1024 * 1024

# GPT partition type GUIDs (sfdisk names them in upper case).
TYPE_FAT = "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"  # Microsoft basic data
TYPE_LINUX = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"  # Linux filesystem


@dataclass(frozen=True)
class Partition:
    """One partition of the card: its GPT number, name, filesystem and default size."""

    number: int
    name: str
    fs: str  # "vfat" or "ext4"
    size_mib: int


BOOTCONFIG = Partition(1, "bootconfig", "vfat", 16)
BOOT_A = Partition(2, "boot_a", "vfat", 256)
BOOT_B = Partition(3, "boot_b", "vfat", 256)
ROOT_A = Partition(4, "root_a", "ext4", 1792)
ROOT_B = Partition(5, "root_b", "ext4", 1792)
DATA = Partition(6, "data", "ext4", 256)

PARTITIONS = (BOOTCONFIG, BOOT_A, BOOT_B, ROOT_A, ROOT_B, DATA)
FIRST_LBA_MIB = 1  # the first partition starts at 1 MiB; every partition is MiB-aligned
NAMESPACE = uuid.UUID("6d617879-2d69-6d61-6765-2d6c61796f75")  # "maxy-image-layou"


def partuuid(part: Partition) -> str:
    """The fixed GPT unique GUID (PARTUUID) of one partition, lower case."""
    return str(uuid.uuid5(NAMESPACE, f"partition:{part.name}"))


@dataclass(frozen=True)
class Slot:
    """An A/B slot: the boot and root partitions the firmware starts together."""

    name: str  # "a" or "b"
    boot: Partition
    root: Partition

    @property
    def boot_partition(self) -> int:
        """The number autoboot.txt's ``boot_partition=`` names for this slot."""
        return self.boot.number


SLOT_A = Slot("a", BOOT_A, ROOT_A)
SLOT_B = Slot("b", BOOT_B, ROOT_B)
SLOTS = (SLOT_A, SLOT_B)


def slot_by_boot_partition(number: int) -> Slot:
    """The slot whose boot partition has this number (ValueError for any other number)."""
    for slot in SLOTS:
        if slot.boot.number == number:
            return slot
    raise ValueError(f"boot_partition={number} names no slot (expected 2 or 3)")


def other(slot: Slot) -> Slot:
    """The other slot."""
    return SLOT_B if slot is SLOT_A else SLOT_A
