"""Import a WhatsApp chat export as a conversation archive, in two steps.

1. Without an owner: the export is read and its senders reported (name → messages), nothing is
   kept — the owner says which sender they are (their name as the phone wrote it).
2. With the owner: each session (:func:`.export.sessions`) is kept through the engine
   (``channel.archive``); a session kept before gains only messages it did not have, so importing
   the same file again adds nothing.

Used by ``maxy channels whatsapp import FILE`` and the ``whatsapp-import`` tool.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from appliance.channels.whatsapp.export import MAX_BYTES, ExportError, parse, sessions
from appliance.channels.whatsapp.linking import CHANNEL
from appliance.rpc.client import RpcClient

log = logging.getLogger(__name__)

MAX_CHAT = 200


def read(path: Path) -> str:
    """The export's text; :class:`ExportError` for a file that cannot be one."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ExportError(f"{path.name} is over {MAX_BYTES // 2**20} MB; export without media.")
        return path.read_bytes().decode("utf-8-sig", errors="replace")
    except OSError as err:
        raise ExportError(f"{path} cannot be read: {err.strerror or err}.") from err


async def import_export(
    engine: RpcClient,
    caller: dict[str, Any],
    text: str,
    zone: str,
    owner: str | None = None,
    chat: str | None = None,
) -> dict[str, Any]:
    """Step 1 (no ``owner``): the senders found. Step 2: the sessions kept, and how many new."""
    export = parse(text, ZoneInfo(zone))
    senders = dict(export.senders.most_common())
    found = {
        "senders": senders,
        "messages": len(export.messages),
        "systemLines": export.system_lines,
        "sessions": len(sessions(export.messages)),
    }
    if owner is None:
        return {**found, "imported": False}
    if owner not in senders:
        raise ExportError(
            f"{owner!r} wrote nothing in this export; the owner is one of: {', '.join(senders)}."
        )
    others = [name for name in senders if name != owner]
    name = (chat or ", ".join(others) or owner).strip()[:MAX_CHAT]
    created = appended = 0
    for session in sessions(export.messages):
        answer = await engine.call(
            "channel.archive",
            {
                "caller": caller,
                "channel": CHANNEL,
                "chat": name,
                "messages": [
                    {
                        "sender": m.sender,
                        "text": m.text[:32_000],
                        "sentAt": m.at.isoformat(),
                        "owner": m.sender == owner,
                    }
                    for m in session
                ],
            },
        )
        created += bool(answer["created"])
        appended += int(answer["appended"])
    log.info(
        "[channels] op=import channel=%s chat=%s sessions=%d new-sessions=%d appended=%d",
        CHANNEL,
        name,
        found["sessions"],
        created,
        appended,
    )
    return {
        **found,
        "imported": True,
        "chat": name,
        "owner": owner,
        "newSessions": created,
        "appended": appended,
    }
