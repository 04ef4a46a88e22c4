"""Repeat rules: RFC 5545 ``RRULE`` text, expanded with ``dateutil.rrule`` in the owner's zone.

A rule repeats a wall-clock time: "every day at 09:00" in Europe/Paris is 09:00 in winter
(+01:00) and in summer (+02:00). The rule is expanded on wall-clock times with ``DTSTART`` the
first time in its zone, then each occurrence becomes an instant (:func:`appliance.core.clock.
in_zone`): an occurrence in the hour a clock springs forward moves forward by the gap, one in the
hour it falls back happens once (the first), and two occurrences that land on the same instant
count once.

Only the ``RRULE`` part is taken (``FREQ=WEEKLY;BYDAY=MO,WE``; an ``RRULE:`` prefix is allowed);
the first time is the event's or reminder's own. ``UNTIL`` without ``Z`` is read as local time
(a date alone: the end of that day) and kept as UTC, as RFC 5545 wants when the start has a zone.
Repeats closer than :data:`MIN_REPEAT` are refused: each firing starts a Claude session.

Why dateutil: it reads RFC 5545 rules as written (``COUNT``, ``UNTIL``, ``INTERVAL``,
``BYDAY=2TU``, ``BYSETPOS``…), is pure Python and small; cron expressions (croniter) cannot say
"every other Tuesday" or "ten times", and a scheduler framework (APScheduler) would bring its own
job store where the graph already keeps the rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr

from appliance.core.clock import in_zone

MIN_REPEAT = timedelta(minutes=15)
FREQUENCIES = ("HOURLY", "DAILY", "WEEKLY", "MONTHLY", "YEARLY")
MAX_STEPS = 100_000  # occurrences walked in one expansion, whatever the window
_CHECKED = 50  # occurrences the minimum spacing is checked over
_UNTIL = re.compile(r"UNTIL=(\d{8})(?:T(\d{6}))?(Z?)", re.IGNORECASE)
_FREQ = re.compile(r"(?:^|;)FREQ=([A-Z]+)(?:;|$)")


class RuleError(ValueError):
    """A repeat rule that cannot be used; the message says what to write instead."""


def _until_in_utc(match: re.Match[str], zone: ZoneInfo) -> str:
    day, clock, utc = match.group(1), match.group(2), match.group(3)
    if utc:
        return f"UNTIL={day}T{clock or '000000'}Z"
    local = datetime.strptime(day + (clock or "235959"), "%Y%m%d%H%M%S")
    return f"UNTIL={in_zone(local, zone).astimezone(UTC):%Y%m%dT%H%M%S}Z"


def normalize(text: str, start: datetime, zone: ZoneInfo) -> str:
    """The rule as stored (upper case, no prefix, ``UNTIL`` in UTC), checked; or RuleError."""
    example = "Write it like FREQ=WEEKLY;BYDAY=MO or FREQ=MONTHLY;BYMONTHDAY=1;COUNT=6."
    rule = text.strip().upper()
    if rule.startswith("RRULE:"):
        rule = rule[len("RRULE:") :]
    if not rule or "\n" in rule or ":" in rule:
        raise RuleError(
            f"{text!r} is not one RRULE; give only its rule part (no DTSTART: the start is the "
            f"first time). {example}"
        )
    freq = _FREQ.search(rule)
    if freq is None or freq.group(1) not in FREQUENCIES:
        raise RuleError(
            f"The rule {text!r} needs FREQ, one of {', '.join(FREQUENCIES)} (nothing repeats "
            f"more often than every {MIN_REPEAT.seconds // 60} minutes). {example}"
        )
    if "COUNT=" in rule and "UNTIL=" in rule:
        raise RuleError(f"The rule {text!r} has both COUNT and UNTIL; RFC 5545 allows one.")
    rule = _UNTIL.sub(lambda m: _until_in_utc(m, zone), rule)
    try:
        expanded = expand(rule, start, zone)
        first = [instant for _, instant in zip(range(_CHECKED), expanded, strict=False)]
    except (ValueError, TypeError) as err:
        raise RuleError(f"The rule {text!r} cannot be read ({err}). {example}") from err
    if not first:
        raise RuleError(f"The rule {text!r} never happens after its start; check UNTIL or COUNT.")
    closest = min((b - a for a, b in pairwise(first)), default=None)
    if closest is not None and closest < MIN_REPEAT:
        raise RuleError(
            f"The rule {text!r} repeats every {int(closest.total_seconds() // 60)} minutes; the "
            f"shortest repeat is {MIN_REPEAT.seconds // 60} minutes."
        )
    return rule


def _rule(text: str, start: datetime, zone: ZoneInfo) -> rrule:
    wall = start.astimezone(zone).replace(tzinfo=zone, fold=0)
    parsed = rrulestr(text, dtstart=wall, cache=False)
    assert isinstance(parsed, rrule)
    return parsed


def expand(
    rule: str | None, start: datetime, zone: ZoneInfo, after: datetime | None = None
) -> Iterator[datetime]:
    """The instants of a one-off (``rule`` None: ``start`` alone) or repeating time, in ``zone``,
    increasing, from the first later than ``after`` (default: from the start)."""
    if not rule:
        if after is None or start > after:
            yield start.astimezone(zone)
        return
    lower = start if after is None else max(start, after - timedelta(days=2))
    parsed = _rule(rule, start, zone)
    previous: datetime | None = None
    for step, wall in enumerate(parsed.xafter(lower.astimezone(zone).replace(fold=0), inc=True)):
        if step >= MAX_STEPS:
            return
        instant = in_zone(wall.replace(tzinfo=None), zone)
        if previous is not None and instant <= previous:
            continue  # two wall times of one instant (around a clock change) happen once
        previous = instant
        if after is None or instant > after:
            yield instant


def next_fire(
    rule: str | None, start: datetime, zone: ZoneInfo, now: datetime, lead: timedelta
) -> tuple[datetime, datetime] | None:
    """The first ``(fire instant, occurrence)`` with the fire time (occurrence minus ``lead``) later
    than ``now``; None when nothing is left."""
    for occurrence in expand(rule, start, zone, after=now + lead):
        return occurrence - lead, occurrence
    return None


def missed_between(
    rule: str | None, start: datetime, zone: ZoneInfo, due: datetime, now: datetime, lead: timedelta
) -> int:
    """How many fire times after ``due`` were also passed by ``now`` (they fire as one)."""
    count = 0
    for occurrence in expand(rule, start, zone, after=due + lead):
        if occurrence - lead > now or count >= MAX_STEPS:
            break
        count += 1
    return count
