"""The cloudflared layer: built from the pinned source archive, checked, cached per architecture
and Go version, installed on PATH in the card — the real build, not a stand-in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.core.fsio import sha256_file
from image import cloudflared as image_cloudflared
from image import overlay
from image.cloudflared import ARCHIVE, COMMIT, SOURCE_SHA256, VERSION, cloudflared
from image.errors import InputMissing
from image.inputs import ELF_MACHINE, elf_machine
from tests.image.conftest import CACHE

pytestmark = pytest.mark.timeout(1800)


@pytest.mark.parametrize("arch", ["x86-64", "arm64"])
def test_each_architecture_is_built_once_checked_and_cached(
    arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = cloudflared(CACHE, arch)
    assert elf_machine(built.path) == ELF_MACHINE[arch]
    assert built.path.stat().st_mode & 0o755 == 0o755
    assert built.sha256 == sha256_file(built.path)
    assert built.path.with_name("cloudflared.sha256").read_text().split()[0] == built.sha256
    assert built.manifest() == {
        "version": VERSION,
        "commit": COMMIT,
        "sha256": built.sha256,
        "size": built.path.stat().st_size,
    }
    # A second call is a lookup: no source archive anywhere, the same file.
    monkeypatch.setenv("MAXY_SOURCE_DIR", "/nonexistent")
    assert cloudflared(CACHE, arch) == built


def test_the_x86_64_build_is_static_and_says_its_version() -> None:
    built = cloudflared(CACHE, "x86-64")
    done = subprocess.run(
        [str(built.path), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert f"cloudflared version {VERSION}" in done.stdout
    assert b"/lib64/ld-linux" not in built.path.read_bytes()[:4096]  # no interpreter: static


def test_a_missing_or_different_archive_and_a_damaged_cache_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputMissing, match="MAXY_SOURCE_DIR"):
        cloudflared(tmp_path / "cache", "x86-64", tmp_path / "nowhere")
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / ARCHIVE).write_bytes(b"not the release")
    with pytest.raises(InputMissing, match=f"not the pinned {SOURCE_SHA256}"):
        cloudflared(tmp_path / "cache", "x86-64", sources)
    built = cloudflared(CACHE, "x86-64")
    copy = tmp_path / "cache" / "cloudflared" / built.path.parent.name
    copy.mkdir(parents=True)
    (copy / "cloudflared").write_bytes(b"\x7fELF tampered")
    (copy / "cloudflared.sha256").write_text(built.sha256 + "  cloudflared\n")
    with pytest.raises(InputMissing, match="does not match"):
        cloudflared(tmp_path / "cache", "x86-64", sources)


def test_the_image_installs_it_on_path(tmp_path: Path) -> None:
    built = cloudflared(CACHE, "x86-64")
    tree = tmp_path / "root"
    (tree / "usr" / "bin").mkdir(parents=True)
    installed = overlay.install_cloudflared(tree, built.path)
    assert installed == tree / "opt/maxy/cloudflared/cloudflared"
    assert installed.stat().st_mode & 0o777 == 0o755
    assert sha256_file(installed) == built.sha256
    assert os.readlink(tree / "usr/bin/cloudflared") == "/opt/maxy/cloudflared/cloudflared"


def test_without_go_the_build_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(image_cloudflared, "GO_FALLBACK", tmp_path / "go" / "bin" / "go")
    with pytest.raises(InputMissing, match=r"Go 1\.26 or newer is needed to build cloudflared"):
        cloudflared(tmp_path / "cache", "x86-64")
