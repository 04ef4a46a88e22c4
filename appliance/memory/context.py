"""The ``<previous-context>`` block an admin session starts with: the owner's work, from the graph.

:func:`previous_context` reads, through the projects and tasks services (so every guard of
:mod:`appliance.memory.guards` and the owner-only rule hold):

1. **active projects** — every project in an open phase (planning, active, blocked,
   verifying), worst health first (:mod:`appliance.memory.health`): its health and why, phase,
   tier, target date, tasks done of all, and the next ready task;
2. **the ready set** — the tasks that can be picked up now (open or in progress, every
   dependency done or cancelled), grouped by project, most pressing first.

Before them, when there is one, comes the newest **compaction briefing** of an earlier admin
session (:mod:`appliance.memory.briefings`: what was asked, done and decided, the work in
progress, what the owner shared), so a session starts where the last long one left off.

Both lists are written by the ``projects`` and ``tasks`` plugins' tools, the admin pages and the
visitor-lead review; nothing else is read (the review digests and alerts an earlier version
showed had no writer, so the block no longer has them).

The block is capped at ``max_chars`` characters, tags included (default :data:`MAX_CHARS`):
projects get at most half of it, the ready set the rest; a list that does not fit ends with a
line ``…N more active projects`` / ``…N more ready tasks``. A briefing takes at most half of it
first (each field clipped to its share). With no briefing, no active project and nothing ready,
the text is empty: no block at all.

One log line per call: ``[context] op=previous chars=… briefing=… projects=…/… ready=…/… ms=…``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.briefings import briefing_lines
from appliance.memory.projects import Projects
from appliance.memory.work import clip

log = logging.getLogger(__name__)

MAX_CHARS = 4000
MIN_CHARS = 500
LINE_CHARS = 240
FETCH = 200
OPEN_TAG, CLOSE_TAG = "<previous-context>", "</previous-context>"
INTRO = (
    "The owner's work as this session starts (project-status, task-list and work-ready say more)."
)
PROJECTS_HEADING = "## Active projects, worst health first"
READY_HEADING = "## Ready to work on, by project"


def project_line(project: dict[str, Any]) -> str:
    """One active project: health, name, phase, target, progress, next step, why."""
    counts = project["counts"]
    facts = [project.get("phase", "?"), project.get("tier", "standard")]
    if project.get("targetDate"):
        facts.append(f"target {project['targetDate']}")
    line = f"- [{project.get('health') or '?'}] {project['name']} ({', '.join(facts)})"
    line += f" — {counts['done']}/{counts['total']} done"
    if project.get("next"):
        line += f"; next: {project['next'][0]['name']}"
    if project.get("reasons"):
        line += f"; {'; '.join(project['reasons'])}"
    return clip(line, LINE_CHARS)


def task_line(task: dict[str, Any]) -> str:
    """One ready task: priority, name, status and due date."""
    extra = []
    if task.get("status") == "in_progress":
        extra.append("in progress")
    if task.get("dueDate"):
        extra.append(f"due {task['dueDate']}" + (", overdue" if task.get("overdue") else ""))
    line = f"[{task.get('priority', 'normal')}] {task['name']}"
    return "  - " + clip(line + (f" ({', '.join(extra)})" if extra else ""), LINE_CHARS - 4)


@dataclass
class _Fitted:
    lines: list[str] = field(default_factory=list)
    shown: int = 0
    total: int = 0


def _fit_projects(projects: list[dict[str, Any]], total: int, budget: int) -> _Fitted:
    fitted = _Fitted(total=total)
    used = len(PROJECTS_HEADING) + 1
    for index, project in enumerate(projects):
        line = project_line(project)
        last = index == total - 1
        reserve = 0 if last else len(f"…{total} more active projects") + 1
        if used + len(line) + 1 + reserve > budget:
            break
        fitted.lines.append(line)
        used += len(line) + 1
    fitted.shown = len(fitted.lines)
    if fitted.shown < total:
        fitted.lines.append(f"…{total - fitted.shown} more active projects")
    return fitted


def _fit_ready(groups: list[dict[str, Any]], total: int, budget: int) -> _Fitted:
    fitted = _Fitted(total=total)
    used = len(READY_HEADING) + 1
    more = len(f"…{total} more ready tasks") + 1
    full = False
    for group in groups:
        project = group["project"]
        head = f"- {project['name']} ({project['phase']}):" if project else "- No project:"
        block: list[str] = []
        for task in group["tasks"]:
            line = task_line(task)
            extra = len(line) + 1 + (0 if block else len(head) + 1)
            last = fitted.shown + len(block) + 1 == total
            if used + extra + (0 if last else more) > budget:
                full = True
                break
            block.append(line)
            used += extra
        if block:
            fitted.lines += [head, *block]
            fitted.shown += len(block)
        if full:
            break
    if fitted.shown < total:
        fitted.lines.append(f"…{total - fitted.shown} more ready tasks")
    return fitted


async def previous_context(
    projects: Projects,
    caller: Caller,
    max_chars: int = MAX_CHARS,
    now: datetime | None = None,
    briefing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``<previous-context>`` block of ``caller``'s account (empty when there is nothing)."""
    clock = time.perf_counter()
    max_chars = max(MIN_CHARS, int(max_chars))
    listed = await projects.listing(caller, limit=FETCH, now=now)
    ready = await projects.tasks.ready(caller, limit=FETCH, now=now)
    if not listed["total"] and not ready["total"] and briefing is None:
        result = _result("", _Fitted(), _Fitted())
        _log(result, clock)
        return result
    frame = len(OPEN_TAG) + len(INTRO) + len(CLOSE_TAG) + 6  # newlines and blank lines
    left = max_chars - frame
    shown_projects = _Fitted()
    parts: list[str] = []
    if briefing is not None:
        whole = listed["total"] or ready["total"]
        parts.append("\n".join(briefing_lines(briefing, left // 2 if whole else left)))
        left -= len(parts[-1]) + 2
    if listed["total"]:
        share = left // 2 if ready["total"] else left
        shown_projects = _fit_projects(listed["projects"], listed["total"], share)
        parts.append("\n".join([PROJECTS_HEADING, *shown_projects.lines]))
        left -= len(parts[-1]) + 2
    shown_ready = _Fitted()
    if ready["total"]:
        shown_ready = _fit_ready(ready["groups"], ready["total"], left)
        parts.append("\n".join([READY_HEADING, *shown_ready.lines]))
    text = "\n".join([OPEN_TAG, INTRO, "", "\n\n".join(parts), CLOSE_TAG])
    result = _result(text, shown_projects, shown_ready, briefing)
    _log(result, clock)
    return result


def _result(
    text: str, projects: _Fitted, ready: _Fitted, briefing: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "text": text,
        "chars": len(text),
        "projects": {"shown": projects.shown, "total": projects.total},
        "ready": {"shown": ready.shown, "total": ready.total},
        "briefing": briefing["id"] if briefing else None,
    }


def _log(result: dict[str, Any], clock: float) -> None:
    log.info(
        "[context] op=previous chars=%s briefing=%s projects=%s/%s ready=%s/%s ms=%.0f",
        result["chars"],
        result["briefing"] is not None,
        result["projects"]["shown"],
        result["projects"]["total"],
        result["ready"]["shown"],
        result["ready"]["total"],
        (time.perf_counter() - clock) * 1000,
    )
