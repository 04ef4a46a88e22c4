"""The running device as ``maxy ota`` sees it: boot state, trust, versions, the armed reboot.

The trial-boot flag is volatile: systemd hands the content of its reboot parameter file
(``MAXY_OTA_REBOOT_PARAM``, default ``/run/systemd/reboot-param``, on a tmpfs) to the kernel
at the next reboot, and ``0 tryboot`` makes the Pi firmware start the ``[tryboot]`` slot once.
A power cut or any reboot clears both the file and the firmware's flag.
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from appliance.core.config import Settings
from appliance.core.fsio import write_atomic
from appliance.core.proc import ToolError, run
from appliance.core.version import build_info
from appliance.ota import autoboot
from appliance.ota.autoboot import Autoboot
from appliance.ota.card import Card
from appliance.ota.errors import StateError
from appliance.ota.firmware import FirmwareState, read_firmware
from appliance.ota.keys import TrustStore
from appliance.ota.layout import Slot
from appliance.ota.state import OtaState

log = logging.getLogger(__name__)

TRYBOOT_PARAM = "0 tryboot"


def ota_dir(settings: Settings) -> Path:
    """Where state.json, the lock and the Neo4j dump live."""
    return settings.data_dir / "ota"


def rotated_keys_dir(settings: Settings) -> Path:
    """Where keys introduced by a committed bundle's ``next_key`` are kept."""
    return settings.keys_dir / "ota"


def trust_store(settings: Settings) -> TrustStore:
    """The keys this device accepts: the image's trust dir and the rotated keys."""
    return TrustStore.load([settings.ota_trust_dir, rotated_keys_dir(settings)])


@dataclass(frozen=True)
class BootView:
    """How the device booted and what autoboot.txt says."""

    firmware: FirmwareState
    autoboot: Autoboot

    @property
    def booted(self) -> Slot:
        """The slot running now."""
        return self.firmware.booted_slot

    @property
    def committed(self) -> Slot:
        """The slot every ordinary boot starts."""
        return self.autoboot.default_slot

    @property
    def in_uncommitted_trial(self) -> bool:
        """A trial boot whose slot is not (yet) the default."""
        return self.firmware.tryboot and self.booted is not self.committed


def boot_view(settings: Settings, card: Card) -> BootView:
    """Read the firmware state and autoboot.txt."""
    return BootView(read_firmware(settings.ota_firmware_dir), autoboot.read_config(card))


def installed_version(state: OtaState, committed: Slot) -> str:
    """The version of the committed slot (recorded, else the running build's)."""
    recorded = state.committed
    if recorded and recorded.get("slot") == committed.name and recorded.get("version"):
        return str(recorded["version"])
    return state.slot_version(committed.name) or str(build_info()["version"])


def armed(param_file: Path) -> bool:
    """Whether the next reboot is armed as a trial boot."""
    try:
        return "tryboot" in param_file.read_text()
    except OSError:
        return False


def arm(param_file: Path) -> None:
    """Make the next reboot a trial boot (atomically: the file is whole or absent)."""
    try:
        param_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(param_file, TRYBOOT_PARAM)
    except OSError as err:
        raise StateError(
            f"cannot arm the trial boot in {param_file} ({err.strerror}); nothing boots the new "
            "slot until `maxy ota apply` runs again with write access to MAXY_OTA_REBOOT_PARAM."
        ) from err
    log.info("[ota] op=arm param=%s", param_file)


def disarm(param_file: Path) -> bool:
    """Make the next reboot an ordinary one; whether a trial boot was armed."""
    if not armed(param_file):
        return False
    try:
        param_file.unlink(missing_ok=True)
    except OSError as err:
        raise StateError(
            f"cannot disarm the trial boot in {param_file} ({err.strerror}); give `maxy ota` "
            "write access to MAXY_OTA_REBOOT_PARAM."
        ) from err
    log.info("[ota] op=disarm param=%s", param_file)
    return True


def reboot(settings: Settings) -> None:
    """Run the reboot command (``MAXY_OTA_REBOOT_COMMAND``)."""
    command = shlex.split(settings.ota_reboot_command)
    log.info("[ota] op=reboot command=%r", settings.ota_reboot_command)
    try:
        done = run(command, timeout=settings.ota_reboot_timeout, env=os.environ)
    except ToolError as err:
        raise StateError(
            f"the reboot command {settings.ota_reboot_command!r} failed ({err}); reboot the "
            "device yourself (`systemctl reboot`)."
        ) from err
    if done.returncode != 0:
        raise StateError(
            f"the reboot command {settings.ota_reboot_command!r} exited {done.returncode}: "
            f"{done.stderr.strip()[-200:]}; reboot the device yourself (`systemctl reboot`)."
        )
