"""What every engine request shares: the caller it is made for, scope fields, a write's answer,
the clock.

The caller is set by the calling process from its own environment, never by an agent; the engine
refuses any account but its own (:mod:`appliance.memory.service`).

Kept apart from the methods (:mod:`appliance.rpc.engine`, :mod:`appliance.rpc.work`,
:mod:`appliance.rpc.knowledge`) so each family of methods can build on them.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, JsonValue

from appliance.rpc.contract import Request, Response

SCOPES: list[JsonValue] = ["public", "shared", "admin"]


def scope_field() -> Any:
    """An optional scope; the engine itself decides what an unknown one means."""
    return Field(default=None, json_schema_extra={"enum": SCOPES})


def scopes_field() -> Any:
    """Scopes to narrow to; unknown ones narrow to nothing (they never widen)."""
    return Field(
        default=None,
        description="Narrow to these scopes (never widens what you may see).",
        json_schema_extra={"items": {"type": "string", "enum": SCOPES}},
    )


class CallerWire(Request):
    """Who is asking (the ``caller`` map); checked against the engine's account."""

    account: str = ""
    scopes: list[str] | None = None
    agent: str | None = None
    session: str | None = None
    subscriptions: list[str] = Field(default_factory=list)


class Called(Request):
    """A request made on behalf of a caller."""

    caller: CallerWire = Field(default_factory=CallerWire)


class Written(Response):
    """What a write of one node answers."""

    id: str
    created: bool
    embedded: bool
    warnings: list[str]


def clock_field() -> Any:
    """A call's "now": the manager's clock or a test's; unset, the engine's own clock."""
    return Field(default=None, description="Now (the engine's clock when unset).")


__all__ = [
    "SCOPES",
    "Called",
    "CallerWire",
    "Written",
    "clock_field",
    "scope_field",
    "scopes_field",
]
