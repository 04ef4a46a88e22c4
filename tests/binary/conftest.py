"""The frozen `maxy` under test: MAXY_BINARY, else dist/maxy, built once when missing or stale.

These tests run the FROZEN executable, never the source tree. `build/build.sh` is called when
dist/maxy is missing or older than any file it is made from (about a minute the first time,
the build virtualenv is then reused); a lock keeps two test sessions from building at once.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import REPO

DIST = REPO / "dist" / "maxy"
ARM64 = REPO / "dist" / "arm64" / "maxy"
# What the binary is made of; editing any of it makes dist/maxy stale.
SOURCES = [
    REPO / "appliance",
    REPO / "schema",
    REPO / "build" / "maxy.spec",
    REPO / "build" / "entry",
    REPO / "build" / "build.sh",
    REPO / "build" / "llama-wheel.sh",
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


def arm64_binary(reporter: pytest.TerminalReporter | None) -> Path:
    """Build dist/arm64/maxy unless it is current (build/build-arm64.sh: cross wheel + chroot)."""
    sources = [*SOURCES, REPO / "build" / "build-arm64.sh", REPO / "build" / "freeze.lock"]
    lock_path = REPO / "build" / "out" / ".build-arm64.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reason = stale(ARM64, sources)
        if reason is None:
            return ARM64
        if os.geteuid() != 0 and os.uname().machine != "aarch64":
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
                f"[binary] built dist/arm64/maxy in {time.monotonic() - started:.0f} s ({reason})"
            )
    return ARM64


@pytest.fixture(scope="session")
def binary(request: pytest.FixtureRequest) -> Iterator[Path]:
    """The frozen executable: $MAXY_BINARY, else dist/maxy (built when missing or stale)."""
    given = os.environ.get("MAXY_BINARY")
    if given:
        path = Path(given).resolve()
        if not os.access(path, os.X_OK):
            pytest.fail(f"MAXY_BINARY={given} is not an executable file")
        yield path
        return
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    yield build(reporter)
