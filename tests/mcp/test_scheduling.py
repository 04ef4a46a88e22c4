"""The scheduling plugin's local tools: the time in the owner's zone and times in words, from a
fixed "now" (the clock is the tool context's); the owner's zone kept in account.json."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from appliance.core.accounts import create_account, owner_zone
from appliance.core.config import load_settings
from appliance.core.identity import Caller
from appliance.mcp import scheduling
from appliance.mcp.tools import ToolContext, ToolError, tools_of
from tests.memory.test_service import engine_healthy
from tests.support.processes import Env, wait_until

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
# A Saturday morning in Paris, the day before the clocks spring forward.
SATURDAY = datetime(2026, 3, 28, 10, 0, tzinfo=PARIS)


def resolved(text: str, now: datetime = SATURDAY, zone: ZoneInfo = PARIS) -> dict[str, Any]:
    return scheduling.resolve(text, now, zone)


@pytest.mark.parametrize(
    ("text", "expected", "time"),
    [
        ("tomorrow at 9", "2026-03-29T09:00:00+02:00", "09:00"),  # after the change: +02:00
        ("next Friday", "2026-04-03T00:00:00+02:00", None),  # a day, no time said
        ("in 2 hours", "2026-03-28T12:00:00+01:00", "12:00"),
        ("at 5pm", "2026-03-28T17:00:00+01:00", "17:00"),
        ("at 9:30", "2026-03-29T09:30:00+02:00", "09:30"),  # 09:30 today has passed
        ("friday at 15:00", "2026-04-03T15:00:00+02:00", "15:00"),
        ("3 April at 10", "2026-04-03T10:00:00+02:00", "10:00"),
        ("2026-04-03T10:30", "2026-04-03T10:30:00+02:00", "10:30"),
        ("2026-04-03T10:30:00-04:00", "2026-04-03T16:30:00+02:00", "16:30"),
        ("demain à 9h", "2026-03-29T09:00:00+02:00", "09:00"),  # the owner's own language
    ],
)
def test_words_resolve_to_an_exact_time_in_the_owners_zone(
    text: str, expected: str, time: str | None
) -> None:
    answer = resolved(text)
    assert (answer["resolved"], answer["time"]) == (expected, time)
    assert answer["timeZone"] == "Europe/Paris" and answer["now"] == "2026-03-28T10:00:00+01:00"
    assert answer["past"] is False
    assert answer["weekday"] == datetime.fromisoformat(expected).strftime("%A")


def test_the_same_words_in_another_zone() -> None:
    now = datetime(2026, 3, 28, 10, 0, tzinfo=NEW_YORK)
    answer = resolved("tomorrow at 9", now, NEW_YORK)
    assert answer["resolved"] == "2026-03-29T09:00:00-04:00"
    assert answer["timeZone"] == "America/New_York"


@pytest.mark.parametrize(
    ("now", "text", "expected"),
    [
        # 01:30 on the night Paris springs forward (02:00 -> 03:00): two hours later is 04:30.
        (datetime(2026, 3, 29, 1, 30, tzinfo=PARIS), "in 2 hours", "2026-03-29T04:30:00+02:00"),
        (datetime(2026, 3, 29, 1, 30, tzinfo=PARIS), "in 45 minutes", "2026-03-29T03:15:00+02:00"),
        # 01:30 (summer time) on the night it falls back (03:00 -> 02:00): 02:30 winter time.
        (datetime(2026, 10, 25, 1, 30, tzinfo=PARIS), "in 2 hours", "2026-10-25T02:30:00+01:00"),
        # A clock time on those nights stays a clock time.
        (datetime(2026, 3, 29, 1, 30, tzinfo=PARIS), "at 10:00", "2026-03-29T10:00:00+02:00"),
        (datetime(2026, 10, 25, 1, 30, tzinfo=PARIS), "at 10:00", "2026-10-25T10:00:00+01:00"),
        # A time the clock skips moves on by the gap.
        (
            datetime(2026, 3, 28, 23, 0, tzinfo=PARIS),
            "tomorrow at 2:30",
            "2026-03-29T03:30:00+02:00",
        ),
    ],
)
def test_daylight_saving_edges(now: datetime, text: str, expected: str) -> None:
    assert resolved(text, now)["resolved"] == expected


def test_a_time_gone_by_is_said_to_be_past() -> None:
    answer = resolved("2026-03-27T09:00")
    assert answer["past"] is True and answer["resolved"] == "2026-03-27T09:00:00+01:00"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("banana", "No time could be read from 'banana'"),
        ("", "needs the words of a time"),
        ("x" * 201, "at most 200 characters"),
        (None, "needs the words of a time"),
    ],
)
def test_words_with_no_time_are_refused_saying_how_to_say_one(text: object, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        scheduling.resolve(text, SATURDAY, PARIS)


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    settings = load_settings({"MAXY_DATA_DIR": str(tmp_path)})
    account = create_account(settings.accounts_dir, "Owner", time_zone="Europe/Paris")
    caller = Caller(account_id=account.id, session_id="s1")
    return ToolContext(settings, caller, engine=None, clock=lambda: SATURDAY)  # type: ignore[arg-type]


def call(context: ToolContext, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    [tool] = [tool for tool in scheduling.TOOLS if tool.name == name]
    handler = tool.handler
    assert handler is not None

    async def once() -> dict[str, Any]:
        result: dict[str, Any] = await handler(context, arguments)
        return result

    return asyncio.run(once())


def test_current_datetime_is_now_in_the_owners_zone_or_the_one_asked(
    context: ToolContext,
) -> None:
    assert call(context, "current-datetime", {}) == {
        "now": "2026-03-28T10:00:00+01:00",
        "date": "2026-03-28",
        "time": "10:00",
        "weekday": "Saturday",
        "timeZone": "Europe/Paris",
        "utcOffset": "+01:00",
    }
    tokyo = call(context, "current-datetime", {"timeZone": "Asia/Tokyo"})
    assert tokyo["now"] == "2026-03-28T18:00:00+09:00" and tokyo["timeZone"] == "Asia/Tokyo"
    with pytest.raises(ToolError, match="not a time zone"):
        call(context, "current-datetime", {"timeZone": "Paris"})
    assert call(context, "time-resolve", {"text": "tomorrow at 9"})["resolved"] == (
        "2026-03-29T09:00:00+02:00"
    )


def test_the_owner_sets_the_zone_and_every_other_key_of_account_json_stays(
    context: ToolContext,
) -> None:
    path = context.settings.accounts_dir / context.caller.account_id / "account.json"
    before = json.loads(path.read_text())
    answer = call(context, "time-zone-set", {"timeZone": "America/New_York"})
    assert answer["now"] == "2026-03-28T05:00:00-04:00"
    after = json.loads(path.read_text())
    assert after == {**before, "timeZone": "America/New_York"}
    assert owner_zone(context.settings.accounts_dir, context.caller.account_id) == NEW_YORK
    assert call(context, "current-datetime", {})["timeZone"] == "America/New_York"

    with pytest.raises(ToolError, match="not a time zone"):
        call(context, "time-zone-set", {"timeZone": "Atlantis/Capital"})
    assert json.loads(path.read_text()) == after  # a refusal changes nothing
    public = ToolContext(
        context.settings,
        Caller(context.caller.account_id, scopes=("public",), agent="anna"),
        engine=None,  # type: ignore[arg-type]
        clock=context.clock,
    )
    with pytest.raises(ToolError, match="Only the owner's agent"):
        call(public, "time-zone-set", {"timeZone": "UTC"})
    assert call(public, "current-datetime", {})["timeZone"] == "America/New_York"


def test_an_account_without_a_zone_is_in_utc_and_a_broken_one_says_how_to_fix_it(
    context: ToolContext,
) -> None:
    path = context.settings.accounts_dir / context.caller.account_id / "account.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "timeZone"}))
    assert call(context, "current-datetime", {})["now"] == "2026-03-28T09:00:00+00:00"
    path.write_text(json.dumps({**data, "timeZone": "Paris"}))
    with pytest.raises(ToolError, match="time-zone-set"):
        call(context, "current-datetime", {})


def test_the_plugin_serves_the_tools_its_manifest_lists_with_their_public_flags() -> None:
    manifest = (
        Path(scheduling.__file__).resolve().parents[1]
        / "plugins"
        / "core"
        / "scheduling"
        / "PLUGIN.md"
    )
    lines = [line for line in manifest.read_text().splitlines() if line.startswith("  - {name: ")]
    listed = {line.split("name: ")[1].split(",")[0]: "public: true" in line for line in lines}
    assert listed == {tool.name: listed[tool.name] for tool in tools_of("scheduling")}
    assert {name for name, public in listed.items() if public} == {
        "current-datetime",
        "time-resolve",
    }
    schemas = {tool.name: tool.schema for tool in tools_of("scheduling")}
    assert schemas["reminder-create"]["required"] == ["name", "dueDate"]
    assert schemas["event-create"]["required"] == ["name", "startDate"]
    assert "now" not in schemas["reminder-create"]["properties"]  # the clock is not the agent's
    assert "caller" not in schemas["event-update"]["properties"]


# --- through `maxy mcp --plugin scheduling` and a real engine --------------------------------


@pytest.fixture
def engine(maxy_env: Env, start_maxy: Any) -> Env:
    process = start_maxy(maxy_env, "engine")
    wait_until(lambda: engine_healthy(maxy_env), 90, f"engine health\n{process.output()}")
    return maxy_env


def server(env: Env, **extra: str) -> StdioServerParameters:
    variables = {**env.vars, "ACCOUNT_ID": env.account_id, "SESSION_ID": "s-sched", **extra}
    args = ["-m", "appliance", "mcp", "--plugin", "scheduling"]
    return StdioServerParameters(command=sys.executable, args=args, env=variables)


@pytest.mark.anyio
async def test_reminders_through_the_plugins_server_and_only_the_time_for_visitors(
    engine: Env,
) -> None:
    async with (
        stdio_client(server(engine)) as (read, write),
        ClientSession(read, write) as owner,
    ):
        await owner.initialize()
        listed = {tool.name for tool in (await owner.list_tools()).tools}
        assert listed == {tool.name for tool in tools_of("scheduling")}
        made = await owner.call_tool(
            "reminder-create",
            {"name": "Renew the lease", "dueDate": "2099-01-05T09:00", "rrule": "FREQ=YEARLY"},
        )
        assert not made.is_error, made.content
        assert made.structured_content is not None
        reminder = made.structured_content
        assert reminder["next"] == "2099-01-05T09:00:00+00:00"  # the account has no zone: UTC
        found = await owner.call_tool("reminder-list", {})
        assert [r["name"] for r in (found.structured_content or {})["reminders"]] == [
            "Renew the lease"
        ]
        refused = await owner.call_tool("reminder-create", {"name": "x", "dueDate": "soon"})
        assert refused.is_error and "not ISO 8601" in refused.content[0].text  # type: ignore[union-attr]
        gone = await owner.call_tool("reminder-cancel", {"id": reminder["id"]})
        assert (gone.structured_content or {})["status"] == "cancelled"

    public = server(engine, ALLOWED_SCOPES="public", MAXY_MCP_TOOLS="current-datetime,time-resolve")
    async with stdio_client(public) as (read, write), ClientSession(read, write) as visitor:
        await visitor.initialize()
        listed = {tool.name for tool in (await visitor.list_tools()).tools}
        assert listed == {"current-datetime", "time-resolve"}
        now = await visitor.call_tool("current-datetime", {})
        assert (now.structured_content or {})["timeZone"] == "UTC"
        sneaky = await visitor.call_tool("reminder-list", {})
        assert sneaky.is_error and "no tool" in sneaky.content[0].text  # type: ignore[union-attr]
