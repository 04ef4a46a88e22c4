"""What the owner's projects and tasks share: their words, their checks, their embedding.

**Owner tasks and audit tasks.** Both are ``Task`` nodes: the label keeps one vector index, one
keyword index and one search route for "what was done", and a session's audit trail and the
owner's work list stay one hop apart (``PRODUCED``). They are told apart by ``kind``: a task of
the owner's work is ``kind: "owner"`` (written only by :mod:`appliance.memory.tasks` and
:mod:`appliance.memory.projects`), a durable MCP call's record is ``kind: "audit"``
(:mod:`appliance.memory.audit`), a CLI command's record names its command
(``cloudflare-tunnel-create``). Every read of the owner's work matches ``kind = "owner"``
(:data:`OWNER_TASK`), a positive match: records made before kinds existed, or written by
``memory-write`` without one, never enter a work list, the ready set or a project's health, and
the owner's tasks never pass for tool calls. A second label would have forked the indexes and
left every existing record to migrate; ``kind`` already carried the command's name on records.

**Who may.** Projects and tasks are the owner's: only a caller with every scope and no agent
(the owner's agent, the admin pages, the app's own review pass) reads or writes them; a public
agent or a visitor is refused outright.

**Dates.** A due date or a target date is a whole day in the owner's time zone, stored as
``YYYY-MM-DD``; an ISO 8601 date-time given for one becomes its day in that zone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from appliance.core.clock import Clock, TimeZoneError, read_instant
from appliance.core.identity import Caller
from appliance.memory.chunking import content_hash
from appliance.memory.errors import EngineError, WriteRejected, rejected
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.health import OPEN_PHASES, TO_DO
from appliance.memory.reindex import reindex_text
from appliance.memory.write import RESERVED, EmbedText

log = logging.getLogger(__name__)

OWNER_KIND = "owner"
STATUSES = ("open", "in_progress", "blocked", "deferred", "done", "cancelled")
CLOSED = ("done", "cancelled")
# A task may be picked up when it is one of these and every task it depends on is CLOSED.
READY_STATUSES = ("open", "in_progress")
PRIORITIES = ("urgent", "high", "normal", "low")
PRIORITY_RANK = {name: rank for rank, name in enumerate(PRIORITIES)}
DEFAULT_PRIORITY = "normal"
PHASES = (*OPEN_PHASES, "complete", "abandoned")
TIERS = ("quick", "standard", "full")
# A project in one of these phases holds its tasks back from the ready set.
HOLDING_PHASES = ("blocked", "abandoned")
MAX_NAME_CHARS = 300
MAX_TEXT_CHARS = 4000

__all__ = ["CLOSED", "OPEN_PHASES", "TO_DO"]


def owner_task(var: str) -> str:
    """Cypher: the node bound to ``var`` is a visible task of the owner's work."""
    return f"({guard(var)} AND {var}.kind = '{OWNER_KIND}')"


OWNER_TASK = owner_task("t")


#: How long the name a progress or history entry shows in the Graph may be.
ENTRY_NAME_CHARS = 120


def clip(text: object, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def owner_only(caller: Caller, area: str, op: str) -> None:
    """Refuse any caller but the owner's own (every scope, no agent)."""
    if caller.scopes is not None or caller.agent is not None:
        raise rejected(
            area,
            "not-owner",
            "Projects and tasks are the owner's: this caller (a public agent or a visitor) may "
            "not use them.",
            op=op,
        )


def text(
    value: object, field: str, area: str, limit: int = MAX_TEXT_CHARS, required: bool = False
) -> str | None:
    """A trimmed text, None when absent or blank (refused when ``required``) or too long."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise rejected(area, f"empty-{field}", f"{field} is needed (a few words).")
        return None
    if not isinstance(value, str):
        raise rejected(area, f"invalid-{field}", f"{field} must be a text.")
    cleaned = value.strip()
    if len(cleaned) > limit:
        raise rejected(
            area,
            f"{field}-too-long",
            f"{field} is {len(cleaned):,} characters; the limit is {limit:,}.",
        )
    return cleaned


def choice(value: object, allowed: tuple[str, ...], field: str, area: str) -> str:
    """One of ``allowed`` (any case), or a refusal listing them."""
    word = (
        value.strip().lower().replace("-", "_").replace(" ", "_") if isinstance(value, str) else ""
    )
    if word not in allowed:
        raise rejected(
            area,
            f"invalid-{field}",
            f"{field} {value!r} is not one of {', '.join(allowed)}.",
        )
    return word


def day(value: object, zone: ZoneInfo, field: str, area: str) -> str:
    """A date as ``YYYY-MM-DD`` in the owner's zone (a date-time becomes its day there)."""
    raw = value.strip() if isinstance(value, str) else value
    if isinstance(raw, str) and len(raw) == 10:
        try:
            return date.fromisoformat(raw).isoformat()
        except ValueError:
            pass
    try:
        return read_instant(raw, zone, field).astimezone(zone).date().isoformat()
    except TimeZoneError as err:
        raise rejected(
            area,
            f"invalid-{field}",
            f"{field} {value!r} is not a date: give YYYY-MM-DD (time-resolve turns words like "
            "'next Friday' into one).",
        ) from err


def read_day(value: object) -> date | None:
    """A stored ``YYYY-MM-DD`` as a date (None when absent or unreadable)."""
    if isinstance(value, str):
        try:
            return date.fromisoformat(value[:10])
        except ValueError:
            return None
    return None


def read_time(value: object) -> datetime | None:
    """A stored instant (ISO 8601 from the driver) as an aware datetime."""
    if not isinstance(value, str):
        return None
    try:
        found = datetime.fromisoformat(value)
    except ValueError:
        return None
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)


def utc(now: datetime) -> datetime:
    """An instant in UTC (the driver cannot send a zoneinfo zone)."""
    return now.astimezone(UTC) if now.tzinfo is not None else now.replace(tzinfo=UTC)


class OwnerWork:
    """What the owner's dated work (events and reminders, tasks) stands on: one account's graph,
    the embedder for what it writes, the owner's time zone (read at each call: the owner may
    change it) and ``clock``, which is now unless a call brings its own (tests, the manager's loop).
    """

    def __init__(
        self,
        graph: Graph,
        embed: EmbedText,
        model_name: str,
        owner_zone: Callable[[], ZoneInfo],
        clock: Clock,
    ) -> None:
        self.graph = graph
        self.embed = embed
        self.model_name = model_name
        self.owner_zone = owner_zone
        self.clock = clock

    def now(self, now: datetime | None) -> datetime:
        """``now``, or the clock's, as an instant in UTC."""
        return utc(now or self.clock())

    def today(self, now: datetime) -> date:
        """The owner's date at ``now``."""
        return now.astimezone(self.owner_zone()).date()


async def embedding(
    embed: EmbedText, model: str, label: str, props: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The embedding properties of a node holding ``props``, as reindex would compute them
    (best effort: none, and a warning, when the model fails)."""
    textual = {
        k: v
        for k, v in props.items()
        if k not in RESERVED and v is not None and isinstance(v, (str, list))
    }
    source = reindex_text(label, textual)
    if not source:
        return {}, []
    try:
        vector = await embed(source)
    except EngineError as err:
        log.warning("[graph-write] warn reason=embed-failed label=%s error=%s", label, err)
        return {}, ["embed-failed"]
    return {
        "embedding": vector,
        "embeddingModel": model,
        "contentHash": content_hash(source),
    }, []


def not_found(area: str, what: str, node_id: str, op: str, hint: str) -> WriteRejected:
    """The one answer for an unknown, deleted or foreign id (ids of others are never confirmed)."""
    return rejected(
        area,
        "not-found",
        f"No {what} with id {node_id} in this account. {hint}",
        op=op,
        id=node_id,
    )
