"""The owner's tasks against the real Neo4j and model: create, update, relate, complete, the
ready set, write-back of a session's output, and the line between owner and audit tasks."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from appliance.memory import reindex
from appliance.memory.audit import record_tool_call
from appliance.memory.errors import WriteRejected
from appliance.memory.projects import Projects
from appliance.memory.tasks import Tasks
from appliance.memory.write import WriteRequest
from tests.memory.conftest import WORK_NOW, Memory

pytestmark = pytest.mark.anyio


@pytest.fixture
def tasks(projects: Projects) -> Tasks:
    return projects.tasks


async def nodes(memory: Memory, label: str) -> int:
    rows, _ = await memory.graph.run(
        f"MATCH (n:`{label}` {{accountId: $a}}) RETURN count(n) AS n",
        {"a": memory.caller.account_id},
    )
    return int(rows[0]["n"])


async def make(tasks: Tasks, memory: Memory, name: str, **fields: Any) -> str:
    done = await tasks.create(memory.caller, {"name": name, **fields})
    return str(done["id"])


def names(answer: dict[str, Any]) -> list[str]:
    return [t["name"] for t in answer["tasks"]]


async def test_a_task_is_created_with_its_details_and_found_by_search(
    memory: Memory, tasks: Tasks
) -> None:
    done = await tasks.create(
        memory.caller,
        {
            "name": "  Renew the car insurance ",
            "description": "Compare three quotes first.",
            "priority": "HIGH",
            "dueDate": "2026-04-20T23:30:00+00:00",  # 01:30 on the 21st in Paris
        },
    )
    task = done["task"]
    assert task["name"] == "Renew the car insurance" and task["priority"] == "high"
    assert task["status"] == "open" and task["dueDate"] == "2026-04-21"
    assert task["ready"] is True and task["overdue"] is False
    rows, _ = await memory.graph.run(
        "MATCH (t:Task {id: $id}) RETURN t.kind AS kind, t.scope AS scope, "
        "size(t.embedding) AS dims",
        {"id": done["id"]},
    )
    assert rows == [{"kind": "owner", "scope": "admin", "dims": 384}]
    # Embedded as reindex would: nothing stale after it.
    counts = await reindex.reindex(
        memory.graph, memory.caller, memory.embed_texts, memory.writer.model_name,
        labels=["Task"], dry_run=True,
    )  # fmt: skip
    assert counts["stale"] == 0
    await memory.graph.run("CALL db.awaitIndexes(60)")
    from appliance.memory.search import SearchRequest

    found = await memory.searcher.search(memory.caller, SearchRequest("car insurance quotes"))
    assert found.results[0].node_id == done["id"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "  "}, "name is needed"),
        ({"name": "x", "priority": "asap"}, "priority 'asap' is not one of urgent, high"),
        ({"name": "x", "dueDate": "next week"}, "is not a date: give YYYY-MM-DD"),
        ({"name": "x", "dependsOn": ["no-such-task"]}, "No task with id no-such-task"),
        ({"name": "x", "projectId": "no-such-project"}, "No project with id no-such-project"),
        ({"name": "x", "contactId": "nobody"}, "No contact with id nobody"),
        ({"name": "x", "conversation": "public:bot:nobody"}, "No conversation of session"),
        ({"name": "x" * 301}, "the limit is 300"),
    ],
)
async def test_bad_tasks_are_refused_and_nothing_is_written(
    memory: Memory, tasks: Tasks, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(WriteRejected, match=message):
        await tasks.create(memory.caller, fields)
    assert await nodes(memory, "Task") == 0


async def test_the_ready_set_waits_for_dependencies_and_completion_unblocks(
    memory: Memory, tasks: Tasks
) -> None:
    measure = await make(tasks, memory, "Measure the kitchen", priority="low")
    order = await make(tasks, memory, "Order the tiles", dependsOn=[measure], priority="high")
    await make(tasks, memory, "Lay the tiles", dependsOn=[order, measure])
    await make(tasks, memory, "Call the plumber", priority="urgent", dueDate="2026-04-10")
    ready = await tasks.ready(memory.caller)
    assert [g["project"] for g in ready["groups"]] == [None]
    assert [t["name"] for t in ready["groups"][0]["tasks"]] == [
        "Call the plumber",
        "Measure the kitchen",
    ]
    assert ready["groups"][0]["tasks"][0]["overdue"] is True  # due the 10th, today the 15th
    listed = await tasks.listing(memory.caller)
    waiting = {t["name"]: t["ready"] for t in listed["tasks"]}
    assert waiting == {
        "Call the plumber": True,
        "Measure the kitchen": True,
        "Order the tiles": False,
        "Lay the tiles": False,
    }

    done = await tasks.complete(memory.caller, measure, note="3.2 by 4.1 m")
    assert done["changed"] is True and done["task"]["status"] == "done"
    assert done["unblocked"] == [{"id": order, "name": "Order the tiles"}]
    # A cancelled dependency holds nothing back either.
    await tasks.update(memory.caller, order, {"status": "cancelled", "note": "bought instead"})
    ready = await tasks.ready(memory.caller)
    assert "Lay the tiles" in [t["name"] for g in ready["groups"] for t in g["tasks"]]
    again = await tasks.complete(memory.caller, measure)
    assert again["changed"] is False


async def test_update_logs_progress_and_status_changes_and_refuses_done(
    memory: Memory, tasks: Tasks
) -> None:
    task_id = await make(tasks, memory, "Write the newsletter")
    caller = memory.other(session_id="s-news")
    started = await tasks.update(caller, task_id, {"status": "in-progress"})
    assert started["task"]["status"] == "in_progress"
    await tasks.update(caller, task_id, {"note": "Drafted the intro."})
    blocked = await tasks.update(
        caller, task_id, {"status": "blocked", "note": "Waiting for photos."}
    )
    progress = blocked["task"]["progress"]
    assert [(e.get("from"), e.get("status"), e.get("text")) for e in progress] == [
        ("open", "in_progress", None),
        (None, None, "Drafted the intro."),
        ("in_progress", "blocked", "Waiting for photos."),
    ]
    rows, _ = await memory.graph.run(
        "MATCH (t:Task {id: $id}) RETURN t.workingSession AS session", {"id": task_id}
    )
    assert rows == [{"session": None}]  # it left in_progress
    with pytest.raises(WriteRejected, match="task-complete"):
        await tasks.update(memory.caller, task_id, {"status": "done"})
    with pytest.raises(WriteRejected, match="Nothing to update"):
        await tasks.update(memory.caller, task_id, {})
    cleared = await tasks.update(memory.caller, task_id, {"dueDate": "2026-05-01"})
    assert cleared["task"]["dueDate"] == "2026-05-01"
    cleared = await tasks.update(memory.caller, task_id, {"dueDate": ""})
    assert "dueDate" not in cleared["task"]
    counts = await reindex.reindex(
        memory.graph, memory.caller, memory.embed_texts, memory.writer.model_name,
        labels=["Task"], dry_run=True,
    )  # fmt: skip
    assert counts["stale"] == 0


async def test_relate_links_and_refuses_a_circle_writing_nothing(
    memory: Memory, tasks: Tasks, projects: Projects
) -> None:
    a = await make(tasks, memory, "A")
    b = await make(tasks, memory, "B", dependsOn=[a])
    c = await make(tasks, memory, "C", dependsOn=[b])
    with pytest.raises(WriteRejected, match="go round in a circle"):
        await tasks.relate(memory.caller, a, {"dependsOn": [c]})
    with pytest.raises(WriteRejected, match="cannot depend on itself"):
        await tasks.relate(memory.caller, a, {"dependsOn": [a]})
    # A refused relate changes nothing, even its parts that were fine.
    project = await projects.create(memory.caller, {"name": "Alphabet"})
    with pytest.raises(WriteRejected, match="No task with id ghost"):
        await tasks.relate(memory.caller, c, {"projectId": project["id"], "dependsOn": ["ghost"]})
    assert "project" not in (await tasks.get(memory.caller, c, "t", WORK_NOW))
    moved = await tasks.relate(
        memory.caller, c, {"projectId": project["id"], "removeDependsOn": [b]}
    )
    assert moved["task"]["project"]["id"] == project["id"]
    assert "dependsOn" not in moved["task"] and moved["task"]["ready"] is True
    detached = await tasks.relate(memory.caller, c, {"projectId": ""})
    assert "project" not in detached["task"]


async def test_owner_tasks_and_audit_tasks_never_mix(memory: Memory, tasks: Tasks) -> None:
    mine = await make(tasks, memory, "Book the dentist")
    # A durable tool call's record, and a Task some agent wrote by hand: neither is work.
    note = await memory.writer.write(memory.caller, WriteRequest("Note", {"name": "gate code"}))
    audit = await record_tool_call(
        memory.graph,
        memory.other(session_id="s-audit"),
        tool="memory-write",
        tool_input={"label": "Note"},
        tool_output="ok",
        is_error=False,
        started_at=WORK_NOW,
        ended_at=WORK_NOW + timedelta(seconds=1),
        ms=1.0,
        durable=True,
        produced=[{"label": "Note", "id": note["id"]}],
    )
    await memory.writer.write(
        memory.caller, WriteRequest("Task", {"name": "Hand-written", "status": "open"})
    )
    assert names(await tasks.listing(memory.caller, status="all")) == ["Book the dentist"]
    ready = await tasks.ready(memory.caller)
    assert [t["id"] for g in ready["groups"] for t in g["tasks"]] == [mine]
    rows, _ = await memory.graph.run(
        "MATCH (t:Task {id: $id}) RETURN t.kind AS kind", {"id": audit["taskId"]}
    )
    assert rows == [{"kind": "audit"}]
    with pytest.raises(WriteRejected, match="No task with id"):
        await tasks.update(memory.caller, audit["taskId"], {"note": "hijack"})


async def test_a_started_task_collects_what_its_session_writes_and_completion_attaches_it(
    memory: Memory, tasks: Tasks
) -> None:
    session = memory.other(session_id="s-work")
    task_id = await make(tasks, memory, "Draft the quote for Anna")
    await tasks.update(session, task_id, {"status": "in_progress"})
    draft = await memory.writer.write(
        memory.caller, WriteRequest("Note", {"name": "Quote draft", "text": "2 days, 900 EUR"})
    )
    report = await memory.writer.write(
        memory.caller, WriteRequest("Report", {"title": "Pricing notes", "body": "…"})
    )
    elsewhere = await memory.writer.write(memory.caller, WriteRequest("Note", {"name": "Other"}))

    async def durable(caller: Any, label: str, node_id: str) -> None:
        await record_tool_call(
            memory.graph,
            caller,
            tool="memory-write",
            tool_input={"label": label},
            tool_output="ok",
            is_error=False,
            started_at=WORK_NOW,
            ended_at=WORK_NOW,
            ms=1.0,
            durable=True,
            produced=[{"label": label, "id": node_id}],
        )

    await durable(session, "Note", draft["id"])
    await durable(memory.other(session_id="s-other"), "Note", elsewhere["id"])
    with pytest.raises(WriteRejected, match="No Report with id ghost"):
        await tasks.complete(session, task_id, outputs=[{"label": "Report", "id": "ghost"}])
    assert (await tasks.get(memory.caller, task_id, "t", WORK_NOW))["status"] == "in_progress"
    with pytest.raises(WriteRejected, match="An output is"):
        await tasks.complete(session, task_id, outputs=[{"label": "Task", "id": task_id}])
    done = await tasks.complete(session, task_id, outputs=[{"label": "Report", "id": report["id"]}])
    assert sorted((p["label"], p["title"]) for p in done["produced"]) == [
        ("Note", "Quote draft"),
        ("Report", "Pricing notes"),
    ]
    # Done: the session's next writes are no longer this task's.
    late = await memory.writer.write(memory.caller, WriteRequest("Note", {"name": "Late"}))
    await durable(session, "Note", late["id"])
    after = await tasks.get(memory.caller, task_id, "t", WORK_NOW)
    assert len(after["produced"]) == 2


async def test_tasks_are_the_owners_alone(memory: Memory, tasks: Tasks) -> None:
    task_id = await make(tasks, memory, "Private chore")
    for visitor in (memory.other(scopes=("public",), agent="bob"), memory.other(agent="bob")):
        with pytest.raises(WriteRejected, match="owner's"):
            await tasks.listing(visitor)
        with pytest.raises(WriteRejected, match="owner's"):
            await tasks.create(visitor, {"name": "Sneaky"})
        with pytest.raises(WriteRejected, match="owner's"):
            await tasks.update(visitor, task_id, {"note": "x"})
    assert await nodes(memory, "Task") == 1
