"""The <previous-context> block of admin sessions, built from a seeded graph in the real Neo4j."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from appliance.core.identity import Caller
from appliance.memory.context import CLOSE_TAG, MAX_CHARS, OPEN_TAG, previous_context
from appliance.memory.graph import Graph
from appliance.memory.write import WriteRequest
from tests.memory.conftest import Memory
from tests.support.processes import Neo4jServer


async def write(
    memory: Memory,
    label: str,
    hours_ago: float | None = None,
    scope: str | None = None,
    **props: Any,
) -> str:
    """memory-write a node, as an agent would; optionally make it ``hours_ago`` old."""
    done = await memory.writer.write(memory.caller, WriteRequest(label, props, scope=scope))
    if hours_ago is not None:
        await memory.graph.run(
            "MATCH (n {id: $id}) SET n.createdAt = datetime() - duration({minutes: $m})",
            {"id": done["id"], "m": int(hours_ago * 60)},
        )
    return str(done["id"])


async def bulk(memory: Memory, label: str, rows: list[dict[str, Any]]) -> None:
    await memory.graph.run(
        f"UNWIND $rows AS row CREATE (n:`{label}`) SET n = row, n.id = randomUUID(), "
        "n.accountId = $a, n.createdAt = datetime()",
        {"rows": rows, "a": memory.caller.account_id},
    )


def lines_between(text: str, start: str, end: str | None) -> list[str]:
    body = text.split(start, 1)[1]
    if end is not None:
        body = body.split(end, 1)[0]
    return [line for line in body.splitlines() if line.startswith(("- ", "…"))]


@pytest.mark.anyio
async def test_digest_then_tasks_by_priority_then_recent_alerts(memory: Memory) -> None:
    await write(memory, "ReviewDigest", 48, title="Last week", summary="Old news.")
    await write(
        memory, "ReviewDigest", 2, title="This week", summary="Two invoices overdue; boiler ok."
    )
    for name, priority in [
        ("Water the plants", "low"),
        ("Pay the plumber", "high"),
        ("Renew the car insurance", "urgent"),
        ("Sort the photos", None),
        ("Book the dentist", 2),
    ]:
        await write(memory, "Task", name=name, priority=priority, status="open")
    await write(memory, "Task", name="Filed the taxes", priority="urgent", status="done")
    gone = await write(memory, "Task", name="Deleted chore", priority="urgent")
    await memory.graph.run("MATCH (t:Task {id: $id}) SET t.deletedAt = datetime()", {"id": gone})
    await write(memory, "ReviewAlert", 3, title="Backup failed", severity="warning")
    await write(memory, "ReviewAlert", 1, title="Disk almost full", severity="critical")
    await write(memory, "ReviewAlert", 30, title="Ancient alert", severity="critical")
    await write(memory, "ReviewAlert", 1, title="Handled alert", severity="high", status="resolved")
    stranger = f"{memory.caller.account_id}-other"
    await memory.graph.run(
        "CREATE (:Task {id: randomUUID(), accountId: $s, name: 'Stranger task', "
        "priority: 'urgent'}) CREATE (:ReviewAlert {id: randomUUID(), accountId: $s, "
        "title: 'Stranger alert', createdAt: datetime()})",
        {"s": stranger},
    )

    result = await previous_context(memory.graph, memory.caller)
    text = result["text"]
    assert text.startswith(OPEN_TAG + "\n") and text.endswith("\n" + CLOSE_TAG)
    assert result["chars"] == len(text) <= MAX_CHARS
    digest = text.index("## Latest review digest: This week")
    tasks, alerts = text.index("## Open tasks"), text.index("## Active review alerts")
    assert digest < tasks < alerts
    assert "Two invoices overdue; boiler ok." in text and "Old news." not in text
    assert lines_between(text, "## Open tasks", "## Active") == [
        "- [urgent] Renew the car insurance (open)",
        "- [high] Pay the plumber (open)",
        "- [2] Book the dentist (open)",
        "- [low] Water the plants (open)",
        "- [no priority] Sort the photos (open)",
    ]
    shown = lines_between(text, "## Active review alerts", CLOSE_TAG)
    assert [re.sub(r" \(\d{4}-.*\)$", "", line) for line in shown] == [
        "- [critical] Disk almost full",
        "- [warning] Backup failed",
    ]
    for absent in ("Filed the taxes", "Deleted chore", "Ancient alert", "Handled alert"):
        assert absent not in text
    assert "Stranger" not in text
    assert result["tasks"] == {"shown": 5, "total": 5}
    assert result["alerts"] == {"shown": 2, "total": 2}


@pytest.mark.anyio
async def test_the_block_is_capped_with_a_more_line_per_list(memory: Memory) -> None:
    await write(memory, "ReviewDigest", title="Digest", summary="d" * 5000)
    await bulk(
        memory,
        "Task",
        [{"name": f"Task {i:03d} " + "x" * 80, "priority": "high"} for i in range(150)],
    )
    await bulk(
        memory,
        "ReviewAlert",
        [{"title": f"Alert {i:02d} " + "y" * 80, "severity": "high"} for i in range(60)],
    )
    result = await previous_context(memory.graph, memory.caller)
    text = result["text"]
    assert len(text) <= MAX_CHARS
    assert text.endswith(CLOSE_TAG)
    tasks = lines_between(text, "## Open tasks", "## Active")
    alerts = lines_between(text, "## Active review alerts", CLOSE_TAG)
    assert tasks[-1] == f"…{150 - result['tasks']['shown']} more open tasks"
    assert alerts[-1] == f"…{60 - result['alerts']['shown']} more alerts"
    assert len(tasks) - 1 == result["tasks"]["shown"] > 5
    assert len(alerts) - 1 == result["alerts"]["shown"] > 5
    # The long digest is cut, not allowed to crowd out the lists.
    assert text.count("d") < 1500

    smaller = await previous_context(memory.graph, memory.caller, max_chars=1500)
    assert len(smaller["text"]) <= 1500
    assert smaller["tasks"]["shown"] < result["tasks"]["shown"]


@pytest.mark.anyio
async def test_alerts_keep_their_share_when_tasks_are_many(memory: Memory) -> None:
    await bulk(memory, "Task", [{"name": f"Task {i} " + "z" * 150} for i in range(400)])
    await write(memory, "ReviewAlert", 1, title="The only alert", severity="critical")
    result = await previous_context(memory.graph, memory.caller)
    assert "The only alert" in result["text"]
    assert result["alerts"] == {"shown": 1, "total": 1}
    assert result["tasks"]["total"] == 400
    assert "more open tasks" in result["text"]


@pytest.mark.anyio
async def test_nothing_to_say_is_no_block(memory: Memory) -> None:
    await write(memory, "Task", name="Finished", status="completed")
    await write(memory, "ReviewAlert", 40, title="Too old")
    result = await previous_context(memory.graph, memory.caller)
    assert result["text"] == "" and result["chars"] == 0


@pytest.mark.anyio
async def test_another_account_or_a_public_caller_sees_none_of_it(memory: Memory) -> None:
    await write(memory, "Task", scope="admin", name="Admin-only chore", priority="high")
    other = memory.other(account_id=f"{memory.caller.account_id}-{uuid.uuid4()}")
    assert (await previous_context(memory.graph, other))["text"] == ""
    public = memory.other(scopes=("public",))
    assert "Admin-only chore" not in (await previous_context(memory.graph, public))["text"]


ITEM = st.tuples(
    st.sampled_from(["Task", "ReviewAlert"]),
    st.booleans(),  # mine
    st.sampled_from(["public", "shared", "admin"]),
    st.booleans(),  # soft-deleted
    st.integers(min_value=0, max_value=400),  # filler characters
    st.sampled_from([None, "urgent", "high", "low", 1, 3, "odd"]),
)


async def _check_block(
    neo4j: Neo4jServer, items: list[Any], scopes: tuple[str, ...] | None, cap: int
) -> None:
    graph = Graph(neo4j.uri, "neo4j", neo4j.password)
    mine = f"prop-{uuid.uuid4()}"
    rows = []
    for n, (label, is_mine, scope, deleted, filler, rank) in enumerate(items):
        rows.append(
            {
                "label": label,
                "account": mine if is_mine else f"{mine}-other",
                "props": {
                    "id": str(uuid.uuid4()),
                    "name": f"item{n}x " + "f" * filler,
                    "title": f"item{n}x " + "f" * filler,
                    "scope": scope,
                    "priority": rank,
                    "severity": rank,
                },
                "deleted": deleted,
            }
        )
    try:
        await graph.run(
            "UNWIND $rows AS row CALL (row) { "
            "  WITH row WHERE row.label = 'Task' CREATE (n:Task) RETURN n "
            "  UNION WITH row WHERE row.label = 'ReviewAlert' CREATE (n:ReviewAlert) RETURN n } "
            "SET n = row.props, n.accountId = row.account, n.createdAt = datetime(), "
            "n.deletedAt = CASE WHEN row.deleted THEN datetime() END",
            {"rows": rows},
        )
        caller = Caller(account_id=mine, scopes=scopes)
        result = await previous_context(graph, caller, max_chars=cap)
        text = result["text"]
        assert len(text) <= cap
        visible = {
            f"item{n}x"
            for n, row in enumerate(rows)
            if row["account"] == mine
            and not row["deleted"]
            and (scopes is None or row["props"]["scope"] in scopes)
        }
        shown = set(re.findall(r"item\d+x", text))
        assert shown <= visible, shown - visible
        for key in ("tasks", "alerts"):
            counts = result[key]
            more = re.search(rf"…(\d+) more {'open tasks' if key == 'tasks' else 'alerts'}", text)
            hidden = int(more.group(1)) if more else 0
            assert counts["shown"] + hidden == counts["total"]
        assert result["tasks"]["total"] + result["alerts"]["total"] == len(visible)
        if text:
            assert text.startswith(OPEN_TAG) and text.endswith(CLOSE_TAG)
    finally:
        await graph.run("MATCH (n) WHERE n.accountId STARTS WITH $a DETACH DELETE n", {"a": mine})
        await graph.close()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    items=st.lists(ITEM, max_size=60),
    scopes=st.sampled_from([None, ("public",), ("public", "shared")]),
    cap=st.integers(min_value=500, max_value=6000),
)
def test_the_block_never_passes_its_cap_or_shows_what_the_caller_may_not_see(
    neo4j_server: Neo4jServer, items: list[Any], scopes: tuple[str, ...] | None, cap: int
) -> None:
    asyncio.run(_check_block(neo4j_server, items, scopes, cap))
