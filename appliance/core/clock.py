"""Time: the clock, IANA time zones, and instants read and written in a zone.

Every time Maxy stores is an instant (UTC); every time it shows is that instant in a zone, as
ISO 8601 with its offset (``2026-03-30T09:00:00+02:00``). A local time that a zone skips (the
hour a clock springs forward) is moved forward by the gap, as the clock on the wall does; a
local time that happens twice (the hour it falls back) is the first of the two.

A :data:`Clock` is passed in wherever "now" decides something, so tests fix it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

Clock = Callable[[], datetime]


class TimeZoneError(ValueError):
    """A name that is not an IANA time zone, or a time that cannot be read."""


def utc_now() -> datetime:
    """The current instant, in UTC."""
    return datetime.now(UTC)


def load_zone(name: object) -> ZoneInfo:
    """The IANA zone ``name`` (``Europe/Paris``), or :class:`TimeZoneError` saying what to use."""
    fix = "Use an IANA time zone name such as Europe/Paris, America/New_York or UTC."
    if not isinstance(name, str) or not name.strip():
        raise TimeZoneError(f"A time zone is needed. {fix}")
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError) as err:  # ValueError: not a key (a path, "..")
        raise TimeZoneError(f"{name!r} is not a time zone. {fix}") from err


def in_zone(local: datetime, zone: ZoneInfo) -> datetime:
    """The instant a wall-clock time in ``zone`` stands for (a skipped time moves forward)."""
    wall = local.replace(tzinfo=zone, fold=0)
    return wall.astimezone(UTC).astimezone(zone)


def read_instant(text: object, zone: ZoneInfo, what: str = "time") -> datetime:
    """An ISO 8601 date or date-time as an instant in ``zone``; without an offset it is local.

    A date alone is its day's start. :class:`TimeZoneError` names the value and the form to use.
    """
    if not isinstance(text, str) or not text.strip():
        raise TimeZoneError(f"The {what} is missing; give it as ISO 8601 (2026-03-30T09:00).")
    raw = text.strip()
    try:
        parsed = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError as err:
        raise TimeZoneError(
            f"The {what} {raw!r} is not ISO 8601. Give it like 2026-03-30T09:00 or "
            "2026-03-30T09:00:00+02:00 (time-resolve turns words into this form)."
        ) from err
    if parsed.tzinfo is None:
        return in_zone(parsed, zone)
    return parsed.astimezone(zone)


def local_iso(instant: datetime, zone: ZoneInfo) -> str:
    """``instant`` in ``zone`` as ISO 8601 with its offset, to the second."""
    return instant.astimezone(zone).isoformat(timespec="seconds")
