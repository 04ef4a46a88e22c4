"""Real signed bundles and real USB-stick images for the USB watcher and offer tests.

A "stick" is a disk-image file holding a real filesystem, made the way a person's computer
would: ``mkfs.vfat`` + ``mcopy`` for FAT, ``mke2fs -d`` for ext4. The watcher reads a partition
device the same way it reads such a file (mtools and debugfs take either).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.ota.bundle import create_bundle, verify_bundle
from appliance.ota.keys import TrustStore, generate_key
from appliance.ota.manifest import Manifest
from appliance.ota.offers import UpdatePaths
from appliance.ota.usb import Scanner

BOARD = "x86-64"
CURRENT = "1.3.2"
MTOOLS = {**os.environ, "MTOOLS_SKIP_CHECK": "1", "MTOOLSRC": "/dev/null"}


@dataclass
class Keys:
    """A release key the device trusts, and one it does not."""

    trusted: Path
    stranger: Path
    trust_dir: Path


def make_keys(root: Path) -> Keys:
    trust_dir = root / "trust"
    trust_dir.mkdir(parents=True)
    trusted = root / "release.pem"
    public = generate_key(trusted)
    shutil.copy(public, trust_dir / public.name)
    stranger = root / "stranger.pem"
    generate_key(stranger)
    return Keys(trusted, stranger, trust_dir)


def make_bundle(
    folder: Path,
    keys: Keys,
    *,
    name: str = "maxy-1.4.0-x86-64.maxyupdate",
    version: str = "1.4.0",
    boards: tuple[str, ...] = (BOARD,),
    signer: Path | None = None,
    seed: bytes = b"",
) -> Path:
    """A real signed bundle of two small slot images."""
    folder.mkdir(parents=True, exist_ok=True)
    images = folder / f".images-{name}"
    images.mkdir()
    boot_a, boot_b, root = images / "boot_a.img", images / "boot_b.img", images / "root.img"
    boot_a.write_bytes(b"BOOT" * 4096 + seed + os.urandom(4096))
    boot_b.write_bytes(b"BOOT" * 4096 + seed + os.urandom(4096))
    root.write_bytes(b"ROOT" * 16384 + seed + os.urandom(4096))
    out = create_bundle(
        folder / name,
        version=version,
        boards=boards,
        boot_images={"a": boot_a, "b": boot_b},
        root_image=root,
        signing_key=signer or keys.trusted,
    )
    shutil.rmtree(images)
    return out


def fat_stick(path: Path, files: list[Path], size_mib: int = 64) -> Path:
    """A FAT32 stick image holding ``files`` in its root directory."""
    with path.open("wb") as handle:
        handle.truncate(size_mib * 1024 * 1024)
    subprocess.run(
        ["mkfs.vfat", "-F", "32", "-n", "MAXYSTICK", str(path)], check=True, capture_output=True
    )
    for file in files:
        subprocess.run(
            ["mcopy", "-i", str(path), str(file), f"::/{file.name}"],
            check=True,
            env=MTOOLS,
            capture_output=True,
        )
    return path


def ext4_stick(path: Path, files: list[Path], size_mib: int = 64) -> Path:
    """An ext4 stick image holding ``files`` in its root directory (``mke2fs -d``)."""
    tree = path.with_name(path.name + ".tree")
    tree.mkdir()
    for file in files:
        shutil.copy(file, tree / file.name)
    subprocess.run(
        ["mke2fs", "-q", "-F", "-t", "ext4", "-d", str(tree), str(path), f"{size_mib}M"],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(tree)
    return path


STICKS = {"vfat": fat_stick, "ext4": ext4_stick}


def scanner(paths: UpdatePaths, keys: Keys, **limits: Any) -> Scanner:
    """A scanner verifying with the real verify_bundle against ``keys``' trust dir."""

    def verify(path: Path) -> Manifest:
        trust = TrustStore.load([keys.trust_dir])
        return verify_bundle(path, trust, board=BOARD, current_version=CURRENT, full=True)

    return Scanner(paths, verify, **limits)


def flip_byte(path: Path, offset: int) -> None:
    """Flip every bit of one byte of a file."""
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
