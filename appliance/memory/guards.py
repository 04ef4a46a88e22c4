"""The Cypher that keeps every caller inside what it may see.

Every read path (vector, keyword, keyword subscriptions, graph expansion, conversation search)
applies the same four guards to every node it returns, related nodes included:

1. account isolation   ``n.accountId = $account``
2. soft delete         ``n.deletedAt IS NULL``
3. scope               ``n.scope IS NULL OR n.scope IN $scopes`` when scopes are restricted
4. per-agent tag       ``$agent IN n.agents`` for a public agent

Memory search adds a fifth for scope-restricted callers (:func:`records_hidden`): conversation
records (``Conversation``, ``Message``, ``ToolCall``) are reached only through the session-bound
conversation search, so one visitor never finds another visitor's words.

The :class:`~appliance.core.identity.Caller` (who is asking) lives in the foundation; these are
the Cypher predicates that hold every caller inside what it may see.
"""

from __future__ import annotations

# Labels of conversation records: found by the session-bound conversation search, not by search.
RECORD_LABELS = ("Conversation", "Message", "ToolCall")


def guard(var: str) -> str:
    """Cypher predicate applying every guard to the node bound to ``var``."""
    return (
        f"({var}.accountId = $account AND {var}.deletedAt IS NULL"
        f" AND ($scopes IS NULL OR {var}.scope IS NULL OR {var}.scope IN $scopes)"
        f" AND ($agent IS NULL OR $agent IN coalesce({var}.agents, [])))"
    )


def records_hidden(var: str) -> str:
    """Cypher predicate keeping conversation records from a scope-restricted memory search."""
    labels = " OR ".join(f"{var}:{label}" for label in RECORD_LABELS)
    return f"($scopes IS NULL OR NOT ({labels}))"


def guard_after_search(var: str) -> str:
    """The guards that cannot run inside a vector index (account filtering already did)."""
    return (
        f"({var}.deletedAt IS NULL"
        f" AND ($scopes IS NULL OR {var}.scope IS NULL OR {var}.scope IN $scopes)"
        f" AND ($agent IS NULL OR $agent IN coalesce({var}.agents, [])))"
    )
