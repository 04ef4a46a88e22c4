"""The owner's projects: a goal with a tier, a phase, a target date, a stakeholder and its tasks.

A project is a ``Project`` node: ``name``, ``description``, ``tier`` (quick, standard, full: how
much ceremony it deserves), ``phase`` (planning, active, blocked, verifying, complete,
abandoned), ``targetDate`` (a day), ``createdAt``, ``updatedAt``, ``phaseChangedAt``,
``completedAt`` / ``abandonedAt`` and ``abandonReason``. Its edges:

- ``(Task)-[:PART_OF]->(Project)`` — its work items (:mod:`appliance.memory.tasks`);
- ``(Project)-[:STAKEHOLDER]->(Person)`` — the client or stakeholder it is for;
- ``(Project)-[:HAS_HISTORY]->(HistoryEntry)`` — its audit trail: one entry (``kind``, ``from``,
  ``to``, ``note``, ``at``) for its creation, every phase, tier, target date (a delay included)
  and stakeholder change, every issue raised (``kind: issue``, open until ``resolvedAt``) and
  resolved, its completion and its abandonment.

:meth:`Projects.create` writes the project, all its work items and their dependencies in ONE
transaction: an item depending on an unknown task, a stakeholder who is not a contact, a circle
of dependencies — anything refused — and nothing at all is written. Completing a project that
still has work to do answers the pending items and asks whether to cancel, defer or keep them
(call again with ``pending``); abandoning one needs a reason and cancels what was left.

Each project is answered with its health (:mod:`appliance.memory.health`, the one place its
rules live) and the counts behind it. One log line per operation:
``[projects] op=create|update|complete|abandon|status|list …``; refusals ``[projects] reject``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from appliance.core.identity import Caller
from appliance.memory import health, work
from appliance.memory.errors import rejected
from appliance.memory.graph import Transaction
from appliance.memory.guards import guard
from appliance.memory.tasks import (
    FIND_HINT,
    NewTask,
    Tasks,
    check_acyclic,
    insert,
    pressing,
    vocabulary,
)

log = logging.getLogger(__name__)

AREA = "projects"
MAX_ITEMS = 100
MAX_LIST = 100
MAX_DELAY_DAYS = 3650
HISTORY_SHOWN = 20
NEXT_SHOWN = 3
PENDING = ("ask", "cancel", "defer", "keep")
HEALTH_ORDER = {"red": 0, "amber": 1, "green": 2}
PROJECT_HINT = "project-list shows the owner's projects and their ids."

_FACTS = (
    "p {.id, .name, .description, .tier, .phase, .targetDate, .createdAt, .updatedAt, "
    ".phaseChangedAt, .completedAt, .abandonedAt, .abandonReason} AS project, "
    f"[(p)-[:HAS_HISTORY]->(h:HistoryEntry) WHERE {guard('h')} | "
    "h {.id, .kind, .from, .to, .note, .at, .resolvedAt, .order}] AS history, "
    f"[(p)-[:STAKEHOLDER]->(s:Person) WHERE {guard('s')} | s {{.id, .name, .email}}] "
    "AS stakeholders"
)


def open_issues(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issues raised on a project and not resolved yet."""
    return [
        {k: h[k] for k in ("id", "note", "at")}
        for h in history
        if h["kind"] == "issue" and h["resolvedAt"] is None
    ]


def summary(
    row: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]], today: date, now: datetime
) -> dict[str, Any]:
    """A project as lists show it: its health and the counts behind it (``tasks``: its task
    views, :func:`appliance.memory.tasks.view`)."""
    project = {k: v for k, v in row["project"].items() if v is not None}
    issues = open_issues(row["history"])
    changed = [project.get("updatedAt"), *(task.get("updatedAt") for task in tasks)]
    times = [when for when in map(work.read_time, changed) if when is not None]
    facts = health.ProjectFacts(
        phase=project.get("phase", "planning"),
        last_activity=max(times) if times else now,
        target=work.read_day(project.get("targetDate")),
        tasks=[health.TaskFacts(t["status"], work.read_day(t.get("dueDate"))) for t in tasks],
        open_issues=len(issues),
    )
    verdict = health.assess(facts, today, now)
    to_do = [t for t in tasks if t["status"] in work.TO_DO]
    ready = sorted((t for t in tasks if t["ready"]), key=pressing)
    project.update(
        health=verdict.level if verdict else None,
        reasons=verdict.reasons if verdict else [],
        counts={
            "total": len(tasks),
            "toDo": len(to_do),
            "done": sum(1 for t in tasks if t["status"] == "done"),
            "overdue": sum(1 for t in to_do if t["overdue"]),
            "blocked": sum(1 for t in to_do if t["status"] == "blocked"),
            "ready": len(ready),
        },
        next=[{"id": t["id"], "name": t["name"]} for t in ready[:NEXT_SHOWN]],
        openIssues=len(issues),
        lastActivityAt=facts.last_activity.isoformat(),
    )
    if row["stakeholders"]:
        project["stakeholder"] = row["stakeholders"][0]
    return project


def _order(project: Mapping[str, Any]) -> tuple[int, str, str]:
    return (
        HEALTH_ORDER.get(project.get("health") or "", 3),
        project.get("targetDate") or "9999-12-31",
        str(project.get("name", "")).lower(),
    )


class Projects:
    """The owner's projects in one account's graph (their tasks through :class:`Tasks`)."""

    def __init__(self, tasks: Tasks) -> None:
        self.tasks = tasks
        self.graph = tasks.graph

    # --- reading ---------------------------------------------------------------------------

    async def _tasks_by_project(
        self, caller: Caller, today: date
    ) -> dict[str | None, list[dict[str, Any]]]:
        """Every task of the owner's work, by the id of its project."""
        found: dict[str | None, list[dict[str, Any]]] = {}
        for task in await self.tasks.views(caller, work.STATUSES, today):
            project = task.pop("project", None)
            found.setdefault(project["id"] if project else None, []).append(task)
        return found

    async def listing(
        self,
        caller: Caller,
        *,
        phases: Sequence[str] | None = None,
        limit: int = MAX_LIST,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Projects of some phases (default: the open ones), worst health first."""
        work.owner_only(caller, AREA, "list")
        current = self.tasks.now(now)
        wanted = [work.choice(p, work.PHASES, "phase", AREA) for p in phases or health.OPEN_PHASES]
        limit = max(1, min(limit, MAX_LIST))
        rows, _ = await self.graph.read(
            f"MATCH (p:Project {{accountId: $account}}) WHERE {guard('p')} "
            f"AND p.phase IN $phases RETURN {_FACTS}",
            {**caller.params(), "phases": wanted},
        )
        today = self.tasks.today(current)
        tasks = await self._tasks_by_project(caller, today) if rows else {}
        projects = sorted(
            (summary(row, tasks.get(row["project"]["id"], []), today, current) for row in rows),
            key=_order,
        )
        log.info("[projects] op=list phases=%s total=%d", ",".join(wanted), len(projects))
        return {
            "projects": projects[:limit],
            "total": len(projects),
            "truncated": len(projects) > limit,
        }

    async def status(
        self, caller: Caller, project_id: str, now: datetime | None = None, op: str = "status"
    ) -> dict[str, Any]:
        """One project in full: health, tasks (ready ones marked), open issues, history."""
        work.owner_only(caller, AREA, op)
        current = self.tasks.now(now)
        rows, _ = await self.graph.read(
            f"MATCH (p:Project {{id: $id}}) WHERE {guard('p')} RETURN {_FACTS}",
            {**caller.params(), "id": project_id},
        )
        if not rows:
            raise work.not_found(AREA, "project", project_id, op, PROJECT_HINT)
        today = self.tasks.today(current)
        tasks = (await self._tasks_by_project(caller, today)).get(project_id, [])
        project = summary(rows[0], tasks, today, current)
        # Work still to do first, then what is done or cancelled.
        project["tasks"] = sorted(tasks, key=lambda t: (t["status"] in work.CLOSED, pressing(t)))
        project["issues"] = open_issues(rows[0]["history"])
        history = sorted(rows[0]["history"], key=lambda h: (str(h["at"]), h["order"] or 0))
        project["history"] = [
            {k: v for k, v in h.items() if v is not None and k != "order"}
            for h in history[-HISTORY_SHOWN:]
        ]
        log.info("[projects] op=%s id=%s health=%s", op, project_id, project["health"])
        return project

    # --- writing ---------------------------------------------------------------------------

    async def create(
        self, caller: Caller, fields: Mapping[str, Any], now: datetime | None = None
    ) -> dict[str, Any]:
        """A project with all its work items and their dependencies, in one transaction."""
        work.owner_only(caller, AREA, "create")
        current = self.tasks.now(now)
        zone = self.tasks.owner_zone()
        project_id = str(uuid.uuid4())
        props: dict[str, Any] = {
            "name": work.text(fields.get("name"), "name", AREA, work.MAX_NAME_CHARS, True),
            "description": work.text(fields.get("description"), "description", AREA),
            "tier": work.choice(fields.get("tier") or "standard", work.TIERS, "tier", AREA),
            "phase": work.choice(fields.get("phase") or "planning", work.PHASES, "phase", AREA),
        }
        if props["phase"] not in health.OPEN_PHASES:
            raise rejected(AREA, "invalid-phase", "A new project starts in an open phase.")
        if fields.get("targetDate"):
            props["targetDate"] = work.day(fields["targetDate"], zone, "targetDate", AREA)
        stakeholder = work.text(fields.get("stakeholderId"), "stakeholderId", AREA, 100)
        items = self._items(fields.get("items"), zone, project_id)
        warnings: list[str] = []
        props = {k: v for k, v in props.items() if v is not None}
        vectors, warned = await work.embedding(
            self.tasks.embed, self.tasks.model_name, "Project", props
        )
        warnings += warned
        for item in items:
            warnings += await self.tasks.embed_new(item)
        async with self.graph.transaction() as tx:
            await tx.run(
                "CREATE (p:Project {id: $id, accountId: $account}) SET p += $props, "
                "p.scope = 'admin', p.createdAt = $now, p.updatedAt = $now, "
                "p.phaseChangedAt = $now",
                {
                    "id": project_id,
                    "account": caller.account_id,
                    "props": {**props, **vectors},
                    "now": current,
                },
            )
            if stakeholder:
                await self._stakeholder(tx, caller, project_id, stakeholder)
            await _history(tx, caller, project_id, current, "created", to=props["phase"])
            await insert(tx, caller, items, current)
        log.info(
            "[projects] op=create id=%s items=%d dependencies=%d tier=%s",
            project_id,
            len(items),
            sum(len(i.depends_on) for i in items),
            props["tier"],
        )
        answer = await self.status(caller, project_id, current, "create")
        return {"id": project_id, "project": answer, "warnings": sorted(set(warnings))}

    def _items(self, value: object, zone: Any, project_id: str) -> list[NewTask]:
        """The work items of a new project, their dependencies resolved to task ids: another
        item's ``key`` or exact name, else an existing task's id (checked in the transaction)."""
        if value is None:
            return []
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise rejected(
                AREA, "invalid-items", f"items is a list of at most {MAX_ITEMS} work items."
            )
        raw: list[Mapping[str, Any]] = []
        for index, entry in enumerate(value):
            if not isinstance(entry, Mapping):
                raise rejected(
                    AREA,
                    "invalid-items",
                    f"Item {index + 1} is not a work item ({{name, dependsOn, …}}).",
                )
            raw.append(entry)
        items = [self.tasks.new_task(entry, zone, project_id=project_id) for entry in raw]
        by_ref: dict[str, str] = {}
        names: dict[str, list[str]] = {}
        for entry, item in zip(raw, items, strict=True):
            key = entry.get("key")
            if key is not None:
                key = str(key).strip()
                if key in by_ref:
                    raise rejected(AREA, "duplicate-key", f"Two items have the key {key!r}.")
                by_ref[key] = item.id
            names.setdefault(str(item.props["name"]).lower(), []).append(item.id)
        for name, ids in names.items():
            if len(ids) == 1:
                by_ref.setdefault(name, ids[0])
        for item in items:
            item.depends_on = [
                by_ref.get(ref, by_ref.get(ref.strip().lower(), ref)) for ref in item.depends_on
            ]
            if item.id in item.depends_on:
                raise rejected(
                    AREA, "dependency-cycle", f"Item {item.props['name']!r} depends on itself."
                )
        new_ids = {item.id for item in items}
        check_acyclic({i.id: [d for d in i.depends_on if d in new_ids] for i in items})
        return items

    async def update(
        self,
        caller: Caller,
        project_id: str,
        fields: Mapping[str, Any],
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Change a project — phase, tier, target date or a delay, stakeholder, details — raise
        or resolve an issue; each change goes in its history."""
        work.owner_only(caller, AREA, "update")
        current = self.tasks.now(now)
        old = await self.stored(caller, project_id, "update")
        note = work.text(fields.get("note"), "note", AREA)
        props, changes = self._changes(old, fields, current)
        stakeholder = fields.get("stakeholderId")
        issue = work.text(fields.get("issue"), "issue", AREA)
        resolve = work.text(fields.get("resolveIssue"), "resolveIssue", AREA, 100)
        if not props and not changes and stakeholder is None and not issue and not resolve:
            if note is None:
                raise rejected(
                    AREA,
                    "nothing-to-update",
                    "Nothing to update: give a phase, tier, targetDate, delayDays, "
                    "stakeholderId, issue, resolveIssue, name, description or a note.",
                )
            changes.append({"kind": "note"})
        merged = {**old, **props}
        if merged.get("targetDate") is None:
            merged.pop("targetDate", None)
        vectors, _ = await work.embedding(
            self.tasks.embed, self.tasks.model_name, "Project", merged
        )
        async with self.graph.transaction() as tx:
            await tx.run(
                "MATCH (p:Project {id: $id}) WHERE p.accountId = $account "
                "SET p += $props, p.updatedAt = $now",
                {
                    "id": project_id,
                    "account": caller.account_id,
                    "props": {**props, **vectors},
                    "now": current,
                },
            )
            for change in changes:
                await _history(tx, caller, project_id, current, note=note, **change)
            if stakeholder is not None:
                await tx.run(
                    "MATCH (p:Project {id: $id})-[r:STAKEHOLDER]->() "
                    "WHERE p.accountId = $account DELETE r",
                    {"id": project_id, "account": caller.account_id},
                )
                if stakeholder:
                    await self._stakeholder(tx, caller, project_id, str(stakeholder))
                await _history(
                    tx, caller, project_id, current, "stakeholder", to=stakeholder or None
                )
            if issue:
                await _history(tx, caller, project_id, current, "issue", note=issue)
            if resolve:
                done, _ = await tx.run(
                    "MATCH (p:Project {id: $id})-[:HAS_HISTORY]->(h:HistoryEntry {id: $issue}) "
                    "WHERE p.accountId = $account AND h.kind = 'issue' AND h.resolvedAt IS NULL "
                    "SET h.resolvedAt = $now RETURN h.note AS note",
                    {
                        "id": project_id,
                        "issue": resolve,
                        "account": caller.account_id,
                        "now": current,
                    },
                )
                if not done:
                    raise rejected(
                        AREA,
                        "issue-not-found",
                        f"No open issue {resolve} on this project (project-status lists them).",
                    )
                await _history(tx, caller, project_id, current, "resolved", to=resolve, note=note)
        log.info(
            "[projects] op=update id=%s changes=%s issue=%s resolved=%s",
            project_id,
            ",".join(c["kind"] for c in changes) or "-",
            bool(issue),
            bool(resolve),
        )
        return {"id": project_id, "project": await self.status(caller, project_id, current)}

    def _changes(
        self, old: Mapping[str, Any], fields: Mapping[str, Any], current: datetime
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The properties an update sets, and the history entries its changes make."""
        zone = self.tasks.owner_zone()
        props: dict[str, Any] = {}
        changes: list[dict[str, Any]] = []
        if fields.get("name") is not None:
            props["name"] = work.text(fields["name"], "name", AREA, work.MAX_NAME_CHARS, True)
        if fields.get("description") is not None:
            props["description"] = work.text(fields["description"], "description", AREA)
        if fields.get("phase"):
            phase = work.choice(fields["phase"], work.PHASES, "phase", AREA)
            if phase not in health.OPEN_PHASES:
                verb = "project-complete" if phase == "complete" else "project-abandon (a reason)"
                raise rejected(
                    AREA, "use-complete-or-abandon", f"To make a project {phase}, use {verb}."
                )
            if old.get("phase") not in health.OPEN_PHASES:
                raise rejected(
                    AREA,
                    "closed",
                    f"This project is {old.get('phase')}; it cannot change phase any more.",
                )
            if phase != old.get("phase"):
                props.update(phase=phase, phaseChangedAt=current)
                changes.append({"kind": "phase", "from": old.get("phase"), "to": phase})
        if fields.get("tier"):
            tier = work.choice(fields["tier"], work.TIERS, "tier", AREA)
            if tier != old.get("tier"):
                props["tier"] = tier
                changes.append({"kind": "tier", "from": old.get("tier"), "to": tier})
        target = old.get("targetDate")
        if fields.get("targetDate") is not None:
            target = (
                None
                if fields["targetDate"] == ""
                else work.day(fields["targetDate"], zone, "targetDate", AREA)
            )
        delay = fields.get("delayDays")
        if delay is not None:
            if not isinstance(delay, int) or isinstance(delay, bool) or abs(delay) > MAX_DELAY_DAYS:
                raise rejected(AREA, "invalid-delay", "delayDays is a whole number of days.")
            base = work.read_day(target)
            if base is None:
                raise rejected(
                    AREA,
                    "no-target",
                    "This project has no target date to delay; set one with targetDate.",
                )
            target = (base + timedelta(days=delay)).isoformat()
        if target != old.get("targetDate"):
            props["targetDate"] = target
            kind = "delay" if delay else "target"
            changes.append({"kind": kind, "from": old.get("targetDate"), "to": target})
        return props, changes

    async def complete(
        self,
        caller: Caller,
        project_id: str,
        pending: str = "ask",
        note: object = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Complete a project; with work still to do, ``ask`` answers it and the question
        (cancel, defer or keep), and the other choices do that to it."""
        work.owner_only(caller, AREA, "complete")
        current = self.tasks.now(now)
        choice = work.choice(pending or "ask", PENDING, "pending", AREA)
        old = await self.stored(caller, project_id, "complete")
        if old.get("phase") not in health.OPEN_PHASES:
            raise rejected(
                AREA, "closed", f"This project is already {old.get('phase')}.", id=project_id
            )
        text = work.text(note, "note", AREA)
        params = {**vocabulary(caller), "id": project_id, "now": current}
        left, _ = await self.graph.run(
            f"MATCH (t:Task)-[:PART_OF]->(:Project {{id: $id}}) WHERE {work.OWNER_TASK} "
            "AND t.status IN $todo + ['deferred'] "
            "RETURN t.id AS id, t.name AS name, t.status AS status, t.dueDate AS dueDate, "
            "t.priority AS priority, toString(t.createdAt) AS createdAt",
            params,
        )
        pending_items = [
            {k: v for k, v in row.items() if v is not None and k != "createdAt"}
            for row in sorted(left, key=pressing)
        ]
        if pending_items and choice == "ask":
            log.info("[projects] op=complete id=%s asked pending=%d", project_id, len(left))
            return {
                "id": project_id,
                "completed": False,
                "pending": pending_items,
                "question": (
                    f"{len(left)} item{'s are' if len(left) != 1 else ' is'} still open. Ask the "
                    "owner: cancel them, defer them (kept for later, out of the ready set) or "
                    "keep them open? Then call project-complete again with pending: cancel, "
                    "defer or keep."
                ),
            }
        retired: dict[str, dict[str, Any]] = {}
        status = "cancelled" if choice == "cancel" else "deferred"
        if pending_items and choice in ("cancel", "defer"):
            retired = await self._retired(caller, [i["id"] for i in pending_items], status)
        async with self.graph.transaction() as tx:
            await self._retire(tx, caller, retired, status, current, "project done")
            await tx.run(
                "MATCH (p:Project {id: $id}) WHERE p.accountId = $account "
                "SET p.phase = 'complete', p.completedAt = $now, p.phaseChangedAt = $now, "
                "p.updatedAt = $now",
                params,
            )
            await _history(
                tx,
                caller,
                project_id,
                current,
                "completed",
                old.get("phase"),
                "complete",
                text or (f"{len(pending_items)} pending: {choice}" if pending_items else None),
            )
        log.info(
            "[projects] op=complete id=%s pending=%d choice=%s",
            project_id,
            len(pending_items),
            choice,
        )
        return {
            "id": project_id,
            "completed": True,
            "pending": pending_items,
            "pendingDone": choice if pending_items else None,
            "project": await self.status(caller, project_id, current, "complete"),
        }

    async def abandon(
        self, caller: Caller, project_id: str, reason: object, now: datetime | None = None
    ) -> dict[str, Any]:
        """Abandon a project for a reason; the work left on it is cancelled."""
        work.owner_only(caller, AREA, "abandon")
        current = self.tasks.now(now)
        why = work.text(reason, "reason", AREA, required=True)
        old = await self.stored(caller, project_id, "abandon")
        if old.get("phase") not in health.OPEN_PHASES:
            raise rejected(
                AREA, "closed", f"This project is already {old.get('phase')}.", id=project_id
            )
        params = {**vocabulary(caller), "id": project_id, "now": current, "why": why}
        left, _ = await self.graph.run(
            f"MATCH (t:Task)-[:PART_OF]->(:Project {{id: $id}}) WHERE {work.OWNER_TASK} "
            "AND t.status IN $todo + ['deferred'] RETURN t.id AS id",
            params,
        )
        retired = await self._retired(caller, [r["id"] for r in left], "cancelled")
        async with self.graph.transaction() as tx:
            await self._retire(tx, caller, retired, "cancelled", current, f"abandoned: {why}")
            await tx.run(
                "MATCH (p:Project {id: $id}) WHERE p.accountId = $account "
                "SET p.phase = 'abandoned', p.abandonedAt = $now, p.abandonReason = $why, "
                "p.phaseChangedAt = $now, p.updatedAt = $now",
                params,
            )
            await _history(
                tx, caller, project_id, current, "abandoned", old.get("phase"), "abandoned", why
            )
        log.info("[projects] op=abandon id=%s cancelled=%d", project_id, len(left))
        return {
            "id": project_id,
            "cancelled": len(left),
            "project": await self.status(caller, project_id, current, "abandon"),
        }

    # --- internals -------------------------------------------------------------------------

    async def stored(self, caller: Caller, project_id: str, op: str) -> dict[str, Any]:
        """A visible project's text properties (what a change and its embedding start from)."""
        if not isinstance(project_id, str) or not project_id.strip():
            raise rejected(AREA, "missing-id", f"Give the project's id ({PROJECT_HINT})")
        rows, _ = await self.graph.read(
            f"MATCH (p:Project {{id: $id}}) WHERE {guard('p')} "
            "RETURN p {.*, embedding: null} AS props, "
            "[k IN keys(p) WHERE p[k] IS :: STRING OR p[k] IS :: LIST<ANY>] AS textual",
            {**caller.params(), "id": project_id},
        )
        if not rows:
            raise work.not_found(AREA, "project", project_id, op, PROJECT_HINT)
        textual = set(rows[0]["textual"])
        return {k: v for k, v in rows[0]["props"].items() if k in textual}

    async def _stakeholder(
        self, tx: Transaction, caller: Caller, project_id: str, person_id: str
    ) -> None:
        found, _ = await tx.run(
            "MATCH (p:Project {id: $id}) WHERE p.accountId = $account "
            f"MATCH (s:Person {{id: $person}}) WHERE {guard('s')} "
            "MERGE (p)-[:STAKEHOLDER]->(s) RETURN s.id AS id",
            {**caller.params(), "id": project_id, "person": person_id},
        )
        if not found:
            raise rejected(
                AREA,
                "stakeholder-not-found",
                f"No contact with id {person_id} in this account to be the stakeholder "
                "(contact-lookup finds one, contact-create adds one); nothing was written.",
            )

    async def _retired(
        self, caller: Caller, task_ids: list[str], status: str
    ) -> dict[str, dict[str, Any]]:
        """The embeddings tasks will have once moved to ``status`` (computed before the
        transaction that moves them: the model is slow, a transaction should not be)."""
        out: dict[str, dict[str, Any]] = {}
        for task_id in task_ids:
            old = await self.tasks.stored(caller, task_id, "retire")
            out[task_id], _ = await work.embedding(
                self.tasks.embed, self.tasks.model_name, "Task", {**old, "status": status}
            )
        return out

    async def _retire(
        self,
        tx: Transaction,
        caller: Caller,
        vectors: Mapping[str, dict[str, Any]],
        status: str,
        now: datetime,
        why: str,
    ) -> None:
        """Move tasks to ``status`` (cancelled or deferred), each with a progress entry."""
        if not vectors:
            return
        await tx.run(
            "UNWIND $rows AS row MATCH (t:Task {id: row.id}) WHERE t.accountId = $account "
            "SET t.logged = coalesce(t.logged, 0) + 1 "
            "CREATE (t)-[:HAS_PROGRESS]->(:ProgressEntry {id: randomUUID(), "
            "accountId: $account, scope: 'admin', at: $now, createdAt: $now, text: $why, "
            "status: $status, from: t.status, order: t.logged, name: $name}) "
            "SET t += row.vectors, t.status = $status, t.statusChangedAt = $now, "
            "t.updatedAt = $now REMOVE t.workingSession",
            {
                "rows": [{"id": k, "vectors": v} for k, v in vectors.items()],
                "account": caller.account_id,
                "now": now,
                "why": why,
                "name": work.clip(why, work.ENTRY_NAME_CHARS),
                "status": status,
            },
        )


async def _history(
    tx: Transaction,
    caller: Caller,
    project_id: str,
    now: datetime,
    kind: str,
    from_: object = None,
    to: object = None,
    note: str | None = None,
    **extra: object,
) -> None:
    """One entry of a project's history."""
    if "from" in extra:
        from_ = extra.pop("from")
    # What the Graph shows for the entry: its kind and change in a few words.
    change = " → ".join(str(x) for x in (from_, to) if x is not None)
    name = work.clip(
        kind.capitalize() + (f": {change}" if change else "") + (f" — {note}" if note else ""),
        work.ENTRY_NAME_CHARS,
    )
    await tx.run(
        "MATCH (p:Project {id: $id}) WHERE p.accountId = $account "
        "SET p.logged = coalesce(p.logged, 0) + 1 "
        "CREATE (p)-[:HAS_HISTORY]->(h:HistoryEntry {id: $hid, accountId: $account, "
        "scope: 'admin', kind: $kind, at: $now, createdAt: $now, order: p.logged}) "
        "SET h.from = $from, h.to = $to, h.note = $note, h.name = $name",
        {
            "id": project_id,
            "hid": str(uuid.uuid4()),
            "account": caller.account_id,
            "kind": kind,
            "now": now,
            "from": None if from_ is None else str(from_),
            "to": None if to is None else str(to),
            "note": note,
            "name": name,
        },
    )


__all__ = ["FIND_HINT", "Projects", "summary"]
