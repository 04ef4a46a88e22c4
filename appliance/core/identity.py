"""Who is asking: the caller's identity that every read and write is checked against.

The :class:`Caller` comes from the calling process's environment (ACCOUNT_ID, ALLOWED_SCOPES,
AGENT_SLUG, SESSION_ID, KEYWORD_SUBSCRIPTIONS), never from tool parameters:
:meth:`Caller.narrow` lets a parameter restrict scopes further but never widen them. It travels
to the engine as the ``caller`` map of an RPC request (:meth:`Caller.to_wire`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCOPES = ("public", "shared", "admin")


class GuardError(ValueError):
    """A caller context that cannot be honoured."""


@dataclass(frozen=True)
class Caller:
    """The authoritative identity of a request."""

    account_id: str
    scopes: tuple[str, ...] | None = None  # None: every scope (the admin agent)
    agent: str | None = None  # a public agent's slug: only nodes tagged for it
    session_id: str | None = None
    subscriptions: tuple[str, ...] = ()  # a public agent's keyword subscriptions

    def __post_init__(self) -> None:
        if not self.account_id:
            raise GuardError("a caller needs an account id")
        if self.scopes is not None:
            unknown = set(self.scopes) - set(SCOPES)
            if unknown:
                raise GuardError(f"unknown scopes {sorted(unknown)}; valid: {', '.join(SCOPES)}")

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Caller:
        """Build from the ``caller`` map of an RPC request."""
        scopes = data.get("scopes")
        return cls(
            account_id=str(data.get("account") or ""),
            scopes=tuple(str(s) for s in scopes) if scopes is not None else None,
            agent=str(data["agent"]) if data.get("agent") else None,
            session_id=str(data["session"]) if data.get("session") else None,
            subscriptions=tuple(str(s) for s in data.get("subscriptions") or ())[:5],
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Caller:
        """Build from ACCOUNT_ID, ALLOWED_SCOPES (comma-separated), AGENT_SLUG, SESSION_ID."""
        raw_scopes = environ.get("ALLOWED_SCOPES", "").strip()
        scopes = None
        if raw_scopes:
            scopes = tuple(s.strip() for s in raw_scopes.split(",") if s.strip())
        return cls(
            account_id=environ.get("ACCOUNT_ID", ""),
            scopes=scopes,
            agent=environ.get("AGENT_SLUG") or None,
            session_id=environ.get("SESSION_ID") or None,
            subscriptions=tuple(
                k.strip() for k in environ.get("KEYWORD_SUBSCRIPTIONS", "").split(",") if k.strip()
            )[:5],
        )

    def to_wire(self) -> dict[str, Any]:
        """The ``caller`` map sent with every RPC request."""
        return {
            "account": self.account_id,
            "scopes": list(self.scopes) if self.scopes is not None else None,
            "agent": self.agent,
            "session": self.session_id,
            "subscriptions": list(self.subscriptions),
        }

    def narrow(self, requested: Sequence[str] | None) -> Caller:
        """Restrict scopes to ``requested`` where allowed; a request never widens them."""
        if requested is None:
            return self
        allowed = set(self.scopes) if self.scopes is not None else set(SCOPES)
        kept = tuple(s for s in SCOPES if s in requested and s in allowed)
        return Caller(self.account_id, kept, self.agent, self.session_id, self.subscriptions)

    def params(self) -> dict[str, Any]:
        """Cypher parameters used by :func:`guard`."""
        return {
            "account": self.account_id,
            "scopes": list(self.scopes) if self.scopes is not None else None,
            "agent": self.agent,
        }
