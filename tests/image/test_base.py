"""The Debian base: where its packages come from, what keys its cache, what needs root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from image import base, tools
from image.errors import BuildFailed, InputMissing
from image.inputs import check_preset, locate_binary
from tests.image.conftest import unprivileged
from tests.support.processes import REPO


def test_the_mirror_is_read_from_deb822_sources_skipping_security(tmp_path: Path) -> None:
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\n"
    )
    assert base.apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_the_mirror_is_read_from_a_one_line_sources_list(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://local.example/debian bookworm main\n"
    )
    assert base.apt_mirror(tmp_path) == "http://local.example/debian"


def test_no_mirror_says_how_to_pass_one(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    with pytest.raises(BuildFailed, match="--mirror"):
        base.apt_mirror(tmp_path)


def test_this_machines_mirror_is_found() -> None:
    assert base.apt_mirror().startswith(("http://", "https://", "file:/"))


def test_the_cache_key_follows_the_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    before = base.base_key("amd64")
    assert before == base.base_key("amd64") != base.base_key("arm64")
    monkeypatch.setattr(base, "COMMON_PACKAGES", (*base.COMMON_PACKAGES, "less"))
    assert base.base_key("amd64") != before
    assert "raspi-firmware" in base.packages("arm64")
    assert "linux-image-amd64" in base.packages("amd64")


def test_only_the_arm64_base_narrows_its_initramfs_and_the_key_follows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert base.initramfs_files("amd64") == {}
    files = base.initramfs_files("arm64")
    assert files["etc/initramfs-tools/conf.d/maxy-modules"].endswith("MODULES=list\n")
    hook = files["etc/initramfs-tools/hooks/maxy-boot-modules"]
    assert hook.startswith("#!/bin/sh\n") and "auto_add_modules base mmc usb_storage block" in hook
    assert "net" not in hook.split("auto_add_modules", 1)[1].splitlines()[0]
    before = base.base_key("arm64")
    monkeypatch.setattr(base, "ARM64_BOOT_MODULES", (*base.ARM64_BOOT_MODULES, "nbd"))
    assert base.base_key("arm64") != before


def test_without_root_a_missing_base_says_to_run_image_base_once(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("dropping root's capabilities needs root to begin with")
    cache = tmp_path / "cache"
    done = subprocess.run(
        unprivileged(
            sys.executable, "-m", "image.base", "--arch", "x86-64", "--cache-dir", str(cache)
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "NeedsRoot" in done.stderr
    assert "sudo -E just image-base ARCH=x86-64" in done.stderr
    assert not list(tmp_path.rglob("*.tar.zst"))


def test_a_preset_firstboot_would_refuse_is_refused_at_build_time(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"owner": "Ann", "brand": {"productName": "Ann's"}}))
    assert check_preset(good) == good
    assert check_preset(None) is None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"owner": "", "colour": "red"}))
    with pytest.raises(InputMissing, match="colour"):
        check_preset(bad)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root (CI runs as root)")
def test_a_killed_step_leaves_nothing_mounted_and_a_leftover_mount_is_released(
    tmp_path: Path,
) -> None:
    work = tmp_path / "base.tar.zst.work"
    (work / "root" / "proc").mkdir(parents=True)
    # The step mounts into the target and is killed before it can unmount (a cancelled build).
    script = 'mount -t tmpfs none "$1" && kill -9 $$'
    done = subprocess.run(
        [*tools.PRIVATE_MOUNTS, "sh", "-c", script, "-", str(work / "root" / "proc")],
        check=False,
    )
    assert done.returncode == -9
    assert tools.mounts_under(work) == []
    # A mount left by an older builder (run without the private namespace) is released first.
    subprocess.run(["mount", "-t", "tmpfs", "none", str(work / "root" / "proc")], check=True)
    assert tools.mounts_under(tmp_path) == [work / "root" / "proc"]
    tools.release_mounts(work)
    assert tools.mounts_under(tmp_path) == []


def test_a_one_file_maxy_is_refused_for_a_card(tmp_path: Path) -> None:
    # It would unpack itself into /tmp at every start; the card's roles then fail to start.
    onefile = tmp_path / "maxy"
    onefile.write_bytes(b"\x7fELF")
    onefile.chmod(0o755)
    with pytest.raises(InputMissing, match="one-directory form"):
        locate_binary("x86-64", onefile)
