"""Events and reminders: the owner's calendar and what should happen when, kept in the graph.

Two kinds, one store:

- an **event** (``Event``) is something in the calendar: ``name``, ``startDate``, optional
  ``endDate``, ``location``, ``description``; with ``remindBefore`` (minutes) it also fires that
  long before each start;
- a **reminder** (``Reminder``) fires at its ``dueDate``; its ``description`` says what to do.

Either may repeat (``rrule``, RFC 5545, :mod:`appliance.memory.recurrence`) in its ``timeZone``
(the owner's unless the call names another). Times are stored as given, in that zone
(``startDate``/``dueDate`` as ISO 8601 with offset); what fires is driven by ``nextFireAt`` (an
instant), with ``lastFiredAt``, ``lastDueAt`` and ``fireCount`` beside it.

Firing (:meth:`Scheduling.claim`, called by the session manager's loop): every active item whose
``nextFireAt`` has passed is claimed once — in one conditional write that also moves
``nextFireAt`` to the first fire time after *now*. So an item that was due several times while
the device was off fires **once**, saying how many times it missed; a one-off reminder is then
``done`` and never fires again. The manager reports the outcome (:meth:`Scheduling.fired`); a
firing that could not start a session is tried again after :data:`RETRY_AFTER`, at most
:data:`MAX_ATTEMPTS` times.

Only the owner's agent (a caller with every scope) reads or writes them; every read and write is
held to the caller's account (:mod:`appliance.memory.guards`). One log line per operation:
``[scheduling] op=create|update|cancel|list|claim|fired …``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from appliance.core.clock import TimeZoneError, load_zone, local_iso, read_instant
from appliance.core.identity import Caller
from appliance.memory.chunking import content_hash
from appliance.memory.errors import EngineError, WriteRejected, rejected
from appliance.memory.guards import guard
from appliance.memory.recurrence import RuleError, expand, missed_between, next_fire, normalize
from appliance.memory.reindex import reindex_text
from appliance.memory.work import OwnerWork
from appliance.memory.write import RESERVED

log = logging.getLogger(__name__)

Kind = Literal["event", "reminder"]
LABELS: dict[str, str] = {"event": "Event", "reminder": "Reminder"}
START: dict[str, str] = {"event": "startDate", "reminder": "dueDate"}
STATUSES = ("active", "done", "cancelled")
MAX_NAME_CHARS = 300
MAX_TEXT_CHARS = 4000
MAX_REMIND_BEFORE = 7 * 24 * 60  # minutes
LIST_DAYS = 31
MAX_OCCURRENCES = 200
MAX_LIST = 200
UPCOMING = 3
CLAIM_LIMIT = 20
RETRY_AFTER = timedelta(minutes=1)
MAX_ATTEMPTS = 3

_ITEM = "n {.*, embedding: null} AS props, labels(n) AS labels"
# Stored as instants: never text to embed (reindex reads only string and list properties).
_INSTANTS = frozenset({"nextFireAt", "lastFiredAt", "lastDueAt", "retryDueAt", "cancelledAt"})
NO_REMINDER = -1  # remindBefore in an update: stop firing before the event


def _clean_text(value: object, field: str, limit: int, required: bool = False) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip() and not required):
        return None
    if not isinstance(value, str) or not value.strip():
        raise rejected("scheduling", f"empty-{field}", f"{field} must be a non-empty text.")
    if len(value) > limit:
        raise rejected(
            "scheduling",
            f"{field}-too-long",
            f"{field} is {len(value):,} characters; the limit is {limit:,}.",
        )
    return value.strip()


def _instant(props: Mapping[str, Any], key: str) -> datetime | None:
    value = props.get(key)
    return datetime.fromisoformat(value) if isinstance(value, str) else None


class Scheduling(OwnerWork):
    """The events and reminders of one engine's account."""

    # --- helpers --------------------------------------------------------------------------

    def _zone(self, name: str | None) -> ZoneInfo:
        try:
            return self.owner_zone() if name is None else load_zone(name)
        except (TimeZoneError, ValueError) as err:
            raise rejected("scheduling", "bad-time-zone", str(err)) from err

    @staticmethod
    def _owner(caller: Caller, op: str) -> None:
        if caller.scopes is not None or caller.agent is not None:
            raise rejected(
                "scheduling",
                "not-owner",
                "Only the owner's agent keeps the calendar and reminders.",
                op=op,
            )

    @staticmethod
    def _time(text: object, zone: ZoneInfo, what: str) -> datetime:
        try:
            return read_instant(text, zone, what)
        except TimeZoneError as err:
            raise rejected("scheduling", "bad-time", str(err), field=what) from err

    @staticmethod
    def _rule(text: str | None, start: datetime, zone: ZoneInfo) -> str | None:
        if text is None or not text.strip():
            return None
        try:
            return normalize(text, start, zone)
        except RuleError as err:
            raise rejected("scheduling", "bad-rule", str(err)) from err

    def _view(self, kind: Kind, props: Mapping[str, Any], now: datetime) -> dict[str, Any]:
        """What an agent reads of one item: its times in its zone, the next few occurrences."""
        zone = load_zone(props.get("timeZone") or "UTC")
        start = datetime.fromisoformat(props[START[kind]])
        rule = props.get("rrule")
        upcoming = []
        if props.get("status") != "cancelled":
            for _, instant in zip(
                range(UPCOMING), expand(rule, start, zone, after=now), strict=False
            ):
                upcoming.append(local_iso(instant, zone))
        view: dict[str, Any] = {
            "id": props["id"],
            "kind": kind,
            "name": props.get("name"),
            "start": local_iso(start, zone),
            "timeZone": zone.key,
            "status": props.get("status") or "active",
            "upcoming": upcoming,
            "fireCount": int(props.get("fireCount") or 0),
        }
        for key in ("description", "location", "rrule", "remindBefore"):
            if props.get(key) is not None:
                view[key] = props[key]
        if props.get("endDate"):
            view["end"] = local_iso(datetime.fromisoformat(props["endDate"]), zone)
        for key, shown in (("nextFireAt", "next"), ("lastFiredAt", "lastFiredAt")):
            fired = _instant(props, key)
            if fired is not None:
                view[shown] = local_iso(fired, zone)
        return view

    def _schedule(
        self, kind: Kind, props: dict[str, Any], now: datetime, zone: ZoneInfo
    ) -> datetime | None:
        """Set ``nextFireAt`` (and ``status``) of a new or changed item; return the fire time."""
        start = datetime.fromisoformat(props[START[kind]])
        lead = props.get("remindBefore")
        if kind == "event" and lead is None:
            props["nextFireAt"] = None
            return None
        found = next_fire(props.get("rrule"), start, zone, now, timedelta(minutes=lead or 0))
        fire = found[0].astimezone(UTC) if found else None
        props["nextFireAt"] = fire
        if kind == "reminder":
            props["status"] = "active" if found else "done"
        return fire

    async def _embedding(
        self, kind: Kind, props: dict[str, Any], old: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Embed an event as reindex would, over its ``old`` properties with ``props`` set on
        them (best effort, into ``props``); a reminder has no vector index."""
        if kind != "event":
            return []
        merged = {**(old or {}), **props}
        textual = {
            k: v
            for k, v in merged.items()
            if k not in RESERVED | _INSTANTS and v is not None and isinstance(v, (str, list))
        }
        text = reindex_text("Event", textual)
        try:
            props["embedding"] = await self.embed(text)
        except EngineError as err:
            log.warning("[graph-write] warn reason=embed-failed label=Event error=%s", err)
            props["embedding"] = None
            return ["embed-failed"]
        props["embeddingModel"], props["contentHash"] = self.model_name, content_hash(text)
        return []

    async def _find(self, caller: Caller, kind: Kind, item_id: str, op: str) -> dict[str, Any]:
        rows, _ = await self.graph.run(
            f"MATCH (n:{LABELS[kind]} {{id: $id}}) WHERE {guard('n')} RETURN {_ITEM}",
            {**caller.params(), "id": item_id},
        )
        if not rows:
            raise rejected(
                "scheduling",
                "not-found",
                f"No {kind} with id {item_id} in this account ({kind}-list shows them).",
                op=op,
                id=item_id,
            )
        props: dict[str, Any] = rows[0]["props"]
        return props

    # --- create, update, cancel -----------------------------------------------------------

    async def create(
        self,
        caller: Caller,
        kind: Kind,
        fields: Mapping[str, Any],
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Create an event or a reminder from the call's fields; answer it as an agent reads it."""
        self._owner(caller, "create")
        current = self.now(now)
        zone = self._zone(fields.get("timeZone"))
        props = self._fields(kind, fields, zone, {})
        start = datetime.fromisoformat(props[START[kind]])
        if kind == "reminder" and props.get("rrule") is None and start <= current:
            raise rejected(
                "scheduling",
                "in-the-past",
                f"That time ({local_iso(start, zone)}) has passed; it is now "
                f"{local_iso(current, zone)}. Resolve the time again (time-resolve).",
            )
        props.update(
            id=str(uuid.uuid4()),
            status="active",
            fireCount=0,
            createdAt=current,
            updatedAt=current,
            scope="admin",
            sessionId=caller.session_id,
        )
        self._schedule(kind, props, current, zone)
        warnings = await self._embedding(kind, props)
        await self.graph.run(
            f"CREATE (n:{LABELS[kind]}) SET n = $props, n.accountId = $account",
            {**caller.params(), "props": {k: v for k, v in props.items() if v is not None}},
        )
        log.info(
            "[scheduling] op=create kind=%s id=%s rule=%s next=%s",
            kind,
            props["id"],
            bool(props.get("rrule")),
            props.get("nextFireAt") and props["nextFireAt"].isoformat(),
        )
        return {**self._view(kind, self._stored(props), current), "warnings": warnings}

    @staticmethod
    def _stored(props: Mapping[str, Any]) -> dict[str, Any]:
        """``props`` as a read gives them back (instants as ISO text)."""
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in props.items()}

    def _fields(
        self, kind: Kind, fields: Mapping[str, Any], zone: ZoneInfo, old: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The stored properties an item gets from a call's ``fields`` over its ``old`` ones."""
        props: dict[str, Any] = {"timeZone": zone.key}

        def given(key: str) -> bool:
            return key in fields and fields[key] is not None

        name = fields.get("name") if given("name") else old.get("name")
        props["name"] = _clean_text(name, "name", MAX_NAME_CHARS, required=True)
        for key in ("description", "location") if kind == "event" else ("description",):
            value = fields[key] if given(key) else old.get(key)
            props[key] = _clean_text(value, key, MAX_TEXT_CHARS)
        start_key = START[kind]
        start_text = fields[start_key] if given(start_key) else old.get(start_key)
        # An old time is re-read in the (maybe new) zone as the same wall-clock time.
        if not given(start_key) and isinstance(start_text, str):
            start_text = start_text[:19]
        start = self._time(start_text, zone, start_key)
        props[start_key] = start.isoformat()
        if kind == "event":
            end_text = fields["endDate"] if given("endDate") else old.get("endDate")
            if isinstance(end_text, str) and end_text.strip():
                if not given("endDate"):
                    end_text = end_text[:19]
                end = self._time(end_text, zone, "endDate")
                if end < start:
                    raise rejected(
                        "scheduling", "ends-before-start", "endDate is before startDate."
                    )
                props["endDate"] = end.isoformat()
            else:
                props["endDate"] = None
            lead = fields["remindBefore"] if given("remindBefore") else old.get("remindBefore")
            if lead is not None and (
                not isinstance(lead, int) or not NO_REMINDER <= lead <= MAX_REMIND_BEFORE
            ):
                raise rejected(
                    "scheduling",
                    "bad-remind-before",
                    f"remindBefore is minutes between 0 and {MAX_REMIND_BEFORE} "
                    f"({NO_REMINDER} in an update: no longer remind).",
                )
            props["remindBefore"] = None if lead == NO_REMINDER else lead
        rule = fields["rrule"] if given("rrule") else old.get("rrule")
        props["rrule"] = self._rule(rule, start, zone)
        return props

    async def update(
        self,
        caller: Caller,
        kind: Kind,
        item_id: str,
        fields: Mapping[str, Any],
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Change an item's fields; its next fire time is worked out again from now."""
        self._owner(caller, "update")
        current = self.now(now)
        old = await self._find(caller, kind, item_id, "update")
        if old.get("status") == "cancelled":
            raise rejected(
                "scheduling",
                "cancelled",
                f"That {kind} was cancelled; create a new one instead.",
                id=item_id,
            )
        zone = self._zone(fields.get("timeZone") or old.get("timeZone"))
        props = self._fields(kind, fields, zone, old)
        props.update(
            updatedAt=current, status=old.get("status") or "active", fireAttempts=0, retryDueAt=None
        )
        self._schedule(kind, props, current, zone)
        warnings = await self._embedding(kind, props, old)
        rows, _ = await self.graph.run(
            f"MATCH (n:{LABELS[kind]} {{id: $id}}) WHERE {guard('n')} "
            "AND n.status <> 'cancelled' SET n += $props RETURN n.id AS id",
            {**caller.params(), "id": item_id, "props": props},
        )
        if not rows:
            raise rejected("scheduling", "not-found", f"No {kind} with id {item_id} to change.")
        log.info("[scheduling] op=update kind=%s id=%s next=%s", kind, item_id, props["nextFireAt"])
        return {
            **self._view(kind, self._stored({**old, **props}), current),
            "warnings": warnings,
        }

    async def cancel(
        self, caller: Caller, kind: Kind, item_id: str, now: datetime | None = None
    ) -> dict[str, Any]:
        """Cancel an item: it never fires again and leaves the lists (idempotent)."""
        self._owner(caller, "cancel")
        await self._find(caller, kind, item_id, "cancel")
        rows, _ = await self.graph.run(
            f"MATCH (n:{LABELS[kind]} {{id: $id}}) WHERE {guard('n')} "
            "WITH n, n.status <> 'cancelled' AS changed "
            "SET n.status = 'cancelled', n.nextFireAt = null, "
            "n.cancelledAt = coalesce(n.cancelledAt, $now) RETURN changed",
            {**caller.params(), "id": item_id, "now": self.now(now)},
        )
        changed = bool(rows and rows[0]["changed"])
        log.info("[scheduling] op=cancel kind=%s id=%s changed=%s", kind, item_id, changed)
        return {"id": item_id, "kind": kind, "status": "cancelled", "changed": changed}

    # --- lists ----------------------------------------------------------------------------

    async def list_events(
        self,
        caller: Caller,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """The occurrences of events between ``since`` and ``until`` (repeats expanded)."""
        self._owner(caller, "list")
        current = self.now(now)
        zone = self._zone(None)
        today = current.astimezone(zone).replace(hour=0, minute=0, second=0, microsecond=0)
        start = self._time(since, zone, "since") if since else today
        end = self._time(until, zone, "until") if until else start + timedelta(days=LIST_DAYS)
        if end <= start:
            raise rejected("scheduling", "bad-window", "until must be later than since.")
        cap = max(1, min(limit or MAX_OCCURRENCES, MAX_OCCURRENCES))
        rows, _ = await self.graph.read(
            f"MATCH (n:Event) WHERE {guard('n')} AND n.startDate IS NOT NULL "
            f"AND coalesce(n.status, 'active') <> 'cancelled' RETURN {_ITEM}",
            caller.params(),
        )
        found: list[tuple[datetime, dict[str, Any]]] = []
        for row in rows:
            props = row["props"]
            item_zone = load_zone(props.get("timeZone") or zone.key)
            first = datetime.fromisoformat(props["startDate"])
            length = timedelta(0)
            if props.get("endDate"):
                length = datetime.fromisoformat(props["endDate"]) - first
            after = start - length - timedelta(seconds=1)
            expanded = expand(props.get("rrule"), first, item_zone, after=after)
            for _, instant in zip(range(cap + 1), expanded, strict=False):
                if instant >= end:
                    break
                occurrence = {
                    "id": props["id"],
                    "name": props.get("name"),
                    "start": local_iso(instant, zone),
                    "end": local_iso(instant + length, zone) if length else None,
                    "recurring": bool(props.get("rrule")),
                }
                for key in ("location", "description", "remindBefore"):
                    if props.get(key) is not None:
                        occurrence[key] = props[key]
                found.append((instant, occurrence))
        found.sort(key=lambda pair: (pair[0], pair[1]["id"]))
        log.info("[scheduling] op=list kind=event events=%d occurrences=%d", len(rows), len(found))
        return {
            "occurrences": [occurrence for _, occurrence in found[:cap]],
            "truncated": len(found) > cap,
            "since": local_iso(start, zone),
            "until": local_iso(end, zone),
            "timeZone": zone.key,
        }

    async def list_reminders(
        self,
        caller: Caller,
        status: str = "active",
        limit: int | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Reminders of one status (or ``all``), the next to fire first."""
        self._owner(caller, "list")
        if status not in (*STATUSES, "all"):
            raise rejected(
                "scheduling", "bad-status", f"status is one of {', '.join(STATUSES)}, all."
            )
        current = self.now(now)
        cap = max(1, min(limit or MAX_LIST, MAX_LIST))
        rows, _ = await self.graph.read(
            f"MATCH (n:Reminder) WHERE {guard('n')} "
            "AND ($status = 'all' OR coalesce(n.status, 'active') = $status) "
            f"RETURN {_ITEM} ORDER BY n.nextFireAt, n.dueDate, n.id LIMIT $limit",
            {**caller.params(), "status": status, "limit": cap + 1},
        )
        log.info("[scheduling] op=list kind=reminder status=%s found=%d", status, len(rows))
        return {
            "reminders": [self._view("reminder", row["props"], current) for row in rows[:cap]],
            "truncated": len(rows) > cap,
        }

    # --- firing ---------------------------------------------------------------------------

    async def claim(
        self, caller: Caller, now: datetime | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """Claim every item due by ``now`` (once each, however many times it was missed)."""
        self._owner(caller, "claim")
        current = self.now(now)
        rows, _ = await self.graph.run(
            "MATCH (n) WHERE (n:Event OR n:Reminder) AND n.accountId = $account "
            "AND n.deletedAt IS NULL AND n.status = 'active' AND n.nextFireAt <= $now "
            f"RETURN {_ITEM} ORDER BY n.nextFireAt, n.id LIMIT $limit",
            {**caller.params(), "now": current, "limit": max(1, min(limit or CLAIM_LIMIT, 100))},
        )
        due = []
        for row in rows:
            claimed = await self._claim_one(caller, row["props"], row["labels"], current)
            if claimed is not None:
                due.append(claimed)
        upcoming, _ = await self.graph.run(
            "MATCH (n) WHERE (n:Event OR n:Reminder) AND n.accountId = $account "
            "AND n.deletedAt IS NULL AND n.status = 'active' AND n.nextFireAt > $now "
            "RETURN min(n.nextFireAt) AS next",
            {**caller.params(), "now": current},
        )
        next_due = upcoming[0]["next"] if upcoming else None
        log.info(
            "[scheduling] op=claim due=%d next=%s",
            len(due),
            next_due,
        )
        return {"due": due, "nextDueAt": next_due, "now": current.isoformat()}

    async def _claim_one(
        self, caller: Caller, props: dict[str, Any], labels: list[str], now: datetime
    ) -> dict[str, Any] | None:
        kind: Kind = "event" if "Event" in labels else "reminder"
        zone = load_zone(props.get("timeZone") or "UTC")
        start = datetime.fromisoformat(props[START[kind]])
        due = _instant(props, "nextFireAt")
        assert due is not None
        shown_due = _instant(props, "retryDueAt") or due
        lead = timedelta(minutes=props.get("remindBefore") or 0)
        rule = props.get("rrule")
        try:
            found = next_fire(rule, start, zone, now, lead)
            missed = missed_between(rule, start, zone, shown_due, now, lead)
        except (RuleError, ValueError) as err:  # a rule edited by hand into something unreadable
            log.error("[scheduling] op=claim id=%s error=bad-rule detail=%s", props["id"], err)
            found, missed = None, 0
        count = int(props.get("fireCount") or 0)
        status = "active" if found or kind == "event" else "done"
        rows, _ = await self.graph.run(
            f"MATCH (n:{LABELS[kind]} {{id: $id}}) WHERE n.accountId = $account "
            "AND n.status = 'active' AND coalesce(n.fireCount, 0) = $count "
            "SET n.nextFireAt = $next, n.lastFiredAt = $now, n.lastDueAt = $due, "
            "n.fireCount = $count + 1, n.status = $status, n.retryDueAt = null "
            "RETURN n.id AS id",
            {
                **caller.params(),
                "id": props["id"],
                "count": count,
                "next": found[0].astimezone(UTC) if found else None,
                "now": now,
                "due": shown_due.astimezone(UTC),
                "status": status,
            },
        )
        if not rows:  # another claim took it first
            return None
        occurrence = shown_due + lead
        item: dict[str, Any] = {
            "id": props["id"],
            "kind": kind,
            "name": props.get("name"),
            "dueAt": local_iso(shown_due, zone),
            "occurrence": local_iso(occurrence, zone),
            "timeZone": zone.key,
            "missed": missed,
            "next": local_iso(found[0], zone) if found else None,
            "attempt": int(props.get("fireAttempts") or 0) + 1,
        }
        for key in ("description", "location", "rrule", "remindBefore"):
            if props.get(key) is not None:
                item[key] = props[key]
        log.info(
            "[scheduling] op=claim-one kind=%s id=%s due=%s missed=%d next=%s",
            kind,
            props["id"],
            shown_due.isoformat(),
            missed,
            item["next"],
        )
        return item

    async def fired(
        self,
        caller: Caller,
        item_id: str,
        session_id: str | None,
        error: str | None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Record how a claimed firing went; a failed one is tried again soon (a few times)."""
        self._owner(caller, "fired")
        current = self.now(now)
        retry = current + RETRY_AFTER
        rows, _ = await self.graph.run(
            "MATCH (n) WHERE (n:Event OR n:Reminder) AND n.id = $id AND n.accountId = $account "
            "WITH n, CASE WHEN $error IS NULL THEN 0 ELSE coalesce(n.fireAttempts, 0) + 1 END "
            "AS attempts "
            "WITH n, attempts, $error IS NOT NULL AND attempts < $max "
            "AND n.status <> 'cancelled' AS again "
            "SET n.lastSessionId = coalesce($session, n.lastSessionId), "
            "n.lastFireError = $error, n.fireAttempts = attempts, "
            "n.retryDueAt = CASE WHEN again THEN n.lastDueAt ELSE null END, "
            "n.nextFireAt = CASE WHEN again AND (n.nextFireAt IS NULL OR n.nextFireAt > $retry) "
            "THEN $retry ELSE n.nextFireAt END, "
            "n.status = CASE WHEN again THEN 'active' ELSE n.status END "
            "RETURN attempts, again",
            {
                **caller.params(),
                "id": item_id,
                "session": session_id,
                "error": error,
                "max": MAX_ATTEMPTS,
                "retry": retry,
            },
        )
        if not rows:
            raise WriteRejected(f"No event or reminder with id {item_id} in this account.")
        attempts, again = int(rows[0]["attempts"]), bool(rows[0]["again"])
        log.info(
            "[scheduling] op=fired id=%s session=%s error=%s attempts=%d retry=%s",
            item_id,
            session_id,
            error,
            attempts,
            again,
        )
        return {
            "id": item_id,
            "attempts": attempts,
            "retryAt": retry.isoformat() if again else None,
        }
