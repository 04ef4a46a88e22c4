"""Durable files: the one atomic write, the one secret-file writer and reader, the one sha256.

A durable write on an SD card is: a temporary file in the same folder, write, fsync, rename
over the target, fsync the folder. Anything less can leave an empty or half file after a power
cut. Readers see the old content or the new, never a mix.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

BLOCK = 1024 * 1024
PRIVATE_DIR_MODE = 0o700
SECRET_MODE = 0o600


def fsync_dir(folder: Path) -> None:
    """Make a rename (or a new entry) in ``folder`` survive a power cut."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) and make it mode 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    if path.stat().st_mode & 0o777 != PRIVATE_DIR_MODE:
        os.chmod(path, PRIVATE_DIR_MODE)


class Staged:
    """A fully written, fsynced temporary file beside ``target``; :meth:`commit` publishes it."""

    def __init__(self, path: Path, target: Path) -> None:
        self.path = path
        self.target = target

    def commit(self, *, exclusive: bool = False) -> bool:
        """Rename onto the target and fsync the folder; with ``exclusive``, False if it exists.

        ``exclusive`` publishes with link(2), which fails when the name exists, so two
        processes racing to create the same file agree on whichever came first.
        """
        if exclusive:
            try:
                os.link(self.path, self.target)
            except FileExistsError:
                return False
        else:
            os.replace(self.path, self.target)
        fsync_dir(self.target.parent)
        return True


@contextlib.contextmanager
def staged(path: Path, data: bytes | str, *, mode: int = 0o644) -> Iterator[Staged]:
    """Write ``data`` (mode ``mode``) to a temporary file beside ``path``; removed if not committed.

    For a file that must be checked before it replaces the old one (``cloudflared ingress
    validate`` reads the staged copy); :func:`write_atomic` is the one-step form.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # the umask must not narrow or widen it
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        yield Staged(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_atomic(
    path: Path, data: bytes | str, *, mode: int = 0o644, exclusive: bool = False
) -> bool:
    """Replace ``path`` with ``data`` durably; with ``exclusive``, return False if it exists."""
    with staged(path, data, mode=mode) as temp:
        return temp.commit(exclusive=exclusive)


def write_secret(
    path: Path, data: bytes | str, *, exclusive: bool = False, private_dir: bool = True
) -> bool:
    """Write a secret durably, mode 0600; with ``exclusive``, keep an existing one.

    With ``private_dir`` (Maxy's own key folders) the folder is made mode 0700 first; a folder
    the owner chose (``maxy ota keygen PATH``) is left as it is. Returns False when
    ``exclusive`` and the file already exists (its content is left as is).
    """
    if private_dir:
        ensure_private_dir(path.parent)
    return write_atomic(path, data, mode=SECRET_MODE, exclusive=exclusive)


def read_secret(path: Path) -> str | None:
    """The stripped text of a secret file; None when it is missing, empty or unreadable."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        log.warning("[keys] op=read warn=unreadable path=%s error=%s", path, err)
        return None
    return text or None


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def sha256_hex(data: bytes | str) -> str:
    """Hex sha256 of ``data`` (text as UTF-8)."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()
