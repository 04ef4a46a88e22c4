"""The owner's projects against the real Neo4j and model: created whole in one transaction (or
not at all), kept true with a history, completed asking about open work, abandoned for a
reason, listed by health on a fixed clock."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from appliance.memory.contacts import Contacts
from appliance.memory.errors import WriteRejected
from appliance.memory.projects import Projects
from tests.memory.conftest import WORK_NOW, Memory, work_of

pytestmark = pytest.mark.anyio

KITCHEN: dict[str, Any] = {
    "name": "Kitchen renovation",
    "description": "New tiles and a new sink before the summer.",
    "tier": "standard",
    "phase": "active",
    "targetDate": "2026-06-30",
    "items": [
        {"key": "measure", "name": "Measure the kitchen", "priority": "high"},
        {"key": "tiles", "name": "Order the tiles", "dependsOn": ["measure"]},
        {"name": "Lay the tiles", "dependsOn": ["tiles", "Book the tiler"]},
        {"name": "Book the tiler", "dueDate": "2026-04-30"},
    ],
}


async def counts(memory: Memory) -> dict[str, int]:
    rows, _ = await memory.graph.run(
        "MATCH (n {accountId: $a}) UNWIND labels(n) AS label RETURN label, count(*) AS n",
        {"a": memory.caller.account_id},
    )
    return {row["label"]: row["n"] for row in rows}


def by_name(project: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in project["tasks"]}


async def test_a_project_is_created_whole_with_its_items_and_dependencies(
    memory: Memory, projects: Projects
) -> None:
    done = await projects.create(memory.caller, KITCHEN)
    project = done["project"]
    assert project["name"] == "Kitchen renovation" and project["phase"] == "active"
    assert project["health"] == "green" and project["reasons"] == []
    assert project["counts"] == {
        "total": 4,
        "toDo": 4,
        "done": 0,
        "overdue": 0,
        "blocked": 0,
        "ready": 2,
    }
    tasks = by_name(project)
    assert tasks["Measure the kitchen"]["ready"] and tasks["Book the tiler"]["ready"]
    assert not tasks["Order the tiles"]["ready"] and not tasks["Lay the tiles"]["ready"]
    assert sorted(d["name"] for d in tasks["Lay the tiles"]["dependsOn"]) == [
        "Book the tiler",
        "Order the tiles",
    ]
    assert [n["name"] for n in project["next"]] == ["Measure the kitchen", "Book the tiler"]
    assert [h["kind"] for h in project["history"]] == ["created"]
    assert await counts(memory) == {"Project": 1, "Task": 4, "HistoryEntry": 1}
    ready = await projects.tasks.ready(memory.caller)
    assert [g["project"]["name"] for g in ready["groups"]] == ["Kitchen renovation"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"items": [{"name": "Lay the tiles", "dependsOn": ["no-such-task"]}]},
            "No task with id no-such-task",
        ),
        (
            {
                "items": [
                    {"key": "a", "name": "A", "dependsOn": ["b"]},
                    {"key": "b", "name": "B", "dependsOn": ["a"]},
                ]
            },
            "go round in a circle",
        ),
        ({"stakeholderId": "nobody"}, "No contact with id nobody"),
        ({"items": [{"name": "A", "dueDate": "soonish"}]}, "is not a date"),
        ({"tier": "huge"}, "tier 'huge' is not one of quick, standard, full"),
        ({"phase": "complete"}, "starts in an open phase"),
        ({"items": [{"key": "x", "name": "A"}, {"key": "x", "name": "B"}]}, "Two items"),
    ],
)
async def test_a_refused_project_writes_nothing(
    memory: Memory, projects: Projects, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(WriteRejected, match=message):
        await projects.create(memory.caller, {**KITCHEN, **change})
    assert await counts(memory) == {}


async def test_changes_issues_and_delays_are_kept_in_the_history(
    memory: Memory, projects: Projects
) -> None:
    anna = await Contacts(memory.graph, memory.writer).create(
        memory.caller, {"name": "Anna Berg", "email": "anna@example.com"}
    )
    created = await projects.create(memory.caller, {**KITCHEN, "stakeholderId": anna["id"]})
    pid = created["id"]
    assert created["project"]["stakeholder"]["name"] == "Anna Berg"
    raised = await projects.update(
        memory.caller, pid, {"issue": "The tiles are out of stock.", "note": "supplier call"}
    )
    project = raised["project"]
    assert project["health"] == "amber" and project["reasons"] == ["1 open issue"]
    [issue] = project["issues"]
    assert issue["note"] == "The tiles are out of stock."
    delayed = await projects.update(
        memory.caller, pid, {"delayDays": 14, "phase": "blocked", "note": "Waiting for stock."}
    )
    project = delayed["project"]
    assert project["targetDate"] == "2026-07-14"
    assert project["health"] == "red" and project["reasons"][0] == "the project is blocked"
    resolved = await projects.update(
        memory.caller, pid, {"resolveIssue": issue["id"], "phase": "active"}
    )
    project = resolved["project"]
    assert project["issues"] == [] and project["health"] == "green"
    history = [(h["kind"], h.get("from"), h.get("to"), h.get("note")) for h in project["history"]]
    assert history == [
        ("created", None, "active", None),
        ("issue", None, None, "The tiles are out of stock."),
        ("phase", "active", "blocked", "Waiting for stock."),
        ("delay", "2026-06-30", "2026-07-14", "Waiting for stock."),
        ("phase", "blocked", "active", None),
        ("resolved", None, issue["id"], None),
    ]
    with pytest.raises(WriteRejected, match="use project-complete"):
        await projects.update(memory.caller, pid, {"phase": "complete"})
    with pytest.raises(WriteRejected, match="No open issue"):
        await projects.update(memory.caller, pid, {"resolveIssue": issue["id"]})
    with pytest.raises(WriteRejected, match="Nothing to update"):
        await projects.update(memory.caller, pid, {})


async def test_complete_asks_about_open_work_then_does_what_the_owner_chose(
    memory: Memory, projects: Projects
) -> None:
    results: dict[str, dict[str, str]] = {}
    for choice in ("cancel", "defer", "keep"):
        created = await projects.create(memory.caller, {**KITCHEN, "name": f"Kitchen {choice}"})
        pid = created["id"]
        measure = by_name(created["project"])["Measure the kitchen"]["id"]
        await projects.tasks.complete(memory.caller, measure)
        asked = await projects.complete(memory.caller, pid)
        assert asked["completed"] is False and "cancel them, defer them" in asked["question"]
        assert sorted(p["name"] for p in asked["pending"]) == [
            "Book the tiler",
            "Lay the tiles",
            "Order the tiles",
        ]
        assert (await projects.status(memory.caller, pid))["phase"] == "active"
        done = await projects.complete(memory.caller, pid, pending=choice)
        assert done["completed"] is True and done["pendingDone"] == choice
        project = done["project"]
        assert project["phase"] == "complete" and project["health"] is None
        assert project["history"][-1]["kind"] == "completed"
        results[choice] = {t["name"]: t["status"] for t in project["tasks"]}
        with pytest.raises(WriteRejected, match="already complete"):
            await projects.complete(memory.caller, pid, pending=choice)
    assert results["cancel"]["Order the tiles"] == "cancelled"
    assert results["defer"]["Order the tiles"] == "deferred"
    assert results["keep"]["Order the tiles"] == "open"
    assert {r["Measure the kitchen"] for r in results.values()} == {"done"}
    # Kept work stays ready; deferred and cancelled work does not.
    ready = await projects.tasks.ready(memory.caller)
    kept = {g["project"]["name"] for g in ready["groups"] if g["project"]}
    assert kept == {"Kitchen keep"}


async def test_abandon_needs_a_reason_and_cancels_the_open_work(
    memory: Memory, projects: Projects
) -> None:
    pid = (await projects.create(memory.caller, KITCHEN))["id"]
    with pytest.raises(WriteRejected, match="reason is needed"):
        await projects.abandon(memory.caller, pid, "  ")
    gone = await projects.abandon(memory.caller, pid, "We are moving house instead.")
    assert gone["cancelled"] == 4
    project = gone["project"]
    assert project["phase"] == "abandoned" and project["abandonReason"].startswith("We are")
    assert {t["status"] for t in project["tasks"]} == {"cancelled"}
    assert project["history"][-1]["kind"] == "abandoned"
    assert (await projects.listing(memory.caller))["projects"] == []
    listed = await projects.listing(memory.caller, phases=["abandoned"])
    assert [p["id"] for p in listed["projects"]] == [pid]


async def test_the_list_puts_the_worst_health_first_on_a_fixed_clock(memory: Memory) -> None:
    month_ago = work_of(memory, now=WORK_NOW - timedelta(days=40))
    await month_ago.create(memory.caller, {"name": "Forgotten shed", "phase": "active"})
    await month_ago.create(
        memory.caller,
        {"name": "Tax return", "items": [{"name": "Collect receipts", "dueDate": "2026-04-13"}]},
    )
    today = work_of(memory)
    await today.create(memory.caller, {"name": "Garden", "targetDate": "2026-09-01"})
    listed = await today.listing(memory.caller)
    assert [(p["name"], p["health"]) for p in listed["projects"]] == [
        ("Forgotten shed", "red"),
        ("Tax return", "red"),
        ("Garden", "green"),
    ]
    shed = listed["projects"][0]
    assert shed["reasons"] == ["nothing has happened for 40 days"]
    # Work on it today makes it fresh again.
    tax = listed["projects"][1]
    assert tax["counts"]["overdue"] == 1
    task = (await today.status(memory.caller, tax["id"]))["tasks"][0]
    await today.tasks.update(memory.caller, task["id"], {"note": "Found most of them."})
    again = {p["name"]: p for p in (await today.listing(memory.caller))["projects"]}
    assert again["Tax return"]["health"] == "amber"
    assert again["Tax return"]["reasons"] == ["1 task overdue"]


async def test_a_blocked_project_holds_its_tasks_back_from_the_ready_set(
    memory: Memory, projects: Projects
) -> None:
    pid = (await projects.create(memory.caller, KITCHEN))["id"]
    await projects.tasks.create(memory.caller, {"name": "Water the plants"})
    await projects.update(memory.caller, pid, {"phase": "blocked"})
    ready = await projects.tasks.ready(memory.caller)
    assert [[t["name"] for t in g["tasks"]] for g in ready["groups"]] == [["Water the plants"]]


async def test_projects_are_the_owners_alone(memory: Memory, projects: Projects) -> None:
    pid = (await projects.create(memory.caller, KITCHEN))["id"]
    visitor = memory.other(scopes=("public",), agent="bob")
    for call in (
        projects.listing(visitor),
        projects.status(visitor, pid),
        projects.update(visitor, pid, {"note": "x"}),
        projects.abandon(visitor, pid, "mine now"),
    ):
        with pytest.raises(WriteRejected, match="owner's"):
            await call
    other = memory.other(account_id=f"{memory.caller.account_id}-other")
    with pytest.raises(WriteRejected, match=f"No project with id {pid} in this account"):
        await projects.status(other, pid)
    assert (await projects.listing(other))["projects"] == []
