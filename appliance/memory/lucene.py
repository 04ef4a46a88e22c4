"""Turn user text into a safe query for Neo4j's full-text indexes (Lucene's classic query parser).

Every character the parser gives meaning to is escaped with a backslash, and the operator words
AND, OR, NOT are lowercased, so the result is only ever a list of terms: no fields (``title:``),
wildcards, fuzzy or proximity suffixes, ranges, groups, phrases, boosts or regular expressions.
Control characters and lone surrogates become spaces: they are never searchable, and a lone
surrogate cannot be encoded to send to Neo4j at all.
"""

from __future__ import annotations

import re

# Lucene's QueryParser.escape set. "&" and "|" only mean something doubled, but escaping a single
# one is harmless and keeps the rule simple.
SPECIAL_CHARACTERS = frozenset('+-&|!(){}[]^"~*?:\\/')
OPERATOR_WORDS = frozenset({"AND", "OR", "NOT"})

_ESCAPES = str.maketrans({char: "\\" + char for char in SPECIAL_CHARACTERS})
_UNSENDABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def escape(query: str) -> str:
    """Return ``query`` as a Lucene query of its plain terms: specials escaped, spaces collapsed."""
    terms = _UNSENDABLE.sub(" ", query).split()
    # A standalone AND/OR/NOT is an operator; lowercased it is an ordinary word again.
    return " ".join(
        (term.lower() if term in OPERATOR_WORDS else term).translate(_ESCAPES) for term in terms
    )


def keyword_query(text: str) -> str | None:
    """The escaped query for ``text``, or None when no letter or digit is left to search for."""
    query = escape(text)
    # Neo4j rejects an empty query, and one of only punctuation analyses to no terms at all.
    return query if any(char.isalnum() for char in query) else None
