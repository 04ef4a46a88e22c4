"""What the boot firmware tells the running system, and which board this is.

The Raspberry Pi firmware publishes its state as device-tree properties under
``/proc/device-tree/chosen/bootloader`` (``MAXY_OTA_FIRMWARE_DIR``), each a big-endian u32:

    tryboot           1 when this boot was a trial boot (armed by ``reboot "0 tryboot"``)
    partition         the boot partition this boot came from (2: slot A, 3: slot B)
    build-timestamp   when the bootloader was built (epoch seconds): tryboot needs a recent one
"""

from __future__ import annotations

import platform
import struct
from dataclasses import dataclass
from pathlib import Path

from appliance.ota.errors import StateError
from appliance.ota.layout import Slot, slot_by_boot_partition

MODEL_FILE = Path("/proc/device-tree/model")


@dataclass(frozen=True)
class FirmwareState:
    """How this system was booted."""

    tryboot: bool
    partition: int
    build_timestamp: int | None

    @property
    def booted_slot(self) -> Slot:
        """The slot running now."""
        return slot_by_boot_partition(self.partition)


def _u32(path: Path) -> int | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StateError(f"cannot read {path} ({err.strerror}).") from err
    if len(raw) < 4:
        raise StateError(f"{path} holds {len(raw)} bytes, not a big-endian u32.")
    return int(struct.unpack(">I", raw[:4])[0])


def read_firmware(directory: Path) -> FirmwareState:
    """Read the firmware's boot state, or StateError saying what is missing."""
    if not directory.is_dir():
        raise StateError(
            f"no boot firmware state at {directory}: this system did not boot through the "
            "Raspberry Pi firmware's A/B mechanism. Set MAXY_OTA_FIRMWARE_DIR to where the "
            "firmware publishes tryboot, partition and build-timestamp."
        )
    partition = _u32(directory / "partition")
    if partition is None:
        raise StateError(f"{directory}/partition is missing: the booted slot is unknown.")
    try:
        slot_by_boot_partition(partition)
    except ValueError as err:
        raise StateError(
            f"the firmware booted partition {partition}, which is no Maxy slot; "
            "reflash the card or check autoboot.txt."
        ) from err
    return FirmwareState(
        tryboot=(_u32(directory / "tryboot") or 0) == 1,
        partition=partition,
        build_timestamp=_u32(directory / "build-timestamp"),
    )


def detect_board(configured: str, model_file: Path = MODEL_FILE) -> str:
    """This device's board name (rpi4, rpi5, x86-64): the setting, else the hardware's."""
    if configured:
        return configured
    try:
        model = model_file.read_bytes().decode("ascii", "replace")
    except OSError:
        model = ""
    if "Raspberry Pi 5" in model or "Compute Module 5" in model:
        return "rpi5"
    if "Raspberry Pi 4" in model or "Compute Module 4" in model or "Raspberry Pi 400" in model:
        return "rpi4"
    if platform.machine().lower() in ("x86_64", "amd64"):
        return "x86-64"
    raise StateError(
        f"cannot tell which board this is (model {model.strip(chr(0)) or 'unknown'!r}); "
        "set MAXY_OTA_BOARD to rpi4, rpi5 or x86-64."
    )
