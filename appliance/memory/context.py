"""The ``<previous-context>`` block an admin session starts with, built from the memory graph.

:func:`previous_context` reads, through every guard of :mod:`appliance.memory.guards`:

1. the latest review digest (``ReviewDigest``, newest ``createdAt``): its title, date and
   summary (else the opening of its body);
2. open tasks (``Task`` whose ``status`` is not done, completed, cancelled, failed or closed),
   by priority — urgent/critical, high, medium/normal, low; a number counts as P1, P2, … — then
   newest first;
3. active review alerts (``ReviewAlert`` created in the last 24 hours, not resolved, dismissed
   or closed), most severe first, then newest.

The block is capped at ``max_chars`` characters, tags included (default :data:`MAX_CHARS`).
The digest takes at most :data:`DIGEST_CHARS`; alerts get at least half of what is left, tasks
the rest; a list that does not fit ends with a line ``…N more open tasks`` /
``…N more alerts``. A graph with none of the three gives an empty text: no block at all.

One log line per call: ``[context] op=previous chars=… digest=… tasks=…/… alerts=…/… ms=…``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.audit import clip
from appliance.memory.graph import Graph
from appliance.memory.guards import guard

log = logging.getLogger(__name__)

MAX_CHARS = 4000
MIN_CHARS = 500
DIGEST_CHARS = 1200
LINE_CHARS = 240
FETCH = 200
ALERT_WINDOW = timedelta(hours=24)
OPEN_TAG, CLOSE_TAG = "<previous-context>", "</previous-context>"
INTRO = "What Maxy's memory holds as this session starts (search memory for more)."

CLOSED_TASK = ["done", "completed", "complete", "cancelled", "canceled", "failed", "closed"]
INACTIVE_ALERT = ["resolved", "dismissed", "closed", "acknowledged", "inactive"]
PRIORITY_RANK = {
    "urgent": 0,
    "critical": 0,
    "highest": 0,
    "p0": 0,
    "high": 1,
    "p1": 1,
    "medium": 2,
    "normal": 2,
    "p2": 2,
    "low": 3,
    "p3": 3,
    "lowest": 4,
    "p4": 4,
}
SEVERITY_RANK = {
    "critical": 0,
    "urgent": 0,
    "high": 1,
    "error": 1,
    "medium": 2,
    "warning": 2,
    "warn": 2,
    "low": 3,
    "info": 3,
}
_UNRANKED = 9.0


def _rank(var: str, prop: str, table: str) -> str:
    """Cypher for a sortable rank: a number as is, a known word by ``table``, else last."""
    value = f"{var}.{prop}"
    return (
        f"CASE WHEN {value} IS :: INTEGER NOT NULL OR {value} IS :: FLOAT NOT NULL "
        f"THEN toFloat({value}) "
        f"ELSE coalesce(toFloat(${table}[toLower(toString({value}))]), {_UNRANKED}) END"
    )


@dataclass
class _Section:
    heading: str
    lines: list[str]
    total: int
    noun: str
    shown: int = 0


def _one_line(value: Any, limit: int = LINE_CHARS) -> str:
    return clip(" ".join(str(value).split()), limit) if value is not None else ""


def _when(value: Any) -> str:
    # The graph hands temporal values over as ISO-8601 text; a plain date stays as it is.
    if isinstance(value, str) and "T" in value:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            pass
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        return value.strftime("%Y-%m-%d %H:%M")
    return _one_line(value, 40)


def _task_line(row: dict[str, Any]) -> str:
    name = _one_line(row.get("name") or row.get("title") or row.get("description") or "(untitled)")
    tag = _one_line(row.get("priority"), 20) or "no priority"
    extra = []
    if row.get("status"):
        extra.append(_one_line(row["status"], 30))
    if row.get("due"):
        extra.append(f"due {_when(row['due'])}")
    line = f"- [{tag}] {name}" + (f" ({', '.join(extra)})" if extra else "")
    detail = row.get("description") if row.get("name") or row.get("title") else None
    return clip(line + (f" — {_one_line(detail)}" if detail else ""), LINE_CHARS)


def _alert_line(row: dict[str, Any]) -> str:
    title = _one_line(row.get("title") or row.get("name") or row.get("description") or "(alert)")
    tag = _one_line(row.get("severity"), 20) or "alert"
    line = f"- [{tag}] {title} ({_when(row.get('createdAt'))})"
    detail = row.get("description") if row.get("title") or row.get("name") else None
    return clip(line + (f" — {_one_line(detail)}" if detail else ""), LINE_CHARS)


def _fit(section: _Section, budget: int) -> int:
    """Keep the lines of ``section`` that fit ``budget``; return the characters used."""
    kept: list[str] = []
    used = len(section.heading) + 1
    more = f"…{section.total} more {section.noun}"
    for index, line in enumerate(section.lines):
        last = index == len(section.lines) - 1 and section.total == len(section.lines)
        reserve = 0 if last else len(more) + 1
        if used + len(line) + 1 + reserve > budget:
            break
        kept.append(line)
        used += len(line) + 1
    section.shown = len(kept)
    if section.shown < section.total:
        kept.append(f"…{section.total - section.shown} more {section.noun}")
        used += len(kept[-1]) + 1
    section.lines = kept
    return used


async def previous_context(
    graph: Graph, caller: Caller, max_chars: int = MAX_CHARS, now: datetime | None = None
) -> dict[str, Any]:
    """The ``<previous-context>`` block of ``caller``'s account (empty when there is nothing)."""
    clock = time.perf_counter()
    max_chars = max(MIN_CHARS, int(max_chars))
    since = (now or datetime.now(UTC)) - ALERT_WINDOW
    params = {
        **caller.params(),
        "closed": CLOSED_TASK,
        "inactive": INACTIVE_ALERT,
        "priorities": PRIORITY_RANK,
        "severities": SEVERITY_RANK,
        "since": since,
        "fetch": FETCH,
    }
    digests, _ = await graph.run(
        f"MATCH (d:ReviewDigest) WHERE {guard('d')} "
        "RETURN d.id AS id, d.title AS title, d.name AS name, d.summary AS summary, "
        "d.body AS body, d.createdAt AS createdAt ORDER BY d.createdAt DESC LIMIT 1",
        params,
    )
    tasks, _ = await graph.run(
        f"MATCH (t:Task) WHERE {guard('t')} "
        "AND NOT toLower(toString(coalesce(t.status, 'open'))) IN $closed "
        f"WITH t, {_rank('t', 'priority', 'priorities')} AS rank "
        "ORDER BY rank, t.createdAt DESC "
        "WITH collect(t {.name, .title, .description, .priority, .status, "
        "due: coalesce(t.dueDate, t.due)}) AS rows "
        "RETURN size(rows) AS total, rows[..$fetch] AS rows",
        params,
    )
    alerts, _ = await graph.run(
        f"MATCH (a:ReviewAlert) WHERE {guard('a')} AND a.createdAt >= $since "
        "AND a.resolvedAt IS NULL "
        "AND NOT toLower(toString(coalesce(a.status, 'active'))) IN $inactive "
        f"WITH a, {_rank('a', 'severity', 'severities')} AS rank "
        "ORDER BY rank, a.createdAt DESC "
        "WITH collect(a {.title, .name, .description, .severity, .createdAt}) AS rows "
        "RETURN size(rows) AS total, rows[..$fetch] AS rows",
        params,
    )
    task_section = _Section(
        "## Open tasks, by priority",
        [_task_line(r) for r in tasks[0]["rows"]],
        int(tasks[0]["total"]),
        "open tasks",
    )
    alert_section = _Section(
        "## Active review alerts, last 24 h",
        [_alert_line(r) for r in alerts[0]["rows"]],
        int(alerts[0]["total"]),
        "alerts",
    )
    digest = digests[0] if digests else None
    parts: list[str] = []
    if digest is not None:
        title = _one_line(digest["title"] or digest["name"] or "Review digest", 120)
        text = digest["summary"] or digest["body"] or ""
        parts.append(
            f"## Latest review digest: {title} ({_when(digest['createdAt'])})\n"
            + clip(str(text).strip(), min(DIGEST_CHARS, max_chars // 4))
        )
    if digest is None and not task_section.total and not alert_section.total:
        result = _result("", None, task_section, alert_section)
        _log(result, clock)
        return result
    frame = len(OPEN_TAG) + len(INTRO) + len(CLOSE_TAG) + 4  # newlines and blank lines
    left = max_chars - frame - sum(len(p) + 2 for p in parts)
    sections = [s for s in (task_section, alert_section) if s.total]
    if alert_section.total:
        wanted = sum(len(line) + 1 for line in task_section.lines) + len(task_section.heading) + 4
        alert_budget = max(left // 2, left - wanted) if task_section.total else left
        left -= _fit(alert_section, alert_budget) + 1
    if task_section.total:
        _fit(task_section, left - 1)
    # Printed in the documented order: digest, tasks, alerts.
    for section in sections:
        parts.append("\n".join([section.heading, *section.lines]))
    text = "\n".join([OPEN_TAG, INTRO, "", "\n\n".join(parts), CLOSE_TAG])
    result = _result(text, digest["id"] if digest else None, task_section, alert_section)
    _log(result, clock)
    return result


def _result(text: str, digest: str | None, tasks: _Section, alerts: _Section) -> dict[str, Any]:
    return {
        "text": text,
        "chars": len(text),
        "digest": digest,
        "tasks": {"shown": tasks.shown, "total": tasks.total},
        "alerts": {"shown": alerts.shown, "total": alerts.total},
    }


def _log(result: dict[str, Any], clock: float) -> None:
    log.info(
        "[context] op=previous chars=%s digest=%s tasks=%s/%s alerts=%s/%s ms=%.0f",
        result["chars"],
        result["digest"],
        result["tasks"]["shown"],
        result["tasks"]["total"],
        result["alerts"]["shown"],
        result["alerts"]["total"],
        (time.perf_counter() - clock) * 1000,
    )
