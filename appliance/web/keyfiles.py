"""Small secret files under ``keys_dir``: mode 0600 in a 0700 directory, written atomically."""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

log = logging.getLogger(__name__)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) and make it mode 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o777 != 0o700:
        os.chmod(path, 0o700)


def write_private(path: Path, data: bytes, *, exclusive: bool = False) -> bool:
    """Write ``data`` atomically (mode 0600); with ``exclusive``, return False if it exists.

    Readers see the old content or the new, never half a file. With ``exclusive`` the file is
    published with link(), which fails if the name exists, so two processes racing to create the
    same secret end up agreeing on whichever came first.
    """
    ensure_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def read_private(path: Path) -> str | None:
    """The stripped text of a secret file; None when it is missing, empty or unreadable."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        log.warning("[keys] op=read warn=unreadable path=%s error=%s", path, err)
        return None
    return text or None
