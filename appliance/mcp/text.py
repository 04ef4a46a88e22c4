"""Plain-text forms of engine results, for agents."""

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


def search_text(result: dict[str, Any]) -> str:
    """Render a ``search`` RPC result as the documented text blocks."""
    return render_text(candidates_from_wire(result.get("results") or []))
