"""cloudflared, Cloudflare's tunnel daemon, built from its pinned source release and cached.

No package registry these machines reach serves cloudflared (Debian has no package, the Go
module proxy refuses the module, the npm and PyPI wrappers download a vendor binary at install
time), so the source archive with its vendored Go modules is kept beside the repository and
built offline with the machine's Go toolchain::

    python -m image.cloudflared [--arch x86-64|arm64] [--source-dir DIR] [--link PATH]

- The archive: ``cloudflared-<VERSION>-src.tar.gz`` in ``--source-dir`` (``MAXY_SOURCE_DIR``,
  default ``../shared/src`` beside the repository), checked against :data:`SOURCE_SHA256` before
  anything is unpacked. A builder with internet access may instead ``git archive`` the same tag;
  the archive must hash the same.
- The build: ``GOFLAGS=-mod=vendor GOPROXY=off CGO_ENABLED=0 go build -trimpath`` with
  ``main.Version`` set, ``GOARCH`` for the target; a static binary, about 1.5 minutes per
  architecture on two cores. Go is ``go`` on PATH, else ``/usr/local/go/bin/go``.
- The cache: ``$MAXY_CACHE_DIR/cloudflared/<key>/cloudflared`` beside ``cloudflared.sha256``,
  where the key hashes the archive's sha256, the architecture and the Go version; a second run
  is a lookup. Builds hold ``$MAXY_CACHE_DIR/cloudflared/.lock`` (flock), so concurrent ones
  wait for each other instead of colliding; a build lands by a rename, so a half-built binary is
  never found.
- The card installs it as ``/opt/maxy/cloudflared/cloudflared`` (``/usr/bin/cloudflared`` links
  to it) and records version, sha256 and size in its manifest; the bootstrap links the host's
  build as ``$MAXY_CACHE_DIR/bin/cloudflared``, where the tests find it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from appliance.core.fsio import sha256_file, sha256_hex
from image.errors import BuildFailed, InputMissing

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
VERSION = "2026.8.2"
COMMIT = "733bfb939963e150dcf5c4faddb1603f744fbc98"  # tag 2026.8.2 (cloudflared-SOURCE.txt)
SOURCE_SHA256 = "cfeaa6442963d07947c68c09dac0eaaa3e33f6dd8236ad256003fdeea4591470"
ARCHIVE = f"cloudflared-{VERSION}-src.tar.gz"
GOARCH = {"x86-64": "amd64", "arm64": "arm64"}
HOST_ARCH = {"x86_64": "x86-64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
GO_FALLBACK = Path("/usr/local/go/bin/go")
GO_NEEDED = "1.26"  # go.mod's `go` line at the pinned commit


@dataclass(frozen=True)
class Cloudflared:
    """One built cloudflared: where it is and what the image's manifest records of it."""

    path: Path
    version: str
    sha256: str
    size: int

    def manifest(self) -> dict[str, str | int]:
        """The manifest's record: version, commit, sha256 and size."""
        return {"version": self.version, "commit": COMMIT, "sha256": self.sha256, "size": self.size}


def source_dir() -> Path:
    """Where the source archive is looked for: MAXY_SOURCE_DIR, else ../shared/src.

    ``..`` is the checkout's parent; a linked git worktree also looks beside its main checkout,
    and a clone of a local checkout (CI's clean clone) beside the checkout it was cloned from.
    """
    named = os.environ.get("MAXY_SOURCE_DIR")
    if named:
        return Path(named)
    beside = REPO.parent / "shared" / "src"
    for checkout in _related_checkouts():
        if not beside.is_dir() and (checkout.parent / "shared" / "src").is_dir():
            return checkout.parent / "shared" / "src"
    return beside


def _related_checkouts() -> list[Path]:
    """The main checkout of a linked worktree, and the local checkout a clone came from."""
    found = []
    dot_git = REPO / ".git"
    if dot_git.is_file():  # "gitdir: <main>/.git/worktrees/<name>"
        gitdir = Path(dot_git.read_text().removeprefix("gitdir:").strip())
        found.append(gitdir.parent.parent.parent)
    origin = subprocess.run(
        ["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if origin.startswith("/") or origin.startswith("file://"):
        found.append(Path(origin.removeprefix("file://")))
    return found


def find_go() -> Path:
    """The Go toolchain: ``go`` on PATH, else /usr/local/go/bin/go; InputMissing if neither."""
    found = shutil.which("go")
    if found is not None:
        return Path(found)
    if os.access(GO_FALLBACK, os.X_OK):
        return GO_FALLBACK
    raise InputMissing(
        f"Go {GO_NEEDED} or newer is needed to build cloudflared: install a Go toolchain as "
        f"{GO_FALLBACK.parent.parent} (or put `go` on PATH)."
    )


def go_version(go: Path) -> str:
    """The toolchain's version (``go1.26.8``)."""
    done = subprocess.run(
        [str(go), "env", "GOVERSION"], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0 or not done.stdout.startswith("go"):
        raise InputMissing(f"{go} does not run: {done.stderr.strip()[-300:]}")
    version = done.stdout.strip()
    numbers = version.removeprefix("go").split(".")
    if tuple(int(n) for n in numbers[:2] if n.isdigit()) < (1, 26):
        raise InputMissing(f"{go} is {version}; cloudflared {VERSION} needs Go {GO_NEEDED}+.")
    return version


def cache_key(arch: str, go: str) -> str:
    """The cache folder's name: what decides the binary (archive, target, toolchain)."""
    return f"{VERSION}-{arch}-" + sha256_hex(f"{SOURCE_SHA256} {GOARCH[arch]} {go}")[:16]


def _archive(folder: Path) -> Path:
    path = folder / ARCHIVE
    if not path.is_file():
        raise InputMissing(
            f"The cloudflared source {path} is missing: set MAXY_SOURCE_DIR (or --source-dir) "
            f"to the folder holding {ARCHIVE}, or `git archive` tag {VERSION} of cloudflared "
            f"(commit {COMMIT}) into it."
        )
    digest = sha256_file(path)
    if digest != SOURCE_SHA256:
        raise InputMissing(f"{path} has sha256 {digest}, not the pinned {SOURCE_SHA256}.")
    return path


def _build(archive: Path, arch: str, go: Path, out: Path) -> None:
    """Unpack the verified archive into a scratch folder and ``go build`` it into ``out``."""
    with tempfile.TemporaryDirectory(prefix=".build-", dir=out.parent) as scratch:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        tops = [p for p in Path(scratch).iterdir() if p.is_dir()]
        if len(tops) != 1:
            raise BuildFailed(f"{archive} should hold one top folder, not {len(tops)}.")
        env = {
            **os.environ,
            "GOFLAGS": "-mod=vendor",
            "GOPROXY": "off",
            "GOTOOLCHAIN": "local",
            "CGO_ENABLED": "0",
            "GOOS": "linux",
            "GOARCH": GOARCH[arch],
            "GOCACHE": str(Path(scratch) / "gocache"),  # a cold, private build: reproducible
            "GOPATH": str(Path(scratch) / "gopath"),
        }
        result = Path(scratch) / "result"
        result.mkdir(mode=0o755)
        staged = result / "cloudflared"
        command = [
            str(go),
            "build",
            "-trimpath",
            "-buildvcs=false",
            "-ldflags",
            f"-X main.Version={VERSION}",
            "-o",
            str(staged),
            "./cmd/cloudflared",
        ]
        started = time.monotonic()
        done = subprocess.run(
            command, cwd=tops[0], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise BuildFailed(f"go build of cloudflared failed: {done.stderr.strip()[-1500:]}")
        staged.chmod(0o755)
        (result / "cloudflared.sha256").write_text(f"{sha256_file(staged)}  cloudflared\n")
        log.info(
            "[cloudflared] op=built arch=%s seconds=%.0f bytes=%d",
            arch,
            time.monotonic() - started,
            staged.stat().st_size,
        )
        result.replace(out)


def cloudflared(cache_dir: Path, arch: str, sources: Path | None = None) -> Cloudflared:
    """cloudflared for ``arch`` from the cache, built from the pinned archive when absent."""
    if arch not in GOARCH:
        raise InputMissing(f"cloudflared is built for {', '.join(GOARCH)}, not {arch}.")
    go = find_go()
    folder = cache_dir / "cloudflared" / cache_key(arch, go_version(go))
    executable, sums = folder / "cloudflared", folder / "cloudflared.sha256"
    if not executable.is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with (folder.parent / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not executable.is_file():  # another build may have made it while we waited
                archive = _archive(sources or source_dir())
                log.info(
                    "[cloudflared] op=build version=%s arch=%s (once per toolchain, ~1.5 min)",
                    VERSION,
                    arch,
                )
                shutil.rmtree(folder, ignore_errors=True)
                _build(archive, arch, go, folder)
    digest = sha256_file(executable)
    if sums.read_text().split()[0] != digest:
        raise InputMissing(
            f"{executable} does not match {sums}; delete {folder}, then build again."
        )
    return Cloudflared(executable, VERSION, digest, executable.stat().st_size)


def link(target: Path, link_path: Path) -> None:
    """Point ``link_path`` at ``target`` (replaced atomically when it points elsewhere)."""
    link_path.parent.mkdir(parents=True, exist_ok=True)
    if link_path.is_symlink() and link_path.resolve() == target.resolve():
        return
    staged = link_path.with_name(f".{link_path.name}.tmp")
    staged.unlink(missing_ok=True)
    staged.symlink_to(target)
    staged.replace(link_path)


def main(argv: list[str] | None = None) -> int:
    """``python -m image.cloudflared``: build (or find) cloudflared, print its path."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m image.cloudflared", description=__doc__)
    parser.add_argument("--arch", choices=sorted(GOARCH), default=HOST_ARCH)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("MAXY_CACHE_DIR", Path.home() / ".cache" / "maxy")),
    )
    parser.add_argument("--source-dir", type=Path, help="the folder holding " + ARCHIVE)
    parser.add_argument("--link", type=Path, help="a symlink to make to the executable")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        built = cloudflared(args.cache_dir, args.arch, args.source_dir)
    except (InputMissing, BuildFailed) as err:
        print(f"[cloudflared] FATAL {err}", file=sys.stderr)
        return 1
    if args.link is not None:
        link(built.path, args.link)
    print(built.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
