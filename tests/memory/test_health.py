"""A project's health on fixed fixtures: the rules of appliance/memory/health.py, a fixed clock."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from appliance.memory.health import (
    OVERDUE_RED_COUNT,
    OVERDUE_RED_DAYS,
    STALE_AMBER_DAYS,
    STALE_RED_DAYS,
    TARGET_SOON_DAYS,
    ProjectFacts,
    TaskFacts,
    assess,
)

NOW = datetime(2026, 4, 15, 9, 30, tzinfo=UTC)
TODAY = date(2026, 4, 15)


def days(n: int) -> date:
    return TODAY + timedelta(days=n)


def facts(
    phase: str = "active",
    idle: int = 0,
    target: date | None = None,
    tasks: tuple[TaskFacts, ...] = (TaskFacts("open"), TaskFacts("done")),
    issues: int = 0,
) -> ProjectFacts:
    return ProjectFacts(phase, NOW - timedelta(days=idle), target, tasks, issues)


@pytest.mark.parametrize(
    ("case", "project", "level", "reasons"),
    [
        ("all well", facts(target=days(30)), "green", []),
        ("a task due today is not late", facts(tasks=(TaskFacts("open", TODAY),)), "green", []),
        (
            "a late task that is done or cancelled does not count",
            facts(tasks=(TaskFacts("done", days(-20)), TaskFacts("cancelled", days(-20)))),
            "green",
            [],
        ),
        (
            "a deferred task is parked, not late",
            facts(tasks=(TaskFacts("deferred", days(-20)),)),
            "green",
            [],
        ),
        (
            "one day overdue",
            facts(tasks=(TaskFacts("open", days(-1)),)),
            "amber",
            ["1 task overdue"],
        ),
        (
            "a blocked task",
            facts(tasks=(TaskFacts("blocked"),)),
            "amber",
            ["1 blocked task"],
        ),
        ("an open issue", facts(issues=2), "amber", ["2 open issues"]),
        (
            "two quiet weeks",
            facts(idle=STALE_AMBER_DAYS),
            "amber",
            [f"nothing has happened for {STALE_AMBER_DAYS} days"],
        ),
        (
            "thirteen quiet days are fine",
            facts(idle=STALE_AMBER_DAYS - 1),
            "green",
            [],
        ),
        (
            "the target is near with work open",
            facts(target=days(TARGET_SOON_DAYS)),
            "amber",
            [f"its target date is in {TARGET_SOON_DAYS} days with work still open"],
        ),
        (
            "the target is today",
            facts(target=TODAY),
            "amber",
            ["its target date is today with work still open"],
        ),
        (
            "the target is near but everything is done",
            facts(target=days(2), tasks=(TaskFacts("done"),)),
            "green",
            [],
        ),
        ("a blocked project", facts(phase="blocked"), "red", ["the project is blocked"]),
        (
            "the target date passed",
            facts(target=days(-3)),
            "red",
            ["its target date passed 3 days ago"],
        ),
        (
            "a task a week overdue",
            facts(tasks=(TaskFacts("in_progress", days(-OVERDUE_RED_DAYS)),)),
            "red",
            [f"a task is overdue by {OVERDUE_RED_DAYS} days"],
        ),
        (
            "three tasks overdue",
            facts(tasks=tuple(TaskFacts("open", days(-1)) for _ in range(OVERDUE_RED_COUNT))),
            "red",
            [f"{OVERDUE_RED_COUNT} tasks overdue"],
        ),
        (
            "a month without activity",
            facts(idle=STALE_RED_DAYS),
            "red",
            [f"nothing has happened for {STALE_RED_DAYS} days"],
        ),
        (
            "red reasons, worst first, and no amber ones",
            facts(
                phase="blocked",
                target=days(-1),
                tasks=(TaskFacts("blocked", days(-10)), TaskFacts("open", days(-2))),
                issues=1,
            ),
            "red",
            [
                "the project is blocked",
                "its target date passed 1 day ago",
                "a task is overdue by 10 days",
            ],
        ),
        (
            "every amber reason",
            facts(
                idle=20,
                target=days(1),
                tasks=(TaskFacts("blocked", days(-2)), TaskFacts("open")),
                issues=1,
            ),
            "amber",
            [
                "1 task overdue",
                "1 blocked task",
                "1 open issue",
                "nothing has happened for 20 days",
                "its target date is in 1 day with work still open",
            ],
        ),
    ],
)
def test_the_rules(case: str, project: ProjectFacts, level: str, reasons: list[str]) -> None:
    verdict = assess(project, TODAY, NOW)
    assert verdict is not None, case
    assert (verdict.level, verdict.reasons) == (level, reasons), case


@pytest.mark.parametrize("phase", ["complete", "abandoned"])
def test_a_closed_project_has_no_health(phase: str) -> None:
    assert assess(facts(phase=phase, target=days(-30), idle=90), TODAY, NOW) is None


@pytest.mark.parametrize("phase", ["planning", "active", "verifying"])
def test_every_open_phase_is_judged_by_the_same_rules(phase: str) -> None:
    verdict = assess(facts(phase=phase, target=days(-1)), TODAY, NOW)
    assert verdict is not None and verdict.level == "red"
