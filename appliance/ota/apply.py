"""``maxy ota apply``: install a bundle into the inactive slot and arm a trial boot of it.

Phases (each with a time limit, each reported to the progress sink)::

    verify      signature, manifest, board, version, bootloader, sizes; every payload's hash
    backup      Neo4j dump to /data (MAXY_OTA_BACKUP)
    write-boot  the target slot's boot image into its boot partition (second pass over the
                bundle; the other slot's boot image is passed over)
    write-root  the root image into the inactive root partition
    readback    both partitions hashed from the medium against the manifest; the written
                cmdline.txt must name the target slot's own root PARTUUID
    arm         autoboot.txt: [all] = committed slot, [tryboot] = the new one; "0 tryboot"
    reboot      MAXY_OTA_REBOOT_COMMAND

Nothing reaches a slot before the whole bundle was verified: the bundle is read twice (a file
or a URL alike), first to check the signed manifest and hash every payload, then to write.
The second pass checks the manifest bytes are the same and hashes again as it writes, so a
bundle that changes in between is caught before anything is armed. The committed slot, its
partitions and ``[all]`` in autoboot.txt are never written.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from appliance.core.config import Settings
from appliance.ota import autoboot, device, fat
from appliance.ota.backup import Neo4jBackup, remove_stale
from appliance.ota.bundle import BundleReader, check_payloads, open_source
from appliance.ota.card import Card
from appliance.ota.errors import BundleError, CompatibilityError, OtaError, StateError
from appliance.ota.firmware import detect_board
from appliance.ota.layout import Slot, other
from appliance.ota.manifest import (
    PAYLOAD_NAMES,
    Manifest,
    check_bootloader,
    check_installable,
    verify_manifest,
)
from appliance.ota.progress import Deadline, Progress
from appliance.ota.slots import read_back, write_payload
from appliance.ota.state import OtaState, exclusive, now
from appliance.tunnel.state import tunnel_health

log = logging.getLogger(__name__)

Confirm = Callable[[Manifest, Slot], bool]


def _tunnel_connected(settings: Settings) -> bool:
    """Whether the tunnel is connected now (commit then requires it again)."""
    try:
        return asyncio.run(tunnel_health(settings.cloudflared_config)).get("connected") is True
    except OSError:
        return False


def _verify(
    settings: Settings,
    source: str | Path,
    card: Card,
    target: Slot,
    *,
    board: str,
    current: str,
    bootloader: int | None,
    progress: Progress,
) -> tuple[Manifest, bytes]:
    """First pass: everything about the bundle is checked; nothing is written."""
    deadline = Deadline("verify", settings.ota_verify_timeout, "MAXY_OTA_VERIFY_TIMEOUT")
    progress("verify", 0, 1, f"reading {source}")
    with open_source(source) as stream:
        reader = BundleReader(stream, str(source))
        raw, signature = reader.signed_manifest()
        manifest = verify_manifest(raw, signature, device.trust_store(settings))
        check_installable(manifest, board=board, current_version=current)
        check_bootloader(manifest, board=board, bootloader_timestamp=bootloader)
        boot, root = manifest.for_slot(target)
        for payload, part in ((boot, target.boot), (root, target.root)):
            extent = card.extent(part)
            if payload.size > extent.size:
                raise CompatibilityError(
                    f"the {payload.name} image of {manifest.version} ({payload.size} B) does not "
                    f"fit partition {extent.number} ({extent.size} B) of this card; reflash "
                    "the card with a current image."
                )
        progress("verify", 0, 1, f"signature by key {manifest.key_id} valid: {manifest.version}")
        check_payloads(reader, manifest, progress=progress, deadline=deadline)
    return manifest, signature


def _write(
    settings: Settings,
    source: str | Path,
    card: Card,
    target: Slot,
    manifest: Manifest,
    signature: bytes,
    progress: Progress,
) -> None:
    """Second pass: stream the payloads into the inactive slot, then read them back."""
    deadline = Deadline("write", settings.ota_write_timeout, "MAXY_OTA_WRITE_TIMEOUT")
    with open_source(source) as stream:
        reader = BundleReader(stream, str(source))
        raw, again = reader.signed_manifest()
        if raw != manifest.raw or again != signature:
            raise BundleError(
                f"{source} changed since it was verified; nothing was switched. Use a copy "
                "that does not change while it installs."
            )
        boot, root = manifest.for_slot(target)
        into = {boot.name: ("boot", target.boot), root.name: ("root", target.root)}
        for name in PAYLOAD_NAMES:
            payload = manifest.payloads[name]
            if name not in into:
                reader.skip(payload)  # the other slot's boot image
                continue
            kind, part = into[name]
            write_payload(
                card,
                card.extent(part),
                reader.payload(payload),
                payload,
                deadline=deadline,
                progress=progress,
                phase=f"write-{kind}",
                label=f"slot {target.name} {kind} (partition {part.number})",
            )
        reader.finish()
    deadline = Deadline("readback", settings.ota_readback_timeout, "MAXY_OTA_READBACK_TIMEOUT")
    done, total = 0, boot.size + root.size
    progress("readback", 0, total, f"slot {target.name}")
    for payload, part in ((boot, target.boot), (root, target.root)):
        done = read_back(
            card,
            card.extent(part),
            payload,
            deadline=deadline,
            progress=progress,
            done=done,
            total=total,
        )
    check_root(card, target, manifest.version)


def check_root(card: Card, slot: Slot, version: str) -> None:
    """Refuse a boot image whose command line would not start ``slot``'s own root.

    A slot's boot image names its root by PARTUUID in cmdline.txt (syslinux.cfg on a PC repeats
    it). Were it another slot's, the trial would run the new kernel on the old root — and might
    even pass its health checks. The check reads the slot as written, after the read-back.
    """
    extent = card.extent(slot.boot)
    want = card.extent(slot.root).partuuid
    text = fat.read_small(card, extent, "cmdline.txt")
    if text is None:
        raise CompatibilityError(
            f"the boot image of {version} written to slot {slot.name} has no cmdline.txt; it "
            "cannot start. Nothing was armed; use a bundle made by Maxy's image build."
        )
    roots = [
        word.split("=", 2)[2].lower()
        for word in text.decode("ascii", "replace").split()
        if word.upper().startswith("ROOT=PARTUUID=")
    ]
    if roots != [want]:
        named = ", ".join(roots) or "no root"
        raise CompatibilityError(
            f"the boot image of {version} for slot {slot.name} names {named} but slot "
            f"{slot.name}'s root partition is {want}: it would start the wrong root. Nothing "
            "was armed; the running slot is untouched. Use a bundle made for this card's layout."
        )


def apply_update(
    settings: Settings,
    source: str | Path,
    progress: Progress,
    *,
    confirm: Confirm | None = None,
) -> Manifest:
    """Install ``source`` into the inactive slot, arm the trial boot and reboot."""
    directory = device.ota_dir(settings)
    with exclusive(directory, "installing an update"), Card(settings.ota_device) as card:
        state = OtaState.load(directory)
        view = device.boot_view(settings, card)
        if view.in_uncommitted_trial:
            raise StateError(
                f"this is a trial boot of slot {view.booted.name} that is not committed yet; "
                "wait for `maxy ota commit` to finish (or reboot to go back) before updating."
            )
        if view.booted is not view.committed:
            raise StateError(
                f"the running slot {view.booted.name} is not the committed slot "
                f"{view.committed.name} in autoboot.txt; reboot, then update."
            )
        committed, target = view.committed, other(view.committed)
        current = device.installed_version(state, committed)
        board = detect_board(settings.ota_board)
        manifest: Manifest | None = None
        try:
            manifest, signature = _verify(
                settings,
                source,
                card,
                target,
                board=board,
                current=current,
                bootloader=view.firmware.build_timestamp,
                progress=progress,
            )
            progress("verify", 1, 1, f"{manifest.version} verified for {board}")
            if confirm is not None and not confirm(manifest, target):
                raise StateError("not confirmed; nothing was written.")
            # A stale "0 tryboot" from an interrupted apply must not start a half-written slot.
            device.disarm(settings.ota_reboot_param)
            if settings.ota_backup:
                remove_stale(settings)
                limit = Deadline("backup", settings.ota_backup_timeout, "MAXY_OTA_BACKUP_TIMEOUT")
                Neo4jBackup(settings, os.environ).run(limit, progress, before=manifest.version)
            else:
                progress("backup", 1, 1, "skipped (MAXY_OTA_BACKUP=off)")
            state.doc["slots"][target.name] = {"version": None, "writing": manifest.version}
            state.save()
            _write(settings, source, card, target, manifest, signature, progress)
            progress("arm", 0, 2, f"autoboot.txt: [tryboot] = slot {target.name}")
            autoboot.write(card, committed, target)
            state.set_slot(target.name, manifest.version)
            if state.committed is None:
                state.set_committed(committed.name, current)
            next_key = manifest.next_key
            state.set_trial(
                {
                    "slot": target.name,
                    "version": manifest.version,
                    "fromSlot": committed.name,
                    "fromVersion": current,
                    "armedAt": now(),
                    "tunnelConnected": _tunnel_connected(settings),
                    "nextKey": {"keyId": next_key.key_id, "publicKey": next_key.public_key}
                    if next_key
                    else None,
                }
            )
            state.save()
            device.arm(settings.ota_reboot_param)
            progress("arm", 2, 2, "the next reboot starts the new slot once")
        except OtaError as err:
            if manifest is not None:
                state.record("apply-failed", manifest.version, current, str(err))
                state.save()
            raise
        log.info("[ota] op=armed version=%s slot=%s", manifest.version, target.name)
        progress("reboot", 0, 1, settings.ota_reboot_command)
        device.reboot(settings)
        progress("reboot", 1, 1, "rebooting into the trial")
        return manifest
