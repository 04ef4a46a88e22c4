"""The contract of the owner's work: the ``projects`` and ``tasks`` plugins' engine methods, and
the review of ended visitor conversations that turns a lead into a contact and a follow-up task.

Declared here, listed with every other method in :mod:`appliance.rpc.engine` (``METHODS``).
Enumerated values (a phase, a priority…) are advertised in the schemas and checked by the
engine itself (:mod:`appliance.memory.work`), which says what the accepted words are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, JsonValue

from appliance.rpc.calls import Called, clock_field
from appliance.rpc.contract import Method, Request, Response

PHASES: list[JsonValue] = ["planning", "active", "blocked", "verifying", "complete", "abandoned"]
OPEN_PHASES: list[JsonValue] = ["planning", "active", "blocked", "verifying"]
TIERS: list[JsonValue] = ["quick", "standard", "full"]
PRIORITIES: list[JsonValue] = ["urgent", "high", "normal", "low"]
STATUSES: list[JsonValue] = ["open", "in_progress", "blocked", "deferred", "done", "cancelled"]
_DAY = "A day, YYYY-MM-DD (time-resolve turns words into a date)."


def _enum(values: list[JsonValue], description: str | None = None) -> Any:
    return Field(default=None, description=description, json_schema_extra={"enum": values})


def _text(description: str | None = None, limit: int = 4000) -> Any:
    return Field(default=None, description=description, json_schema_extra={"maxLength": limit})


# --- projects ----------------------------------------------------------------------------


class ProjectItem(Request):
    """One work item of a new project."""

    key: str | None = Field(
        default=None, description="A short name other items' dependsOn can use (e.g. 'tiles')."
    )
    name: str = Field(description="What is to be done.", json_schema_extra={"maxLength": 300})
    description: str | None = _text()
    priority: str | None = _enum(PRIORITIES, "Default normal.")
    due_date: str | None = Field(default=None, description=_DAY)
    depends_on: list[str] = Field(
        default_factory=list,
        description="Items this one waits for: another item's key or exact name, or an "
        "existing task's id.",
    )


class ProjectCreateRequest(Called):
    """A project with all its work items and their dependencies, written in one transaction."""

    name: str = Field(description="The project's name.", json_schema_extra={"maxLength": 300})
    description: str | None = _text("The goal, in a sentence or two.")
    tier: str | None = _enum(TIERS, "How much ceremony: quick, standard (default) or full.")
    phase: str | None = _enum(OPEN_PHASES, "Default planning.")
    target_date: str | None = Field(default=None, description="When it should be done. " + _DAY)
    stakeholder_id: str | None = Field(
        default=None, description="The client or stakeholder: a contact's id (contact-lookup)."
    )
    items: list[ProjectItem] = Field(default_factory=list, description="Its work items.")
    now: datetime | None = clock_field()


class ProjectWritten(Response):
    """The project as it now stands (health, tasks, issues, history)."""

    id: str
    project: dict[str, Any]
    warnings: list[str] = Field(default_factory=list)


class ProjectRef(Called):
    """One project by id."""

    id: str = Field(description="The project's id (project-list).")
    now: datetime | None = clock_field()


class ProjectListRequest(Called):
    """Projects of some phases, worst health first."""

    phases: list[str] | None = Field(
        default=None,
        description="Only these phases (default: the open ones).",
        json_schema_extra={"items": {"type": "string", "enum": PHASES}},
    )
    limit: int | None = Field(default=None, json_schema_extra={"minimum": 1, "maximum": 100})
    now: datetime | None = clock_field()


class ProjectListResponse(Response):
    """Each: ``{id, name, phase, tier, targetDate?, health, reasons, counts, next, …}``."""

    projects: list[dict[str, Any]]
    total: int
    truncated: bool


class ProjectUpdateRequest(Called):
    """Change a project; each change is kept in its history."""

    id: str = Field(description="The project's id.")
    name: str | None = _text(limit=300)
    description: str | None = _text()
    phase: str | None = _enum(OPEN_PHASES, "project-complete and project-abandon close one.")
    tier: str | None = _enum(TIERS)
    target_date: str | None = Field(default=None, description=_DAY + ' "" clears it.')
    delay_days: int | None = Field(
        default=None,
        description="Move the target date this many days later (negative: earlier).",
        json_schema_extra={"minimum": -3650, "maximum": 3650},
    )
    stakeholder_id: str | None = Field(default=None, description='A contact\'s id; "" removes.')
    issue: str | None = _text("Raise an issue (it stays open until resolved).")
    resolve_issue: str | None = Field(default=None, description="An open issue's id to resolve.")
    note: str | None = _text("Why (kept with the history entries of this change).")
    now: datetime | None = clock_field()


class ProjectCompleteRequest(Called):
    """Complete a project; what to do with work still open."""

    id: str = Field(description="The project's id.")
    pending: str = Field(
        default="ask",
        description="Open items: ask (default: answer them and ask the owner), cancel, defer "
        "(out of the ready set, kept) or keep (left open).",
        json_schema_extra={"enum": ["ask", "cancel", "defer", "keep"], "default": "ask"},
    )
    note: str | None = _text()
    now: datetime | None = clock_field()


class ProjectCompleteResponse(Response):
    """``completed: false`` with ``pending`` and ``question`` when the owner must choose."""

    id: str
    completed: bool
    pending: list[dict[str, Any]]
    question: str | None = None
    pending_done: str | None = None
    project: dict[str, Any] | None = None


class ProjectAbandonRequest(Called):
    """Abandon a project, saying why."""

    id: str = Field(description="The project's id.")
    reason: str = Field(description="Why it is abandoned.", json_schema_extra={"maxLength": 4000})
    now: datetime | None = clock_field()


class ProjectAbandonResponse(Response):
    """How many open tasks were cancelled with it."""

    id: str
    cancelled: int
    project: dict[str, Any]


# --- tasks -------------------------------------------------------------------------------


class OutputRef(Request):
    """A node a task produced."""

    label: str = Field(description="Its label, e.g. KnowledgeDocument, Report, EmailMessage.")
    id: str


class TaskCreateRequest(Called):
    """A task of the owner's work."""

    name: str = Field(description="What is to be done.", json_schema_extra={"maxLength": 300})
    description: str | None = _text()
    priority: str | None = _enum(PRIORITIES, "Default normal.")
    due_date: str | None = Field(default=None, description=_DAY)
    project_id: str | None = Field(default=None, description="The project it is part of.")
    depends_on: list[str] = Field(default_factory=list, description="Ids of tasks it waits for.")
    contact_id: str | None = Field(default=None, description="A contact it concerns.")
    conversation: str | None = Field(
        default=None, description="The session id of a conversation it follows up."
    )
    source: str | None = None
    now: datetime | None = clock_field()


class TaskWritten(Response):
    """The task as it now stands."""

    id: str
    task: dict[str, Any]
    warnings: list[str] = Field(default_factory=list)


class TaskUpdateRequest(Called):
    """Change a task; a status change and a note go in its progress log."""

    id: str = Field(description="The task's id (task-list, work-ready).")
    name: str | None = _text(limit=300)
    description: str | None = _text(description='"" clears it.')
    status: str | None = _enum(
        STATUSES,
        "in_progress starts it in this session (what the session then writes is linked to "
        "it); done is task-complete's.",
    )
    priority: str | None = _enum(PRIORITIES)
    due_date: str | None = Field(default=None, description=_DAY + ' "" clears it.')
    note: str | None = _text("A progress note (or why the status changed).")
    now: datetime | None = clock_field()


class TaskListRequest(Called):
    """The owner's tasks, most pressing first."""

    project_id: str | None = None
    status: str = Field(
        default="todo",
        description="todo (open, in progress or blocked; default), all, or one status.",
        json_schema_extra={"enum": ["todo", "all", *STATUSES], "default": "todo"},
    )
    limit: int | None = Field(default=None, json_schema_extra={"minimum": 1, "maximum": 200})
    now: datetime | None = clock_field()


class TaskListResponse(Response):
    """Each: ``{id, name, status, priority, dueDate?, overdue, ready, project?, dependsOn?, …}``."""

    tasks: list[dict[str, Any]]
    total: int
    truncated: bool


class TaskRelateRequest(Called):
    """Link a task to what it waits for, its project, what it produced, a contact, a chat."""

    id: str = Field(description="The task's id.")
    depends_on: list[str] | None = Field(default=None, description="Add: tasks it waits for.")
    remove_depends_on: list[str] | None = Field(default=None, description="Remove these.")
    project_id: str | None = Field(default=None, description='Its project; "" detaches it.')
    produced: list[OutputRef] | None = Field(default=None, description="Nodes it produced.")
    contact_id: str | None = None
    conversation: str | None = Field(default=None, description="A conversation's session id.")
    now: datetime | None = clock_field()


class TaskCompleteRequest(Called):
    """Mark a task done, attaching what it produced."""

    id: str = Field(description="The task's id.")
    outputs: list[OutputRef] | None = Field(
        default=None, description="What it produced (documents, reports, emails, files…)."
    )
    note: str | None = _text()
    now: datetime | None = clock_field()


class TaskCompleteResponse(Response):
    """Everything the task produced, and the tasks its completion made ready."""

    id: str
    changed: bool
    task: dict[str, Any]
    produced: list[dict[str, Any]]
    unblocked: list[dict[str, Any]]


class WorkReadyRequest(Called):
    """The ready set: what can be picked up now."""

    project_id: str | None = None
    limit: int | None = Field(default=None, json_schema_extra={"minimum": 1, "maximum": 200})
    now: datetime | None = clock_field()


class WorkReadyResponse(Response):
    """Groups ``{project: {id, name, phase} | null, tasks}``, the most pressing first."""

    groups: list[dict[str, Any]]
    total: int
    truncated: bool


# --- visitor leads -----------------------------------------------------------------------


class ConversationEndedRequest(Called):
    """Visitors' conversations that ended (no message since ``before``), not yet reviewed."""

    before: datetime
    limit: int = Field(default=20, json_schema_extra={"minimum": 1, "maximum": 100})


class ConversationEndedResponse(Response):
    """Each: ``{sessionId, agentSlug, lastAt, messages}``, oldest first."""

    conversations: list[dict[str, Any]]


class ConversationReviewedRequest(Called):
    """Mark a visitor's conversation reviewed, with what the review found."""

    session_id: str
    outcome: str = Field(
        description="lead (a contact and a follow-up were written), none, or delegated (to "
        "the public-session-reviewer role).",
        json_schema_extra={"enum": ["lead", "none", "delegated"]},
    )
    task_id: str | None = None
    person_id: str | None = None
    now: datetime | None = clock_field()


class ConversationReviewedResponse(Response):
    """``changed`` is false when it had been reviewed already."""

    session_id: str
    changed: bool


PROJECT_CREATE = Method(
    "project.create",
    ProjectCreateRequest,
    ProjectWritten,
    "A project with its items and dependencies, in one step.",
)
PROJECT_LIST = Method(
    "project.list", ProjectListRequest, ProjectListResponse, "Projects, by health."
)
PROJECT_STATUS = Method("project.status", ProjectRef, ProjectWritten, "One project in full.")
PROJECT_UPDATE = Method(
    "project.update", ProjectUpdateRequest, ProjectWritten, "Change a project (kept in history)."
)
PROJECT_COMPLETE = Method(
    "project.complete",
    ProjectCompleteRequest,
    ProjectCompleteResponse,
    "Complete a project (asks about open items).",
)
PROJECT_ABANDON = Method(
    "project.abandon", ProjectAbandonRequest, ProjectAbandonResponse, "Abandon a project."
)
TASK_CREATE = Method("task.create", TaskCreateRequest, TaskWritten, "Add a task.")
TASK_UPDATE = Method("task.update", TaskUpdateRequest, TaskWritten, "Change a task.")
TASK_LIST = Method("task.list", TaskListRequest, TaskListResponse, "The owner's tasks.")
TASK_RELATE = Method("task.relate", TaskRelateRequest, TaskWritten, "Link a task.")
TASK_COMPLETE = Method(
    "task.complete", TaskCompleteRequest, TaskCompleteResponse, "Finish a task with its output."
)
WORK_READY = Method("work.ready", WorkReadyRequest, WorkReadyResponse, "The ready set.")
CONVERSATION_ENDED = Method(
    "conversation.ended",
    ConversationEndedRequest,
    ConversationEndedResponse,
    "Visitors' ended conversations to review.",
)
CONVERSATION_REVIEWED = Method(
    "conversation.reviewed",
    ConversationReviewedRequest,
    ConversationReviewedResponse,
    "Mark a visitor's conversation reviewed.",
)

METHODS: tuple[Method[Any, Any], ...] = (
    PROJECT_CREATE,
    PROJECT_LIST,
    PROJECT_STATUS,
    PROJECT_UPDATE,
    PROJECT_COMPLETE,
    PROJECT_ABANDON,
    TASK_CREATE,
    TASK_UPDATE,
    TASK_LIST,
    TASK_RELATE,
    TASK_COMPLETE,
    WORK_READY,
    CONVERSATION_ENDED,
    CONVERSATION_REVIEWED,
)
