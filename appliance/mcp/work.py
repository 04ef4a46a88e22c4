"""The ``projects`` and ``tasks`` plugins' tools: the owner's projects, work items and the ready
set, all engine-backed (:mod:`appliance.rpc.work`, :mod:`appliance.memory.projects`,
:mod:`appliance.memory.tasks`). None is public: a visitor's agent never sees the owner's work.

Why two plugins: projects are planned and reviewed now and then (the project-manager role),
while tasks are the daily "what's outstanding?" loop every session may run — the split lets
either be read, and its instructions kept short, on its own.
"""

from __future__ import annotations

from appliance.mcp.tool import ALWAYS_LOAD, LARGE_RESULT, Tool
from appliance.rpc import work as api

PROJECT_TOOLS: tuple[Tool, ...] = (
    Tool(
        name="project-create",
        plugin="projects",
        method=api.PROJECT_CREATE,
        description=(
            "Create a project with all its work items and their dependencies in one step (one "
            "transaction: if anything is refused — an unknown dependency, a stakeholder who is "
            "not a contact, a circle of dependencies — nothing is written). Items depend on "
            "each other by key or exact name, or on existing tasks by id. Answers the project "
            "with its health and which items are ready."
        ),
        meta=LARGE_RESULT,
        forwarded=(
            "name",
            "description",
            "tier",
            "phase",
            "targetDate",
            "stakeholderId",
            "items",
        ),
        produces="id",
        produces_label="Project",
    ),
    Tool(
        name="project-list",
        plugin="projects",
        method=api.PROJECT_LIST,
        description=(
            "List projects (the open ones unless phases are named), worst health first: each "
            "with its health (green, amber, red) and why, counts of its tasks and what is next."
        ),
        meta={**ALWAYS_LOAD, **LARGE_RESULT},
        forwarded=("phases", "limit"),
    ),
    Tool(
        name="project-status",
        plugin="projects",
        method=api.PROJECT_STATUS,
        description=(
            "One project in full: health and why, its tasks (ready ones marked, overdue ones "
            "flagged), open issues and its history of phase changes, delays and issues."
        ),
        meta=LARGE_RESULT,
        forwarded=("id",),
    ),
    Tool(
        name="project-update",
        plugin="projects",
        method=api.PROJECT_UPDATE,
        description=(
            "Change a project: phase (planning, active, blocked, verifying), tier, target date "
            "or a delay in days, stakeholder, name or description; raise an issue or resolve "
            "one. Every change is kept in its history with the note given."
        ),
        forwarded=(
            "id",
            "name",
            "description",
            "phase",
            "tier",
            "targetDate",
            "delayDays",
            "stakeholderId",
            "issue",
            "resolveIssue",
            "note",
        ),
        produces="id",
        produces_label="Project",
    ),
    Tool(
        name="project-complete",
        plugin="projects",
        method=api.PROJECT_COMPLETE,
        description=(
            "Complete a project. If work is still open it answers the pending items and a "
            "question instead: ask the owner whether to cancel, defer or keep them, then call "
            "again with pending set to their answer."
        ),
        forwarded=("id", "pending", "note"),
        produces="id",
        produces_label="Project",
    ),
    Tool(
        name="project-abandon",
        plugin="projects",
        method=api.PROJECT_ABANDON,
        description=(
            "Abandon a project, with the owner's reason; the work left on it is cancelled."
        ),
        forwarded=("id", "reason"),
        produces="id",
        produces_label="Project",
    ),
)

TASK_TOOLS: tuple[Tool, ...] = (
    Tool(
        name="work-ready",
        plugin="tasks",
        method=api.WORK_READY,
        description=(
            "What can be picked up now: open tasks whose dependencies are all done, grouped by "
            'project, most pressing first. Start here for "what\'s outstanding?".'
        ),
        meta={**ALWAYS_LOAD, **LARGE_RESULT},
        forwarded=("projectId", "limit"),
    ),
    Tool(
        name="task-list",
        plugin="tasks",
        method=api.TASK_LIST,
        description=(
            "List the owner's tasks (to do by default; all, or one status), optionally of one "
            "project, most pressing first, each saying whether it is ready or overdue."
        ),
        meta={**ALWAYS_LOAD, **LARGE_RESULT},
        forwarded=("projectId", "status", "limit"),
    ),
    Tool(
        name="task-create",
        plugin="tasks",
        method=api.TASK_CREATE,
        description=(
            "Add a task to the owner's work: name, priority, due date, the project it is part "
            "of, the tasks it waits for, a contact it concerns or a conversation it follows up."
        ),
        meta=ALWAYS_LOAD,
        forwarded=(
            "name",
            "description",
            "priority",
            "dueDate",
            "projectId",
            "dependsOn",
            "contactId",
            "conversation",
        ),
        produces="id",
        produces_label="Task",
    ),
    Tool(
        name="task-update",
        plugin="tasks",
        method=api.TASK_UPDATE,
        description=(
            "Change a task's details or status, or add a progress note. Set status in_progress "
            "when you start on it: what you then write in this session is linked to it as its "
            "output. Use task-complete to finish it."
        ),
        meta=ALWAYS_LOAD,
        forwarded=("id", "name", "description", "status", "priority", "dueDate", "note"),
        produces="id",
        produces_label="Task",
    ),
    Tool(
        name="task-relate",
        plugin="tasks",
        method=api.TASK_RELATE,
        description=(
            'Link a task: tasks it waits for (or no longer does), its project ("" detaches), '
            "nodes it produced, a contact, a conversation. A dependency that would go round in "
            "a circle is refused."
        ),
        forwarded=(
            "id",
            "dependsOn",
            "removeDependsOn",
            "projectId",
            "produced",
            "contactId",
            "conversation",
        ),
        produces="id",
        produces_label="Task",
    ),
    Tool(
        name="task-complete",
        plugin="tasks",
        method=api.TASK_COMPLETE,
        description=(
            "Mark a task done, naming what it produced (documents, reports, emails, files) as "
            "outputs. Answers everything the task produced and the tasks now ready because of it."
        ),
        meta=ALWAYS_LOAD,
        forwarded=("id", "outputs", "note"),
        produces="id",
        produces_label="Task",
    ),
)
