"""Just enough FAT (12, 16 or 32) to find a small file in a partition's root directory.

mtools and mkfs.vfat pick the FAT width by size. The boot sector gives the geometry; the root
directory is a fixed region on FAT12/16 and a cluster chain on FAT32; a file is found by its 8.3
directory entry (``cmdline.txt`` → ``CMDLINE TXT``; a long name's short alias is the same for
the names Maxy reads). Nothing is mounted: the same code reads ``/dev/mmcblk0`` and a card image.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from appliance.ota.card import Card, Extent
from appliance.ota.errors import StateError


@dataclass(frozen=True)
class FileSpot:
    """Where a file's data starts inside its partition."""

    sector_offset: int  # byte offset of the file's first data sector in the partition
    sector_size: int
    cluster_size: int  # bytes of one cluster: what a file's first cluster holds contiguously
    length: int
    fat_bits: int


def short_name(name: str) -> bytes:
    """The 11-byte 8.3 directory name of ``name`` (``autoboot.txt`` → ``AUTOBOOTTXT``)."""
    stem, _, extension = name.upper().partition(".")
    if not stem or len(stem) > 8 or len(extension) > 3:
        raise ValueError(f"{name!r} is not an 8.3 name")
    return stem.ljust(8).encode("ascii") + extension.ljust(3).encode("ascii")


def _u16(data: bytes, at: int) -> int:
    return int(struct.unpack_from("<H", data, at)[0])


def _u32(data: bytes, at: int) -> int:
    return int(struct.unpack_from("<I", data, at)[0])


def locate(card: Card, extent: Extent, name: str) -> FileSpot | None:
    """Find ``name`` in the root directory of the FAT filesystem of ``extent`` (None: absent)."""
    wanted = short_name(name)
    boot = card.pread(extent, 0, 512)
    bps, spc, reserved, fats = _u16(boot, 11), boot[13], _u16(boot, 14), boot[16]
    if boot[510:512] != b"\x55\xaa" or bps not in (512, 1024, 2048, 4096) or not spc or not fats:
        raise StateError(
            f"partition {extent.number} ({extent.name}) holds no FAT filesystem; the card is "
            "damaged — reflash it."
        )
    root_entries = _u16(boot, 17)
    total = _u16(boot, 19) or _u32(boot, 32)
    fat_size = _u16(boot, 22) or _u32(boot, 36)
    root_sectors = (root_entries * 32 + bps - 1) // bps
    first_data = reserved + fats * fat_size + root_sectors
    clusters = (total - first_data) // spc
    bits = 12 if clusters < 4085 else 16 if clusters < 65525 else 32

    def cluster_offset(cluster: int) -> int:
        return (first_data + (cluster - 2) * spc) * bps

    if bits == 32:
        directory = bytearray()
        cluster, seen = _u32(boot, 44), 0
        while 2 <= cluster < 0x0FFFFFF8 and seen < clusters:
            directory += card.pread(extent, cluster_offset(cluster), spc * bps)
            entry = card.pread(extent, reserved * bps + cluster * 4, 4)
            cluster, seen = _u32(entry, 0) & 0x0FFFFFFF, seen + 1
    else:
        root_offset = (reserved + fats * fat_size) * bps
        directory = bytearray(card.pread(extent, root_offset, root_sectors * bps))
    for at in range(0, len(directory), 32):
        entry = bytes(directory[at : at + 32])
        if entry[0] == 0:
            break
        attributes = entry[11]
        if entry[0] == 0xE5 or attributes == 0x0F or attributes & 0x18:
            continue  # deleted, long-name part, volume label or directory
        if entry[:11] == wanted:
            cluster = _u16(entry, 26) | ((_u16(entry, 20) << 16) if bits == 32 else 0)
            length = _u32(entry, 28)
            offset = cluster_offset(cluster) if cluster >= 2 else 0
            return FileSpot(offset, bps, spc * bps, length, bits)
    return None


def read_small(card: Card, extent: Extent, name: str) -> bytes | None:
    """The bytes of a file no longer than one cluster (None: absent), e.g. ``cmdline.txt``."""
    spot = locate(card, extent, name)
    if spot is None:
        return None
    if spot.length == 0:
        return b""
    if spot.sector_offset == 0 or spot.length > spot.cluster_size:
        raise StateError(
            f"{name} on partition {extent.number} ({extent.name}) is {spot.length} bytes; "
            f"expected at most {spot.cluster_size}. The boot image is not one Maxy made."
        )
    return card.pread(extent, spot.sector_offset, spot.length)
