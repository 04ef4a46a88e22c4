"""Repeat rules: RRULE text expanded in a zone, across daylight-saving changes; refusals."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from itertools import islice, pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from appliance.core.clock import in_zone
from appliance.memory.recurrence import (
    RuleError,
    expand,
    missed_between,
    next_fire,
    normalize,
)

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def first(rule: str | None, start: datetime, count: int, zone: ZoneInfo = PARIS) -> list[str]:
    return [i.isoformat() for i in islice(expand(rule, start, zone), count)]


def test_a_daily_time_keeps_its_wall_clock_across_the_spring_change() -> None:
    start = datetime(2026, 3, 28, 9, 0, tzinfo=PARIS)
    assert first("FREQ=DAILY", start, 3) == [
        "2026-03-28T09:00:00+01:00",
        "2026-03-29T09:00:00+02:00",
        "2026-03-30T09:00:00+02:00",
    ]


def test_a_time_the_clock_skips_moves_on_and_one_it_repeats_happens_once() -> None:
    spring = datetime(2026, 3, 28, 2, 30, tzinfo=PARIS)
    assert first("FREQ=DAILY", spring, 3) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:30:00+02:00",  # 02:30 does not exist that night
        "2026-03-30T02:30:00+02:00",
    ]
    autumn = datetime(2026, 10, 24, 2, 30, tzinfo=PARIS)
    assert first("FREQ=DAILY", autumn, 3) == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",  # the first 02:30 of two, and only that one
        "2026-10-26T02:30:00+01:00",
    ]
    # Hourly through the spring gap: 02:30 and 03:30 are the same instant that night, once.
    hourly = first("FREQ=HOURLY", datetime(2026, 3, 29, 0, 30, tzinfo=PARIS), 4)
    assert hourly == [
        "2026-03-29T00:30:00+01:00",
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-29T04:30:00+02:00",
    ]


def test_rules_expand_as_rfc_5545_says() -> None:
    start = datetime(2026, 4, 1, 18, 0, tzinfo=NEW_YORK)  # a Wednesday
    assert first("FREQ=WEEKLY;BYDAY=MO,WE;COUNT=3", start, 10, NEW_YORK) == [
        "2026-04-01T18:00:00-04:00",
        "2026-04-06T18:00:00-04:00",
        "2026-04-08T18:00:00-04:00",
    ]
    # The second Tuesday of every other month; UNTIL as a local date (the whole day counts).
    rule = normalize("RRULE:freq=monthly;interval=2;byday=2TU;until=20260915", start, NEW_YORK)
    assert rule == "FREQ=MONTHLY;INTERVAL=2;BYDAY=2TU;UNTIL=20260916T035959Z"
    assert first(rule, start, 10, NEW_YORK) == [
        "2026-04-14T18:00:00-04:00",
        "2026-06-09T18:00:00-04:00",
        "2026-08-11T18:00:00-04:00",
    ]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("FREQ=MINUTELY", "needs FREQ, one of HOURLY"),
        ("FREQ=HOURLY;BYMINUTE=0,10", "repeats every 10 minutes"),
        ("DTSTART:20260101T000000\nRRULE:FREQ=DAILY", "give only its rule part"),
        ("FREQ=DAILY;COUNT=3;UNTIL=20270101", "both COUNT and UNTIL"),
        ("FREQ=DAILY;BYDAY=XX", "cannot be read"),
        ("FREQ=DAILY;UNTIL=20200101", "never happens after its start"),
        ("every monday", "needs FREQ"),
    ],
)
def test_rules_that_cannot_be_used_are_refused_with_what_to_write(rule: str, message: str) -> None:
    with pytest.raises(RuleError, match=message):
        normalize(rule, datetime(2026, 4, 1, 9, 0, tzinfo=PARIS), PARIS)


def test_the_next_fire_and_what_was_missed_meanwhile() -> None:
    start = datetime(2026, 3, 1, 9, 0, tzinfo=PARIS)
    now = datetime(2026, 3, 5, 12, 0, tzinfo=PARIS)
    fire, occurrence = next_fire("FREQ=DAILY", start, PARIS, now, timedelta(0)) or (None, None)
    assert fire == occurrence == datetime(2026, 3, 6, 9, 0, tzinfo=PARIS)
    assert missed_between("FREQ=DAILY", start, PARIS, start, now, timedelta(0)) == 4
    # Thirty minutes before each start: 08:30 fires for the 09:00 occurrence.
    lead = timedelta(minutes=30)
    early = datetime(2026, 3, 6, 8, 40, tzinfo=PARIS)
    fire, occurrence = next_fire("FREQ=DAILY", start, PARIS, early, lead) or (None, None)
    assert (fire, occurrence) == (
        datetime(2026, 3, 7, 8, 30, tzinfo=PARIS),
        datetime(2026, 3, 7, 9, 0, tzinfo=PARIS),
    )
    # A one-off: its one time, then nothing.
    assert next_fire(None, start, PARIS, start - lead, timedelta(0)) == (start, start)
    assert next_fire(None, start, PARIS, start, timedelta(0)) is None


@settings(max_examples=60, deadline=None)
@given(
    hour=st.integers(0, 23),
    minute=st.sampled_from([0, 15, 30, 45]),
    days=st.integers(0, 400),
    zone=st.sampled_from(["Europe/Paris", "America/New_York", "Australia/Sydney", "UTC"]),
)
def test_a_daily_rule_is_once_a_day_at_its_wall_clock_time(
    hour: int, minute: int, days: int, zone: str
) -> None:
    tz = ZoneInfo(zone)
    start = in_zone(datetime(2026, 1, 1, hour, minute) + timedelta(days=days), tz)
    # A start inside a clock change's gap is already moved on (02:00 becomes 03:00), and a rule
    # can only repeat the time it is given: that start is a rule at the later time.
    assume(start.astimezone(tz).time() == time(hour, minute))
    instants = list(islice(expand("FREQ=DAILY", start, tz), 40))
    assert all(a < b for a, b in pairwise(instants))
    day = start.date()
    for instant in instants:
        assert instant.astimezone(tz).date() == day
        # The wall-clock time of that day, moved on by the gap only where the clock skips it.
        assert instant == in_zone(datetime.combine(day, time(hour, minute)), tz)
        day += timedelta(days=1)
