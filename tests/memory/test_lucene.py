"""Escaping user text for Neo4j's full-text (Lucene classic query parser) search."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.memory.lucene import OPERATOR_WORDS, SPECIAL_CHARACTERS, escape, keyword_query

SPECIALS = sorted(SPECIAL_CHARACTERS)
# Words the parser itself treats as operators; none may survive as a standalone term.
PARSER_OPERATORS = {"AND", "OR", "NOT", "&&", "||"}


def unescaped_specials(query: str) -> list[int]:
    """Offsets of characters the query parser would read as syntax (a checker, not a parser)."""
    bad: list[int] = []
    i = 0
    while i < len(query):
        if query[i] == "\\":
            if i + 1 == len(query):
                bad.append(i)  # a trailing backslash escapes nothing: a parse error
            i += 2
            continue
        if query[i] in SPECIAL_CHARACTERS:
            bad.append(i)
        i += 1
    return bad


def strip_escapes(query: str) -> str:
    """The query with each escaping backslash removed."""
    out: list[str] = []
    i = 0
    while i < len(query):
        if query[i] == "\\" and i + 1 < len(query):
            out.append(query[i + 1])
            i += 2
        else:
            out.append(query[i])
            i += 1
    return "".join(out)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("   \t\n ", ""),
        ("hello", "hello"),
        ("  hello   world  ", "hello world"),
        ("a && b", r"a \&\& b"),
        ("a || b", r"a \|\| b"),
        ("a&&b", r"a\&\&b"),
        ("title:foo", r"title\:foo"),
        ("title: foo", r"title\: foo"),
        ('"unbalanced quote', r"\"unbalanced quote"),
        ('say "hi', r"say \"hi"),
        ("(open group", r"\(open group"),
        ("close] bracket}", r"close\] bracket\}"),
        ("[1 TO 5]", r"\[1 TO 5\]"),
        ("{a TO b}", r"\{a TO b\}"),
        ("trailing\\", "trailing\\\\"),
        ("\\", "\\\\"),
        ("back\\slash", "back\\\\slash"),
        ("C++ -flag +must", r"C\+\+ \-flag \+must"),
        ("wild* card? *", r"wild\* card\? \*"),
        ("fuzzy~ near~2", r"fuzzy\~ near\~2"),
        ("boost^4", r"boost\^4"),
        ("!important", r"\!important"),
        ("/regex.*/", r"\/regex.\*\/"),
        ("path/to/file.txt", r"path\/to\/file.txt"),
        ("(1+1):2", r"\(1\+1\)\:2"),
        ("cats AND dogs", "cats and dogs"),
        ("cats OR dogs NOT birds", "cats or dogs not birds"),
        ("AND", "and"),
        ("NOT NOT", "not not"),
        ("ANDROID ORANGE NOTE", "ANDROID ORANGE NOTE"),
        ("And or Not", "And or Not"),
        ("(AND)", r"\(AND\)"),
        ("AND:", r"AND\:"),
        ("x\tAND\ny", "x and y"),
        ("café  naïve", "café naïve"),
        ("東京：タワー", "東京：タワー"),  # noqa: RUF001 - fullwidth colon is no Lucene syntax
        ("über\u00a0cool", "über cool"),
        ("\u3000x\u3000AND\u3000y\u3000", "x and y"),
        ("emoji 🎉!", r"emoji 🎉\!"),
        ("nul\x00byte", "nul byte"),
        ("bell\x07 del\x7f", "bell del"),
        ("lone \ud800 surrogate", "lone surrogate"),
        ("email@example.com", "email@example.com"),
        ("50% off #1 $5 =x", "50% off #1 $5 =x"),
    ],
)
def test_escape_table(text: str, expected: str) -> None:
    assert escape(text) == expected
    assert unescaped_specials(escape(text)) == []


@pytest.mark.parametrize("char", SPECIALS)
def test_each_special_character_alone(char: str) -> None:
    assert escape(char) == "\\" + char
    assert escape(f"  {char}  ") == "\\" + char
    assert keyword_query(char) is None


@pytest.mark.parametrize("char", SPECIALS)
def test_each_special_character_in_words(char: str) -> None:
    assert escape(f"a{char}b") == f"a\\{char}b"
    assert escape(f"{char}start end{char}") == f"\\{char}start end\\{char}"
    assert escape(char * 3) == ("\\" + char) * 3
    assert keyword_query(f"a{char}b") == f"a\\{char}b"


def test_the_special_set_is_lucenes() -> None:
    assert SPECIAL_CHARACTERS == set('+-&|!(){}[]^"~*?:\\/')
    assert {"AND", "OR", "NOT"} == OPERATOR_WORDS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("   ", None),
        ("!!! ???", None),
        ("--- ***", None),
        ("&& || ()", None),
        ("\\", None),
        ("_ . , ;", None),
        ("\x00\x01", None),
        ("🎉", None),
        ("a", "a"),
        ("3", "3"),
        ("AND", "and"),
        ("hello?", r"hello\?"),
        ("title:foo", r"title\:foo"),
        ("東京", "東京"),
        ("  spaced   out ", "spaced out"),
    ],
)
def test_keyword_query(text: str, expected: str | None) -> None:
    assert keyword_query(text) == expected


# Text that leans on the syntax and operator words, mixed with arbitrary unicode (surrogates too).
syntaxy_text = st.lists(
    st.sampled_from([*SPECIALS, " ", "\t", "\n", "\u3000", "a", "Z", "AND", "OR", "NOT", "é"])
    | st.characters(exclude_categories=()),
).map("".join)


@given(st.text() | syntaxy_text)
def test_escaped_text_has_no_unescaped_syntax(text: str) -> None:
    query = escape(text)
    assert unescaped_specials(query) == []
    assert not PARSER_OPERATORS & set(query.split(" "))
    assert query == query.strip()
    assert "  " not in query
    assert not any(char.isspace() and char != " " for char in query)


@given(st.text() | syntaxy_text)
def test_escaping_only_adds_backslashes(text: str) -> None:
    """Removing the escapes gives back the terms, with operators lowercased."""
    words = "".join(" " if c < " " or c == "\x7f" or "\ud800" <= c <= "\udfff" else c for c in text)
    expected = " ".join(w.lower() if w in OPERATOR_WORDS else w for w in words.split())
    assert strip_escapes(escape(text)) == expected


@given(st.text() | syntaxy_text)
def test_keyword_query_is_none_exactly_when_nothing_is_searchable(text: str) -> None:
    query = keyword_query(text)
    if query is None:
        assert not any(char.isalnum() for char in text)
    else:
        assert query == escape(text)
        assert query


@given(st.text() | syntaxy_text)
def test_escape_is_deterministic_and_stable_under_whitespace(text: str) -> None:
    assert escape(text) == escape(text)
    assert escape(f"  {text}\n") == escape(text)
