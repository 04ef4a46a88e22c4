"""The engine's handlers of the owner's dated work: projects and tasks
(:mod:`appliance.rpc.work`), visitors' conversations that ended and their review, and events and
reminders with the manager's claims of what is due (:mod:`appliance.rpc.scheduling`).

Kept apart from :mod:`appliance.memory.service` so the engine's module stays short: the
:class:`~appliance.memory.service.Engine` builds one :class:`WorkHandlers` and merges its
:attr:`~WorkHandlers.handlers` into its method table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.core.clock import utc_now
from appliance.core.identity import Caller
from appliance.memory import conversations
from appliance.memory.graph import Graph
from appliance.memory.projects import Projects
from appliance.memory.scheduling import Scheduling
from appliance.memory.tasks import Tasks
from appliance.rpc import engine as api
from appliance.rpc import work as work_api
from appliance.rpc.calls import Called
from appliance.rpc.server import Handler


def fields(call: Called) -> dict[str, Any]:
    """A call's own fields as given (camelCase), without the caller, the clock and the id."""
    return call.model_dump(by_alias=True, exclude_unset=True, exclude={"caller", "now", "id"})


class WorkHandlers:
    """Projects, tasks, events and reminders of one engine's account, as RPC handlers."""

    def __init__(
        self,
        graph: Graph,
        projects: Projects,
        tasks: Tasks,
        scheduling: Scheduling,
        caller: Callable[[Called], Caller],
    ) -> None:
        self.graph = graph
        self.projects = projects
        self.tasks = tasks
        self.scheduling = scheduling
        self.caller = caller

    @property
    def handlers(self) -> dict[str, Handler]:
        """The handlers of :mod:`appliance.rpc.work`'s and the scheduling methods."""
        w = work_api
        return {
            w.PROJECT_CREATE.name: w.PROJECT_CREATE.handler(self.project_create),
            w.PROJECT_LIST.name: w.PROJECT_LIST.handler(self.project_list),
            w.PROJECT_STATUS.name: w.PROJECT_STATUS.handler(self.project_status),
            w.PROJECT_UPDATE.name: w.PROJECT_UPDATE.handler(self.project_update),
            w.PROJECT_COMPLETE.name: w.PROJECT_COMPLETE.handler(self.project_complete),
            w.PROJECT_ABANDON.name: w.PROJECT_ABANDON.handler(self.project_abandon),
            w.TASK_CREATE.name: w.TASK_CREATE.handler(self.task_create),
            w.TASK_UPDATE.name: w.TASK_UPDATE.handler(self.task_update),
            w.TASK_LIST.name: w.TASK_LIST.handler(self.task_list),
            w.TASK_RELATE.name: w.TASK_RELATE.handler(self.task_relate),
            w.TASK_COMPLETE.name: w.TASK_COMPLETE.handler(self.task_complete),
            w.WORK_READY.name: w.WORK_READY.handler(self.work_ready),
            w.CONVERSATION_ENDED.name: w.CONVERSATION_ENDED.handler(self.conversation_ended),
            w.CONVERSATION_REVIEWED.name: w.CONVERSATION_REVIEWED.handler(
                self.conversation_reviewed
            ),
            api.EVENT_CREATE.name: api.EVENT_CREATE.handler(self.event_create),
            api.EVENT_LIST.name: api.EVENT_LIST.handler(self.event_list),
            api.EVENT_UPDATE.name: api.EVENT_UPDATE.handler(self.event_update),
            api.EVENT_CANCEL.name: api.EVENT_CANCEL.handler(self.event_cancel),
            api.REMINDER_CREATE.name: api.REMINDER_CREATE.handler(self.reminder_create),
            api.REMINDER_LIST.name: api.REMINDER_LIST.handler(self.reminder_list),
            api.REMINDER_UPDATE.name: api.REMINDER_UPDATE.handler(self.reminder_update),
            api.REMINDER_CANCEL.name: api.REMINDER_CANCEL.handler(self.reminder_cancel),
            api.SCHEDULE_CLAIM.name: api.SCHEDULE_CLAIM.handler(self.schedule_claim),
            api.SCHEDULE_FIRED.name: api.SCHEDULE_FIRED.handler(self.schedule_fired),
        }

    async def project_create(self, call: work_api.ProjectCreateRequest) -> dict[str, Any]:
        """A project with its work items and their dependencies, in one transaction."""
        return await self.projects.create(self.caller(call), fields(call), call.now)

    async def project_list(self, call: work_api.ProjectListRequest) -> dict[str, Any]:
        """Projects of some phases, worst health first."""
        return await self.projects.listing(
            self.caller(call), phases=call.phases, limit=call.limit or 100, now=call.now
        )

    async def project_status(self, call: work_api.ProjectRef) -> dict[str, Any]:
        """One project in full."""
        project = await self.projects.status(self.caller(call), call.id, call.now)
        return {"id": call.id, "project": project}

    async def project_update(self, call: work_api.ProjectUpdateRequest) -> dict[str, Any]:
        """Change a project."""
        return await self.projects.update(self.caller(call), call.id, fields(call), call.now)

    async def project_complete(self, call: work_api.ProjectCompleteRequest) -> dict[str, Any]:
        """Complete a project, or ask about the work still open on it."""
        return await self.projects.complete(
            self.caller(call), call.id, call.pending, call.note, call.now
        )

    async def project_abandon(self, call: work_api.ProjectAbandonRequest) -> dict[str, Any]:
        """Abandon a project for a reason."""
        return await self.projects.abandon(self.caller(call), call.id, call.reason, call.now)

    async def task_create(self, call: work_api.TaskCreateRequest) -> dict[str, Any]:
        """Add a task."""
        return await self.tasks.create(self.caller(call), fields(call), call.now)

    async def task_update(self, call: work_api.TaskUpdateRequest) -> dict[str, Any]:
        """Change a task."""
        return await self.tasks.update(self.caller(call), call.id, fields(call), call.now)

    async def task_list(self, call: work_api.TaskListRequest) -> dict[str, Any]:
        """The owner's tasks."""
        return await self.tasks.listing(
            self.caller(call),
            project_id=call.project_id,
            status=call.status,
            limit=call.limit or 50,
            now=call.now,
        )

    async def task_relate(self, call: work_api.TaskRelateRequest) -> dict[str, Any]:
        """Link a task to its dependencies, project, outputs, contact or conversation."""
        return await self.tasks.relate(self.caller(call), call.id, fields(call), call.now)

    async def task_complete(self, call: work_api.TaskCompleteRequest) -> dict[str, Any]:
        """Finish a task, attaching what it produced."""
        outputs = [o.model_dump() for o in call.outputs] if call.outputs is not None else None
        return await self.tasks.complete(self.caller(call), call.id, outputs, call.note, call.now)

    async def work_ready(self, call: work_api.WorkReadyRequest) -> dict[str, Any]:
        """The ready set, grouped by project."""
        return await self.tasks.ready(
            self.caller(call), project_id=call.project_id, limit=call.limit or 50, now=call.now
        )

    async def conversation_ended(self, call: work_api.ConversationEndedRequest) -> dict[str, Any]:
        """Visitors' conversations that went quiet and were not reviewed yet."""
        return await conversations.ended_conversations(
            self.graph, self.caller(call), call.before, call.limit
        )

    async def conversation_reviewed(
        self, call: work_api.ConversationReviewedRequest
    ) -> dict[str, Any]:
        """Mark a visitor's conversation reviewed."""
        return await conversations.mark_reviewed(
            self.graph,
            self.caller(call),
            call.session_id,
            call.outcome,
            call.now or utc_now(),
            call.task_id,
            call.person_id,
        )

    async def event_create(self, call: api.EventCreateRequest) -> dict[str, Any]:
        """Add an event to the owner's calendar."""
        return await self.scheduling.create(self.caller(call), "event", fields(call), call.now)

    async def event_update(self, call: api.EventUpdateRequest) -> dict[str, Any]:
        """Change an event."""
        return await self.scheduling.update(
            self.caller(call), "event", call.id, fields(call), call.now
        )

    async def event_cancel(self, call: api.ScheduledRef) -> dict[str, Any]:
        """Cancel an event."""
        return await self.scheduling.cancel(self.caller(call), "event", call.id, call.now)

    async def event_list(self, call: api.EventListRequest) -> dict[str, Any]:
        """Occurrences of events in a window."""
        return await self.scheduling.list_events(
            self.caller(call), call.since, call.until, call.limit, call.now
        )

    async def reminder_create(self, call: api.ReminderCreateRequest) -> dict[str, Any]:
        """Add a reminder."""
        return await self.scheduling.create(self.caller(call), "reminder", fields(call), call.now)

    async def reminder_update(self, call: api.ReminderUpdateRequest) -> dict[str, Any]:
        """Change a reminder."""
        return await self.scheduling.update(
            self.caller(call), "reminder", call.id, fields(call), call.now
        )

    async def reminder_cancel(self, call: api.ScheduledRef) -> dict[str, Any]:
        """Cancel a reminder."""
        return await self.scheduling.cancel(self.caller(call), "reminder", call.id, call.now)

    async def reminder_list(self, call: api.ReminderListRequest) -> dict[str, Any]:
        """Reminders of one status."""
        return await self.scheduling.list_reminders(
            self.caller(call), call.status, call.limit, call.now
        )

    async def schedule_claim(self, call: api.ScheduleClaimRequest) -> dict[str, Any]:
        """Claim what is due (the session manager fires it)."""
        return await self.scheduling.claim(self.caller(call), call.now, call.limit)

    async def schedule_fired(self, call: api.ScheduleFiredRequest) -> dict[str, Any]:
        """Record how a claimed firing went."""
        return await self.scheduling.fired(
            self.caller(call), call.id, call.session_id, call.error, call.now
        )
