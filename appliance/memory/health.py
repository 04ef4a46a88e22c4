"""A project's health — green, amber or red — from its facts and today's date. The one place.

Only a project still open (phase ``planning``, ``active``, ``blocked`` or ``verifying``) has a
health; a ``complete`` or ``abandoned`` one has none. The rules, first match wins:

**red** when any of
  - the project's phase is ``blocked``;
  - its target date has passed;
  - a task is overdue by :data:`OVERDUE_RED_DAYS` days or more;
  - :data:`OVERDUE_RED_COUNT` or more tasks are overdue;
  - nothing has happened on it for :data:`STALE_RED_DAYS` days or more.

**amber** when none of those, and any of
  - a task is overdue;
  - there is a blocker: a task whose status is ``blocked``, or an open issue;
  - nothing has happened on it for :data:`STALE_AMBER_DAYS` days or more;
  - its target date is within :data:`TARGET_SOON_DAYS` days and work is still open.

**green** otherwise.

A task is *overdue* when it is still to do (``open``, ``in_progress`` or ``blocked``) and its due
date is before today; a task due today is not. *Today* is the owner's date (their time zone),
and every date is a whole day. *Something happened* means the project or one of its tasks
changed, or a progress or history entry was written: the newest of those is ``last_activity``.

Each verdict carries the reasons behind it, worst first, in the owner's words; a green project
has none. :func:`assess` is pure: the caller brings the clock (``today``, ``now``), so the rules
are tested on fixed fixtures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Literal

Level = Literal["green", "amber", "red"]

OPEN_PHASES = ("planning", "active", "blocked", "verifying")
TO_DO = ("open", "in_progress", "blocked")
OVERDUE_RED_DAYS = 7
OVERDUE_RED_COUNT = 3
STALE_AMBER_DAYS = 14
STALE_RED_DAYS = 30
TARGET_SOON_DAYS = 7


@dataclass(frozen=True)
class TaskFacts:
    """What health reads of one task."""

    status: str
    due: date | None = None


@dataclass(frozen=True)
class ProjectFacts:
    """What health reads of one project."""

    phase: str
    last_activity: datetime
    target: date | None = None
    tasks: Sequence[TaskFacts] = ()
    open_issues: int = 0


@dataclass(frozen=True)
class Health:
    """A verdict and why (worst reason first; none when green)."""

    level: Level
    reasons: list[str] = field(default_factory=list)


def _days(n: int) -> str:
    return f"{n} day{'' if n == 1 else 's'}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def assess(facts: ProjectFacts, today: date, now: datetime) -> Health | None:
    """The health of an open project (None for a complete or abandoned one)."""
    if facts.phase not in OPEN_PHASES:
        return None
    to_do = [t for t in facts.tasks if t.status in TO_DO]
    late = sorted((today - t.due).days for t in to_do if t.due is not None and t.due < today)
    blocked_tasks = sum(1 for t in to_do if t.status == "blocked")
    idle = (now - facts.last_activity).days
    red: list[str] = []
    amber: list[str] = []
    if facts.phase == "blocked":
        red.append("the project is blocked")
    if facts.target is not None and facts.target < today:
        red.append(f"its target date passed {_days((today - facts.target).days)} ago")
    if late and late[-1] >= OVERDUE_RED_DAYS:
        red.append(f"a task is overdue by {_days(late[-1])}")
    if len(late) >= OVERDUE_RED_COUNT:
        red.append(f"{_count(len(late), 'task')} overdue")
    if idle >= STALE_RED_DAYS:
        red.append(f"nothing has happened for {_days(idle)}")
    if red:
        return Health("red", red)
    if late:
        amber.append(f"{_count(len(late), 'task')} overdue")
    if blocked_tasks:
        amber.append(f"{_count(blocked_tasks, 'blocked task')}")
    if facts.open_issues:
        amber.append(f"{_count(facts.open_issues, 'open issue')}")
    if idle >= STALE_AMBER_DAYS:
        amber.append(f"nothing has happened for {_days(idle)}")
    if (
        facts.target is not None
        and (facts.target - today).days <= TARGET_SOON_DAYS
        and (to_do or not facts.tasks)
    ):
        left = (facts.target - today).days
        when = "today" if left == 0 else f"in {_days(left)}"
        amber.append(f"its target date is {when} with work still open")
    if amber:
        return Health("amber", amber)
    return Health("green")
