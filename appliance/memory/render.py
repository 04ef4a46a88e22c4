"""Render ``memory-search`` results: a text form for agents and a structured form for the UI.

Text form (:func:`render_text`), the contract the MCP tool description cites. Results appear in
the order given (rank order), one block each, blocks separated by a line ``---``::

    [Person, Customer] id=3f2a… score=0.812
      name: Anna Smith
      email: anna@example.com
      related:
        -[WORKS_AT]-> [Organization] id=9a1c… name: Acme Ltd
        <-[PRODUCED]- [Task] id=77c0… name: Import contacts
    ---
    [Note] id=… score=0.640
      …

- Header: the labels comma-joined in brackets, the full node id, the score with 3 decimals.
- Properties: one per line, ``  key: value``, in the order stored. Lists are joined with ", ";
  booleans are ``true``/``false``; dates and times are ISO 8601; values longer than 2,000
  characters are cut to 2,000 ending in "…". Null values, an ``id`` property equal to the
  header id, and the hidden properties (``embedding``, ``accountId``) are never written.
- Related nodes (one-hop neighbours) under ``  related:``, one per line: the arrow shows the
  relationship's stored direction from the result — ``-[TYPE]->`` outgoing, ``<-[TYPE]-``
  incoming — then the neighbour's labels, id and a short description: ``key: value`` for the
  first present of name, title, headline, subject, else the first string property other than
  the id, cut to 120 characters (omitted when the neighbour has none). No related nodes, no
  ``related:`` line.
- Line breaks inside any value, key, id, label or type are written as the two characters
  ``\\n``, so every item stays on its one line and no stored text can forge a separator.
- Budget (at least 200 characters, else ValueError): the whole output is at most ``budget``
  characters. When over, related nodes are dropped one at a time from the end of the list,
  starting with the lowest-ranked result and moving up; a result that lost some gets a line
  ``  related: N more not shown`` after the ones kept (alone, if none is kept). Only if that is
  not enough are whole results dropped, lowest-ranked first, and the output ends with a line
  ``(N more results not shown: output budget)``.
- No results at all: ``No results.``

Structured form (:func:`render_structured`), JSON-able, one dict per result: ``{id, labels,
score, props, related: [{id, labels, type, direction, props}], trace: {vector, keyword,
keywordRaw, fused, boosts, score, decisions}}`` with hidden properties removed and dates and
times as ISO 8601 strings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.memory.hits import HIDDEN_PROPERTIES, Candidate, Related

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 80_000
# The smallest budget that always fits the "more results not shown" line on its own.
MIN_BUDGET = 200
MAX_VALUE_CHARS = 2_000
MAX_DESCRIPTION_CHARS = 120
DESCRIPTION_KEYS = ("name", "title", "headline", "subject")
SEPARATOR = "---"
NO_RESULTS = "No results."
ELLIPSIS = "…"
RELATED_HEADER = "  related:"


def _json_value(value: Any) -> Any:
    """A JSON-able form of a property value (Neo4j temporal types become ISO 8601 strings)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if hasattr(value, "iso_format"):  # neo4j.time types
        return str(value.iso_format())
    if hasattr(value, "isoformat"):  # datetime types
        return str(value.isoformat())
    return str(value)


def _visible(props: Mapping[str, Any]) -> dict[str, Any]:
    """Props without nulls and hidden keys, as JSON-able values."""
    return {
        k: _json_value(v) for k, v in props.items() if v is not None and k not in HIDDEN_PROPERTIES
    }


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def _scalar_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _one_line(text: str) -> str:
    # Escaped line breaks keep every item on its own line, so no stored text (a value, a
    # caller-chosen id) can forge a property, a related node or a block separator.
    return text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n")


def _value_text(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """One-line text of a JSON-able value, cut to ``limit`` characters."""
    if isinstance(value, list):
        text = ", ".join(_scalar_text(v) for v in value)
    else:
        text = _scalar_text(value)
    return _cut(_one_line(text), limit)


def _labels_text(labels: Sequence[str]) -> str:
    return "[" + ", ".join(_one_line(label) for label in labels) + "]"


def _description(rel: Related) -> str:
    """``key: value`` for a related node's best naming property, or ''."""
    props = _visible(rel.props)
    for key in DESCRIPTION_KEYS:
        if props.get(key) not in (None, "", []):
            return f"{key}: {_value_text(props[key], MAX_DESCRIPTION_CHARS)}"
    for key, value in props.items():
        # The id is already on the line; it describes nothing.
        if isinstance(value, str) and value.strip() and key != "id":
            return f"{_one_line(key)}: {_value_text(value, MAX_DESCRIPTION_CHARS)}"
    return ""


def _related_line(rel: Related) -> str:
    rel_type = _one_line(rel.rel_type)
    arrow = f"-[{rel_type}]->" if rel.direction == "out" else f"<-[{rel_type}]-"
    line = f"    {arrow} {_labels_text(rel.labels)} id={_one_line(rel.node_id)}"
    description = _description(rel)
    return f"{line} {description}" if description else line


@dataclass
class _Block:
    """One result's lines, with how many of its related lines are kept."""

    head: list[str]
    related: list[str]
    kept: int

    def lines(self) -> list[str]:
        """The block's lines with only the kept related nodes."""
        out = list(self.head)
        if self.kept:
            out.append(RELATED_HEADER)
            out.extend(self.related[: self.kept])
        dropped = len(self.related) - self.kept
        if dropped:
            out.append(f"{RELATED_HEADER} {dropped} more not shown")
        return out

    def length(self) -> int:
        """Characters of the block's lines joined by newlines, without building them."""
        size = sum(len(line) + 1 for line in self.head) - 1
        if self.kept:
            kept = self.related[: self.kept]
            size += len(RELATED_HEADER) + 1 + sum(len(line) + 1 for line in kept)
        dropped = len(self.related) - self.kept
        if dropped:
            size += len(f"{RELATED_HEADER} {dropped} more not shown") + 1
        return size


def _block(cand: Candidate) -> _Block:
    head = [f"{_labels_text(cand.labels)} id={_one_line(cand.node_id)} score={cand.score:.3f}"]
    for key, value in _visible(cand.props).items():
        if key == "id" and value == cand.node_id:
            continue  # already in the header
        head.append(f"  {_one_line(key)}: {_value_text(value)}")
    related = [_related_line(rel) for rel in cand.related]
    return _Block(head, related, len(related))


def _more_results(count: int) -> str:
    return f"({count} more results not shown: output budget)"


def _total(lengths: Sequence[int], omitted: int) -> int:
    """Characters of the blocks joined by separator lines, plus the notice line if any."""
    size = sum(lengths) + (len(SEPARATOR) + 2) * max(len(lengths) - 1, 0)
    if omitted:
        size += len(_more_results(omitted)) + (1 if lengths else 0)
    return size


def render_text(results: Sequence[Candidate], budget: int = DEFAULT_BUDGET) -> str:
    """Render results as the documented text format, at most ``budget`` characters."""
    if budget < MIN_BUDGET:
        raise ValueError(f"The output budget must be at least {MIN_BUDGET} characters: {budget}.")
    if not results:
        return NO_RESULTS
    blocks = [_block(cand) for cand in results]
    lengths = [b.length() for b in blocks]
    # Related nodes go first, lowest-ranked result upward, one at a time.
    index = len(blocks) - 1
    while _total(lengths, 0) > budget and index >= 0:
        if blocks[index].kept:
            blocks[index].kept -= 1
            lengths[index] = blocks[index].length()
        else:
            index -= 1
    # Then whole results, lowest-ranked first.
    omitted = 0
    while blocks and _total(lengths, omitted) > budget:
        blocks.pop()
        lengths.pop()
        omitted += 1
    text = f"\n{SEPARATOR}\n".join("\n".join(b.lines()) for b in blocks)
    if omitted:
        text = f"{text}\n{_more_results(omitted)}" if text else _more_results(omitted)
    log.info(
        "[memory-render] op=text results=%s shown=%s related_dropped=%s chars=%s budget=%s",
        len(results),
        len(blocks),
        sum(len(b.related) - b.kept for b in blocks),
        len(text),
        budget,
    )
    return text


def _related_structured(rel: Related) -> dict[str, Any]:
    return {
        "id": rel.node_id,
        "labels": list(rel.labels),
        "type": rel.rel_type,
        "direction": rel.direction,
        "props": _visible(rel.props),
    }


def render_structured(results: Sequence[Candidate]) -> list[dict[str, Any]]:
    """Render results as JSON-able dicts for the UI, with every score in the trace."""
    return [
        {
            "id": cand.node_id,
            "labels": list(cand.labels),
            "score": cand.score,
            "props": _visible(cand.props),
            "related": [_related_structured(rel) for rel in cand.related],
            "trace": {
                "vector": cand.vector,
                "keyword": cand.keyword,
                "keywordRaw": cand.keyword_raw,
                "fused": cand.fused,
                "boosts": dict(cand.boosts),
                "score": cand.score,
                "decisions": list(cand.trace),
            },
        }
        for cand in results
    ]
