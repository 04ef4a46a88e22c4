"""Plain-text forms of engine results, for agents and the `maxy memory` commands."""

from __future__ import annotations

from typing import Any

from appliance.memory.hits import Candidate, Related
from appliance.memory.render import render_text


def candidates_from_wire(results: list[dict[str, Any]]) -> list[Candidate]:
    """Rebuild candidates from the engine's ``search`` reply."""
    return [
        Candidate(
            node_id=r["id"],
            labels=list(r["labels"]),
            props=dict(r["props"]),
            score=float(r["score"]),
            related=[
                Related(x["id"], list(x["labels"]), x["type"], x["direction"], dict(x["props"]))
                for x in r.get("related") or []
            ],
        )
        for r in results
    ]


KEYWORD_ONLY_NOTE = (
    "(Vector ranking unavailable: the embedding model failed, so these are keyword matches "
    "only. `maxy doctor` says what to fix.)"
)


def search_text(result: dict[str, Any]) -> str:
    """Render a ``search`` RPC result as the documented text blocks."""
    text = render_text(candidates_from_wire(result.get("results") or []))
    if result.get("keywordOnly"):
        # The agent should know the ranking is weaker than usual, and why.
        return KEYWORD_ONLY_NOTE + "\n\n" + text
    return text
