"""A Raspberry Pi OS Lite (64-bit) image as the base: fetch, check, split into its partitions.

    python -m image.build --arch arm64 --base 2025-05-13-raspios-bookworm-arm64-lite.img.xz \\
        --base-sha256 <the sha256 published next to the download>

``--base`` is a path or an http(s) URL; a URL needs ``--base-sha256`` (a path is checked
against it when given). The file may be raw or compressed (``.xz``, ``.zst``, ``.gz``). It is
decompressed once into ``$MAXY_CACHE_DIR/image/rpios/<sha256>/``, and its two partitions — the
FAT boot partition (firmware, kernels, initramfs, device trees and overlays) and the ext4 root —
are copied out by the offsets ``sfdisk --json`` reports. Nothing is mounted: the root's files are
read with ``debugfs`` and the boot partition's with ``mcopy`` (``image/populate.py``).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import lzma
import os
import shutil
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, cast

import zstandard

from appliance.core.fsio import sha256_file
from image.errors import InputMissing
from image.tools import copy_out, sfdisk_read

log = logging.getLogger(__name__)

FAT_TYPES = {
    "b",
    "c",
    "e",
    "ebd0a0a2-b9e5-4433-87c0-68b6b72699c7",
    "c12a7328-f81f-11d2-ba4b-00a0c93ec93b",
}
LINUX_TYPES = {"83", "0fc63daf-8483-4772-8e79-3d69d8477de4"}


def _fetch(source: str, target: Path, expected: str | None) -> str:
    """Copy or download ``source`` to ``target``; return its sha256 (checked if expected)."""
    digest = hashlib.sha256()
    partial = target.with_name(target.name + ".partial")
    opener: IO[bytes]
    if source.startswith(("http://", "https://")):
        opener = urllib.request.urlopen(source, timeout=60)
    else:
        opener = Path(source).open("rb")
    with opener as src, partial.open("wb") as dst:
        for block in iter(lambda: src.read(1 << 20), b""):
            digest.update(block)
            dst.write(block)
    got = digest.hexdigest()
    if expected and got != expected.lower():
        partial.unlink()
        raise InputMissing(
            f"The base image {source} has sha256 {got}, not the pinned {expected}. "
            "Check the download (or the pinned checksum)."
        )
    os.replace(partial, target)
    return got


@contextmanager
def _decompressed(path: Path) -> Iterator[IO[bytes]]:
    with path.open("rb") as raw:
        magic = raw.read(6)
    if magic.startswith(b"\xfd7zXZ"):
        with lzma.open(path) as handle:
            yield handle
    elif magic.startswith(b"\x28\xb5\x2f\xfd"):
        with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as handle:
            yield handle
    elif magic.startswith(b"\x1f\x8b"):
        with gzip.open(path) as handle:
            yield cast(IO[bytes], handle)
    else:
        with path.open("rb") as handle:
            yield handle


def prepare(cache_dir: Path, source: str, sha256: str | None) -> tuple[Path, Path, str]:
    """The base's (root ext4 image, boot FAT image, sha256 of the file as given)."""
    is_url = source.startswith(("http://", "https://"))
    if is_url and not sha256:
        raise InputMissing(f"--base {source} is a URL: pin its content with --base-sha256.")
    if not is_url and not Path(source).is_file():
        raise InputMissing(f"The base image {source} does not exist.")
    if not is_url and sha256 is None:
        sha256 = sha256_file(Path(source))
    assert sha256 is not None
    folder = cache_dir / "image" / "rpios" / sha256.lower()
    root, boot = folder / "root.ext4", folder / "boot.fat"
    if root.is_file() and boot.is_file():
        return root, boot, sha256.lower()
    folder.mkdir(parents=True, exist_ok=True)
    download = folder / "download"
    got = _fetch(source, download, sha256)
    disk = folder / "disk.img"
    with _decompressed(download) as src, disk.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    download.unlink()
    table = sfdisk_read(disk)
    sector = int(str(table.get("sectorsize", 512)))
    parts = table.get("partitions", [])
    assert isinstance(parts, list)

    def first(types: set[str]) -> dict[str, object]:
        for part in parts:
            if str(part.get("type", "")).lower() in types:
                return dict(part)
        raise InputMissing(
            f"{source} has no partition of type {sorted(types)[0]}: not a Raspberry Pi OS image?"
        )

    for name, types, target in (("boot", FAT_TYPES, boot), ("root", LINUX_TYPES, root)):
        part = first(types)
        start, size = int(str(part["start"])) * sector, int(str(part["size"])) * sector
        copy_out(disk, start, size, target.with_suffix(".partial"))
        os.replace(target.with_suffix(".partial"), target)
        log.info("[image] op=rpios-partition name=%s bytes=%d", name, size)
    disk.unlink()
    return root, boot, got
