"""What every engine request made on behalf of someone carries: the caller, and scope fields.

Set by the calling process from its own environment, never by an agent; the engine refuses any
account but its own (:mod:`appliance.memory.service`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, JsonValue

from appliance.rpc.contract import Request

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
