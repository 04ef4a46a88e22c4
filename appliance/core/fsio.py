"""Durable files: the one atomic write, the one secret-file writer and reader, the one sha256.

A durable write on an SD card is: a temporary file in the same folder, write, fsync, rename
over the target, fsync the folder. Anything less can leave an empty or half file after a power
cut. Readers see the old content or the new, never a mix.

A full disk is one error everywhere: :class:`DiskFull` (code ``disk-full``), raised from an
``ENOSPC``/``EDQUOT`` by :func:`disk_full_errors` around any write of Maxy's data (these writes,
uploads, the engine's kept texts, Neo4j's store, backups), so the owner reads the same "free
space, then try again" whichever write found the partition full.
"""

from __future__ import annotations

import contextlib
import errno
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
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# Below this many free bytes a partition counts as full: Neo4j needs a few MB to restart (its
# logs, a checkpoint) and stops its database on the first transaction it cannot append.
LOW_SPACE = 8 * 1024 * 1024


class DiskFull(Exception):
    """A write found no space left: nothing was changed; free space, then try again.

    ``where`` names what could not be written (a path, or "the Neo4j store").
    """

    code = "disk-full"

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(
            f"The disk is full: {where} could not be written (no space left on the device), "
            "and nothing was changed. Free space on the data partition — remove old backups "
            "or uploaded files you no longer need — then try again."
        )


def is_no_space(err: OSError) -> bool:
    """True if ``err`` says the disk (or the user's quota) is full."""
    return err.errno in _NO_SPACE


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (None: no such path)."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def low_on_space(path: Path) -> bool:
    """True if ``path`` exists on a filesystem with less than :data:`LOW_SPACE` bytes free."""
    free = free_bytes(path)
    return free is not None and free < LOW_SPACE


@contextlib.contextmanager
def disk_full_errors(where: Path | str) -> Iterator[None]:
    """Turn a no-space ``OSError`` raised inside the block into :class:`DiskFull`."""
    try:
        yield
    except OSError as err:
        if is_no_space(err):
            log.error("[disk] op=write error=disk-full where=%s", where)
            raise DiskFull(str(where)) from err
        raise


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
        with disk_full_errors(self.target):
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
    try:
        with disk_full_errors(path):
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
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
