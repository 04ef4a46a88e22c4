"""Vendor the browser libraries the web UI loads: npm tarballs -> appliance/app/static/vendor/.

    python build/vendor.py [--manifest build/vendor.json] [--out DIR] [--cache-dir DIR]

``build/vendor.json`` pins each package to an exact version and the sha512 integrity of its
tarball (as ``npm pack --json`` reports it), and lists the files to copy. For each package the
tarball is fetched once with ``npm pack`` into ``<cache>/npm`` (cache: MAXY_CACHE_DIR, default
~/.cache/maxy), checked against the pinned integrity, and only the listed files are extracted to
``<out>/<package>/<path>``. A stamp (the manifest's sha256) makes a second run a no-op; a cached
tarball is never fetched again, so vendoring works offline once the cache is warm.

Nothing is served from a CDN: the pages load only what this script put under /static/vendor/.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from appliance.core.fsio import sha256_file

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "build" / "vendor.json"
OUT = ROOT / "appliance" / "app" / "static" / "vendor"
STAMP = ".vendor-stamp"
_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$")
_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$")


class VendorError(Exception):
    """Vendoring cannot complete; the message says what to do."""


@dataclass(frozen=True)
class Package:
    """One pinned npm package and the files taken from it."""

    name: str
    version: str
    integrity: str
    files: tuple[str, ...]

    @property
    def spec(self) -> str:
        """``name@version`` as npm takes it."""
        return f"{self.name}@{self.version}"

    @property
    def tarball(self) -> str:
        """The file name ``npm pack`` gives the tarball."""
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"


def _safe_relative(path: str) -> str:
    """A relative POSIX path with no ``..``; anything else is refused."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path:
        raise VendorError(f"vendor.json lists an unsafe file path {path!r}: use a relative path.")
    return str(pure)


def load_manifest(path: Path) -> list[Package]:
    """Read and validate vendor.json."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise VendorError(f"{path} cannot be read as JSON ({err}).") from err
    packages = []
    for entry in data.get("packages", []):
        name, version = str(entry.get("name", "")), str(entry.get("version", ""))
        integrity = str(entry.get("integrity", ""))
        if not _NAME.match(name):
            raise VendorError(f"{path}: {name!r} is not an npm package name.")
        if not _VERSION.match(version):
            raise VendorError(f"{path}: {name} must pin an exact version, not {version!r}.")
        if not integrity.startswith("sha512-"):
            raise VendorError(
                f"{path}: {name} needs its sha512 integrity (from `npm pack --json {name}@"
                f"{version}`)."
            )
        files = tuple(_safe_relative(str(f)) for f in entry.get("files", []))
        if not files:
            raise VendorError(f"{path}: {name} lists no files to vendor.")
        packages.append(Package(name, version, integrity, files))
    return packages


def integrity_of(path: Path) -> str:
    """The npm ``sha512-<base64>`` integrity string of a file."""
    digest = hashlib.sha512()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha512-" + base64.b64encode(digest.digest()).decode()


def fetch(package: Package, cache: Path) -> Path:
    """Return the cached tarball, running ``npm pack`` only when it is not cached yet."""
    target = cache / package.tarball
    if target.is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError(
            f"npm is missing, and {package.spec} is not cached in {cache}. "
            "Install it (apt-get install npm) and run build/vendor.py again."
        )
    cache.mkdir(parents=True, exist_ok=True)
    print(f"[vendor] op=fetch package={package.spec}", file=sys.stderr)
    done = subprocess.run(
        [npm, "pack", package.spec, "--json", "--pack-destination", str(cache)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not target.is_file():
        raise VendorError(f"`npm pack {package.spec}` failed:\n{done.stderr.strip()}")
    return target


def extract(package: Package, tarball: Path, out: Path) -> None:
    """Copy the package's listed files out of its tarball into ``out/<name>/``."""
    dest = out / package.name
    with tarfile.open(tarball, "r:gz") as archive:
        # npm tarballs keep everything under one top folder, normally "package/".
        members = {
            PurePosixPath(*PurePosixPath(m.name).parts[1:]): m for m in archive if m.isfile()
        }
        for name in package.files:
            member = members.get(PurePosixPath(name))
            if member is None:
                raise VendorError(f"{package.spec} has no file {name}; fix build/vendor.json.")
            source = archive.extractfile(member)
            assert source is not None  # a regular file always has content
            path = dest / name
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            with source, partial.open("wb") as handle:
                shutil.copyfileobj(source, handle)
            os.replace(partial, path)


def vendor(manifest: Path, out: Path, cache: Path) -> bool:
    """Vendor every package; return False when the stamp says it was already done."""
    want = sha256_file(manifest)
    packages = load_manifest(manifest)
    stamp = out / STAMP
    complete = all((out / p.name / f).is_file() for p in packages for f in p.files)
    if complete and stamp.is_file() and stamp.read_text().strip() == want:
        return False
    for package in packages:
        tarball = fetch(package, cache)
        got = integrity_of(tarball)
        if got != package.integrity:
            raise VendorError(
                f"{tarball} does not match the integrity pinned for {package.spec} "
                f"(got {got}). Delete the file to fetch it again; if it persists, the "
                "published package changed: check it before updating build/vendor.json."
            )
        shutil.rmtree(out / package.name, ignore_errors=True)
        extract(package, tarball, out)
        print(
            f"[vendor] op=extract package={package.spec} files={len(package.files)}",
            file=sys.stderr,
        )
    stamp.write_text(want + "\n")
    return True


def main() -> int:
    """Parse arguments and vendor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("MAXY_CACHE_DIR") or "~/.cache/maxy"),
        help="cache root; tarballs go to <cache-dir>/npm",
    )
    args = parser.parse_args()
    try:
        vendor(args.manifest, args.out, args.cache_dir.expanduser() / "npm")
    except VendorError as err:
        print(f"[vendor] FATAL {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
