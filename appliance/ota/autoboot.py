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

The FAT is parsed (:mod:`appliance.ota.fat`) just far enough to find the file's first data
sector through its 8.3 entry ``AUTOBOOT.TXT``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance.ota import fat
from appliance.ota.card import Card, Extent
from appliance.ota.errors import StateError
from appliance.ota.fat import FileSpot
from appliance.ota.layout import BOOTCONFIG, SLOT_A, SLOT_B, Slot, slot_by_boot_partition

FILE_NAME = "autoboot.txt"
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


def locate(card: Card, extent: Extent) -> FileSpot:
    """Find autoboot.txt in the FAT filesystem of ``extent``."""
    spot = fat.locate(card, extent, FILE_NAME)
    if spot is None:
        raise StateError(
            f"partition {extent.number} has no autoboot.txt; the firmware cannot choose a slot. "
            "Restore it from the image's firmware-config/autoboot.txt."
        )
    if spot.sector_offset == 0 or spot.length > spot.sector_size:
        raise StateError(
            f"autoboot.txt on partition {extent.number} is {spot.length} bytes; Maxy keeps "
            f"it to {LENGTH}. Restore it from the image's firmware-config/."
        )
    return spot


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
