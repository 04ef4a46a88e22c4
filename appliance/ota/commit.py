"""``maxy ota commit``: make a healthy trial boot the default, or let the firmware roll back.

Run by a unit on every boot. In a trial boot (the firmware's tryboot flag is 1 and it booted the
slot autoboot.txt's ``[tryboot]`` names) it polls the health checks
(:mod:`appliance.ota.health`) for up to ``MAXY_OTA_COMMIT_WINDOW`` seconds:

- healthy: autoboot.txt is rewritten in place so ``[all]`` names the new slot and ``[tryboot]``
  the old one (one sector, see :mod:`appliance.ota.autoboot`), state.json records the commit,
  and the bundle's ``next_key`` joins the trusted keys;
- never healthy: nothing is switched; the failure is recorded and the device reboots without
  the tryboot flag, so the firmware starts the previous slot.

In an ordinary boot there is nothing to commit; the command then settles what state.json still
calls a trial: committed (the switch happened but the record did not), or rolled back (power
cut, crash or watchdog reset during the trial).
"""

from __future__ import annotations

import logging
from typing import Any

from appliance.core.config import Settings
from appliance.core.version import build_info
from appliance.ota import autoboot, device
from appliance.ota.card import Card
from appliance.ota.device import BootView
from appliance.ota.errors import HealthCheckFailed, StateError
from appliance.ota.health import summary, wait_healthy
from appliance.ota.keys import install_rotated_key
from appliance.ota.layout import Slot, other
from appliance.ota.progress import Progress
from appliance.ota.state import OtaState, exclusive

log = logging.getLogger(__name__)


def _finish_commit(settings: Settings, state: OtaState, slot: Slot, trial: dict[str, Any]) -> str:
    """Record a switched slot as committed and trust its bundle's next key."""
    version = str(trial.get("version") or state.slot_version(slot.name) or "unknown")
    origin = str(trial.get("fromVersion") or "unknown")
    next_key = trial.get("nextKey")
    if isinstance(next_key, dict) and next_key.get("publicKey"):
        install_rotated_key(device.rotated_keys_dir(settings), str(next_key["publicKey"]))
    state.set_committed(slot.name, version)
    state.set_trial(None)
    state.record("committed", version, origin)
    state.save()
    return f"committed {version} on slot {slot.name}."


def settle(settings: Settings, state: OtaState, view: BootView) -> str:
    """Outside a trial boot: close a trial that state.json still holds; say what happened."""
    trial = state.trial
    if trial is None:
        return f"not in a trial boot; slot {view.booted.name} runs, nothing to commit."
    if trial.get("slot") == view.committed.name:
        return _finish_commit(settings, state, view.committed, trial)
    if device.armed(settings.ota_reboot_param):
        return (
            f"the trial of {trial.get('version')} on slot {trial.get('slot')} is armed; it "
            "starts at the next reboot."
        )
    version, origin = str(trial.get("version")), str(trial.get("fromVersion"))
    state.set_trial(None)
    state.record("rolled-back", version, origin, "the trial slot was not committed before a reboot")
    state.save()
    return f"the update to {version} did not complete its trial boot; {origin} runs."


def commit_trial(settings: Settings, progress: Progress) -> str:
    """Commit the running trial boot if it proves healthy; HealthCheckFailed after a rollback."""
    directory = device.ota_dir(settings)
    with exclusive(directory, "committing"), Card(settings.ota_device) as card:
        state = OtaState.load(directory)
        view = device.boot_view(settings, card)
        if not view.in_uncommitted_trial:
            message = settle(settings, state, view)
            progress("done", 1, 1, message)
            return message
        booted = view.booted
        if view.autoboot.trial_slot is not booted:
            raise StateError(
                f"this trial boot runs slot {booted.name}, but autoboot.txt's [tryboot] names "
                f"{view.autoboot.trial}; not committing. Reboot to return to slot "
                f"{view.committed.name}."
            )
        trial = state.trial if state.trial and state.trial.get("slot") == booted.name else {}
        version = str(trial.get("version") or build_info()["version"])
        origin = str(trial.get("fromVersion") or state.slot_version(view.committed.name) or "?")
        log.info("[ota] op=commit-check slot=%s version=%s", booted.name, version)
        try:
            checks = wait_healthy(
                settings,
                window=settings.ota_commit_window,
                tunnel=bool(trial.get("tunnelConnected")),
                progress=progress,
            )
        except HealthCheckFailed as err:
            state.set_trial(None)
            state.record("health-check-failed", version, origin, str(err))
            state.save()
            device.disarm(settings.ota_reboot_param)
            log.error("[ota] op=commit FAILED version=%s reason=%r", version, str(err))
            progress("reboot", 0, 1, f"unhealthy; rebooting into {origin}")
            device.reboot(settings)
            raise HealthCheckFailed(
                f"the update to {version} failed its health check ({err}); rebooting into "
                f"slot {view.committed.name} ({origin})."
            ) from err
        progress("switch", 0, 1, f"autoboot.txt: [all] = slot {booted.name}")
        autoboot.write(card, booted, other(booted))
        progress("switch", 1, 1, summary(checks))
        record = {**trial, "version": version, "fromVersion": origin}
        message = _finish_commit(settings, state, booted, record)
        log.info("[ota] op=committed version=%s slot=%s", version, booted.name)
        progress("done", 1, 1, message)
        return message
