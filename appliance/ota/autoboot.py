"""``autoboot.txt``: the firmware's A/B selector on partition #1, read and rewritten in place.

The file always has exactly this form (64 bytes; only the two digits ever change)::

    [all]
    tryboot_a_b=1
    boot_partition=2        the committed slot: what every ordinary boot starts
    [tryboot]
    boot_partition=3        the trial slot: started once, by a reboot armed with "0 tryboot"

How the firmware chooses (:func:`select_boot`): when the volatile tryboot flag is set and
``tryboot_a_b=1``, the ``[tryboot]`` section's ``boot_partition`` applies; otherwise ``[all]``'s.
The flag lives in RAM: a power cut or any ordinary reboot clears it, so only a reboot that
``maxy ota apply`` armed ever starts the trial slot.

Why a rewrite cannot leave the card unbootable. The file is rewritten by ONE ``pwrite`` of the
single sector that holds it, then ``fsync``; its length, its directory entry and the FAT never
change, so the filesystem's metadata is never in flux. If power fails during that write, the
sector may hold any mix of old and new bytes (a torn write, at any granularity down to single
bytes). Old and new contents are identical except at the two digit positions, and each of
those digits is, old or new, a ``2`` or a ``3`` — so every possible mix is again a well-formed
file whose two ``boot_partition`` lines each name slot A or slot B. Which one matters only when
both slots can be booted, and the callers make sure of that before they write:

- ``apply`` changes only the ``[tryboot]`` digit (``[all]`` already names the committed slot),
  and only after the new slot was written and read back, so a mix can at worst name the
  verified new slot for the trial boot — and an ordinary boot ignores ``[tryboot]``;
- ``commit`` swaps both digits only after the trial slot proved healthy, so any mix names
  either the previously committed slot or the verified, healthy new one.

``tests/ota/test_autoboot.py`` enumerates every mix and checks both claims.

The FAT (12, 16 or 32 — mtools and mkfs.vfat pick by size) is parsed here just far enough to
find the file's first data sector: boot sector, then the root directory (a fixed region on
FAT12/16, a cluster chain on FAT32), then the 8.3 entry ``AUTOBOOT.TXT``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from appliance.ota.card import Card, Extent
from appliance.ota.errors import StateError
from appliance.ota.layout import BOOTCONFIG, SLOT_A, SLOT_B, Slot, slot_by_boot_partition

FILE_NAME = b"AUTOBOOT" + b"TXT"  # the 8.3 directory name of autoboot.txt
TEMPLATE = "[all]\ntryboot_a_b=1\nboot_partition={default}\n[tryboot]\nboot_partition={trial}\n"
_EXACT = re.compile(
    rb"\A\[all\]\ntryboot_a_b=1\nboot_partition=([23])\n\[tryboot\]\nboot_partition=([23])\n\Z"
)


def render(default: Slot, trial: Slot) -> bytes:
    """The file that boots ``default`` normally and ``trial`` on an armed tryboot."""
    return TEMPLATE.format(default=default.boot_partition, trial=trial.boot_partition).encode()


DEFAULT_CONTENT = render(SLOT_A, SLOT_B)  # what a freshly flashed card carries
LENGTH = len(DEFAULT_CONTENT)


@dataclass(frozen=True)
class Autoboot:
    """What autoboot.txt says: the default and the trial boot partitions."""

    default: int
    trial: int | None
    tryboot_a_b: bool

    @property
    def default_slot(self) -> Slot:
        """The slot every ordinary boot starts."""
        return slot_by_boot_partition(self.default)

    @property
    def trial_slot(self) -> Slot | None:
        """The slot an armed tryboot starts (None: tryboot would start the default)."""
        if not self.tryboot_a_b or self.trial is None:
            return None
        return slot_by_boot_partition(self.trial)


def parse(text: str | bytes) -> Autoboot:
    """Parse autoboot.txt as the firmware reads it; StateError if it names no slot."""
    raw = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    section = "all"
    values: dict[str, dict[str, str]] = {"all": {}, "tryboot": {}}
    for number, line in enumerate(raw.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise StateError(f"autoboot.txt line {number} ({line!r}) is not key=value.")
        if section in values:
            values[section][key.strip()] = value.strip()
    try:
        default = int(values["all"]["boot_partition"])
        slot_by_boot_partition(default)
        trial_text = values["tryboot"].get("boot_partition")
        trial = int(trial_text) if trial_text is not None else None
        if trial is not None:
            slot_by_boot_partition(trial)
    except (KeyError, ValueError) as err:
        raise StateError(
            f"autoboot.txt names no valid boot partition ({err}); restore it from the image's "
            f"firmware-config/autoboot.txt."
        ) from err
    return Autoboot(default, trial, values["all"].get("tryboot_a_b") == "1")


def select_boot(autoboot_text: str | bytes, tryboot: bool) -> Slot:
    """The slot the firmware boots, given autoboot.txt and the tryboot flag."""
    config = parse(autoboot_text)
    if tryboot and config.trial_slot is not None:
        return config.trial_slot
    return config.default_slot


@dataclass(frozen=True)
class FileSpot:
    """Where autoboot.txt's data lies inside the bootconfig partition."""

    sector_offset: int  # byte offset of the file's first data sector in the partition
    sector_size: int
    length: int
    fat_bits: int


def _u16(data: bytes, at: int) -> int:
    return int(struct.unpack_from("<H", data, at)[0])


def _u32(data: bytes, at: int) -> int:
    return int(struct.unpack_from("<I", data, at)[0])


def locate(card: Card, extent: Extent) -> FileSpot:
    """Find autoboot.txt in the FAT filesystem of ``extent``."""
    boot = card.pread(extent, 0, 512)
    bps, spc, reserved, fats = _u16(boot, 11), boot[13], _u16(boot, 14), boot[16]
    if boot[510:512] != b"\x55\xaa" or bps not in (512, 1024, 2048, 4096) or not spc or not fats:
        raise StateError(
            f"partition {extent.number} holds no FAT filesystem; reflash the card's bootconfig."
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
        if entry[:11] == FILE_NAME:
            cluster = _u16(entry, 26) | ((_u16(entry, 20) << 16) if bits == 32 else 0)
            length = _u32(entry, 28)
            if cluster < 2 or length > bps:
                raise StateError(
                    f"autoboot.txt on partition {extent.number} is {length} bytes; Maxy keeps "
                    f"it to {LENGTH}. Restore it from the image's firmware-config/."
                )
            return FileSpot(cluster_offset(cluster), bps, length, bits)
    raise StateError(
        f"partition {extent.number} has no autoboot.txt; the firmware cannot choose a slot. "
        "Restore it from the image's firmware-config/autoboot.txt."
    )


def read(card: Card) -> tuple[bytes, FileSpot]:
    """The bytes of autoboot.txt and where they lie."""
    extent = card.extent(BOOTCONFIG)
    spot = locate(card, extent)
    return card.pread(extent, spot.sector_offset, spot.length), spot


def read_config(card: Card) -> Autoboot:
    """autoboot.txt of ``card``, parsed."""
    return parse(read(card)[0])


def write(card: Card, default: Slot, trial: Slot) -> bool:
    """Point autoboot.txt at ``default`` and ``trial`` with one sector write; whether it changed."""
    extent = card.extent(BOOTCONFIG)
    spot = locate(card, extent)
    sector = card.pread(extent, spot.sector_offset, spot.sector_size)
    current = sector[: spot.length]
    if not _EXACT.match(current):
        raise StateError(
            "autoboot.txt is not in the form Maxy rewrites in place (someone edited it?). "
            "Restore it from the image's firmware-config/autoboot.txt, then try again."
        )
    new = render(default, trial)
    if current == new:
        return False
    card.pwrite(extent, spot.sector_offset, new + sector[len(new) :])
    card.sync()
    return True
