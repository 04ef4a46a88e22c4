"""Request and response types of the engine's scheduling methods: the owner's events and
reminders (:mod:`appliance.memory.scheduling`, the scheduling plugin) and the manager's claims of
what is due.

Declared here to keep :mod:`appliance.rpc.engine` short; it names the methods in its one table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from appliance.rpc.calls import Called, clock_field
from appliance.rpc.contract import Response

_TIME = "ISO 8601 (from time-resolve); without an offset it is in the owner's time zone."
_RULE = (
    "How it repeats: an RFC 5545 RRULE such as FREQ=WEEKLY;BYDAY=TU or "
    "FREQ=MONTHLY;BYMONTHDAY=1;COUNT=6 (none: once)."
)


class EventFields(Called):
    """What an event is: all optional here (an update changes only what it names)."""

    name: str | None = Field(default=None, description="What it is, e.g. 'Dentist'.")
    start_date: str | None = Field(default=None, description="When it starts: " + _TIME)
    end_date: str | None = Field(default=None, description="When it ends: " + _TIME)
    location: str | None = None
    description: str | None = Field(default=None, description="Details worth keeping.")
    rrule: str | None = Field(default=None, description=_RULE)
    remind_before: int | None = Field(
        default=None,
        description=(
            "Minutes before each start to start a turn about it, so the owner is reminded "
            "(none: no reminder; -1 in an update: stop reminding)."
        ),
        json_schema_extra={"minimum": -1, "maximum": 10080},
    )
    time_zone: str | None = Field(
        default=None, description="IANA zone of its times (default: the owner's)."
    )
    now: datetime | None = clock_field()


class EventCreateRequest(EventFields):
    """A new event in the owner's calendar."""

    name: str = Field(description="What it is, e.g. 'Dentist'.")
    start_date: str = Field(description="When it starts: " + _TIME)


class EventUpdateRequest(EventFields):
    """Change an event: only the fields given (rrule "" makes it happen once)."""

    id: str


class ReminderFields(Called):
    """What a reminder is: all optional here (an update changes only what it names)."""

    name: str | None = Field(default=None, description="What to be reminded of.")
    due_date: str | None = Field(default=None, description="When it is due: " + _TIME)
    description: str | None = Field(
        default=None, description="What to do when it is due (the turn it starts reads this)."
    )
    rrule: str | None = Field(default=None, description=_RULE)
    time_zone: str | None = Field(
        default=None, description="IANA zone of its times (default: the owner's)."
    )
    now: datetime | None = clock_field()


class ReminderCreateRequest(ReminderFields):
    """A new reminder: when it is due, a turn of the owner's agent starts with it."""

    name: str = Field(description="What to be reminded of.")
    due_date: str = Field(description="When it is due: " + _TIME)


class ReminderUpdateRequest(ReminderFields):
    """Change a reminder: only the fields given (rrule "" makes it happen once)."""

    id: str


class Scheduled(Response):
    """One event or reminder as an agent reads it: its times in its zone."""

    id: str
    kind: str
    name: str | None
    start: str
    time_zone: str
    status: str
    upcoming: list[str]
    fire_count: int
    end: str | None = None
    description: str | None = None
    location: str | None = None
    rrule: str | None = None
    remind_before: int | None = None
    next: str | None = None
    last_fired_at: str | None = None
    warnings: list[str] = Field(default_factory=list)


class ScheduledRef(Called):
    """One event or reminder by id."""

    id: str
    now: datetime | None = clock_field()


class CancelResponse(Response):
    """``changed`` is false when it was already cancelled."""

    id: str
    kind: str
    status: str
    changed: bool


class EventListRequest(Called):
    """Occurrences of events in a window (repeats expanded)."""

    since: str | None = Field(default=None, description="From (default: today's start). " + _TIME)
    until: str | None = Field(default=None, description="Until (default: 31 days on). " + _TIME)
    limit: int | None = Field(default=None, json_schema_extra={"minimum": 1, "maximum": 200})
    now: datetime | None = clock_field()


class EventListResponse(Response):
    """Earliest first: ``{id, name, start, end, recurring, location?, …}`` each."""

    occurrences: list[dict[str, Any]]
    truncated: bool
    since: str
    until: str
    time_zone: str


class ReminderListRequest(Called):
    """Reminders of one status."""

    status: Literal["active", "done", "cancelled", "all"] = Field(
        default="active", json_schema_extra={"default": "active"}
    )
    limit: int | None = Field(default=None, json_schema_extra={"minimum": 1, "maximum": 200})
    now: datetime | None = clock_field()


class ReminderListResponse(Response):
    """The next to fire first."""

    reminders: list[dict[str, Any]]
    truncated: bool


class ScheduleClaimRequest(Called):
    """Claim what is due (the session manager's loop)."""

    limit: int | None = None
    now: datetime | None = clock_field()


class ScheduleClaimResponse(Response):
    """What to fire now, and when the next thing is due (UTC)."""

    due: list[dict[str, Any]]
    next_due_at: str | None
    now: str


class ScheduleFiredRequest(Called):
    """How one claimed firing went: the session it started, or why it could not."""

    id: str
    session_id: str | None = None
    error: str | None = None
    now: datetime | None = clock_field()


class ScheduleFiredResponse(Response):
    """``retryAt`` when a failed firing will be tried again."""

    id: str
    attempts: int
    retry_at: str | None
