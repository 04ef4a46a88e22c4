"""Building the frozen binaries for tests: dist/maxy and dist/arm64/maxy-onedir, when missing or
stale.

`build/build.sh` is called when dist/maxy is missing or older than any file it is made from
(about a minute the first time, the build virtualenv is then reused); a lock keeps two test
sessions (and `just image`) from building at once.

The arm64 binary takes far longer (an emulated freeze; on a new machine also the arm64 Debian
base and the cross-compiled llama.cpp), mostly on one core: when a session will use it,
tests/conftest.py starts its build in the background at collection (:func:`start_arm64_build`,
holding the same lock) and runs the tests that need it last, so the rest of the suite runs
meanwhile; :func:`arm64_binary` then waits on the lock.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.processes import REPO

DIST = REPO / "dist" / "maxy"
ARM64 = REPO / "dist" / "arm64" / "maxy-onedir" / "maxy"  # the form the card carries
# What the binary is made of; editing any of it makes dist/maxy stale.
SOURCES = [
    REPO / "appliance",
    REPO / "schema",
    REPO / "build" / "maxy.spec",
    REPO / "build" / "entry",
    REPO / "build" / "build.sh",
    REPO / "build" / "llama-wheel.sh",
    REPO / "build" / "ggml-simd.patch",
    REPO / "pyproject.toml",
]


def newest_source(sources: list[Path] = SOURCES) -> tuple[float, Path]:
    """The modification time and path of the newest file the binary is built from."""
    newest = (0.0, REPO)
    for source in sources:
        files = [source] if source.is_file() else source.rglob("*")
        for path in files:
            if "__pycache__" in path.parts or not path.is_file():
                continue
            newest = max(newest, (path.stat().st_mtime, path))
    return newest


def stale(binary: Path, sources: list[Path] = SOURCES) -> str | None:
    """Why ``binary`` must be rebuilt, or None when it is current."""
    if not binary.is_file():
        return f"{binary} is missing"
    mtime, path = newest_source(sources)
    if mtime > binary.stat().st_mtime:
        return f"{path.relative_to(REPO)} is newer than {binary.name}"
    return None


def build(reporter: pytest.TerminalReporter | None) -> Path:
    """Build dist/maxy unless it is current (under a lock shared with other test sessions)."""
    lock_path = REPO / "build" / "out" / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reason = stale(DIST)
        if reason is None:
            return DIST
        started = time.monotonic()
        done = subprocess.run(
            [str(REPO / "build" / "build.sh")],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        seconds = time.monotonic() - started
        if done.returncode != 0:
            pytest.fail(f"build/build.sh failed ({reason}):\n{done.stdout}\n{done.stderr}")
        line = f"[binary] built dist/maxy in {seconds:.0f} s ({reason})"
        if reporter is not None:
            reporter.write_line(line)
    return DIST


ARM64_SOURCES = [*SOURCES, REPO / "build" / "build-arm64.sh", REPO / "build" / "freeze.lock"]
ARM64_LOCK = REPO / "build" / "out" / ".build-arm64.lock"  # shared with image/inputs.py
ARM64_LOG = REPO / "build" / "out" / "build-arm64.log"


def _can_build_arm64() -> bool:
    return os.geteuid() == 0 or os.uname().machine == "aarch64"


def start_arm64_build() -> subprocess.Popen[bytes] | None:
    """Start build/build-arm64.sh in the background under the lock, if the binary is stale."""
    if stale(ARM64, ARM64_SOURCES) is None or not _can_build_arm64() or not shutil.which("flock"):
        return None
    ARM64_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with ARM64_LOG.open("wb") as log:
        return subprocess.Popen(
            ["flock", str(ARM64_LOCK), str(REPO / "build" / "build-arm64.sh")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_arm64_build(build: subprocess.Popen[bytes]) -> None:
    """End a background build the session no longer waits for (its whole process group)."""
    if build.poll() is None:
        os.killpg(build.pid, signal.SIGTERM)
        try:
            build.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()


def arm64_binary(reporter: pytest.TerminalReporter | None) -> Path:
    """Build dist/arm64/maxy-onedir unless it is current (build/build-arm64.sh: a cross wheel,
    PyInstaller in a chroot)."""
    lock_path = ARM64_LOCK
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for a background build (start_arm64_build)
        reason = stale(ARM64, ARM64_SOURCES)
        if reason is None:
            return ARM64
        if not _can_build_arm64():
            pytest.skip(f"{reason}; building it on x86-64 chroots into an arm64 root: needs root")
        started = time.monotonic()
        done = subprocess.run(
            [str(REPO / "build" / "build-arm64.sh")],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"build/build-arm64.sh failed ({reason}):\n{done.stdout}\n{done.stderr}")
        if reporter is not None:
            reporter.write_line(
                f"[binary] built dist/arm64/maxy-onedir in {time.monotonic() - started:.0f} s "
                f"({reason})"
            )
    return ARM64
