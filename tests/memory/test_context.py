"""The <previous-context> block of admin sessions: the newest compaction briefing, active projects
and the ready set, built from briefings, projects and tasks made through their own services in
the real Neo4j."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from appliance.core.identity import Caller
from appliance.memory.briefings import latest_briefing, write_briefing
from appliance.memory.context import CLOSE_TAG, MAX_CHARS, OPEN_TAG, READY_HEADING, previous_context
from appliance.memory.embedder import Embedder
from appliance.memory.graph import Graph
from appliance.memory.projects import Projects
from appliance.memory.tasks import Tasks
from appliance.memory.write import WriteRequest
from tests.memory.conftest import PARIS, WORK_NOW, Memory
from tests.support.processes import Neo4jServer


def lines_between(text: str, start: str, end: str | None) -> list[str]:
    body = text.split(start, 1)[1]
    if end is not None:
        body = body.split(end, 1)[0]
    return [line for line in body.splitlines() if line.startswith(("- ", "  - ", "…"))]


@pytest.mark.anyio
async def test_active_projects_by_health_then_the_ready_set_by_project(
    memory: Memory, projects: Projects
) -> None:
    await projects.create(
        memory.caller,
        {
            "name": "Kitchen",
            "phase": "active",
            "targetDate": "2026-04-10",  # passed: red
            "items": [
                {"key": "m", "name": "Measure", "priority": "high", "dueDate": "2026-04-14"},
                {"name": "Order tiles", "dependsOn": ["m"]},
            ],
        },
    )
    await projects.create(
        memory.caller, {"name": "Garden", "items": [{"name": "Buy seeds", "priority": "low"}]}
    )
    closed = await projects.create(memory.caller, {"name": "Old move", "items": [{"name": "Box"}]})
    await projects.abandon(memory.caller, closed["id"], "moved already")
    await projects.tasks.create(memory.caller, {"name": "Renew insurance", "priority": "urgent"})
    # Neither a hand-written Task nor a review digest (nothing writes those) is shown.
    await memory.writer.write(memory.caller, WriteRequest("Task", {"name": "Stray", "status": "x"}))
    await memory.writer.write(memory.caller, WriteRequest("ReviewDigest", {"title": "Old news"}))

    result = await previous_context(projects, memory.caller, now=WORK_NOW)
    text = result["text"]
    assert text.startswith(OPEN_TAG + "\n") and text.endswith("\n" + CLOSE_TAG)
    assert result["chars"] == len(text) <= MAX_CHARS
    assert text.index("## Active projects") < text.index("## Ready to work on")
    assert lines_between(text, "## Active projects", "## Ready") == [
        "- [red] Kitchen (active, standard, target 2026-04-10) — 0/2 done; next: Measure; "
        "its target date passed 5 days ago",
        "- [green] Garden (planning, standard) — 0/1 done; next: Buy seeds",
    ]
    assert lines_between(text, "## Ready to work on", CLOSE_TAG) == [
        "- No project:",
        "  - [urgent] Renew insurance",
        "- Kitchen (active):",
        "  - [high] Measure (due 2026-04-14, overdue)",
        "- Garden (planning):",
        "  - [low] Buy seeds",
    ]
    for absent in ("Old move", "Box", "Stray", "Old news", "Order tiles"):
        assert absent not in text
    assert result["projects"] == {"shown": 2, "total": 2}
    assert result["ready"] == {"shown": 3, "total": 3}


@pytest.mark.anyio
async def test_the_block_is_capped_with_a_more_line_per_list(
    memory: Memory, projects: Projects
) -> None:
    for i in range(30):
        await projects.create(
            memory.caller,
            {
                "name": f"Project {i:02d} " + "p" * 60,
                "items": [{"name": f"Task {i:02d}.{j} " + "t" * 60} for j in range(4)],
            },
        )
    result = await previous_context(projects, memory.caller, now=WORK_NOW)
    text = result["text"]
    assert len(text) <= MAX_CHARS and text.endswith(CLOSE_TAG)
    shown = lines_between(text, "## Active projects", "## Ready")
    ready = lines_between(text, "## Ready to work on", CLOSE_TAG)
    assert shown[-1] == f"…{30 - result['projects']['shown']} more active projects"
    assert ready[-1] == f"…{120 - result['ready']['shown']} more ready tasks"
    assert result["projects"]["shown"] > 5 and result["ready"]["shown"] > 5
    smaller = await previous_context(projects, memory.caller, max_chars=1500, now=WORK_NOW)
    assert len(smaller["text"]) <= 1500
    assert smaller["ready"]["shown"] < result["ready"]["shown"]


@pytest.mark.anyio
async def test_nothing_to_say_is_no_block(memory: Memory, projects: Projects) -> None:
    task = await projects.tasks.create(memory.caller, {"name": "Finished"})
    await projects.tasks.complete(memory.caller, task["id"])
    result = await previous_context(projects, memory.caller, now=WORK_NOW)
    assert result["text"] == "" and result["chars"] == 0


@pytest.mark.anyio
async def test_another_account_sees_none_of_it_and_a_public_caller_is_refused(
    memory: Memory, projects: Projects
) -> None:
    await projects.tasks.create(memory.caller, {"name": "Admin-only chore"})
    other = memory.other(account_id=f"{memory.caller.account_id}-{uuid.uuid4()}")
    assert (await previous_context(projects, other, now=WORK_NOW))["text"] == ""
    with pytest.raises(Exception, match="owner's"):
        await previous_context(projects, memory.other(scopes=("public",)), now=WORK_NOW)


@pytest.mark.anyio
async def test_the_newest_briefing_comes_first_within_the_cap_and_stays_in_its_account(
    memory: Memory, projects: Projects
) -> None:
    session = memory.other(session_id=f"s-{uuid.uuid4()}")
    briefing = {
        "asked": "Plan the spring hive inspection " + "a" * 3000,
        "done": "Listed the hives.",
        "decisions": "",
        "inProgress": "Booking the bee inspector.",
        "aboutOwner": "Ada keeps bees on the roof.",
    }
    await write_briefing(memory.graph, session, {**briefing, "asked": "An older one"})
    written = await write_briefing(memory.graph, session, briefing)
    assert written["sessionId"] == session.session_id and written["conversationId"] is None
    for _ in range(40):
        await projects.tasks.create(memory.caller, {"name": "Chore " + "c" * 100})
    latest = await latest_briefing(memory.graph, memory.caller)
    assert latest is not None and latest["id"] == written["id"]
    result = await previous_context(projects, memory.caller, now=WORK_NOW, briefing=latest)
    text = result["text"]
    assert result["briefing"] == written["id"] and len(text) <= MAX_CHARS
    heading, asked, done, in_progress, owner = text.split("\n")[3:8]
    assert heading.startswith("## Where the last session left off")
    assert asked.startswith("- Asked: Plan the spring hive inspection aaa") and asked.endswith("…")
    assert (done, in_progress) == (
        "- Done: Listed the hives.",
        "- In progress: Booking the bee inspector.",
    )
    assert owner == "- About the owner: Ada keeps bees on the roof."
    assert READY_HEADING in text  # the chores still have their half
    other = memory.other(account_id=f"{memory.caller.account_id}-{uuid.uuid4()}")
    assert await latest_briefing(memory.graph, other) is None
    assert await latest_briefing(memory.graph, memory.other(scopes=("public",))) is None
    with pytest.raises(Exception, match="owner's own admin sessions"):
        await write_briefing(
            memory.graph, memory.other(scopes=("public",), session_id="v"), briefing
        )
    with pytest.raises(Exception, match="this caller has none"):
        await write_briefing(memory.graph, memory.caller, briefing)


ITEM = st.tuples(
    st.booleans(),  # mine
    st.booleans(),  # in a project
    st.integers(min_value=0, max_value=200),  # filler characters
    st.sampled_from(["urgent", "high", "normal", "low"]),
)


async def _check_block(neo4j: Neo4jServer, embedder: Embedder, items: list[Any], cap: int) -> None:
    graph = Graph(neo4j.uri, "neo4j", neo4j.password)
    mine = f"prop-{uuid.uuid4()}"

    async def embed(text: str) -> list[float]:
        return [0.1] * embedder.dimension

    service = Projects(Tasks(graph, embed, "fake", lambda: PARIS, lambda: WORK_NOW))
    try:
        own = Caller(account_id=mine)
        theirs = Caller(account_id=f"{mine}-other")
        for side in (own, theirs):
            project = await service.create(side, {"name": f"proj{side is own}x"})
            for n, (is_mine, grouped, filler, priority) in enumerate(items):
                if is_mine != (side is own):
                    continue
                fields = {"name": f"item{n}x " + "f" * filler, "priority": priority}
                if grouped:
                    fields["projectId"] = project["id"]
                await service.tasks.create(side, fields)
        result = await previous_context(service, own, max_chars=cap, now=WORK_NOW)
        text = result["text"]
        assert len(text) <= cap
        visible = {f"item{n}x" for n, item in enumerate(items) if item[0]}
        shown = set(re.findall(r"item\d+x", text))
        assert shown <= visible, shown - visible
        assert "projFalsex" not in text
        more = re.search(r"…(\d+) more ready tasks", text)
        assert result["ready"]["shown"] + (int(more.group(1)) if more else 0) == len(visible)
        # Counted in the ready list only: a project's line also names its next task.
        ready_part = text.split(READY_HEADING, 1)[1] if READY_HEADING in text else ""
        assert len(set(re.findall(r"item\d+x", ready_part))) == result["ready"]["shown"]
        assert text.startswith(OPEN_TAG) and text.endswith(CLOSE_TAG)
    finally:
        await graph.run("MATCH (n) WHERE n.accountId STARTS WITH $a DETACH DELETE n", {"a": mine})
        await graph.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    items=st.lists(ITEM, max_size=25),
    cap=st.integers(min_value=500, max_value=6000),
)
def test_the_block_never_passes_its_cap_or_shows_another_accounts_work(
    neo4j_server: Neo4jServer, embedder: Embedder, items: list[Any], cap: int
) -> None:
    asyncio.run(_check_block(neo4j_server, embedder, items, cap))
