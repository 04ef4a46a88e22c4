"""A WhatsApp chat export (``_chat.txt``, "Export chat → Without media"), read into sessions.

Two line styles, as the phones write them::

    [21/03/2024, 09:15:02] Anna Berg: see you at 8        (iPhone)
    21/03/2024, 09:15 - Anna Berg: see you at 8           (Android)

Dates are day first unless the file shows otherwise (a second field above 12 means month
first); a two-digit year is 20yy; a 12-hour time with AM/PM is read as such. A line that does not
start with a date continues the message before it (a multi-line message). System lines — "Messages
and calls are end-to-end encrypted", "Anna created group …", "<Media omitted>" notes marked by
the phone's invisible U+200E, an Android line with no "Name:" — are counted, not kept. The times
are the phone's local time; they are read in the owner's zone.

:func:`parse` answers the messages and who wrote how many (the importer reports the senders it
found and takes which one is the owner); :func:`sessions` cuts them where eight hours pass
without a message.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo

GAP = timedelta(hours=8)
MAX_BYTES = 50 * 1024 * 1024
_MARKS = "\u200e\u200f\u202a\u202c\ufeff"
_DATE = (
    r"(\d{1,2})[/.\-](\d{1,2})[/.\-](\d{2,4}),?\s+(\d{1,2}):(\d{2})(?::(\d{2}))?"
    r"\s*([AaPp]\.?[Mm]\.?)?"
)
_IOS = re.compile(rf"^\[{_DATE}\]\s(.*)$")
_ANDROID = re.compile(rf"^{_DATE}\s[-\u2013]\s(.*)$")
_SENDER = re.compile(r"^([^:]{1,100}?):\s(.*)$", re.DOTALL)


class ExportError(ValueError):
    """The file is not a chat export this reader knows (the message says what to do)."""


@dataclass(frozen=True)
class ExportMessage:
    """One message of the export."""

    at: datetime
    sender: str
    text: str


@dataclass
class Export:
    """What an export holds."""

    messages: list[ExportMessage] = field(default_factory=list)
    senders: Counter[str] = field(default_factory=Counter)
    system_lines: int = 0


def _clean(line: str) -> str:
    return line.translate({ord(c): None for c in _MARKS}).rstrip("\r")


def _head(line: str) -> tuple[tuple[str, ...], str] | None:
    """A message's first line: its date fields and the rest; None for a continuation."""
    stripped = line.lstrip(_MARKS)
    for pattern in (_IOS, _ANDROID):
        found = pattern.match(stripped)
        if found:
            return found.groups()[:7], found.group(8)
    return None


def _day_first(heads: list[tuple[str, ...]]) -> bool:
    firsts = [int(h[0]) for h in heads]
    seconds = [int(h[1]) for h in heads]
    return not (max(seconds, default=0) > 12 and max(firsts, default=0) <= 12)


def _when(fields: tuple[str, ...], day_first: bool, zone: tzinfo) -> datetime:
    a, b, year, hour, minute, second, half = fields
    day, month = (int(a), int(b)) if day_first else (int(b), int(a))
    full = int(year) + 2000 if len(year) == 2 else int(year)
    h = int(hour)
    if half:
        pm = half.lower().startswith("p")
        h = (h % 12) + (12 if pm else 0)
    return datetime(full, month, day, h, int(minute), int(second or 0), tzinfo=zone)


def parse(text: str, zone: tzinfo) -> Export:
    """The messages of an export; :class:`ExportError` when none can be read."""
    lines = [_clean(line) for line in text.splitlines()]
    heads = [h for h in (_head(line) for line in lines) if h is not None]
    if not heads:
        raise ExportError(
            "This is not a WhatsApp chat export: no line starts with a date such as "
            "'[21/03/2024, 09:15:02] Name:' or '21/03/2024, 09:15 - Name:'. Export the chat "
            "from the phone (the chat → ⋮ or the name → Export chat → Without media) and "
            "give its _chat.txt."
        )
    day_first = _day_first([h[0] for h in heads])
    export = Export()
    current: list[tuple[datetime, str, list[str]]] = []  # the message being read
    system = False

    def close() -> None:
        if current:
            at, sender, parts = current.pop()
            body = "\n".join(parts).strip()
            if body:
                export.messages.append(ExportMessage(at, sender, body))
                export.senders[sender] += 1

    for raw, line in zip(text.splitlines(), lines, strict=True):
        head = _head(line)
        if head is None:
            if current and not system:
                current[-1][2].append(line)
            continue
        close()
        fields, rest = head
        try:
            at = _when(fields, day_first, zone)
        except ValueError:  # not a real date: a continuation that looks like one
            if current:
                current[-1][2].append(line)
            continue
        said = _SENDER.match(rest)
        original = _SENDER.match(_after_head(raw))  # the phone marks its own notes with U+200E
        marked = raw.lstrip()[:1] in _MARKS or (
            original is not None and original.group(2)[:1] in _MARKS
        )
        system = said is None or marked
        if system:
            export.system_lines += 1
            continue
        assert said is not None
        current.append((at, said.group(1).strip(), [said.group(2)]))
    close()
    if not export.messages:
        raise ExportError("The export holds no messages (only system lines); nothing to import.")
    return export


def _after_head(raw: str) -> str:
    """The raw line after its date (its invisible marks kept, to tell system lines)."""
    stripped = raw.lstrip(_MARKS)
    for pattern in (_IOS, _ANDROID):
        found = pattern.match(stripped)
        if found:
            return found.group(8)
    return ""


def sessions(messages: list[ExportMessage], gap: timedelta = GAP) -> list[list[ExportMessage]]:
    """The messages in sessions: a new one where more than ``gap`` passed without a message."""
    ordered = sorted(messages, key=lambda m: m.at)
    found: list[list[ExportMessage]] = []
    for message in ordered:
        if found and message.at - found[-1][-1].at <= gap:
            found[-1].append(message)
        else:
            found.append([message])
    return found
