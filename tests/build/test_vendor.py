"""build/vendor.py: pinned npm tarballs, integrity-checked, extracted once, offline when cached.

The tarballs here are real npm packs of a small local package (``npm pack <folder>`` needs no
registry), and the integrity they are checked against is the one ``npm pack --json`` reports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import REPO

VENDOR = REPO / "build" / "vendor.py"
MANIFEST = REPO / "build" / "vendor.json"
STATIC_VENDOR = REPO / "appliance" / "app" / "static" / "vendor"


@dataclass
class Packed:
    """A packed demo package: its tarball in the cache and what npm says of it."""

    name: str
    version: str
    integrity: str
    cache: Path


def npm() -> str:
    found = shutil.which("npm")
    if found is None:
        pytest.fail("npm is missing: apt-get install npm (build/vendor.py needs it once)")
    return found


@pytest.fixture
def packed(tmp_path: Path) -> Packed:
    source = tmp_path / "src"
    (source / "dist").mkdir(parents=True)
    (source / "package.json").write_text(json.dumps({"name": "@demo/lib", "version": "1.2.3"}))
    (source / "dist" / "lib.min.js").write_text("window.demoLib = 1;\n")
    (source / "LICENSE").write_text("MIT\n")
    cache = tmp_path / "cache"
    (cache / "npm").mkdir(parents=True)
    done = subprocess.run(
        [
            npm(),
            "pack",
            str(source),
            "--json",
            "--offline",
            "--pack-destination",
            str(cache / "npm"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    info = json.loads(done.stdout)[0]
    assert (cache / "npm" / info["filename"]).is_file()
    return Packed(info["name"], info["version"], info["integrity"], cache)


def manifest(path: Path, *packages: dict[str, object]) -> Path:
    path.write_text(json.dumps({"packages": list(packages)}))
    return path


def entry(packed: Packed, **changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": packed.name,
        "version": packed.version,
        "integrity": packed.integrity,
        "files": ["dist/lib.min.js", "LICENSE"],
    }
    return {**base, **changes}


def run_vendor(
    man: Path, out: Path, cache: Path, *, with_npm: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run build/vendor.py; without npm on PATH unless asked (proves nothing is fetched)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAXY_")}
    env["PATH"] = os.path.dirname(npm()) if with_npm else "/nonexistent"
    return subprocess.run(
        [
            sys.executable,
            str(VENDOR),
            "--manifest",
            str(man),
            "--out",
            str(out),
            "--cache-dir",
            str(cache),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_cached_tarball_is_vendored_offline_and_only_once(packed: Packed, tmp_path: Path) -> None:
    man = manifest(tmp_path / "vendor.json", entry(packed))
    out = tmp_path / "vendor"
    first = run_vendor(man, out, packed.cache)
    assert first.returncode == 0, first.stderr
    lib = out / "@demo" / "lib" / "dist" / "lib.min.js"
    assert lib.read_text() == "window.demoLib = 1;\n"
    assert (out / "@demo" / "lib" / "LICENSE").is_file()
    assert not (out / "@demo" / "lib" / "package.json").exists()  # only the listed files
    assert "op=extract package=@demo/lib@1.2.3 files=2" in first.stderr
    stamp = out / ".vendor-stamp"
    mtime = lib.stat().st_mtime_ns
    second = run_vendor(man, out, packed.cache)
    assert second.returncode == 0 and second.stderr == ""
    assert lib.stat().st_mtime_ns == mtime and stamp.is_file()


def test_a_changed_manifest_or_a_missing_file_vendors_again(packed: Packed, tmp_path: Path) -> None:
    man = manifest(tmp_path / "vendor.json", entry(packed, files=["dist/lib.min.js"]))
    out = tmp_path / "vendor"
    assert run_vendor(man, out, packed.cache).returncode == 0
    assert not (out / "@demo" / "lib" / "LICENSE").exists()
    manifest(man, entry(packed))
    assert run_vendor(man, out, packed.cache).returncode == 0
    assert (out / "@demo" / "lib" / "LICENSE").is_file()
    (out / "@demo" / "lib" / "LICENSE").unlink()
    again = run_vendor(man, out, packed.cache)
    assert again.returncode == 0 and "op=extract" in again.stderr
    assert (out / "@demo" / "lib" / "LICENSE").is_file()


def test_a_tarball_that_does_not_match_its_integrity_is_refused(
    packed: Packed, tmp_path: Path
) -> None:
    other = "sha512-" + "A" * 86 + "=="
    man = manifest(tmp_path / "vendor.json", entry(packed, integrity=other))
    out = tmp_path / "vendor"
    done = run_vendor(man, out, packed.cache)
    assert done.returncode == 1
    assert "does not match the integrity pinned for @demo/lib@1.2.3" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (out / "@demo").exists() and not (out / ".vendor-stamp").exists()


def test_without_npm_an_uncached_package_says_how_to_get_it(tmp_path: Path) -> None:
    man = manifest(
        tmp_path / "vendor.json",
        {"name": "cytoscape", "version": "3.35.0", "integrity": "sha512-x", "files": ["a.js"]},
    )
    done = run_vendor(man, tmp_path / "vendor", tmp_path / "cache")
    assert done.returncode == 1
    assert "npm is missing" in done.stderr and "apt-get install npm" in done.stderr


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"version": "^1.2.3"}, "must pin an exact version"),
        ({"version": "latest"}, "must pin an exact version"),
        ({"integrity": "sha1-abc"}, "needs its sha512 integrity"),
        ({"files": ["../../etc/passwd"]}, "unsafe file path"),
        ({"files": ["/etc/passwd"]}, "unsafe file path"),
        ({"files": []}, "lists no files"),
        ({"name": "Not A Name"}, "is not an npm package name"),
        ({"files": ["dist/missing.js"]}, "has no file dist/missing.js"),
    ],
)
def test_bad_manifests_are_one_clear_line(
    packed: Packed, tmp_path: Path, changes: dict[str, object], needle: str
) -> None:
    man = manifest(tmp_path / "vendor.json", entry(packed, **changes))
    done = run_vendor(man, tmp_path / "vendor", packed.cache)
    assert done.returncode == 1
    assert needle in done.stderr and "[vendor] FATAL" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_real_manifest_pins_every_package() -> None:
    packages = json.loads(MANIFEST.read_text())["packages"]
    names = {p["name"] for p in packages}
    assert {"cytoscape", "@xterm/xterm"} <= names
    for package in packages:
        assert package["integrity"].startswith("sha512-"), package["name"]
        assert package["version"][0].isdigit(), package["name"]


def test_bootstrap_vendored_the_real_manifest() -> None:
    """After `just bootstrap`, every listed file is in place and the stamp matches."""
    done = subprocess.run(
        [sys.executable, str(VENDOR), "--manifest", str(MANIFEST), "--out", str(STATIC_VENDOR)],
        capture_output=True,
        text=True,
        env={"PATH": "/nonexistent", "HOME": "/nonexistent"},
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", (
        f"the UI's libraries are not vendored: run build/vendor.py (just bootstrap)\n{done.stderr}"
    )
    for package in json.loads(MANIFEST.read_text())["packages"]:
        for name in package["files"]:
            assert (STATIC_VENDOR / package["name"] / name).is_file()
