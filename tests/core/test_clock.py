"""Time zones and instants: names, ISO 8601 in a zone, the hours a clock skips or repeats."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from appliance.core.clock import TimeZoneError, in_zone, load_zone, local_iso, read_instant

PARIS = ZoneInfo("Europe/Paris")


@pytest.mark.parametrize("name", ["", "  ", "Mars/Olympus", "../etc/passwd", "/etc/localtime", 3])
def test_a_name_that_is_no_zone_is_refused_saying_what_to_use(name: object) -> None:
    with pytest.raises(TimeZoneError, match="IANA time zone name such as Europe/Paris"):
        load_zone(name)


def test_a_zone_is_found_by_its_iana_name() -> None:
    assert load_zone(" America/New_York ").key == "America/New_York"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-30T09:00", "2026-03-30T09:00:00+02:00"),  # local: Paris summer time
        ("2026-01-30T09:00", "2026-01-30T09:00:00+01:00"),
        ("2026-03-30", "2026-03-30T00:00:00+02:00"),  # a date is its day's start
        ("2026-03-30T07:00:00Z", "2026-03-30T09:00:00+02:00"),
        ("2026-03-30T09:00:00-04:00", "2026-03-30T15:00:00+02:00"),
        ("2026-03-29T02:30", "2026-03-29T03:30:00+02:00"),  # skipped: moved on by the gap
        ("2026-10-25T02:30", "2026-10-25T02:30:00+02:00"),  # twice: the first
    ],
)
def test_iso_times_are_read_in_the_zone(text: str, expected: str) -> None:
    assert local_iso(read_instant(text, PARIS), PARIS) == expected


@pytest.mark.parametrize("text", ["", "tomorrow", "30/03/2026", None])
def test_a_time_that_is_not_iso_says_which_form_to_use(text: object) -> None:
    with pytest.raises(TimeZoneError, match="2026-03-30T09:00"):
        read_instant(text, PARIS, "startDate")


def test_in_zone_is_the_instant_on_the_wall_clock() -> None:
    instant = in_zone(datetime(2026, 7, 1, 12, 0), PARIS)
    assert instant.astimezone(UTC) == datetime(2026, 7, 1, 10, 0, tzinfo=UTC)
