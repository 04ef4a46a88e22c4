"""Boot the cards under qemu — software emulation only, no KVM — and reach /healthz.

This is the whole appliance on its real disk image: BIOS → syslinux → Debian's kernel and
initramfs → the root slot read-only → the pre-init's /data and /etc, /var overlays → systemd →
``maxy firstboot`` (account from the preset) → Neo4j, engine, manager, app, edge. The edge's
``/healthz`` (which asks the engine) is polled through a forwarded port until it answers 200.
The time to that first 200 is reported, never asserted.

The arm64 card boots on ``qemu-system-aarch64 -M virt`` (a Cortex-A72, the Pi 4's core): qemu
has no Raspberry Pi 4 machine, so the card's own kernel and initramfs are started directly (as
the Pi's firmware would start them) with the slot's own cmdline.txt, the card as a virtio disk.

The third test installs a newer release's bundle into slot B of a copy of the card with
``maxy ota``'s own apply, then starts slot B the way a Pi's tryboot would (a PC has no tryboot:
the GPT's LegacyBIOSBootable attribute moves to boot_b) and checks that slot B boots ITS root.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from appliance.core.config import load_settings
from appliance.ota.apply import apply_update
from appliance.ota.layout import BOOT_A, BOOT_B, ROOT_A, ROOT_B, partuuid
from appliance.ota.progress import Silent
from image import build as image_build
from image.tools import ext4_list, ext4_read, fat_read
from tests.image.conftest import CACHE, PRESET, Card, report
from tests.support.processes import base_environ, port_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

# Seconds, emulated on two shared CPUs; an emulated arm64 core is several times slower.
BOOT_LIMIT = {"x86-64": 40 * 60, "arm64": 100 * 60}
ILLEGAL_IN_LLAMA = re.compile(r"trap invalid opcode .* in libggml")


def healthz(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10.0).status_code
    except httpx.HTTPError:
        return None


QEMU = {
    "x86-64": ("qemu-system-x86_64", "qemu-system-x86"),
    "arm64": ("qemu-system-aarch64", "qemu-system-arm"),
}


def qemu_or_skip(card: Card) -> str:
    """The card's qemu-system, or a skip saying why this test does not run."""
    if not os.environ.get("MAXY_TEST_QEMU"):
        pytest.skip(
            "boots the whole card under software emulation (many minutes on two cores): "
            "run it with MAXY_TEST_QEMU=1 just test tests/image/test_qemu_boot.py"
        )
    program, package = QEMU[card.arch]
    qemu = shutil.which(program)
    if qemu is None:
        pytest.skip(f"{program} is not installed (apt-get install {package})")
    if not card.has_binary:
        pytest.skip("the card has no maxy binary")
    return qemu


@dataclass
class Boot:
    """What one emulated boot showed."""

    first_answer: float | None  # seconds from power-on to the edge's first answer
    status: int | None  # the last /healthz status
    seconds: float
    log: str  # the serial console
    llama_cannot_run: bool
    exit_code: int | None


def machine(card: Card, tmp_path: Path) -> list[str]:
    """The emulated board: a PC that starts from the card's BIOS loader, or an arm64 ``virt``
    machine started on slot A's own kernel, initramfs and command line."""
    if card.arch == "x86-64":
        return ["-machine", "pc", "-cpu", "max"]
    boot_a = card.parts["boot_a"]
    kernel, initrd = tmp_path / "vmlinuz", tmp_path / "initrd.img"
    kernel.write_bytes(fat_read(boot_a, "/vmlinuz"))
    initrd.write_bytes(fat_read(boot_a, "/initrd.img"))
    cmdline = fat_read(boot_a, "/cmdline.txt").decode().strip()
    return [
        *("-machine", "virt", "-cpu", "cortex-a72"),
        *("-kernel", str(kernel), "-initrd", str(initrd)),
        # virt's serial port is a PL011; the last console= is /dev/console. The journal goes to
        # the console too: an emulated Cortex-A72 boots for tens of minutes, and a boot that
        # runs out of time shows which unit it was in and what that unit last said.
        *("-append", f"{cmdline} console=ttyAMA0 systemd.journald.forward_to_console=1"),
    ]


def boot(qemu: str, card: Card, disk: Path, tmp_path: Path) -> Boot:
    """Power the card on under qemu until /healthz answers 200 (or the limit); then off."""
    console = tmp_path / "console.log"
    command = [
        qemu,
        "-accel",
        "tcg",
        *machine(card, tmp_path),
        "-smp",
        "2",
        "-m",
        "3072",
        "-display",
        "none",
        "-monitor",
        "none",
        "-no-reboot",
        "-serial",
        f"file:{console}",
        # The card is never changed: writes go to a temporary overlay.
        "-drive",
        f"file={disk},format=raw,if=virtio,snapshot=on",
        "-netdev",
        "user,id=net0,hostfwd=tcp:127.0.0.1:0-:19200",  # qemu binds a free port
        "-device",
        "virtio-net-pci,netdev=net0",
    ]
    started = time.monotonic()
    with (tmp_path / "qemu.log").open("wb") as qemu_log:
        proc = subprocess.Popen(command, stdout=qemu_log, stderr=subprocess.STDOUT)
    port = port_of(proc)
    first_answer: float | None = None
    status: int | None = None
    llama_cannot_run = False
    try:
        while time.monotonic() - started < BOOT_LIMIT[card.arch] and proc.poll() is None:
            status = healthz(port)
            if status is not None and first_answer is None:
                first_answer = time.monotonic() - started
            if status == 200:
                break
            text = console.read_text(errors="replace") if console.exists() else ""
            if ILLEGAL_IN_LLAMA.search(text):
                llama_cannot_run = True
                break
            time.sleep(5)
        seconds = time.monotonic() - started
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log = console.read_text(errors="replace") if console.exists() else ""
    return Boot(first_answer, status, seconds, log, llama_cannot_run, proc.returncode)


def check_healthy(run: Boot) -> None:
    """Boot chain, pre-init (/data, the overlays), first boot, the edge, then a 200."""
    log = run.log
    assert run.first_answer is not None, (
        f"the edge never answered on the forwarded port in {run.seconds:.0f} s (qemu exit "
        f"{run.exit_code}); console:\n{log[-6000:]}"
    )
    assert "maxy-preinit:" not in log, log[log.index("maxy-preinit:") - 200 :][:1000]
    assert "Failed to set up mount namespacing" not in log
    assert "Hostname set to <maxy>" in log
    assert not run.llama_cannot_run, (
        "the engine died of an illegal instruction in llama.cpp: the binary's llama-cpp-python "
        "was compiled for the build machine's CPU, not by build/llama-wheel.sh (one variant "
        f"per processor generation); console:\n{log[-6000:]}"
    )
    assert run.status == 200, (
        f"no 200 from /healthz after {run.seconds:.0f} s (last: {run.status}); "
        f"console:\n{log[-6000:]}"
    )


def kernel_command_line(log: str) -> list[str]:
    """The kernel's command line as it printed it on the console."""
    found = re.search(r"Kernel command line: (.*)", log)
    assert found, f"no 'Kernel command line' on the console:\n{log[:4000]}"
    return found.group(1).split()


def test_the_x86_card_boots_under_qemu_and_serves_healthz(
    x86_card: Card, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    qemu = qemu_or_skip(x86_card)
    run = boot(qemu, x86_card, x86_card.image, tmp_path)
    if run.first_answer is not None:
        report(
            request,
            f"[image] qemu (TCG, no KVM, 2 vCPUs, 3 GB): power-on to the edge's first answer "
            f"in {run.first_answer:.0f} s",
        )
    check_healthy(run)
    assert f"root=PARTUUID={partuuid(ROOT_A)}" in kernel_command_line(run.log)
    report(request, f"[image] qemu: power-on to the first /healthz 200 in {run.seconds:.0f} s")


@pytest.mark.timeout(7200)
def test_the_arm64_card_boots_under_qemu_virt_and_serves_healthz(
    arm64_card: Card, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    qemu = qemu_or_skip(arm64_card)
    run = boot(qemu, arm64_card, arm64_card.image, tmp_path)
    if run.first_answer is not None:
        report(
            request,
            f"[image] qemu-system-aarch64 virt (TCG, Cortex-A72, 2 vCPUs, 3 GB): power-on to the "
            f"edge's first answer in {run.first_answer:.0f} s",
        )
    check_healthy(run)
    assert f"root=PARTUUID={partuuid(ROOT_A)}" in kernel_command_line(run.log)
    report(
        request, f"[image] qemu arm64: power-on to the first /healthz 200 in {run.seconds:.0f} s"
    )


def test_an_update_installed_into_slot_b_boots_slot_bs_own_root(
    x86_card: Card, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    qemu = qemu_or_skip(x86_card)
    wanted = image_build.Request(
        arch="x86-64",
        out=tmp_path / "release",
        cache_dir=CACHE,
        version="0.2.0",
        small=True,
        preset=PRESET,
    )
    newer = image_build.build(wanted)
    disk = tmp_path / "card.img"
    subprocess.run(["cp", "--sparse=always", str(x86_card.image), str(disk)], check=True)
    trust = tmp_path / "trust"
    trust.mkdir()
    for entry in ext4_list(x86_card.parts["root_a"], "/etc/maxy/ota/trust"):
        pem = ext4_read(x86_card.parts["root_a"], f"/etc/maxy/ota/trust/{entry.name}")
        (trust / entry.name).write_bytes(pem)
    firmware = tmp_path / "firmware"  # a PC has none: what a Pi's would say, slot A running
    firmware.mkdir()
    (firmware / "partition").write_bytes(struct.pack(">I", BOOT_A.number))
    (firmware / "tryboot").write_bytes(struct.pack(">I", 0))
    env = {
        **base_environ(),
        "MAXY_DATA_DIR": str(tmp_path / "data"),
        "MAXY_OTA_DEVICE": str(disk),
        "MAXY_OTA_TRUST_DIR": str(trust),
        "MAXY_OTA_FIRMWARE_DIR": str(firmware),
        "MAXY_OTA_BOARD": "x86-64",
        "MAXY_OTA_BACKUP": "off",
        "MAXY_OTA_REBOOT_PARAM": str(tmp_path / "reboot-param"),
        "MAXY_OTA_REBOOT_COMMAND": "true",
    }
    manifest = apply_update(load_settings(env), newer.bundle, Silent())
    assert manifest.version == "0.2.0"
    assert (tmp_path / "reboot-param").read_text() == "0 tryboot"
    # The PC's stand-in for the armed trial: its BIOS boot code starts boot_b instead.
    subprocess.run(["sfdisk", "-q", "--part-attrs", str(disk), str(BOOT_A.number), ""], check=True)
    subprocess.run(
        ["sfdisk", "-q", "--part-attrs", str(disk), str(BOOT_B.number), "LegacyBIOSBootable"],
        check=True,
    )

    run = boot(qemu, x86_card, disk, tmp_path)

    words = kernel_command_line(run.log)
    assert f"root=PARTUUID={partuuid(ROOT_B)}" in words, words
    assert f"root=PARTUUID={partuuid(ROOT_A)}" not in words
    check_healthy(run)
    report(request, f"[image] qemu: slot B (0.2.0): first /healthz 200 in {run.seconds:.0f} s")
