"""The owner's contact book: people kept as ``Person`` nodes of the memory graph.

- **One person per email in an account.** A contact's email is stored trimmed and lower-cased,
  and so is its ``emailKey``, unique per account (constraint ``person_email_key`` of
  ``schema/schema.cypher``). :meth:`Contacts.create` with an email merges on (accountId,
  emailKey): a second create of the same email, in any case or spacing, updates that person
  (``created: false``) and two concurrent first creates make one node. A Person of that email
  written without the key (``memory-write``) is adopted: it gets the key instead of a twin.
- **Without an email** nothing can key a person, so duplicates are refused instead: a create whose
  name (case and spacing folded) or telephone number (its digits) matches a live contact with no
  email, or that has no email itself and matches any live contact, is refused naming the match,
  unless ``allowDuplicate`` says the owner means a different person. This check is best effort
  (two such creates at the same instant can both pass); the email key is not.
- **Soft delete** (``memory-delete`` of a Person) hides a contact from lookup, list, update and
  search at once. A deleted contact keeps its email until purged: creating that email again is
  refused with the way back (``memory-restore``), so nothing the owner deleted is silently
  revived or doubled.
- **Guards.** Every read applies :func:`~appliance.memory.guards.guard` (account, soft delete,
  scope, agent); an id of another account, a deleted one and an unknown one get the same "no
  contact" answer, so ids of other accounts are never confirmed. The book is the owner's: a
  caller that may not see admin-scoped nodes (a public agent) is refused outright, and contacts
  are written at the caller's most private scope (``admin`` for the owner).
- **Search.** Writes go through :class:`~appliance.memory.write.Writer`, so a contact is stamped,
  embedded and provenance-linked like any node, and ``memory-search`` finds it by meaning and by
  keyword (name, email and telephone are in the ``entity_search`` index).

One log line per operation: ``[contacts] op=create|update|lookup|list …``; refusals are
``[contacts] reject reason=…``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.errors import GraphQueryFailed, WriteRejected, rejected
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.reports import caller_agents, resolve_scope
from appliance.memory.write import Writer, WriteRequest

log = logging.getLogger(__name__)

LABEL = "Person"
# A contact's fields (schema.org Person properties) and the longest value each may hold.
FIELDS: dict[str, int] = {
    "name": 200,
    "email": 254,
    "telephone": 40,
    "jobTitle": 200,
    "worksFor": 200,
    "address": 500,
    "birthDate": 10,
    "description": 4000,
}
# Stored on the node but not part of a contact as an agent reads it.
INTERNAL = frozenset(
    {
        "embedding",
        "embeddingModel",
        "contentHash",
        "accountId",
        "emailKey",
        "deletedAt",
        "scope",
        "agents",
    }
)
MAX_LOOKUP = 50
MAX_PAGE_SIZE = 100
MAX_CANDIDATES = 5
_EMAIL = re.compile(r"^[^@\s]+@[^@\s.]+(\.[^@\s.]+)+$")
_PHONE = re.compile(r"^\+?[0-9 ()./-]+$")
_MONTH_DAY = re.compile(r"^--(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$")


def _string(var: str, prop: str) -> str:
    """Cypher: the property as a string, '' when absent or not a string."""
    return f"(CASE WHEN {var}.{prop} IS :: STRING NOT NULL THEN {var}.{prop} ELSE '' END)"


# Cypher expressions over a Person bound to ``n``.
_EMAIL_OF = f"coalesce(n.emailKey, toLower(trim({_string('n', 'email')})))"
_DIGITS_OF = (
    f"reduce(d = '', c IN split({_string('n', 'telephone')}, '') | "
    "d + CASE WHEN c >= '0' AND c <= '9' THEN c ELSE '' END)"
)
_NAME_OF = (
    f"toLower(trim({_string('n', 'name')} + ' ' + {_string('n', 'givenName')} + ' ' + "
    f"{_string('n', 'familyName')}))"
)
_SORT_NAME = (
    f"toLower(CASE WHEN {_string('n', 'name')} <> '' THEN n.name "
    f"ELSE trim({_string('n', 'givenName')} + ' ' + {_string('n', 'familyName')}) END)"
)


def normalise_email(raw: str) -> str:
    """The email trimmed and lower-cased; refused when it is not an address."""
    email = raw.strip().lower()
    if not _EMAIL.match(email) or len(email) > FIELDS["email"]:
        raise rejected(
            "contacts",
            "invalid-email",
            f"{raw!r} is not an email address (expected name@domain, e.g. anna@example.com). "
            "Leave email out if you do not know it.",
        )
    return email


def phone_digits(raw: str) -> str:
    """The digits of a telephone number; refused when it is not one."""
    text = raw.strip()
    digits = "".join(c for c in text if c.isdigit())
    if not _PHONE.match(text) or not 3 <= len(digits) <= 20:
        raise rejected(
            "contacts",
            "invalid-telephone",
            f"{raw!r} is not a telephone number (digits, spaces and + ( ) - . / only, 3 to 20 "
            "digits, e.g. +44 20 7946 0018).",
        )
    return digits


def name_key(name: str) -> str:
    """A name with case and spacing folded, as duplicates are compared."""
    return " ".join(name.split()).lower()


def _check_birth_date(value: str) -> None:
    if _MONTH_DAY.match(value):
        return
    try:
        date.fromisoformat(value)
    except ValueError:
        pass
    else:
        if len(value) == 10:
            return
    raise rejected(
        "contacts",
        "invalid-birth-date",
        f"{value!r} is not a birth date: give YYYY-MM-DD, or --MM-DD when the year is unknown.",
    )


def clean(fields: Mapping[str, str | None], *, creating: bool) -> tuple[dict[str, str], list[str]]:
    """The properties to set (trimmed, email lower-cased) and, for an update, those to clear
    (given as ""); refused with what is wrong and how to fix it."""
    props: dict[str, str] = {}
    remove: list[str] = []
    for key, value in fields.items():
        if key not in FIELDS or value is None:
            continue
        text = " ".join(value.split()) if key != "description" else value.strip()
        if not text:
            if creating:
                continue
            if key == "name":
                raise rejected(
                    "contacts", "empty-name", "A contact's name cannot be cleared; give a new one."
                )
            remove.append(key)
            continue
        if len(text) > FIELDS[key]:
            raise rejected(
                "contacts",
                "too-long",
                f"{key} is {len(text):,} characters; the limit is {FIELDS[key]:,}.",
                field=key,
            )
        if key == "email":
            text = normalise_email(text)
        elif key == "telephone":
            phone_digits(text)
        elif key == "birthDate":
            _check_birth_date(text)
        props[key] = text
    if creating and "name" not in props:
        raise rejected("contacts", "empty-name", "A contact needs a name (e.g. 'Anna Berg').")
    return props, remove


def contact(node_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    """A Person as the tools answer it: its id and properties, never internal ones."""
    return {
        "id": node_id,
        **{k: v for k, v in props.items() if k not in INTERNAL and k != "id" and v is not None},
    }


def _owner_only(caller: Caller, op: str) -> None:
    if caller.scopes is not None and "admin" not in caller.scopes:
        raise rejected(
            "contacts",
            "not-owner",
            "The contact book is the owner's: this caller (a public agent or a visitor) may not "
            "use it.",
            op=op,
        )


@dataclass(frozen=True)
class _Holder:
    """A Person of the account that holds an email."""

    id: str
    keyed: bool
    deleted: bool
    visible: bool
    scope: str | None
    agents: list[str] | None


class Contacts:
    """The contact book of one account's graph, written through the one :class:`Writer`."""

    def __init__(self, graph: Graph, writer: Writer) -> None:
        self.graph = graph
        self.writer = writer

    async def create(
        self, caller: Caller, fields: Mapping[str, str | None], *, allow_duplicate: bool = False
    ) -> dict[str, Any]:
        """Create a contact, or merge into the one with the same email."""
        _owner_only(caller, "create")
        props, _ = clean(fields, creating=True)
        email = props.get("email")
        target: _Holder | None = None
        warnings: list[str] = []
        if email is not None:
            target, others = await self._holder(caller, email)
            if others:
                warnings.append("same-email: " + ", ".join(others))
        if target is None and not allow_duplicate:
            await self._refuse_duplicates(caller, props)
        if target is not None:
            request = WriteRequest(
                LABEL,
                dict(props),
                id=target.id,
                key={"emailKey": email} if email else None,
                scope=target.scope,
                agents=target.agents,
            )
        else:
            request = WriteRequest(
                LABEL,
                dict(props),
                key={"emailKey": email} if email else None,
                scope=resolve_scope(caller, None),
                agents=caller_agents(caller),
            )
        done = await self._write(caller, request)
        log.info(
            "[contacts] op=create id=%s created=%s email=%s",
            done["id"],
            done["created"],
            bool(email),
        )
        return {**done, "warnings": done["warnings"] + warnings}

    async def update(
        self, caller: Caller, contact_id: str, fields: Mapping[str, str | None]
    ) -> dict[str, Any]:
        """Change a contact's fields; "" clears one (the name excepted)."""
        _owner_only(caller, "update")
        props, remove = clean(fields, creating=False)
        if not props and not remove:
            raise rejected(
                "contacts",
                "nothing-to-update",
                'Nothing to update: give at least one field ("" clears a field).',
            )
        current = await self._visible(caller, contact_id)
        if current is None:
            raise await self._not_found(caller, "update", contact_id)
        email = props.get("email")
        if email is not None:
            target, _ = await self._holder(caller, email, besides=contact_id)
            if target is not None:
                raise rejected(
                    "contacts",
                    "email-taken",
                    f"Another contact (id {target.id}) already has the email {email}: update "
                    "that one instead, or memory-delete one of the two.",
                    id=contact_id,
                )
        request = WriteRequest(
            LABEL,
            dict(props),
            id=contact_id,
            key={"emailKey": email} if email else None,
            remove=remove,
            scope=current["scope"],
            agents=current["agents"],
        )
        done = await self._write(caller, request)
        log.info(
            "[contacts] op=update id=%s set=%s cleared=%s",
            contact_id,
            ",".join(sorted(props)),
            ",".join(sorted(remove)),
        )
        return done

    async def lookup(
        self,
        caller: Caller,
        *,
        email: str | None = None,
        telephone: str | None = None,
        name: str | None = None,
        limit: int = 10,
    ) -> dict[str, Any]:
        """Contacts matching any of an email, a telephone number or a name (all its words)."""
        _owner_only(caller, "lookup")
        email_key = normalise_email(email) if email and email.strip() else None
        digits = phone_digits(telephone) if telephone and telephone.strip() else None
        words = name_key(name).split() if name and name.strip() else None
        if email_key is None and digits is None and words is None:
            raise rejected(
                "contacts",
                "empty-lookup",
                "Give an email, a telephone number or a name to look up (contact-list browses "
                "every contact).",
            )
        limit = max(1, min(limit, MAX_LOOKUP))
        rows, _ = await self.graph.read(
            f"MATCH (n:{LABEL}) WHERE {guard('n')} "
            # coalesce: a detail not asked for compares to null, and null sorts first DESC.
            f"WITH n, coalesce({_EMAIL_OF} = $email, false) AS byEmail, "
            f"coalesce({_DIGITS_OF} = $digits, false) AS byPhone, "
            f"$words IS NOT NULL AND all(w IN $words WHERE {_NAME_OF} CONTAINS w) AS byName, "
            f"{_SORT_NAME} AS sortName "
            "WHERE byEmail OR byPhone OR byName "
            "RETURN n.id AS id, n {.*, embedding: null} AS props, "
            "[m IN [['email', byEmail], ['telephone', byPhone], ['name', byName]] "
            "WHERE m[1] | m[0]] AS matchedBy, coalesce(sortName = $name, false) AS exact "
            "ORDER BY size(matchedBy) DESC, byEmail DESC, byPhone DESC, exact DESC, sortName, id "
            "LIMIT $limit",
            {
                **caller.params(),
                "email": email_key,
                "digits": digits,
                "words": words,
                "name": " ".join(words) if words else None,
                "limit": limit,
            },
        )
        found = [
            {**contact(row["id"], row["props"]), "matchedBy": row["matchedBy"]} for row in rows
        ]
        log.info(
            "[contacts] op=lookup email=%s telephone=%s name=%s found=%d",
            email_key is not None,
            digits is not None,
            words is not None,
            len(found),
        )
        return {"contacts": found}

    async def listing(
        self, caller: Caller, *, page: int = 1, page_size: int = 20
    ) -> dict[str, Any]:
        """Every contact the caller may see, by name, one page at a time."""
        _owner_only(caller, "list")
        page = max(1, page)
        page_size = max(1, min(page_size, MAX_PAGE_SIZE))
        skip = (page - 1) * page_size
        rows, _ = await self.graph.read(
            f"MATCH (n:{LABEL}) WHERE {guard('n')} "
            f"WITH n ORDER BY {_SORT_NAME}, n.id "
            "WITH collect(n) AS everyone "
            "RETURN size(everyone) AS total, "
            "[m IN everyone[$skip..$end] | {id: m.id, props: m {.*, embedding: null}}] AS items",
            {**caller.params(), "skip": skip, "end": skip + page_size},
        )
        total = int(rows[0]["total"]) if rows else 0
        items = [contact(item["id"], item["props"]) for item in (rows[0]["items"] if rows else [])]
        log.info(
            "[contacts] op=list page=%d page_size=%d total=%d returned=%d",
            page,
            page_size,
            total,
            len(items),
        )
        return {"items": items, "page": page, "pageSize": page_size, "total": total}

    async def _write(self, caller: Caller, request: WriteRequest) -> dict[str, Any]:
        """Write through the Writer; answer with the contact as stored."""
        try:
            done = await self.writer.write(caller, request)
        except GraphQueryFailed as err:
            # Another write took the email between our check and this one.
            if "ConstraintValidationFailed" not in str(err):
                raise
            raise rejected(
                "contacts",
                "email-taken",
                f"Another contact has just been given the email {request.properties.get('email')}"
                "; look it up with contact-lookup and update that one.",
            ) from err
        stored = await self._visible(caller, done["id"])
        props = stored["props"] if stored else {}
        return {**done, "contact": contact(done["id"], props)}

    async def _visible(self, caller: Caller, contact_id: str) -> dict[str, Any] | None:
        """The live contact of that id the caller may see, or None."""
        rows, _ = await self.graph.read(
            f"MATCH (n:{LABEL} {{id: $id}}) WHERE {guard('n')} "
            "RETURN n {.*, embedding: null} AS props, n.scope AS scope, n.agents AS agents",
            {**caller.params(), "id": contact_id},
        )
        return rows[0] if rows else None

    async def _not_found(self, caller: Caller, op: str, contact_id: str) -> WriteRejected:
        """The one answer for an unknown, deleted or foreign id (the log tells them apart)."""
        rows, _ = await self.graph.run(
            f"MATCH (n:{LABEL} {{id: $id}}) RETURN n.accountId = $account AS mine, "
            "n.deletedAt IS NOT NULL AS deleted",
            {"id": contact_id, "account": caller.account_id},
        )
        if not rows:
            reason = "not-found"
        elif not rows[0]["mine"]:
            reason = "invalid-account-id"
        else:
            reason = "deleted" if rows[0]["deleted"] else "not-visible"
        return rejected(
            "contacts",
            reason,
            f"No contact with id {contact_id} in this account. Find it with contact-lookup "
            "or contact-list.",
            op=op,
            id=contact_id,
        )

    async def _holder(
        self, caller: Caller, email: str, *, besides: str | None = None
    ) -> tuple[_Holder | None, list[str]]:
        """The contact holding an email (and other live ones with it written without the key);
        refused when it is deleted or hidden from the caller."""
        rows, _ = await self.graph.run(
            f"MATCH (n:{LABEL} {{accountId: $account}}) WHERE {_EMAIL_OF} = $email "
            "AND ($besides IS NULL OR n.id <> $besides) "
            "AND (n.emailKey IS NOT NULL OR n.deletedAt IS NULL) "
            "RETURN n.id AS id, n.emailKey IS NOT NULL AS keyed, "
            f"n.deletedAt IS NOT NULL AS deleted, {guard('n')} AS visible, "
            "n.scope AS scope, n.agents AS agents "
            "ORDER BY keyed DESC, n.createdAt, n.id",
            {**caller.params(), "email": email, "besides": besides},
        )
        holders = [_Holder(**row) for row in rows]
        keyed = next((h for h in holders if h.keyed), None)
        if keyed is not None and keyed.deleted:
            raise rejected(
                "contacts",
                "email-deleted",
                f"The contact with the email {email} (id {keyed.id}) was deleted. Bring it back "
                f"with memory-restore (label Person, id {keyed.id}) and then change it with "
                "contact-update; its email is free again once the deletion is purged.",
                id=keyed.id,
            )
        if keyed is not None and not keyed.visible:
            raise rejected(
                "contacts",
                "email-hidden",
                f"A contact with the email {email} exists that this caller may not change.",
                id=keyed.id,
            )
        live = [h for h in holders if h.visible and not h.deleted]
        target = keyed or (live[0] if live else None)
        others = [h.id for h in live if target is None or h.id != target.id]
        return target, others

    async def _refuse_duplicates(self, caller: Caller, props: Mapping[str, str]) -> None:
        """Refuse a new person who may be a live contact already (see the module docstring)."""
        phone = props.get("telephone")
        rows, _ = await self.graph.run(
            f"MATCH (n:{LABEL}) WHERE {guard('n')} "
            f"AND ({_SORT_NAME} = $name OR ($digits IS NOT NULL AND {_DIGITS_OF} = $digits)) "
            f"AND ($email IS NULL OR {_EMAIL_OF} = '') "
            "RETURN n.id AS id, n {.*, embedding: null} AS props "
            "ORDER BY n.createdAt, n.id LIMIT $limit",
            {
                **caller.params(),
                "name": name_key(props["name"]),
                "digits": phone_digits(phone) if phone else None,
                "email": props.get("email"),
                "limit": MAX_CANDIDATES,
            },
        )
        if not rows:
            return
        described = "; ".join(_describe(row["id"], row["props"]) for row in rows)
        raise rejected(
            "contacts",
            "possible-duplicate",
            f"This may be a contact you already have: {described}. Update that one with "
            "contact-update (adding what is new, e.g. the email), or pass allowDuplicate: true "
            "if this is a different person.",
            matches=len(rows),
        )


def _describe(node_id: str, props: Mapping[str, Any]) -> str:
    shown = [f"{k} {props[k]}" for k in ("email", "telephone") if props.get(k)]
    name = props.get("name") or " ".join(
        str(props[k]) for k in ("givenName", "familyName") if props.get(k)
    )
    return f"{name} (id {node_id}" + "".join(f", {s}" for s in shown) + ")"
