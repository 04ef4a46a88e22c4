"""The linked device's files, shared by ``maxy channels``, the Settings page and the tools.

All under ``<channels_dir>/whatsapp/`` (0700; every file 0600)::

    session.db     whatsmeow's session (the device's keys): created 0600 before the library
                   opens it; removed when WhatsApp logs the device out or the owner unlinks it
    unlink         the owner asked to unlink: the role logs the device out, then forgets it
    link           the owner asked to link (Settings → WhatsApp → Link): the role connects
                   and shows QR codes; without it and without a session it does not connect
    qr             the QR code to scan now (pairing data: shown on the Settings page only,
                   never sent, never logged); replaced at each refresh, removed once paired
    outbox/*.json  the owner's messages from the ``whatsapp-send`` tool, for the role (the only
                   process holding the connection) to send through the outbound gate; the
                   answer is written back as ``<id>.done.json``

None of this imports the library: the app and the tools use it without loading the Go core.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

from appliance.core.fsio import read_secret, write_secret

log = logging.getLogger(__name__)

CHANNEL = "whatsapp"  # the channel's name in rows, labels and settings
SESSION_FILES = ("session.db", "session.db-wal", "session.db-shm", "session.db-journal")
OUTBOX_WAIT = 30.0  # seconds the tool waits for the role's answer


def folder(channels_dir: Path) -> Path:
    """The device's folder (made 0700)."""
    path = channels_dir / "whatsapp"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def session_path(channels_dir: Path) -> Path:
    """whatsmeow's session database, created empty 0600 when missing (the library fills it)."""
    path = folder(channels_dir) / "session.db"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
    return path


def has_session(channels_dir: Path) -> bool:
    """True when a session is stored (the device was paired and not logged out)."""
    path = channels_dir / "whatsapp" / "session.db"
    return path.is_file() and path.stat().st_size > 0


def forget_session(channels_dir: Path) -> None:
    """Remove the session (logged out, or unlinked): the next link needs a new QR scan."""
    for name in (*SESSION_FILES, "qr", "link", "unlink"):
        with contextlib.suppress(FileNotFoundError):
            (channels_dir / "whatsapp" / name).unlink()


def request_link(channels_dir: Path) -> None:
    """The owner asked to link the device (the role connects and shows QR codes)."""
    write_secret(folder(channels_dir) / "link", "requested\n")


def request_unlink(channels_dir: Path) -> None:
    """The owner asked to unlink: with a session, the role logs out; without, stop linking."""
    if has_session(channels_dir):
        write_secret(folder(channels_dir) / "unlink", "requested\n")
        return
    forget_session(channels_dir)


def unlink_requested(channels_dir: Path) -> bool:
    """True when the owner asked to unlink the linked device."""
    return (channels_dir / "whatsapp" / "unlink").is_file()


def link_requested(channels_dir: Path) -> bool:
    """True when the owner asked to link and no session is stored yet."""
    return (channels_dir / "whatsapp" / "link").is_file()


def set_qr(channels_dir: Path, code: str | None) -> None:
    """Keep the code to scan now (None: no code, e.g. paired)."""
    path = folder(channels_dir) / "qr"
    if code is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    write_secret(path, code + "\n")


def qr(channels_dir: Path) -> str | None:
    """The code to scan now, if any."""
    return read_secret(channels_dir / "whatsapp" / "qr")


# --- the owner's outbox -------------------------------------------------------------------


def outbox(channels_dir: Path) -> Path:
    """Where the tools leave the owner's messages for the role."""
    path = folder(channels_dir) / "outbox"
    path.mkdir(exist_ok=True, mode=0o700)
    return path


def post(channels_dir: Path, chat: dict[str, Any], text: str) -> str:
    """Leave one message for the role; its id."""
    message_id = uuid.uuid4().hex
    body = {"id": message_id, "chat": chat, "text": text, "postedAt": time.time()}
    write_secret(outbox(channels_dir) / f"{message_id}.json", json.dumps(body))
    return message_id


def answer_of(channels_dir: Path, message_id: str) -> dict[str, Any] | None:
    """The role's answer to a posted message (and both files removed), or None yet."""
    box = outbox(channels_dir)
    done = box / f"{message_id}.done.json"
    try:
        answer: dict[str, Any] = json.loads(done.read_text())
    except (FileNotFoundError, ValueError):
        return None
    done.unlink(missing_ok=True)
    return answer


def withdraw(channels_dir: Path, message_id: str) -> bool:
    """Take back a posted message the role has not picked up; False when it was taken."""
    try:
        (outbox(channels_dir) / f"{message_id}.json").unlink()
    except FileNotFoundError:
        return False
    return True


def waiting(channels_dir: Path) -> list[dict[str, Any]]:
    """The posted messages (oldest first), each removed from the box as it is read."""
    found = []
    for path in sorted(outbox(channels_dir).glob("*.json"), key=lambda p: p.stat().st_mtime):
        if path.name.endswith(".done.json"):
            continue
        try:
            body = json.loads(path.read_text())
            path.unlink()
        except (OSError, ValueError) as err:
            log.warning("[channels] op=outbox warn=unreadable path=%s error=%s", path.name, err)
            path.unlink(missing_ok=True)
            continue
        if isinstance(body, dict):
            found.append(body)
    return found


def answer(channels_dir: Path, message_id: str, result: dict[str, Any]) -> None:
    """The role's answer to one posted message."""
    write_secret(outbox(channels_dir) / f"{message_id}.done.json", json.dumps(result))
