"""Boot the x86-64 card under qemu — software emulation only, no KVM — and reach /healthz.

This is the whole appliance on its real disk image: BIOS → syslinux → Debian's kernel and
initramfs → the root slot read-only → the pre-init's /data and /etc, /var overlays → systemd →
``maxy firstboot`` (account from the preset) → Neo4j, engine, manager, app, edge. The edge's
``/healthz`` (which asks the engine) is polled through a forwarded port until it answers 200.
The time to that first 200 is reported, never asserted.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.image.conftest import Card, report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

BOOT_LIMIT = 40 * 60  # seconds; emulated, on two shared CPUs


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthz(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10.0).status_code
    except httpx.HTTPError:
        return None


ILLEGAL_IN_LLAMA = re.compile(r"trap invalid opcode .* in libggml")


def test_the_x86_card_boots_under_qemu_and_serves_healthz(
    x86_card: Card, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not os.environ.get("MAXY_TEST_QEMU"):
        pytest.skip(
            "boots the whole card under software emulation (many minutes on two cores): "
            "run it with MAXY_TEST_QEMU=1 just test tests/image/test_qemu_boot.py"
        )
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        pytest.skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    if not x86_card.has_binary:
        pytest.skip("the card has no maxy binary")
    port = free_port()
    console = tmp_path / "console.log"
    command = [
        qemu,
        "-accel",
        "tcg",
        "-machine",
        "pc",
        "-cpu",
        "max",
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
        f"file={x86_card.image},format=raw,if=virtio,snapshot=on",
        "-netdev",
        f"user,id=net0,hostfwd=tcp:127.0.0.1:{port}-:19200",
        "-device",
        "virtio-net-pci,netdev=net0",
    ]
    started = time.monotonic()
    with (tmp_path / "qemu.log").open("wb") as qemu_log:
        proc = subprocess.Popen(command, stdout=qemu_log, stderr=subprocess.STDOUT)
    first_answer: float | None = None
    status: int | None = None
    llama_cannot_run = False
    try:
        while time.monotonic() - started < BOOT_LIMIT and proc.poll() is None:
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
    # Boot chain, pre-init (/data, the overlays), first boot and the hardened edge unit.
    assert first_answer is not None, (
        f"the edge never answered on the forwarded port in {seconds:.0f} s (qemu exit "
        f"{proc.returncode}); console:\n{log[-6000:]}"
    )
    assert "maxy-preinit:" not in log, log[log.index("maxy-preinit:") - 200 :][:1000]
    assert "Failed to set up mount namespacing" not in log
    assert "Hostname set to <maxy>" in log
    report(
        request,
        f"[image] qemu (TCG, no KVM, 2 vCPUs, 3 GB): power-on to the edge's first answer "
        f"in {first_answer:.0f} s",
    )
    assert not llama_cannot_run, (
        "the engine died of an illegal instruction in llama.cpp: the binary's llama-cpp-python "
        "was compiled for the build machine's CPU, not by build/llama-wheel.sh (portable "
        f"x86-64-v3); console:\n{log[-6000:]}"
    )
    assert status == 200, (
        f"no 200 from /healthz after {seconds:.0f} s (last: {status}); console:\n{log[-6000:]}"
    )
    report(request, f"[image] qemu: power-on to the first /healthz 200 in {seconds:.0f} s")
