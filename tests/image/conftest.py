"""Built card images, inspected without mounting anything.

The expensive part — building an image — happens once per test session per architecture, through
the real builder (``image.build.build``) with the layout's smaller test sizes (same content). The
builder keeps its outputs in ``$MAXY_CACHE_DIR/image/out/<key>``, keyed by a hash of every input
and of its own code, so a second session with unchanged inputs reuses them and only decompresses
the card. The first build of a Debian base (debootstrap, root) is cached the same way.

``MAXY_IMAGE_BINARY`` puts a given maxy build on the x86-64 card instead of ``dist/``.

arm64: the Debian arm64 base is assembled under qemu-user-static here, and the arm64 ``maxy``
(``dist/arm64/maxy-onedir``) is built here too when missing, by build/build-arm64.sh (a
cross-compiled llama.cpp wheel, PyInstaller in a chroot of that base under qemu-user; needs root
on x86-64). Without root and without a build the arm64 image is built ``--without-binary`` and
the binary checks skip, saying so, while every other layer is checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from image import build as image_build
from image.errors import NeedsRoot, ToolMissing
from image.tools import copy_out, sfdisk_read
from tests.support.frozen import ARM64

CACHE = Path(os.environ.get("MAXY_CACHE_DIR", "~/.cache/maxy")).expanduser()
PRESET = Path(__file__).with_name("preset.json")


def arm64_binary_missing() -> str | None:
    """Why the arm64 image has no maxy binary here, or None when there is (or will be) one.

    The image build makes dist/arm64/maxy-onedir with build/build-arm64.sh when it is missing (cross
    wheel plus a chroot into the arm64 base under qemu-user): that needs root on x86-64.
    """
    if ARM64.is_file():
        return None
    if os.geteuid() == 0 or platform.machine() == "aarch64":
        return None
    return (
        "no arm64 maxy build here and this is not root: build/build-arm64.sh chroots into the "
        "arm64 base (`sudo -E just build-arm64` once); the arm64 image was built "
        "--without-binary and only its binary layer is unchecked"
    )


def unprivileged(*command: str) -> list[str]:
    """``command`` without any privilege: uid 0 with every capability dropped, for good.

    Root's powers are capabilities; without CAP_CHOWN, CAP_MKNOD, CAP_DAC_OVERRIDE and
    CAP_SYS_ADMIN a process can neither give a file away, make a device node, read others'
    files nor mount anything — exactly what an ordinary user cannot do. (Switching to ``nobody``
    instead would also lose this machine's Python, which lives under /root.)
    """
    return [
        "setpriv",
        "--no-new-privs",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--",
        *command,
    ]


@dataclass
class Card:
    """One built card image and its pieces."""

    arch: str
    image: Path  # the decompressed card
    bundle: Path
    record: dict[str, object]
    table: dict[str, object]
    parts: dict[str, Path]  # partition name → a copy of that partition (not root_b)
    has_binary: bool
    reused: bool

    def partition(self, name: str) -> dict[str, object]:
        """The sfdisk entry of the partition called ``name``."""
        for part in self.table["partitions"]:  # type: ignore[attr-defined]
            if part.get("name") == name:
                return dict(part)
        raise KeyError(name)

    def region_sha256(self, name: str) -> str:
        """The sha256 of a partition's bytes, read from the card itself."""
        part = self.partition(name)
        start, left = int(str(part["start"])) * 512, int(str(part["size"])) * 512
        digest = hashlib.sha256()
        with self.image.open("rb") as card:
            card.seek(start)
            while left:
                block = card.read(min(left, 1 << 20))
                digest.update(block)
                left -= len(block)
        return digest.hexdigest()


def split(
    card: Path, table: dict[str, object], into: Path, skip: tuple[str, ...] = ()
) -> dict[str, Path]:
    """Copy the named partitions of a card into files of their own (sparse)."""
    sector = int(str(table.get("sectorsize", 512)))
    parts = {}
    for part in table["partitions"]:  # type: ignore[attr-defined]
        if part["name"] in skip:
            continue
        target = into / f"{part['name']}.img"
        copy_out(card, part["start"] * sector, part["size"] * sector, target)
        parts[part["name"]] = target
    return parts


def report(request: pytest.FixtureRequest, line: str) -> None:
    """Print one line on the terminal, past pytest's output capture (figures, not asserts)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


def build_card(arch: str, into: Path, request: pytest.FixtureRequest) -> Card:
    """Build (or reuse) the test image of ``arch`` and take it apart."""
    missing = arm64_binary_missing() if arch == "arm64" else None
    # MAXY_IMAGE_BINARY: a maxy build (its one-directory form) to put on the x86-64 card
    # instead of dist/ (e.g. one whose llama.cpp was compiled without -march=native).
    given = os.environ.get("MAXY_IMAGE_BINARY") if arch == "x86-64" else None
    wanted = image_build.Request(
        arch=arch,
        binary=Path(given) if given else None,
        out=into / "out",
        cache_dir=CACHE,
        version="0.1.0",
        small=True,
        preset=PRESET,
        without_binary=missing is not None,
    )
    started = time.monotonic()
    try:
        result = image_build.build(wanted)
    except NeedsRoot as err:
        pytest.skip(f"the Debian {arch} base is not cached and this is not root: {err}")
    except ToolMissing as err:
        if arch == "arm64" and platform.machine() != "aarch64":
            pytest.skip(f"cannot assemble the arm64 base here: {err}")
        raise
    seconds = time.monotonic() - started
    card = into / "card.img"
    subprocess.run(["zstd", "-q", "-d", "-f", str(result.image), "-o", str(card)], check=True)
    table = sfdisk_read(card)
    parts = split(card, table, into, skip=("root_b",))  # compared on the card: disk space
    line = (
        f"[image] {arch}: {'reused' if result.reused else 'built'} in {seconds:.0f} s "
        f"({result.image.stat().st_size / 1e6:.0f} MB .img.zst, "
        f"{result.bundle.stat().st_size / 1e6:.0f} MB bundle)"
    )
    report(request, line)
    return Card(
        arch=arch,
        image=card,
        bundle=result.bundle,
        record=json.loads(result.record.read_text()),
        table=table,
        parts=parts,
        has_binary=missing is None,
        reused=result.reused,
    )


_CARDS: dict[str, Card] = {}


@pytest.fixture(scope="session", autouse=True)
def _remove_cards() -> Iterator[None]:
    """Delete the decompressed cards at the end of the session (gigabytes each)."""
    yield
    for built in _CARDS.values():
        shutil.rmtree(built.image.parent, ignore_errors=True)
    _CARDS.clear()


def _card(arch: str, request: pytest.FixtureRequest, factory: pytest.TempPathFactory) -> Card:
    if arch not in _CARDS:
        _CARDS[arch] = build_card(arch, factory.mktemp(f"card-{arch}"), request)
    return _CARDS[arch]


@pytest.fixture(scope="session", params=["x86-64", "arm64"])
def card(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Card:
    """A built card of each architecture (built once per session)."""
    return _card(request.param, request, tmp_path_factory)


@pytest.fixture(scope="session")
def x86_card(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Card:
    """The x86-64 card (the same one ``card`` gives)."""
    return _card("x86-64", request, tmp_path_factory)


@pytest.fixture(scope="session")
def arm64_card(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Card:
    """The Raspberry Pi card (the same one ``card`` gives)."""
    return _card("arm64", request, tmp_path_factory)
