"""The FAT partitions, read with mtools: bootconfig's autoboot.txt and each slot's boot files."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
import zstandard

from appliance.ota.layout import SLOTS, Slot, slot_by_boot_partition
from image.disk import FIRMWARE_CONFIG
from image.tools import fat_list, fat_read
from tests.image.conftest import Card

pytestmark = pytest.mark.timeout(7200)

AUTOBOOT = b"[all]\ntryboot_a_b=1\nboot_partition=2\n[tryboot]\nboot_partition=3\n"


def test_bootconfig_holds_only_autoboot_txt_in_its_fixed_form(card: Card) -> None:
    image = card.parts["bootconfig"]
    assert fat_list(image) == ["autoboot.txt"]
    text = fat_read(image, "/autoboot.txt")
    assert text == AUTOBOOT
    assert (FIRMWARE_CONFIG / "autoboot.txt").read_bytes() == AUTOBOOT
    # [all] starts slot A; a `0 tryboot` reboot starts slot B once.
    numbers = [int(n) for n in re.findall(rb"boot_partition=(\d+)", text)]
    assert [slot_by_boot_partition(n).name for n in numbers] == ["a", "b"]


@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: f"slot_{s.name}")
def test_each_slot_cmdline_names_its_own_root_partition_read_only(card: Card, slot: Slot) -> None:
    image = card.parts[slot.boot.name]
    cmdline = fat_read(image, "/cmdline.txt").decode()
    assert cmdline.count("\n") == 1 and cmdline.endswith("\n"), "one line, as the firmware wants"
    args = cmdline.split()
    roots = [a.removeprefix("root=PARTUUID=") for a in args if a.startswith("root=")]
    assert roots == [str(card.partition(slot.root.name)["uuid"]).lower()]
    other = next(s for s in SLOTS if s is not slot)
    assert str(card.partition(other.root.name)["uuid"]).lower() not in cmdline
    assert "ro" in args and "rw" not in args
    assert "rootwait" in args
    assert "init=/usr/lib/maxy/preinit" in args


@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: f"slot_{s.name}")
def test_each_slot_has_the_firmware_config_and_a_kernel_it_names(card: Card, slot: Slot) -> None:
    image = card.parts[slot.boot.name]
    files = fat_list(image)
    assert fat_read(image, "/config.txt") == (FIRMWARE_CONFIG / "config.txt").read_bytes()
    assert "include kernel.txt" in (FIRMWARE_CONFIG / "config.txt").read_text()
    kernel_txt = fat_read(image, "/kernel.txt").decode()
    assert "kernel=vmlinuz" in kernel_txt
    assert "initramfs initrd.img followkernel" in kernel_txt
    assert {"vmlinuz", "initrd.img", "config.txt", "cmdline.txt", "kernel.txt"} <= set(files)


def test_the_kernel_is_for_the_cards_architecture(card: Card) -> None:
    image = card.parts["boot_a"]
    kernel = fat_read(image, "/vmlinuz")
    if card.arch == "x86-64":
        assert kernel[0x202:0x206] == b"HdrS", "an x86 bzImage"
    else:
        # An arm64 Image (the Pi firmware loads it as it is, or gzip-compressed): "ARM\x64" at 56.
        raw = gzip.decompress(kernel) if kernel[:2] == b"\x1f\x8b" else kernel
        assert raw[56:60] == b"ARM\x64"
    initrd = fat_read(image, "/initrd.img")
    assert initrd[:6] == b"070701" or initrd[:4] == b"\x28\xb5\x2f\xfd" or initrd[:2] == b"\x1f\x8b"


def _cpio_names(archive: bytes) -> list[str]:
    """The member names of a newc cpio archive (or several, concatenated)."""
    names, at = [], 0
    while at + 110 <= len(archive) and archive[at : at + 6] == b"070701":
        size, name_size = int(archive[at + 54 : at + 62], 16), int(archive[at + 94 : at + 102], 16)
        name = archive[at + 110 : at + 110 + name_size - 1].decode()
        at = (at + 110 + name_size + 3) & ~3
        at = (at + size + 3) & ~3
        if name == "TRAILER!!!":
            at = archive.find(b"070701", at)
            if at < 0:
                break
            continue
        names.append(name)
    return names


def test_the_pi_initramfs_holds_the_boot_path_not_every_driver(arm64_card: Card) -> None:
    packed = fat_read(arm64_card.parts["boot_a"], "/initrd.img")
    archive = zstandard.ZstdDecompressor().stream_reader(packed).read()
    modules = {name.rsplit("/", 1)[-1].split(".ko")[0] for name in _cpio_names(archive)}
    modules.discard("")
    # The Pi 4's SD host and its reset controller, USB storage, qemu's virtio disk, the root's ext4.
    for needed in ("sdhci-iproc", "reset-raspberrypi", "usb-storage", "virtio_blk", "ext4"):
        assert needed in modules, needed
    # MODULES=most would carry network and graphics drivers; this one does not.
    assert not any("/kernel/drivers/net/" in name for name in _cpio_names(archive))
    assert "e1000e" not in modules and "r8169" not in modules


def test_the_pi_slot_carries_debians_raspberry_pi_firmware_and_device_trees(
    arm64_card: Card,
) -> None:
    image = arm64_card.parts["boot_a"]
    files = set(fat_list(image))
    assert {"start4.elf", "fixup4.dat", "bcm2711-rpi-4-b.dtb"} <= files
    assert fat_read(image, "/bcm2711-rpi-4-b.dtb")[:4] == b"\xd0\x0d\xfe\xed"
    assert fat_read(image, "/start4.elf")[:4] == b"\x7fELF"
    assert "upstream_kernel=1" in fat_read(image, "/kernel.txt").decode()


def test_a_pc_starts_slot_a_through_syslinux_with_the_same_command_line(x86_card: Card) -> None:
    boot_a = x86_card.partition("boot_a")
    assert boot_a.get("attrs") == "LegacyBIOSBootable"
    assert "attrs" not in x86_card.partition("boot_b"), "the BIOS starts slot A only"
    with x86_card.image.open("rb") as card:
        mbr = card.read(512)
    assert mbr[:440] == Path("/usr/lib/syslinux/mbr/gptmbr.bin").read_bytes()
    assert mbr[510:512] == b"\x55\xaa" and mbr[450] == 0xEE, "the protective MBR is intact"
    for slot in SLOTS:
        image = x86_card.parts[slot.boot.name]
        assert {"ldlinux.sys", "ldlinux.c32", "syslinux.cfg"} <= set(fat_list(image))
        config = fat_read(image, "/syslinux.cfg").decode()
        cmdline = fat_read(image, "/cmdline.txt").decode().strip()
        assert f"  APPEND {cmdline}\n" in config
        assert "LINUX /vmlinuz" in config and "INITRD /initrd.img" in config
