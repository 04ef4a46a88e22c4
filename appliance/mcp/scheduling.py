"""The ``scheduling`` plugin's tools: the time, times in words, events and reminders.

Local tools (in the ``maxy mcp`` process, no engine needed):

- ``current-datetime``: now in the owner's time zone (account.json's ``timeZone``, UTC while
  unset) or a zone the call names;
- ``time-resolve``: words ("tomorrow at 9", "next Friday", "in 2 hours", "2026-04-03 15:00")
  to an exact ISO 8601 time in that zone;
- ``time-zone-set`` (the owner's agent only): store the owner's zone.

Both of the first two are public: every public agent may tell the time. The events and
reminders (``event-*``, ``reminder-*``) are the engine's (:mod:`appliance.memory.scheduling`).

Why dateparser for the words: it is kept up to date, reads many languages (the owner may not
write English), prefers the future for a bare weekday or time, and says how precise a result is
(a time, or only a day). parsedatetime, the other candidate, has not had a release since 2020,
read "this evening" against the real date instead of the given "now" and "this friday" as the
past one. Two gaps of dateparser are closed here: a bare hour after "at" ("tomorrow at 9") is
read as that hour (dateparser drops it), and a duration ("in 2 hours") is added to the instant,
not to the wall clock, so it stays right across a daylight-saving change.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from dateparser.date import DateDataParser

from appliance.core.accounts import AccountError, owner_zone, set_time_zone
from appliance.core.clock import TimeZoneError, in_zone, load_zone, local_iso
from appliance.mcp.tool import Tool, ToolContext, ToolError
from appliance.rpc import engine as api

PLUGIN = "scheduling"
MAX_TEXT = 200
# "at 9" (no minutes, no am/pm): dateparser ignores the hour; "at 9:00" it reads.
_BARE_HOUR = re.compile(
    r"\b(at|à|um|om|alle|a las)\s+(\d{1,2})(?![\d:.h]|\s*(?:am|pm|a\.m\.|p\.m\.|uhr|o'clock))",
    re.IGNORECASE,
)
_ZONE_SCHEMA = {
    "type": "string",
    "description": "An IANA time zone such as Europe/Paris (default: the owner's).",
}


def _zone(context: ToolContext, arguments: dict[str, Any]) -> ZoneInfo:
    """The zone the call names, else the owner's."""
    try:
        if arguments.get("timeZone"):
            return load_zone(arguments["timeZone"])
        return owner_zone(context.settings.accounts_dir, context.caller.account_id)
    except (TimeZoneError, AccountError) as err:
        raise ToolError(str(err)) from err


def moment(now: datetime, zone: ZoneInfo) -> dict[str, Any]:
    """``now`` as an agent reads it, in ``zone``."""
    local = now.astimezone(zone)
    offset = local.strftime("%z")
    return {
        "now": local_iso(now, zone),
        "date": local.date().isoformat(),
        "time": local.strftime("%H:%M"),
        "weekday": local.strftime("%A"),
        "timeZone": zone.key,
        "utcOffset": f"{offset[:3]}:{offset[3:]}",
    }


def _parse(text: str, base: datetime) -> tuple[datetime, str] | None:
    """dateparser's reading of ``text`` seen from the wall-clock time ``base``, and how precise
    it is (time, day, week, month, year)."""
    parser = DateDataParser(
        settings={
            "RELATIVE_BASE": base,
            "PREFER_DATES_FROM": "future",
            "RETURN_TIME_AS_PERIOD": True,
        }
    )
    found = parser.get_date_data(text)
    if found.date_obj is None:
        return None
    return found.date_obj, str(found.period or "day")


def resolve(text: object, now: datetime, zone: ZoneInfo) -> dict[str, Any]:
    """The exact time ``text`` names, seen from ``now`` in ``zone``; :class:`ToolError` if none.

    A result with only a day ("next Friday") has ``time`` None and starts at that day's
    midnight; ``past`` says when the time named has already gone by.
    """
    if not isinstance(text, str) or not text.strip():
        raise ToolError("time-resolve needs the words of a time, e.g. 'tomorrow at 9'.")
    if len(text) > MAX_TEXT:
        raise ToolError(f"time-resolve reads at most {MAX_TEXT} characters; say only the time.")
    words = _BARE_HOUR.sub(lambda m: f"{m.group(1)} {m.group(2)}:00", text.strip())
    base = now.astimezone(zone).replace(tzinfo=None, microsecond=0)
    first = _parse(words, base)
    if first is None:
        raise ToolError(
            f"No time could be read from {text!r}. Say it like 'tomorrow at 9', 'next Friday "
            "at 15:00', 'in 2 hours', '3 April at 10:30' or 2026-04-03T10:30."
        )
    found, precision = first
    if found.tzinfo is not None:  # the words carried an offset or a zone
        instant = found.astimezone(zone)
    elif precision == "time":
        # Words relative to now ("in 2 hours") move with it; a clock time does not. A duration
        # is added to the instant, so it is right across a daylight-saving change.
        later = _parse(words, base + timedelta(hours=1))
        moved = later is not None and later[0] - found == timedelta(hours=1)
        instant = now.astimezone(UTC) + (found - base) if moved else in_zone(found, zone)
    else:
        instant = in_zone(datetime.combine(found.date(), datetime.min.time()), zone)
    local = instant.astimezone(zone)
    has_time = precision == "time"
    past = instant < now if has_time else local.date() < now.astimezone(zone).date()
    return {
        "text": text,
        "resolved": local_iso(instant, zone),
        "date": local.date().isoformat(),
        "weekday": local.strftime("%A"),
        "time": local.strftime("%H:%M") if has_time else None,
        "precision": precision,
        "past": past,
        "timeZone": zone.key,
        "now": local_iso(now, zone),
    }


async def current_datetime(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Now, in the owner's time zone or the one the call names."""
    return moment(context.clock(), _zone(context, arguments))


async def time_resolve(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Words of a time to an exact ISO 8601 time."""
    return resolve(arguments.get("text"), context.clock(), _zone(context, arguments))


async def time_zone_set(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Store the owner's time zone (the owner's agent only)."""
    if context.caller.scopes is not None or context.caller.agent is not None:
        raise ToolError("Only the owner's agent may set the owner's time zone.")
    try:
        zone = set_time_zone(
            context.settings.accounts_dir, context.caller.account_id, arguments.get("timeZone")
        )
    except (TimeZoneError, AccountError) as err:
        raise ToolError(str(err)) from err
    return moment(context.clock(), zone)


_EVENT_FIELDS = (
    "name",
    "startDate",
    "endDate",
    "location",
    "description",
    "rrule",
    "remindBefore",
    "timeZone",
)
_REMINDER_FIELDS = ("name", "dueDate", "description", "rrule", "timeZone")

TOOLS: tuple[Tool, ...] = (
    Tool(
        name="current-datetime",
        plugin=PLUGIN,
        description=(
            "The current date, time and weekday in the owner's time zone (or another zone). "
            "Use it instead of guessing what day or time it is."
        ),
        handler=current_datetime,
        input_schema={
            "type": "object",
            "properties": {"timeZone": _ZONE_SCHEMA},
            "additionalProperties": False,
        },
    ),
    Tool(
        name="time-resolve",
        plugin=PLUGIN,
        description=(
            "Turn words for a time ('tomorrow at 9', 'next Friday', 'in 2 hours', '3 April at "
            "10:30') into an exact ISO 8601 time in the owner's time zone, with its weekday. "
            "`time` is null when the words name only a day; `past` when it has gone by."
        ),
        handler=time_resolve,
        input_schema={
            "type": "object",
            "properties": {
                "text": {
                    "type": "string",
                    "description": "The time in words, as the person said it.",
                    "maxLength": MAX_TEXT,
                },
                "timeZone": _ZONE_SCHEMA,
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    ),
    Tool(
        name="time-zone-set",
        plugin=PLUGIN,
        description=(
            "Set the owner's time zone (an IANA name such as Europe/Paris), when the owner "
            "says where they live or that the times shown are wrong."
        ),
        handler=time_zone_set,
        input_schema={
            "type": "object",
            "properties": {"timeZone": {**_ZONE_SCHEMA, "description": "An IANA time zone."}},
            "required": ["timeZone"],
            "additionalProperties": False,
        },
    ),
    Tool(
        name="event-create",
        plugin=PLUGIN,
        method=api.EVENT_CREATE,
        description=(
            "Add an event to the owner's calendar (once, or repeating by an RRULE). With "
            "remindBefore, a turn starts that many minutes before each start to remind the "
            "owner. Resolve the time with time-resolve first."
        ),
        forwarded=_EVENT_FIELDS,
        produces="id",
        produces_label="Event",
    ),
    Tool(
        name="event-list",
        plugin=PLUGIN,
        method=api.EVENT_LIST,
        description=(
            "The owner's events between two times (default: the next 31 days from today), "
            "repeating ones as each occurrence, earliest first."
        ),
        forwarded=("since", "until", "limit"),
    ),
    Tool(
        name="event-update",
        plugin=PLUGIN,
        method=api.EVENT_UPDATE,
        description=(
            "Change an event (by id from event-list): only the fields given change; rrule '' "
            "makes it happen once, remindBefore -1 stops its reminder."
        ),
        forwarded=("id", *_EVENT_FIELDS),
        produces="id",
        produces_label="Event",
    ),
    Tool(
        name="event-cancel",
        plugin=PLUGIN,
        method=api.EVENT_CANCEL,
        description="Cancel an event (by id): it leaves the calendar and never reminds again.",
        forwarded=("id",),
    ),
    Tool(
        name="reminder-create",
        plugin=PLUGIN,
        method=api.REMINDER_CREATE,
        description=(
            "Set a reminder: when it is due (once, or repeating by an RRULE) a turn of the "
            "owner's agent starts with it, to do what its description says or remind the owner. "
            "Resolve the time with time-resolve first. One missed while the device was off "
            "fires once when it is back."
        ),
        forwarded=_REMINDER_FIELDS,
        produces="id",
        produces_label="Reminder",
    ),
    Tool(
        name="reminder-list",
        plugin=PLUGIN,
        method=api.REMINDER_LIST,
        description="The owner's reminders (active by default), the next to fire first.",
        forwarded=("status", "limit"),
    ),
    Tool(
        name="reminder-update",
        plugin=PLUGIN,
        method=api.REMINDER_UPDATE,
        description=(
            "Change a reminder (by id from reminder-list): only the fields given change; a "
            "done one moved to a later time is active again; rrule '' makes it happen once."
        ),
        forwarded=("id", *_REMINDER_FIELDS),
        produces="id",
        produces_label="Reminder",
    ),
    Tool(
        name="reminder-cancel",
        plugin=PLUGIN,
        method=api.REMINDER_CANCEL,
        description="Cancel a reminder (by id): it never fires again.",
        forwarded=("id",),
    ),
)
