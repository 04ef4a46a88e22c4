"""Events and reminders against the real Neo4j and model, from a fixed "now": created, listed
(repeats expanded), changed, cancelled, and claimed once when due — however long the device was
off — and never across accounts."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from appliance.core.identity import Caller
from appliance.memory.errors import WriteRejected
from appliance.memory.scheduling import MAX_ATTEMPTS, RETRY_AFTER, Scheduling
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio

PARIS = ZoneInfo("Europe/Paris")
MONDAY = datetime(2026, 3, 23, 8, 0, tzinfo=PARIS)  # 07:00 UTC, a week before summer time


def late() -> datetime:
    """A clock that must not be read: every call here brings its own "now"."""
    raise AssertionError("the engine's clock was read")


@pytest.fixture
def store(memory: Memory) -> Scheduling:
    return Scheduling(
        memory.graph, memory.writer.embed, memory.writer.model_name, lambda: PARIS, late
    )


async def node(memory: Memory, item_id: str) -> dict[str, Any]:
    rows, _ = await memory.graph.run(
        "MATCH (n {id: $id}) RETURN properties(n) AS p, labels(n) AS l", {"id": item_id}
    )
    return {**rows[0]["p"], "labels": rows[0]["l"]}


async def test_a_reminder_is_stored_for_its_account_with_its_rule_and_next_time(
    store: Scheduling, memory: Memory
) -> None:
    made = await store.create(
        memory.caller,
        "reminder",
        {"name": "Water the plants", "dueDate": "2026-03-24T09:00", "rrule": "FREQ=WEEKLY"},
        MONDAY,
    )
    assert made["start"] == "2026-03-24T09:00:00+01:00" and made["timeZone"] == "Europe/Paris"
    assert made["next"] == "2026-03-24T09:00:00+01:00" and made["status"] == "active"
    assert made["upcoming"] == [
        "2026-03-24T09:00:00+01:00",
        "2026-03-31T09:00:00+02:00",  # summer time: still nine o'clock
        "2026-04-07T09:00:00+02:00",
    ]
    stored = await node(memory, made["id"])
    assert stored["labels"] == ["Reminder"] and stored["accountId"] == memory.caller.account_id
    assert stored["rrule"] == "FREQ=WEEKLY" and stored["scope"] == "admin"
    assert datetime.fromisoformat(stored["nextFireAt"]) == datetime(2026, 3, 24, 8, 0, tzinfo=UTC)
    assert stored["fireCount"] == 0


async def test_refusals_say_what_to_do_and_write_nothing(store: Scheduling, memory: Memory) -> None:
    cases = [
        ({"name": "Late", "dueDate": "2026-03-22T09:00"}, "has passed"),
        ({"name": "Bad time", "dueDate": "next tuesday"}, "not ISO 8601"),
        ({"name": "Bad rule", "dueDate": "2026-03-24T09:00", "rrule": "FREQ=MINUTELY"}, "FREQ"),
        ({"name": "Bad zone", "dueDate": "2026-03-24T09:00", "timeZone": "Paris"}, "IANA"),
        ({"name": " ", "dueDate": "2026-03-24T09:00"}, "name must be a non-empty text"),
    ]
    for fields, message in cases:
        with pytest.raises(WriteRejected, match=message):
            await store.create(memory.caller, "reminder", fields, MONDAY)
    visitor = memory.other(scopes=("public",), agent="anna")
    with pytest.raises(WriteRejected, match="Only the owner's agent"):
        await store.create(visitor, "reminder", {"name": "x", "dueDate": "2026-03-24"}, MONDAY)
    with pytest.raises(WriteRejected, match="Only the owner's agent"):
        await store.list_reminders(visitor, now=MONDAY)
    rows, _ = await memory.graph.run(
        "MATCH (n:Reminder {accountId: $a}) RETURN count(n) AS n", {"a": memory.caller.account_id}
    )
    assert rows[0]["n"] == 0


async def test_a_reminder_missed_while_the_device_was_off_fires_once(
    store: Scheduling, memory: Memory
) -> None:
    daily = await store.create(
        memory.caller,
        "reminder",
        {"name": "Pills", "dueDate": "2026-03-23T09:00", "rrule": "FREQ=DAILY"},
        MONDAY,
    )
    once = await store.create(
        memory.caller, "reminder", {"name": "Call Anna", "dueDate": "2026-03-24T12:00"}, MONDAY
    )
    # The device is off from Monday 08:00 until Thursday 10:00: four pills and the call missed.
    back = datetime(2026, 3, 26, 10, 0, tzinfo=PARIS)
    claimed = await store.claim(memory.caller, back)
    by_id = {item["id"]: item for item in claimed["due"]}
    assert set(by_id) == {daily["id"], once["id"]}
    assert by_id[daily["id"]]["dueAt"] == "2026-03-23T09:00:00+01:00"
    assert by_id[daily["id"]]["missed"] == 3  # Tuesday, Wednesday, Thursday
    assert by_id[daily["id"]]["next"] == "2026-03-27T09:00:00+01:00"
    assert by_id[once["id"]]["missed"] == 0 and by_id[once["id"]]["next"] is None
    # The same moment again, or a little later: nothing more.
    assert (await store.claim(memory.caller, back))["due"] == []
    assert (await store.claim(memory.caller, back + timedelta(hours=5)))["due"] == []
    done = await node(memory, once["id"])
    assert done["status"] == "done" and "nextFireAt" not in done and done["fireCount"] == 1
    # Friday 09:00 the daily one is due again, once.
    [friday] = (await store.claim(memory.caller, datetime(2026, 3, 27, 9, 0, tzinfo=PARIS)))["due"]
    assert friday["id"] == daily["id"] and friday["missed"] == 0
    listed = await store.list_reminders(memory.caller, now=back)
    assert [r["id"] for r in listed["reminders"]] == [daily["id"]]
    assert listed["reminders"][0]["fireCount"] == 2
    every = await store.list_reminders(memory.caller, "all", now=back)
    assert {r["id"]: r["status"] for r in every["reminders"]} == {
        daily["id"]: "active",
        once["id"]: "done",
    }


async def test_one_claim_wins_when_two_ask_at_once(store: Scheduling, memory: Memory) -> None:
    await store.create(
        memory.caller, "reminder", {"name": "Once", "dueDate": "2026-03-23T09:00"}, MONDAY
    )
    at = datetime(2026, 3, 23, 9, 0, tzinfo=PARIS)
    first, second = await asyncio.gather(
        store.claim(memory.caller, at), store.claim(memory.caller, at)
    )
    assert len(first["due"]) + len(second["due"]) == 1


async def test_a_firing_that_could_not_start_is_tried_again_a_few_times(
    store: Scheduling, memory: Memory
) -> None:
    made = await store.create(
        memory.caller, "reminder", {"name": "Bins out", "dueDate": "2026-03-23T20:00"}, MONDAY
    )
    at = datetime(2026, 3, 23, 20, 0, tzinfo=PARIS)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        [item] = (await store.claim(memory.caller, at))["due"]
        assert item["attempt"] == attempt and item["dueAt"] == "2026-03-23T20:00:00+01:00"
        answer = await store.fired(memory.caller, made["id"], None, "pty-cap-reached: full", at)
        assert answer["attempts"] == attempt
        assert (answer["retryAt"] is None) == (attempt == MAX_ATTEMPTS)
        at += RETRY_AFTER
    assert (await store.claim(memory.caller, at + timedelta(days=1)))["due"] == []
    stored = await node(memory, made["id"])
    assert stored["status"] == "done" and stored["lastFireError"] == "pty-cap-reached: full"

    # A firing that started its session is recorded with it.
    other = await store.create(
        memory.caller, "reminder", {"name": "Tea", "dueDate": "2026-03-23T16:00"}, MONDAY
    )
    await store.claim(memory.caller, datetime(2026, 3, 23, 16, 0, tzinfo=PARIS))
    answer = await store.fired(memory.caller, other["id"], "session-1", None, MONDAY)
    assert answer == {"id": other["id"], "attempts": 0, "retryAt": None}
    assert (await node(memory, other["id"]))["lastSessionId"] == "session-1"


async def test_events_list_their_occurrences_in_a_window(store: Scheduling, memory: Memory) -> None:
    weekly = await store.create(
        memory.caller,
        "event",
        {
            "name": "Choir practice",
            "startDate": "2026-03-18T19:30",
            "endDate": "2026-03-18T21:00",
            "rrule": "FREQ=WEEKLY;COUNT=4",
            "location": "Village hall",
        },
        MONDAY,
    )
    dentist = await store.create(
        memory.caller,
        "event",
        {"name": "Dentist", "startDate": "2026-03-30T10:15", "remindBefore": 60},
        MONDAY,
    )
    assert "next" not in weekly  # no remindBefore: an event in the calendar, nothing fires
    assert dentist["next"] == "2026-03-30T09:15:00+02:00"
    listed = await store.list_events(memory.caller, now=MONDAY)
    assert listed["since"] == "2026-03-23T00:00:00+01:00"
    assert listed["until"] == "2026-04-23T00:00:00+02:00"
    assert [(o["name"], o["start"], o["end"]) for o in listed["occurrences"]] == [
        ("Choir practice", "2026-03-25T19:30:00+01:00", "2026-03-25T21:00:00+01:00"),
        ("Dentist", "2026-03-30T10:15:00+02:00", None),
        ("Choir practice", "2026-04-01T19:30:00+02:00", "2026-04-01T21:00:00+02:00"),
        ("Choir practice", "2026-04-08T19:30:00+02:00", "2026-04-08T21:00:00+02:00"),
    ]
    assert listed["occurrences"][0]["recurring"] is True
    assert listed["occurrences"][0]["location"] == "Village hall"
    narrow = await store.list_events(
        memory.caller, "2026-03-30T00:00", "2026-03-31T00:00", now=MONDAY
    )
    assert [o["name"] for o in narrow["occurrences"]] == ["Dentist"]
    # An event is in the memory graph: embedded, so memory search finds it.
    stored = await node(memory, dentist["id"])
    assert stored["labels"] == ["Event"] and len(stored["embedding"]) == 384

    # The dentist's reminder fires an hour before; the event itself does not end.
    [item] = (await store.claim(memory.caller, datetime(2026, 3, 30, 9, 20, tzinfo=PARIS)))["due"]
    assert item["kind"] == "event" and item["occurrence"] == "2026-03-30T10:15:00+02:00"
    assert (await node(memory, dentist["id"]))["status"] == "active"


async def test_update_moves_the_next_time_and_cancel_stops_it(
    store: Scheduling, memory: Memory
) -> None:
    made = await store.create(
        memory.caller, "reminder", {"name": "Renew passport", "dueDate": "2026-03-24T09:00"}, MONDAY
    )
    moved = await store.update(
        memory.caller,
        "reminder",
        made["id"],
        {"dueDate": "2026-04-02T18:00", "description": "Photos first"},
        MONDAY,
    )
    assert moved["next"] == "2026-04-02T18:00:00+02:00" and moved["name"] == "Renew passport"
    assert moved["description"] == "Photos first"
    # Another zone keeps the wall-clock time of the reminder, now in New York.
    abroad = await store.update(
        memory.caller, "reminder", made["id"], {"timeZone": "America/New_York"}, MONDAY
    )
    assert abroad["start"] == "2026-04-02T18:00:00-04:00"
    cancelled = await store.cancel(memory.caller, "reminder", made["id"], MONDAY)
    assert cancelled == {
        "id": made["id"],
        "kind": "reminder",
        "status": "cancelled",
        "changed": True,
    }
    again = await store.cancel(memory.caller, "reminder", made["id"], MONDAY)
    assert again["changed"] is False
    assert (await store.claim(memory.caller, datetime(2026, 4, 3, tzinfo=UTC)))["due"] == []
    assert (await store.list_reminders(memory.caller, now=MONDAY))["reminders"] == []
    with pytest.raises(WriteRejected, match="cancelled; create a new one"):
        await store.update(memory.caller, "reminder", made["id"], {"name": "x"}, MONDAY)
    with pytest.raises(WriteRejected, match="No reminder with id nope"):
        await store.cancel(memory.caller, "reminder", "nope", MONDAY)


async def test_another_accounts_items_are_never_listed_changed_or_claimed(
    store: Scheduling, memory: Memory
) -> None:
    stranger = Caller(account_id=f"{memory.caller.account_id}-other-{uuid.uuid4()}")
    theirs = await store.create(
        stranger, "reminder", {"name": "Their secret", "dueDate": "2026-03-23T09:00"}, MONDAY
    )
    await store.create(
        stranger, "event", {"name": "Their party", "startDate": "2026-03-24T20:00"}, MONDAY
    )
    mine = await store.create(
        memory.caller, "reminder", {"name": "Mine", "dueDate": "2026-03-23T09:00"}, MONDAY
    )
    later = datetime(2026, 3, 25, tzinfo=UTC)
    assert [
        r["id"] for r in (await store.list_reminders(memory.caller, "all", now=MONDAY))["reminders"]
    ] == [mine["id"]]
    assert (await store.list_events(memory.caller, now=MONDAY))["occurrences"] == []
    assert [i["id"] for i in (await store.claim(memory.caller, later))["due"]] == [mine["id"]]
    for change in (
        store.update(memory.caller, "reminder", theirs["id"], {"name": "mine now"}, MONDAY),
        store.cancel(memory.caller, "reminder", theirs["id"], MONDAY),
    ):
        with pytest.raises(WriteRejected, match="No reminder with id"):
            await change
    with pytest.raises(WriteRejected):
        await store.fired(memory.caller, theirs["id"], "s", None, later)
    still = await node(memory, theirs["id"])
    assert still["name"] == "Their secret" and still["status"] == "active"
    assert still["fireCount"] == 0
