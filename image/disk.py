"""The card image: FAT boot slots and bootconfig, a GPT written by sfdisk, partitions copied in.

Every card of every build has the same GPT identifiers — disk GUID, PARTUUIDs, filesystem
UUIDs — derived from fixed names (``appliance.ota.layout.partuuid``). That is what lets an
update bundle's boot image for a slot, whose ``cmdline.txt`` names that slot's root by PARTUUID,
fit every card ever flashed, and it
keeps two builds of the same inputs byte-for-byte comparable. (The price: two Maxy cards in one
machine look alike; the pre-init finds /data next to the root it booted, not by PARTUUID.)
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from appliance.ota.layout import (
    FIRST_LBA_MIB,
    MIB,
    NAMESPACE,
    PARTITIONS,
    TYPE_FAT,
    TYPE_LINUX,
    Partition,
    Slot,
    partuuid,
)
from image.errors import ToolMissing
from image.tools import copy_into, make_fat, run, sfdisk_write

FIRMWARE_CONFIG = Path(__file__).resolve().parent.parent / "firmware-config"
GPTMBR = Path("/usr/lib/syslinux/mbr/gptmbr.bin")
SECTOR = 512
# Room after the last partition for the backup GPT (33 sectors, rounded up to 1 MiB).
TAIL_MIB = 1
CONSOLES = {
    ("x86-64", "debian"): "console=tty0 console=ttyS0,115200",
    ("arm64", "debian"): "console=tty0 console=ttyS1,115200",
    ("arm64", "rpios"): "console=serial0,115200 console=tty1",
}


def disk_guid() -> str:
    """The fixed GPT disk GUID."""
    return str(uuid.uuid5(NAMESPACE, "disk"))


def fs_uuid(name: str) -> str:
    """The fixed ext4 UUID of a filesystem ("root" or "data")."""
    return str(uuid.uuid5(NAMESPACE, f"filesystem:{name}"))


def fat_volume_id(part: Partition) -> str:
    """The fixed FAT volume id (8 hex digits) of a FAT partition."""
    return uuid.uuid5(NAMESPACE, f"volume:{part.name}").hex[:8]


def sizes(small: bool) -> dict[str, int]:
    """Partition sizes in MiB: the layout's, or smaller ones for tests (same content)."""
    sized = {part.name: part.size_mib for part in PARTITIONS}
    if small:
        sized.update(boot_a=128, boot_b=128, root_a=1280, root_b=1280, data=64)
    return sized


def autoboot_txt() -> bytes:
    """The bootconfig partition's autoboot.txt, exactly as firmware-config has it."""
    return (FIRMWARE_CONFIG / "autoboot.txt").read_bytes()


def cmdline_txt(slot: Slot, consoles: str) -> bytes:
    """A slot's cmdline.txt: its OWN root partition by PARTUUID, read-only."""
    template = (FIRMWARE_CONFIG / "cmdline.txt").read_text()
    return template.format(consoles=consoles, root_partuuid=partuuid(slot.root)).encode()


def syslinux_cfg(cmdline: bytes) -> bytes:
    """A PC slot's syslinux.cfg: boot its kernel with the slot's own command line at once."""
    return (
        "# Written by image/build.py: the same kernel, initramfs and command line as cmdline.txt.\n"
        "DEFAULT maxy\nPROMPT 0\nTIMEOUT 0\n"
        "LABEL maxy\n  LINUX /vmlinuz\n  INITRD /initrd.img\n"
        f"  APPEND {cmdline.decode().strip()}\n"
    ).encode()


def boot_image(
    out: Path, slot: Slot, size_mib: int, boot_files: Path, consoles: str, bios: bool = False
) -> None:
    """One boot slot's FAT image: kernel, initramfs, firmware, config.txt, cmdline.txt.

    ``bios``: a PC's slot also gets syslinux (``syslinux --install`` writes its boot sector and
    ldlinux.sys into the image file through mtools, no mount) and a syslinux.cfg.
    """
    staging = out.with_name(out.name + ".d")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(boot_files, staging)
    cmdline = cmdline_txt(slot, consoles)
    (staging / "config.txt").write_bytes((FIRMWARE_CONFIG / "config.txt").read_bytes())
    (staging / "cmdline.txt").write_bytes(cmdline)
    if bios:
        (staging / "syslinux.cfg").write_bytes(syslinux_cfg(cmdline))
    make_fat(out, size_mib, f"BOOT_{slot.name.upper()}", fat_volume_id(slot.boot), staging)
    if bios:
        run(["syslinux", "--install", out])
    shutil.rmtree(staging)


def bootconfig_image(out: Path, size_mib: int) -> None:
    """The bootconfig partition: a small FAT holding autoboot.txt only."""
    staging = out.with_name(out.name + ".d")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "autoboot.txt").write_bytes(autoboot_txt())
    part = PARTITIONS[0]
    make_fat(out, size_mib, "BOOTCONFIG", fat_volume_id(part), staging)
    shutil.rmtree(staging)


def sfdisk_script(sized: dict[str, int], bios_boot: str | None = None) -> str:
    """The GPT as an sfdisk script: fixed GUIDs, MiB-aligned partitions in layout order.

    ``bios_boot`` names the partition a PC's BIOS starts (GPT attribute LegacyBIOSBootable,
    which syslinux's gptmbr.bin looks for).
    """
    lines = [
        "label: gpt",
        f"label-id: {disk_guid().upper()}",
        "unit: sectors",
        f"first-lba: {FIRST_LBA_MIB * MIB // SECTOR}",
        "",
    ]
    start = FIRST_LBA_MIB * MIB // SECTOR
    for part in PARTITIONS:
        size = sized[part.name] * MIB // SECTOR
        kind = TYPE_FAT if part.fs == "vfat" else TYPE_LINUX
        attrs = ', attrs="LegacyBIOSBootable"' if part.name == bios_boot else ""
        lines.append(
            f"start={start}, size={size}, type={kind}, uuid={partuuid(part).upper()}, "
            f"name={part.name}{attrs}"
        )
        start += size
    return "\n".join(lines) + "\n"


def disk_size(sized: dict[str, int]) -> int:
    """Bytes of the whole card image."""
    return (FIRST_LBA_MIB + sum(sized.values()) + TAIL_MIB) * MIB


def offsets(sized: dict[str, int]) -> dict[str, int]:
    """Byte offset of each partition on the card."""
    found, at = {}, FIRST_LBA_MIB * MIB
    for part in PARTITIONS:
        found[part.name] = at
        at += sized[part.name] * MIB
    return found


def assemble(
    out: Path, sized: dict[str, int], images: dict[str, Path], bios_boot: str | None = None
) -> None:
    """Write the card: a sparse file, the GPT, then each partition image at its offset.

    ``bios_boot``: also put syslinux's GPT boot code into the protective MBR (its first 440
    bytes; the partition entries after them stay sfdisk's) to start that partition on a PC.
    """
    out.unlink(missing_ok=True)
    with out.open("wb") as handle:
        handle.truncate(disk_size(sized))
    sfdisk_write(out, sfdisk_script(sized, bios_boot))
    if bios_boot is not None:
        code = GPTMBR.read_bytes() if GPTMBR.is_file() else b""
        if len(code) != 440:
            raise ToolMissing(
                f"{GPTMBR} (440 bytes of GPT boot code) is missing: apt-get install syslinux-common"
            )
        with out.open("r+b") as handle:
            handle.write(code)
    where = offsets(sized)
    for part in PARTITIONS:
        image = images[part.name]
        if image.stat().st_size > sized[part.name] * MIB:
            raise ValueError(f"{image} is bigger than partition {part.name}")
        copy_into(out, where[part.name], image)
