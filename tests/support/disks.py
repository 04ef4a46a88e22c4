"""A small partition of its own for the disk-full tests: a tmpfs of fixed size, and a filler.

``small_disk`` (a fixture: import it into the module that uses it) mounts the tmpfs (it needs
root and mount, as the CI VM has; skipped otherwise) and unmounts it at the end; :func:`fill`
writes one file until the filesystem has not a byte left.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SIZE = "24m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of :data:`SIZE`, unmounted at the end."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs of fixed size needs root and mount (the CI VM has both)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"this container refuses mounts: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Write one file until the filesystem has not a byte left; return it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for block in (1024 * 1024, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * block)
            except OSError as err:
                assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler
