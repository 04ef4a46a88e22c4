"""What every engine request shares: the caller it is made for, a write's answer, the clock.

Kept apart from the methods (:mod:`appliance.rpc.engine`, :mod:`appliance.rpc.work`) so each
family of methods can build on them.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from appliance.rpc.contract import Request, Response


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


__all__ = ["Called", "CallerWire", "Written", "clock_field"]
