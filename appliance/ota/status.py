"""``maxy ota status``: slots, versions, the trial, the last outcome — read-only.

Each source (firmware state, the card, state.json) is read on its own; one that cannot be read
is reported with its reason instead of hiding the others.
"""

from __future__ import annotations

from typing import Any

from appliance.core.config import Settings
from appliance.ota import autoboot, device
from appliance.ota.card import Card
from appliance.ota.errors import OtaError
from appliance.ota.firmware import detect_board, read_firmware
from appliance.ota.layout import SLOTS
from appliance.ota.state import OtaState, describe


def collect(settings: Settings) -> dict[str, Any]:
    """Everything ``maxy ota status`` shows, as JSON-ready data."""
    report: dict[str, Any] = {"device": str(settings.ota_device)}
    try:
        report["board"] = detect_board(settings.ota_board)
    except OtaError as err:
        report["board"] = None
        report["boardError"] = str(err)
    try:
        firmware = read_firmware(settings.ota_firmware_dir)
        report["firmware"] = {
            "tryboot": firmware.tryboot,
            "bootedSlot": firmware.booted_slot.name,
            "partition": firmware.partition,
            "bootloaderTimestamp": firmware.build_timestamp,
        }
    except OtaError as err:
        report["firmware"] = {"error": str(err)}
    try:
        with Card(settings.ota_device, writable=False) as card:
            config = autoboot.read_config(card)
        trial_slot = config.trial_slot
        report["autoboot"] = {
            "defaultSlot": config.default_slot.name,
            "trialSlot": trial_slot.name if trial_slot else None,
        }
    except OtaError as err:
        report["autoboot"] = {"error": str(err)}
    try:
        state = OtaState.load(device.ota_dir(settings))
        report["state"] = state.to_json()
    except OtaError as err:
        state = None
        report["state"] = {"error": str(err)}
    report["armed"] = device.armed(settings.ota_reboot_param)
    slots: dict[str, Any] = {}
    default = report["autoboot"].get("defaultSlot")
    booted = report["firmware"].get("bootedSlot")
    for slot in SLOTS:
        info = (state.doc["slots"].get(slot.name) if state else None) or {}
        roles = [
            name
            for name, hit in (("committed", default == slot.name), ("running", booted == slot.name))
            if hit
        ]
        if info.get("writing"):
            roles.append(f"incomplete: writing {info['writing']} did not finish")
        slots[slot.name] = {"version": info.get("version"), "roles": roles}
    report["slots"] = slots
    last = state.last() if state else None
    report["last"] = {**last, "text": describe(last)} if last else None
    report["trial"] = state.trial if state else None
    return report


def render(report: dict[str, Any]) -> str:
    """The report as lines for a terminal."""
    lines = [f"board:      {report.get('board') or report.get('boardError')}"]
    firmware = report["firmware"]
    if "error" in firmware:
        lines.append(f"booted:     unknown ({firmware['error']})")
    else:
        kind = "trial boot" if firmware["tryboot"] else "ordinary boot"
        lines.append(f"booted:     slot {firmware['bootedSlot']} ({kind})")
    config = report["autoboot"]
    if "error" in config:
        lines.append(f"autoboot:   unreadable ({config['error']})")
    else:
        lines.append(
            f"autoboot:   default slot {config['defaultSlot']}, trial slot {config['trialSlot']}"
        )
    for name, slot in report["slots"].items():
        roles = ", ".join(slot["roles"])
        lines.append(f"slot {name}:     {slot['version'] or 'unknown version'}  {roles}".rstrip())
    trial = report.get("trial")
    if trial:
        when = "armed: starts at the next reboot" if report["armed"] else "not committed yet"
        lines.append(f"trial:      {trial.get('version')} on slot {trial.get('slot')} ({when})")
    last = report.get("last")
    lines.append(f"last:       {last['text'] if last else 'no update yet'}")
    return "\n".join(lines)
