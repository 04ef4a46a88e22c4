"""The Claude Code CLI layer (``just image --claude-cli VERSION``): fetched from npm, checked,
cached, installed on PATH, named in maxy.env — with the real package, not a stand-in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.core.fsio import sha256_file
from image import overlay
from image.build import _image_env
from image.errors import InputMissing
from image.inputs import CLAUDE_TESTED, ELF_MACHINE, claude_cli, elf_machine
from tests.image.conftest import CACHE

pytestmark = pytest.mark.timeout(1800)


@pytest.mark.parametrize("arch", ["x86-64", "arm64"])
def test_the_cli_for_each_architecture_comes_from_npm_checked_and_cached(
    arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    executable, digest = claude_cli(CACHE, arch, CLAUDE_TESTED)
    assert elf_machine(executable) == ELF_MACHINE[arch]
    assert executable.stat().st_mode & 0o755 == 0o755
    assert digest == sha256_file(executable)
    assert executable.with_name("claude.sha256").read_text().split()[0] == digest
    # A second build takes it from the cache: no npm on PATH, the same file.
    monkeypatch.setenv("PATH", "/nonexistent")
    assert claude_cli(CACHE, arch, CLAUDE_TESTED) == (executable, digest)


def test_the_x86_64_cli_runs_here(tmp_path: Path) -> None:
    executable, _ = claude_cli(CACHE, "x86-64", CLAUDE_TESTED)
    env = {
        "PATH": os.defpath,
        "HOME": str(tmp_path),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "DISABLE_AUTOUPDATER": "1",
    }
    done = subprocess.run(
        [str(executable), "--version"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{CLAUDE_TESTED} (Claude Code)"


def test_a_damaged_cache_or_a_bad_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputMissing, match="a version like"):
        claude_cli(tmp_path, "x86-64", "latest; rm -rf /")
    folder = tmp_path / "claude" / CLAUDE_TESTED / "linux-x64"
    folder.mkdir(parents=True)
    (folder / "claude").write_bytes(b"\x7fELF tampered")
    (folder / "claude.sha256").write_text("0" * 64 + "  claude\n")
    with pytest.raises(InputMissing, match="does not match"):
        claude_cli(tmp_path, "x86-64", CLAUDE_TESTED)


def test_the_image_puts_it_on_path_and_names_it_in_maxy_env(tmp_path: Path) -> None:
    executable, _ = claude_cli(CACHE, "x86-64", CLAUDE_TESTED)
    tree = tmp_path / "root"
    (tree / "usr" / "bin").mkdir(parents=True)
    installed = overlay.install_claude(tree, executable)
    assert installed == tree / "opt/maxy/claude/claude"
    assert installed.stat().st_mode & 0o777 == 0o755
    assert sha256_file(installed) == sha256_file(executable)
    assert os.readlink(tree / "usr/bin/claude") == "/opt/maxy/claude/claude"
    model = tmp_path / "model.gguf"
    assert _image_env(model, "2026.08.1", claude=True)["MAXY_CLAUDE_BIN"] == (
        "/opt/maxy/claude/claude"
    )
    assert "MAXY_CLAUDE_BIN" not in _image_env(model, "2026.08.1")
