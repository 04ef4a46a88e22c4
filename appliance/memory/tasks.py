"""The owner's tasks: work items with a status, a priority, a due date and what they depend on.

A task is a ``Task`` node of ``kind: "owner"`` (:mod:`appliance.memory.work` says why the kind):
``name``, ``description``, ``status`` (open, in_progress, blocked, deferred, done, cancelled),
``priority`` (urgent, high, normal, low), ``dueDate`` (a day), ``source`` (who made it, e.g.
``visitor-lead``), ``createdAt``, ``updatedAt``, ``statusChangedAt``, ``completedAt``. Its edges:

- ``(Task)-[:PART_OF]->(Project)`` — at most one project;
- ``(Task)-[:DEPENDS_ON]->(Task)`` — never in a cycle (refused when one would close);
- ``(Task)-[:HAS_PROGRESS]->(ProgressEntry)`` — the progress log: a note, and every status change
  (``from``, ``status``, ``at``);
- ``(Task)-[:PRODUCED]->(node)`` — what the work made (a document, a report, an email, a file);
- ``(Task)-[:CONCERNS]->(Person)`` and ``(Task)-[:FOLLOWS_UP]->(Conversation)`` — a follow-up's
  who and where (a visitor lead).

**The ready set** (:meth:`Tasks.ready`): tasks ``open`` or ``in_progress`` whose every dependency
is ``done`` or ``cancelled`` (a cancelled one will not be done, so it holds nothing back), and
whose project, if any, is not ``blocked`` or ``abandoned`` — grouped by project, each group by
priority, then due date, then age.

**Write-back.** Starting a task (status ``in_progress``) in a session makes it that session's
work: every node a durable tool call of the session then creates or updates is linked
``PRODUCED`` from it (:func:`attach_output`, called by the audit trail), as is each output named
when it is completed (:meth:`Tasks.complete`), which answers with everything the task produced
and the tasks its completion made ready.

Every write of one call is one transaction: a bad dependency, project, contact or output writes
nothing. One log line per operation: ``[tasks] op=create|update|relate|complete|list|ready …``;
refusals are ``[tasks] reject reason=…``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from appliance.core.identity import Caller
from appliance.memory import work
from appliance.memory.errors import rejected
from appliance.memory.graph import Graph, Transaction
from appliance.memory.guards import guard
from appliance.memory.write import writable_labels

log = logging.getLogger(__name__)

AREA = "tasks"
MAX_DEPENDENCIES = 50
MAX_OUTPUTS = 20
MAX_LIST = 200
DEFAULT_LIST = 50
PROGRESS_SHOWN = 10
# What a finished task's output may not be: work items and their logs are not products.
NOT_OUTPUT = frozenset({"Task", "Project", "ProgressEntry", "HistoryEntry", "ToolCall"})
LIST_STATUSES = ("todo", "all", *work.STATUSES)
FIND_HINT = "task-list shows the owner's tasks and their ids."

# One task and every edge it has to a node the caller may see, in one pattern: a query with few
# subqueries plans in a fraction of the time (Neo4j plans each new query text once).
VIEW = (
    "t {.id, .name, .description, .status, .priority, .dueDate, .source, .createdAt, "
    ".updatedAt, .completedAt} AS task, "
    "[(t)-[r:PART_OF|DEPENDS_ON|PRODUCED|CONCERNS|FOLLOWS_UP]->(m) "
    f"WHERE {guard('m')} | {{rel: type(r), id: m.id, label: head(labels(m)), "
    "name: coalesce(m.name, m.title), status: m.status, phase: m.phase, email: m.email, "
    "telephone: m.telephone, sessionId: m.sessionId}] AS links"
)


def vocabulary(caller: Caller) -> dict[str, Any]:
    """The parameters every task query takes: the guards' and the words of the work."""
    return {
        **caller.params(),
        "readyStatuses": list(work.READY_STATUSES),
        "closed": list(work.CLOSED),
        "todo": list(work.TO_DO),
        "rank": work.PRIORITY_RANK,
    }


def is_ready(status: str, dependencies: Sequence[str | None], phase: str | None) -> bool:
    """The ready rule, in one place: open or in progress, every dependency done or cancelled,
    and no project holding it back (blocked or abandoned)."""
    return (
        status in work.READY_STATUSES
        and all(dep in work.CLOSED for dep in dependencies)
        and phase not in work.HOLDING_PHASES
    )


def view(row: Mapping[str, Any], today: date) -> dict[str, Any]:
    """One task as the tools answer it (``ready``, and ``overdue`` by the owner's date)."""
    task = {k: v for k, v in row["task"].items() if v is not None}
    links: dict[str, list[dict[str, Any]]] = {}
    for link in row["links"]:
        links.setdefault(link["rel"], []).append(link)
    project = links.get("PART_OF", [None])[0]
    deps = links.get("DEPENDS_ON", [])
    due = work.read_day(task.get("dueDate"))
    task["overdue"] = bool(due and due < today and task.get("status") in work.TO_DO)
    task["ready"] = is_ready(
        task.get("status", ""), [d["status"] for d in deps], project["phase"] if project else None
    )
    if project:
        task["project"] = {k: project[k] for k in ("id", "name", "phase")}
    if deps:
        task["dependsOn"] = [{k: d[k] for k in ("id", "name", "status")} for d in deps]
    if links.get("PRODUCED"):
        task["produced"] = [
            {"id": o["id"], "label": o["label"], "title": o["name"]} for o in links["PRODUCED"]
        ]
    if links.get("CONCERNS"):
        task["concerns"] = [
            {k: c[k] for k in ("id", "name", "email", "telephone") if c[k] is not None}
            for c in links["CONCERNS"]
        ]
    if links.get("FOLLOWS_UP"):
        task["followsUp"] = links["FOLLOWS_UP"][0]["sessionId"]
    return task


def pressing(task: Mapping[str, Any]) -> tuple[int, str, str, str]:
    """The order of tasks: priority, then due date (none last), then age."""
    return (
        work.PRIORITY_RANK.get(task.get("priority") or "", 9),
        task.get("dueDate") or "9999-12-31",
        str(task.get("createdAt") or ""),
        str(task.get("id")),
    )


@dataclass
class NewTask:
    """A task to create: its properties (embedding included) and its edges."""

    id: str
    props: dict[str, Any]
    project_id: str | None = None
    depends_on: list[str] = field(default_factory=list)
    contact_id: str | None = None
    conversation: str | None = None


def check_acyclic(edges: Mapping[str, Sequence[str]]) -> None:
    """Refuse dependencies that go round in a circle (``edges``: task → tasks it needs)."""
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            loop = [*path[path.index(node) :], node]
            raise rejected(
                AREA,
                "dependency-cycle",
                "These dependencies go round in a circle: "
                + " → ".join(loop)
                + ". A task cannot wait, however indirectly, for itself.",
            )
        state[node] = 1
        for needed in edges.get(node, ()):
            visit(needed, [*path, node])
        state[node] = 2

    for node in edges:
        visit(node, [])


async def insert(tx: Transaction, caller: Caller, items: Sequence[NewTask], now: datetime) -> None:
    """Create ``items`` and their edges inside ``tx``; raise (rolling it all back) when a
    project, dependency, contact or conversation they name is not the owner's to use."""
    params = {**vocabulary(caller), "now": now}
    rows = [{"id": item.id, "props": item.props} for item in items]
    await tx.run(
        "UNWIND $rows AS r CREATE (t:Task {id: r.id, accountId: $account}) SET t += r.props, "
        f"t.kind = '{work.OWNER_KIND}', t.scope = 'admin', t.createdAt = $now, "
        "t.updatedAt = $now, t.statusChangedAt = $now",
        {**params, "rows": rows},
    )
    wanted = [
        {"from": item.id, "to": item.project_id} for item in items if item.project_id is not None
    ]
    await _link(tx, params, wanted, "PART_OF", "Project", guard("m"), "project", "project-list")
    wanted = [{"from": item.id, "to": dep} for item in items for dep in item.depends_on]
    await _link(tx, params, wanted, "DEPENDS_ON", "Task", work.owner_task("m"), "task", FIND_HINT)
    wanted = [
        {"from": item.id, "to": item.contact_id} for item in items if item.contact_id is not None
    ]
    await _link(tx, params, wanted, "CONCERNS", "Person", guard("m"), "contact", "contact-lookup")
    wanted = [{"from": item.id, "to": item.conversation} for item in items if item.conversation]
    found, _ = await tx.run(
        "UNWIND $pairs AS w MATCH (t:Task {id: w.from}) "
        "MATCH (m:Conversation {accountId: $account, sessionId: w.to}) "
        f"WHERE {guard('m')} CREATE (t)-[:FOLLOWS_UP]->(m) RETURN w.to AS to",
        {**params, "pairs": wanted},
    )
    missing = {w["to"] for w in wanted} - {row["to"] for row in found}
    if missing:
        raise rejected(
            AREA,
            "conversation-not-found",
            f"No conversation of session {sorted(missing)[0]} in this account to follow up.",
        )


async def _link(
    tx: Transaction,
    params: Mapping[str, Any],
    pairs: list[dict[str, str]],
    rel: str,
    label: str,
    visible: str,
    what: str,
    hint: str,
) -> None:
    """``(from)-[rel]->(to)`` for each pair; refused naming the first ``to`` not found."""
    if not pairs:
        return
    found, _ = await tx.run(
        "UNWIND $pairs AS w MATCH (n:Task {id: w.from}) WHERE n.accountId = $account "
        f"MATCH (m:{label} {{id: w.to}}) WHERE {visible} "
        f"MERGE (n)-[:{rel}]->(m) RETURN w.to AS to",
        {**params, "pairs": pairs},
    )
    missing = sorted({p["to"] for p in pairs} - {row["to"] for row in found})
    if missing:
        raise rejected(
            AREA,
            f"{what}-not-found",
            f"No {what} with id {missing[0]} in this account ({hint}); nothing was written.",
            id=missing[0],
        )


async def attach_output(
    graph: Graph, caller: Caller, session: str | None, targets: Sequence[Mapping[str, str]]
) -> list[str]:
    """Link what a durable tool call produced to the task its session is working on (the ids of
    the tasks linked; none when the session works on none)."""
    if not session or not targets:
        return []
    linked: set[str] = set()
    for target in targets:
        label = target["label"]
        if label in NOT_OUTPUT or label not in writable_labels():
            continue
        rows, _ = await graph.run(
            f"MATCH (t:Task {{accountId: $account, workingSession: $session}}) "
            f"WHERE {work.OWNER_TASK} AND t.status = 'in_progress' "
            f"MATCH (n:`{label}` {{id: $id}}) WHERE {guard('n')} "
            "MERGE (t)-[:PRODUCED]->(n) RETURN t.id AS id",
            {**caller.params(), "session": session, "id": target["id"]},
        )
        linked.update(row["id"] for row in rows)
    if linked:
        log.info("[tasks] op=write-back session=%s tasks=%s", session, ",".join(sorted(linked)))
    return sorted(linked)


class Tasks(work.OwnerWork):
    """The owner's tasks in one account's graph (their dates in the owner's time zone)."""

    # --- reading ---------------------------------------------------------------------------

    async def get(self, caller: Caller, task_id: str, op: str, now: datetime) -> dict[str, Any]:
        """One task with its progress log, or the "no task" refusal."""
        rows, _ = await self.graph.read(
            f"MATCH (t:Task {{id: $id}}) WHERE {work.OWNER_TASK} RETURN {VIEW}, "
            f"[(t)-[:HAS_PROGRESS]->(e:ProgressEntry) WHERE {guard('e')} | "
            "e {.text, .status, .from, .at, .order}] AS progress",
            {**vocabulary(caller), "id": task_id},
        )
        if not rows:
            raise work.not_found(AREA, "task", task_id, op, FIND_HINT)
        task = view(rows[0], self.today(now))
        progress = sorted(rows[0]["progress"], key=lambda e: (str(e["at"]), e["order"] or 0))
        if progress:
            task["progress"] = [
                {k: v for k, v in e.items() if v is not None and k != "order"}
                for e in progress[-PROGRESS_SHOWN:]
            ]
        return task

    async def views(
        self, caller: Caller, statuses: Sequence[str], today: date, project_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The owner's tasks of some statuses (of one project), most pressing first."""
        rows, _ = await self.graph.read(
            f"MATCH (t:Task {{accountId: $account}}) WHERE {work.OWNER_TASK} "
            f"AND t.status IN $statuses RETURN {VIEW}",
            {**vocabulary(caller), "statuses": list(statuses)},
        )
        found = [view(row, today) for row in rows]
        if project_id is not None:
            found = [t for t in found if (t.get("project") or {}).get("id") == project_id]
        return sorted(found, key=pressing)

    async def listing(
        self,
        caller: Caller,
        *,
        project_id: str | None = None,
        status: str = "todo",
        limit: int = DEFAULT_LIST,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """The owner's tasks of one status (``todo``: open, in progress or blocked; ``all``),
        optionally of one project, most pressing first."""
        work.owner_only(caller, AREA, "list")
        current = self.now(now)
        wanted = work.choice(status, LIST_STATUSES, "status", AREA)
        statuses = {"todo": list(work.TO_DO), "all": list(work.STATUSES)}.get(wanted, [wanted])
        limit = max(1, min(limit, MAX_LIST))
        found = await self.views(caller, statuses, self.today(current), project_id)
        log.info("[tasks] op=list status=%s project=%s total=%d", wanted, project_id, len(found))
        return {"tasks": found[:limit], "total": len(found), "truncated": len(found) > limit}

    async def ready(
        self,
        caller: Caller,
        *,
        project_id: str | None = None,
        limit: int = DEFAULT_LIST,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """The ready set: tasks that can be picked up now, grouped by project."""
        work.owner_only(caller, AREA, "ready")
        current = self.now(now)
        limit = max(1, min(limit, MAX_LIST))
        today = self.today(current)
        found = await self.views(caller, work.READY_STATUSES, today, project_id)
        ready = [task for task in found if task["ready"]]
        groups: dict[str | None, dict[str, Any]] = {}
        for task in ready[:limit]:
            project = task.pop("project", None)
            key = project["id"] if project else None
            group = groups.setdefault(key, {"project": project, "tasks": []})
            group["tasks"].append(task)
        ordered = sorted(groups.values(), key=_group_order)
        log.info(
            "[tasks] op=ready project=%s total=%d groups=%d", project_id, len(ready), len(groups)
        )
        return {"groups": ordered, "total": len(ready), "truncated": len(ready) > limit}

    # --- writing ---------------------------------------------------------------------------

    def new_task(
        self, fields: Mapping[str, Any], zone: ZoneInfo, *, project_id: str | None = None
    ) -> NewTask:
        """A task to create from a call's fields (checked; not embedded yet)."""
        props: dict[str, Any] = {
            "name": work.text(fields.get("name"), "name", AREA, work.MAX_NAME_CHARS, True),
            "description": work.text(fields.get("description"), "description", AREA),
            "priority": work.choice(
                fields.get("priority") or work.DEFAULT_PRIORITY, work.PRIORITIES, "priority", AREA
            ),
            "status": "open",
            "source": work.text(fields.get("source"), "source", AREA, 40),
        }
        if fields.get("dueDate"):
            props["dueDate"] = work.day(fields["dueDate"], zone, "dueDate", AREA)
        depends = fields.get("dependsOn") or []
        if not isinstance(depends, list) or len(depends) > MAX_DEPENDENCIES:
            raise rejected(
                AREA,
                "invalid-dependencies",
                f"dependsOn is a list of at most {MAX_DEPENDENCIES} task ids.",
            )
        return NewTask(
            id=str(uuid.uuid4()),
            props={k: v for k, v in props.items() if v is not None},
            project_id=project_id or work.text(fields.get("projectId"), "projectId", AREA, 100),
            depends_on=[str(d) for d in dict.fromkeys(depends)],
            contact_id=work.text(fields.get("contactId"), "contactId", AREA, 100),
            conversation=work.text(fields.get("conversation"), "conversation", AREA, 300),
        )

    async def embed_new(self, item: NewTask) -> list[str]:
        """Embed a task about to be created, as reindex would (best effort)."""
        stored = {**item.props, "kind": work.OWNER_KIND}
        vectors, warnings = await work.embedding(self.embed, self.model_name, "Task", stored)
        item.props.update(vectors)
        return warnings

    async def create(
        self, caller: Caller, fields: Mapping[str, Any], now: datetime | None = None
    ) -> dict[str, Any]:
        """Create one task with its edges, in one transaction."""
        work.owner_only(caller, AREA, "create")
        current = self.now(now)
        item = self.new_task(fields, self.owner_zone())
        warnings = await self.embed_new(item)
        async with self.graph.transaction() as tx:
            await insert(tx, caller, [item], current)
        task = await self.get(caller, item.id, "create", current)
        log.info(
            "[tasks] op=create id=%s project=%s depends=%d source=%s",
            item.id,
            item.project_id,
            len(item.depends_on),
            item.props.get("source"),
        )
        return {"id": item.id, "task": task, "warnings": warnings}

    async def update(
        self, caller: Caller, task_id: str, fields: Mapping[str, Any], now: datetime | None = None
    ) -> dict[str, Any]:
        """Change a task's details or status; a note goes in its progress log."""
        work.owner_only(caller, AREA, "update")
        current = self.now(now)
        old = await self.stored(caller, task_id, "update")
        zone = self.owner_zone()
        props: dict[str, Any] = {}
        remove: list[str] = []
        if "name" in fields and fields["name"] is not None:
            props["name"] = work.text(fields["name"], "name", AREA, work.MAX_NAME_CHARS, True)
        for key in ("description", "dueDate"):
            if key not in fields or fields[key] is None:
                continue
            if fields[key] == "":
                remove.append(key)
            elif key == "dueDate":
                props[key] = work.day(fields[key], zone, key, AREA)
            else:
                props[key] = work.text(fields[key], key, AREA)
        if fields.get("priority"):
            props["priority"] = work.choice(fields["priority"], work.PRIORITIES, "priority", AREA)
        note = work.text(fields.get("note"), "note", AREA)
        status = old["status"]
        if fields.get("status"):
            status = work.choice(fields["status"], work.STATUSES, "status", AREA)
            if status == "done" and old["status"] != "done":
                raise rejected(
                    AREA,
                    "use-complete",
                    "Mark a task done with task-complete: it attaches what the task produced "
                    "and says which tasks it made ready.",
                    id=task_id,
                )
        if not props and not remove and note is None and status == old["status"]:
            raise rejected(
                AREA,
                "nothing-to-update",
                'Nothing to update: give a field to change, a status or a note ("" clears the '
                "description or the due date).",
            )
        await self._write(caller, task_id, old, props, remove, status, note, current)
        task = await self.get(caller, task_id, "update", current)
        log.info(
            "[tasks] op=update id=%s set=%s cleared=%s status=%s->%s",
            task_id,
            ",".join(sorted(props)),
            ",".join(remove),
            old["status"],
            status,
        )
        return {"id": task_id, "task": task}

    async def relate(
        self, caller: Caller, task_id: str, fields: Mapping[str, Any], now: datetime | None = None
    ) -> dict[str, Any]:
        """Link a task: to tasks it needs, a project, what it produced, a contact, a
        conversation; or unlink dependencies or its project — in one transaction."""
        work.owner_only(caller, AREA, "relate")
        current = self.now(now)
        await self.stored(caller, task_id, "relate")
        add = _ids(fields.get("dependsOn"), "dependsOn")
        drop = _ids(fields.get("removeDependsOn"), "removeDependsOn")
        outputs = _outputs(fields.get("produced"))
        project = fields.get("projectId")
        contact = work.text(fields.get("contactId"), "contactId", AREA, 100)
        conversation = work.text(fields.get("conversation"), "conversation", AREA, 300)
        if not (add or drop or outputs or project is not None or contact or conversation):
            raise rejected(
                AREA,
                "nothing-to-relate",
                'Nothing to relate: give dependsOn, removeDependsOn, projectId ("" detaches), '
                "produced, contactId or conversation.",
            )
        if task_id in add:
            raise rejected(AREA, "dependency-cycle", "A task cannot depend on itself.")
        params = {**vocabulary(caller), "id": task_id, "now": current}
        async with self.graph.transaction() as tx:
            if drop:
                await tx.run(
                    "MATCH (t:Task {id: $id})-[r:DEPENDS_ON]->(m:Task) WHERE m.id IN $drop "
                    "AND t.accountId = $account DELETE r",
                    {**params, "drop": drop},
                )
            if add:
                loops, _ = await tx.run(
                    "UNWIND $add AS dep MATCH (t:Task {id: $id}) MATCH (m:Task {id: dep}) "
                    # A deleted task is "no such" (below), never a cycle: it must not show.
                    "WHERE m.accountId = $account AND m.deletedAt IS NULL "
                    "AND EXISTS { MATCH (m)-[:DEPENDS_ON*1..]->(t) } RETURN dep",
                    {**params, "add": add},
                )
                if loops:
                    raise rejected(
                        AREA,
                        "dependency-cycle",
                        f"Task {loops[0]['dep']} already waits, directly or not, for this task: "
                        "depending on it would go round in a circle.",
                    )
            if project is not None:
                await tx.run(
                    "MATCH (t:Task {id: $id})-[r:PART_OF]->() WHERE t.accountId = $account "
                    "DELETE r",
                    params,
                )
            item = NewTask(
                task_id,
                {},
                project_id=work.text(project, "projectId", AREA, 100),
                depends_on=add,
                contact_id=contact,
                conversation=conversation,
            )
            await _relink(tx, caller, item, params)
            await _produced(tx, params, outputs)
            await tx.run(
                "MATCH (t:Task {id: $id}) WHERE t.accountId = $account SET t.updatedAt = $now",
                params,
            )
        task = await self.get(caller, task_id, "relate", current)
        log.info(
            "[tasks] op=relate id=%s depends=+%d-%d project=%s produced=%d",
            task_id,
            len(add),
            len(drop),
            project,
            len(outputs),
        )
        return {"id": task_id, "task": task}

    async def complete(
        self,
        caller: Caller,
        task_id: str,
        outputs: object = None,
        note: object = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Mark a task done with what it produced; answer it, its outputs and what is now ready."""
        work.owner_only(caller, AREA, "complete")
        current = self.now(now)
        old = await self.stored(caller, task_id, "complete")
        targets = _outputs(outputs)
        text = work.text(note, "note", AREA)
        changed = old["status"] != "done"
        params = {**vocabulary(caller), "id": task_id, "now": current}
        async with self.graph.transaction() as tx:
            await _produced(tx, params, targets)
            if changed:
                await self._set(
                    tx, caller, task_id, old, {"completedAt": current}, [], "done", text, current
                )
        task = await self.get(caller, task_id, "complete", current)
        rows, _ = await self.graph.run(
            f"MATCH (t:Task)-[:DEPENDS_ON]->(:Task {{id: $id}}) WHERE {work.OWNER_TASK} "
            f"AND t.status IN $readyStatuses RETURN {VIEW}",
            vocabulary(caller) | {"id": task_id},
        )
        today = self.today(current)
        unblocked = sorted((t for t in (view(r, today) for r in rows) if t["ready"]), key=pressing)
        log.info(
            "[tasks] op=complete id=%s changed=%s outputs=%d produced=%d unblocked=%d",
            task_id,
            changed,
            len(targets),
            len(task.get("produced", [])),
            len(unblocked),
        )
        return {
            "id": task_id,
            "changed": changed,
            "task": task,
            "produced": task.get("produced", []),
            "unblocked": [{"id": t["id"], "name": t["name"]} for t in unblocked],
        }

    # --- internals -------------------------------------------------------------------------

    async def stored(self, caller: Caller, task_id: str, op: str) -> dict[str, Any]:
        """A task's stored properties (what embedding and status changes start from)."""
        if not isinstance(task_id, str) or not task_id.strip():
            raise rejected(AREA, "missing-id", f"Give the task's id ({FIND_HINT})")
        rows, _ = await self.graph.read(
            f"MATCH (t:Task {{id: $id}}) WHERE {work.OWNER_TASK} "
            # Only text: instants come back as ISO strings, and an embedding reads text only.
            "RETURN t {.*, embedding: null} AS props, "
            "[k IN keys(t) WHERE t[k] IS :: STRING OR t[k] IS :: LIST<ANY>] AS textual",
            {**caller.params(), "id": task_id},
        )
        if not rows:
            raise work.not_found(AREA, "task", task_id, op, FIND_HINT)
        props, textual = rows[0]["props"], set(rows[0]["textual"])
        return {k: v for k, v in props.items() if k in textual}

    async def _write(
        self,
        caller: Caller,
        task_id: str,
        old: Mapping[str, Any],
        props: dict[str, Any],
        remove: list[str],
        status: str,
        note: str | None,
        now: datetime,
    ) -> None:
        async with self.graph.transaction() as tx:
            await self._set(tx, caller, task_id, old, props, remove, status, note, now)

    async def _set(
        self,
        tx: Transaction,
        caller: Caller,
        task_id: str,
        old: Mapping[str, Any],
        props: dict[str, Any],
        remove: list[str],
        status: str,
        note: str | None,
        now: datetime,
    ) -> None:
        """Set a task's new properties and status (re-embedded), and log the change."""
        moved = status != old["status"]
        props = dict(props)
        if moved:
            props.update(status=status, statusChangedAt=now)
            if status == "in_progress":
                props["workingSession"] = caller.session_id
                props.setdefault("startedAt", now)
            elif old["status"] == "in_progress":
                remove = [*remove, "workingSession"]
            if old["status"] == "done":
                remove = [*remove, "completedAt"]
        merged = {k: v for k, v in {**old, **props}.items() if k not in remove}
        vectors, _ = await work.embedding(self.embed, self.model_name, "Task", merged)
        cleared = {key: None for key in remove}
        await tx.run(
            "MATCH (t:Task {id: $id}) WHERE t.accountId = $account "
            "SET t += $props, t.updatedAt = $now",
            {
                "id": task_id,
                "account": caller.account_id,
                "props": {**props, **vectors, **cleared},
                "now": now,
            },
        )
        if moved or note:
            await tx.run(
                "MATCH (t:Task {id: $id}) WHERE t.accountId = $account "
                "SET t.logged = coalesce(t.logged, 0) + 1 "
                "CREATE (t)-[:HAS_PROGRESS]->(e:ProgressEntry {id: $eid, accountId: $account, "
                "scope: 'admin', at: $now, createdAt: $now, order: t.logged}) "
                "SET e.text = $text, e.status = $status, e.from = $from, e.sessionId = $session, "
                "e.name = $name",
                {
                    "id": task_id,
                    "eid": str(uuid.uuid4()),
                    "account": caller.account_id,
                    "now": now,
                    "text": note,
                    "status": status if moved else None,
                    "from": old["status"] if moved else None,
                    "session": caller.session_id,
                    # What the Graph shows for the entry.
                    "name": work.clip(note or f"{old['status']} → {status}", work.ENTRY_NAME_CHARS),
                },
            )


async def _relink(
    tx: Transaction, caller: Caller, item: NewTask, params: Mapping[str, Any]
) -> None:
    """The edges of ``item`` onto an existing task (dependencies, project, contact, chat)."""
    await _link(
        tx,
        params,
        [{"from": item.id, "to": d} for d in item.depends_on],
        "DEPENDS_ON",
        "Task",
        work.owner_task("m"),
        "task",
        FIND_HINT,
    )
    if item.project_id:
        await _link(
            tx,
            params,
            [{"from": item.id, "to": item.project_id}],
            "PART_OF",
            "Project",
            guard("m"),
            "project",
            "project-list",
        )
    if item.contact_id:
        await _link(
            tx,
            params,
            [{"from": item.id, "to": item.contact_id}],
            "CONCERNS",
            "Person",
            guard("m"),
            "contact",
            "contact-lookup",
        )
    if item.conversation:
        found, _ = await tx.run(
            "MATCH (t:Task {id: $id}) MATCH (m:Conversation {accountId: $account, "
            f"sessionId: $session}}) WHERE {guard('m')} MERGE (t)-[:FOLLOWS_UP]->(m) "
            "RETURN m.id AS id",
            {**params, "session": item.conversation},
        )
        if not found:
            raise rejected(
                AREA,
                "conversation-not-found",
                f"No conversation of session {item.conversation} in this account to follow up.",
            )


async def _produced(
    tx: Transaction, params: Mapping[str, Any], targets: Sequence[Mapping[str, str]]
) -> None:
    """``(task)-[:PRODUCED]->(output)`` for each target; refused naming one not found."""
    for target in targets:
        found, _ = await tx.run(
            f"MATCH (t:Task {{id: $id}}) WHERE t.accountId = $account "
            f"MATCH (n:`{target['label']}` {{id: $out}}) WHERE {guard('n')} "
            "MERGE (t)-[:PRODUCED]->(n) RETURN n.id AS id",
            {**params, "out": target["id"]},
        )
        if not found:
            raise rejected(
                AREA,
                "output-not-found",
                f"No {target['label']} with id {target['id']} in this account to attach as the "
                "task's output; nothing was written.",
                id=target["id"],
            )


def _ids(value: object, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_DEPENDENCIES:
        raise rejected(
            AREA, f"invalid-{field}", f"{field} is a list of at most {MAX_DEPENDENCIES} task ids."
        )
    return [str(v) for v in dict.fromkeys(value) if str(v).strip()]


def _outputs(value: object) -> list[dict[str, str]]:
    """Outputs named as ``[{label, id}]`` (a node of the graph that is not a work item)."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_OUTPUTS:
        raise rejected(
            AREA, "invalid-outputs", f"Outputs are a list of at most {MAX_OUTPUTS} {{label, id}}."
        )
    found = []
    for item in value:
        label = item.get("label") if isinstance(item, Mapping) else None
        node_id = item.get("id") if isinstance(item, Mapping) else None
        if (
            not isinstance(label, str)
            or label not in writable_labels()
            or label in NOT_OUTPUT
            or not isinstance(node_id, str)
            or not node_id
        ):
            raise rejected(
                AREA,
                "invalid-outputs",
                f"An output is {{label, id}} of a node the task made (a KnowledgeDocument, "
                f"Report, EmailMessage, Note…), not {item!r}.",
            )
        found.append({"label": label, "id": node_id})
    return found


def _group_order(group: Mapping[str, Any]) -> tuple[int, str, str]:
    """Groups: the one with the most pressing task first; tasks of no project last on ties."""
    first = group["tasks"][0]
    rank = work.PRIORITY_RANK.get(first.get("priority", ""), 9)
    due = first.get("dueDate") or "9999-12-31"
    return rank, due, (group["project"] or {}).get("name") or "~"
