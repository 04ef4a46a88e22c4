"""The card as one GPT disk: a block device on the device, a disk-image file in tests.

Nothing is mounted. The GPT is read here (primary header at LBA 1, else the backup at the last
LBA; both CRC-checked), and every partition is addressed by byte offset on the whole disk, so
the same code writes ``/dev/mmcblk0`` and ``card.img``. Writes go through ``pwrite`` and are
made durable with ``fsync``; :meth:`Card.drop_cache` makes a read-back come from the medium,
not from the page cache that the write just filled.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import struct
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from appliance.ota.errors import SlotWriteError, StateError
from appliance.ota.layout import PARTITIONS, Partition

log = logging.getLogger(__name__)

GPT_SIGNATURE = b"EFI PART"
BLKSSZGET = 0x1268  # logical sector size of a block device
BLKGETSIZE64 = 0x80081272  # size in bytes of a block device
_HEADER = struct.Struct("<8sIIIIQQQQ16sQIII")
_ENTRY = struct.Struct("<16s16sQQQ72s")


@dataclass(frozen=True)
class Extent:
    """Where one partition lies on the disk, in bytes."""

    number: int
    name: str
    type_guid: str
    offset: int
    size: int
    partuuid: str = ""  # the GPT unique GUID, lower case (what ``root=PARTUUID=`` names)


def _guid(raw: bytes) -> str:
    return str(uuid.UUID(bytes_le=raw)).upper()


def _read_exact(fd: int, size: int, offset: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise StateError(f"the card ends before byte {offset + size}: it is truncated.")
    return data


def _parse_header(raw: bytes) -> tuple[int, int, int] | None:
    """``(entries_lba, count, entry_size)`` of a valid GPT header, else None."""
    fields = _HEADER.unpack_from(raw)
    signature, _rev, header_size, crc = fields[0], fields[1], fields[2], fields[3]
    if signature != GPT_SIGNATURE or not 92 <= header_size <= len(raw):
        return None
    blank = bytearray(raw[:header_size])
    blank[16:20] = b"\0\0\0\0"
    if zlib.crc32(bytes(blank)) != crc:
        return None
    entries_lba, count, entry_size = fields[10], fields[11], fields[12]
    if entry_size < _ENTRY.size or count > 1024:
        return None
    return entries_lba, count, entry_size


def read_gpt(fd: int, sector: int, disk_size: int) -> dict[int, Extent]:
    """The partitions of the GPT on ``fd``, by number (1-based, as ``/dev/mmcblk0p<N>``)."""
    for lba in (1, disk_size // sector - 1):
        header = _read_exact(fd, sector, lba * sector)
        parsed = _parse_header(header)
        if parsed is None:
            continue
        entries_lba, count, entry_size = parsed
        table = _read_exact(fd, count * entry_size, entries_lba * sector)
        if zlib.crc32(table) != struct.unpack_from("<I", header, 88)[0]:
            continue
        if lba != 1:
            log.warning("[ota] op=read-gpt warn=primary-header-damaged using=backup")
        extents: dict[int, Extent] = {}
        for index in range(count):
            entry = table[index * entry_size : index * entry_size + _ENTRY.size]
            type_raw, unique, first, last, _attrs, name_raw = _ENTRY.unpack(entry)
            if type_raw == bytes(16):
                continue
            name = name_raw.decode("utf-16-le", "replace").split("\0", 1)[0]
            number = index + 1
            extents[number] = Extent(
                number,
                name,
                _guid(type_raw),
                first * sector,
                (last - first + 1) * sector,
                _guid(unique).lower(),
            )
        return extents
    raise StateError(
        "the card has no valid GPT partition table (both headers damaged or absent). "
        "Is MAXY_OTA_DEVICE the whole card (e.g. /dev/mmcblk0), not one partition?"
    )


class Card:
    """An open GPT disk with the layout of :mod:`appliance.ota.layout`."""

    def __init__(self, path: Path, *, writable: bool = True) -> None:
        self.path = path
        try:
            self.fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC)
        except OSError as err:
            raise StateError(
                f"cannot open the card {path} ({err.strerror}). Run as a user who may write "
                "it, or set MAXY_OTA_DEVICE to the card's whole-disk device."
            ) from err
        try:
            info = os.fstat(self.fd)
            self.is_block = stat.S_ISBLK(info.st_mode)
            if self.is_block:
                self.sector = struct.unpack("I", fcntl.ioctl(self.fd, BLKSSZGET, b"\0" * 4))[0]
                self.size = struct.unpack("Q", fcntl.ioctl(self.fd, BLKGETSIZE64, b"\0" * 8))[0]
            else:
                self.sector, self.size = 512, info.st_size
            self.extents = read_gpt(self.fd, self.sector, self.size)
            self._check_layout()
        except BaseException:
            os.close(self.fd)
            raise

    def _check_layout(self) -> None:
        for part in PARTITIONS[:5]:
            extent = self.extents.get(part.number)
            if extent is None:
                raise StateError(
                    f"the card {self.path} has no partition {part.number} ({part.name}); it "
                    "was not made by Maxy's image builder. Flash a Maxy image first."
                )
            if extent.name and extent.name != part.name:
                raise StateError(
                    f"partition {part.number} of {self.path} is named {extent.name!r}, not "
                    f"{part.name!r}: this is not a Maxy card. Check MAXY_OTA_DEVICE."
                )

    def __enter__(self) -> Card:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the disk."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def extent(self, part: Partition) -> Extent:
        """Where ``part`` lies on this card."""
        return self.extents[part.number]

    def pread(self, extent: Extent, offset: int, size: int) -> bytes:
        """Read ``size`` bytes at ``offset`` inside ``extent``."""
        if offset < 0 or offset + size > extent.size:
            raise ValueError(f"read outside partition {extent.number}")
        return _read_exact(self.fd, size, extent.offset + offset)

    def pwrite(self, extent: Extent, offset: int, data: bytes | memoryview) -> None:
        """Write ``data`` at ``offset`` inside ``extent`` (all of it, or SlotWriteError)."""
        if offset < 0 or offset + len(data) > extent.size:
            raise SlotWriteError(
                f"refusing to write past the end of partition {extent.number} ({extent.name})."
            )
        view = memoryview(data)
        position = extent.offset + offset
        try:
            while view:
                written = os.pwrite(self.fd, view, position)
                view, position = view[written:], position + written
        except OSError as err:
            raise SlotWriteError(
                f"writing partition {extent.number} of {self.path} failed at byte "
                f"{position - extent.offset} ({err.strerror}). The running system is "
                "untouched; the card may be failing — try again, or replace the card."
            ) from err

    def sync(self) -> None:
        """Make every write so far durable."""
        try:
            os.fsync(self.fd)
        except OSError as err:
            raise SlotWriteError(f"flushing {self.path} failed ({err.strerror}).") from err

    def drop_cache(self, extent: Extent) -> None:
        """Forget cached pages of ``extent`` so the next read comes from the medium."""
        os.posix_fadvise(self.fd, extent.offset, extent.size, os.POSIX_FADV_DONTNEED)
