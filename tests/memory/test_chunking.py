"""Sections, chunks, content hashes and summaries of documents (pure functions, no I/O)."""

from __future__ import annotations

import hashlib
import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.memory.chunking import Section, chunk, content_hash, sectionise, summary


def normalised(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def place(text: str, chunks: list[str], overlap_chars: int) -> list[tuple[int, int]] | None:
    """Spans putting each chunk in ``text`` in order: no gap but whitespace, each overlapping the
    one before by at most ``overlap_chars``, the last ending the text; None if impossible."""
    body = normalised(text)
    if not chunks or not body.startswith(chunks[0]):
        return [] if not chunks and not body else None

    def following(i: int, start: int) -> list[int]:
        end, piece = start + len(chunks[i]), chunks[i + 1]
        found: list[int] = []
        at = body.find(piece, max(start + 1, end - overlap_chars))
        while at != -1 and not (at > end and body[end:at].strip()):
            if at + len(piece) > end:
                found.append(at)
            at = body.find(piece, at + 1)
        return found

    # Depth-first, earliest start first; iterative because there can be thousands of chunks.
    parent: dict[tuple[int, int], tuple[int, int] | None] = {(0, 0): None}
    stack = [(0, 0)]
    while stack:
        i, start = stack.pop()
        if i == len(chunks) - 1:
            if start + len(chunks[i]) != len(body):
                continue
            spans: list[tuple[int, int]] = []
            node: tuple[int, int] | None = (i, start)
            while node is not None:
                spans.append((node[1], node[1] + len(chunks[node[0]])))
                node = parent[node]
            return spans[::-1]
        for at in reversed(following(i, start)):
            if (i + 1, at) not in parent:
                parent[(i + 1, at)] = (i, start)
                stack.append((i + 1, at))
    return None


def words_in_order(text: str, chunks: list[str]) -> bool:
    """Whether the chunks' words, minus overlaps, are exactly the text's words in order."""
    words, pieces = text.split(), [piece.split() for piece in chunks]
    if not pieces:
        return not words
    seen: set[tuple[int, int]] = set()
    stack = [(0, 0)] if words[: len(pieces[0])] == pieces[0] else []
    while stack:
        i, at = stack.pop()
        end = at + len(pieces[i])
        if i == len(pieces) - 1:
            if end == len(words):
                return True
            continue
        for nxt in range(at + 1, end + 1):
            fits = words[nxt : nxt + len(pieces[i + 1])] == pieces[i + 1]
            if fits and nxt + len(pieces[i + 1]) > end and (i + 1, nxt) not in seen:
                seen.add((i + 1, nxt))
                stack.append((i + 1, nxt))
    return False


# ── sectionise ──────────────────────────────────────────────────────────────────────────────

S = tuple[str, int, list[str], str]  # (title, level, path, text)


def shape(sections: list[Section]) -> list[S]:
    assert [s.index for s in sections] == list(range(len(sections)))
    return [(s.title, s.level, s.path, s.text) for s in sections]


GUIDE = "# Guide\nIntro text\n## Install\nSteps\n### Linux\napt install\n## Use\nrun it\n"

SECTION_CASES: list[tuple[str, str, list[S]]] = [
    ("empty", "", []),
    ("blank", " \n\t\n ", []),
    (
        "no headings",
        "Just text.\n\nMore.",
        [
            ("Introduction", 0, ["Introduction"], "Just text.\n\nMore."),
        ],
    ),
    (
        "atx tree",
        GUIDE,
        [
            ("Guide", 1, ["Guide"], "Intro text"),
            ("Install", 2, ["Guide", "Install"], "Steps"),
            ("Linux", 3, ["Guide", "Install", "Linux"], "apt install"),
            ("Use", 2, ["Guide", "Use"], "run it"),
        ],
    ),
    (
        "preamble",
        "Preface.\n\n# A\nx",
        [
            ("Introduction", 0, ["Introduction"], "Preface."),
            ("A", 1, ["A"], "x"),
        ],
    ),
    ("blank preamble omitted", "\n  \n# A\nx", [("A", 1, ["A"], "x")]),
    (
        "closing hashes",
        "## Title ##\nx\n# Sharp# \ny",
        [
            ("Title", 2, ["Title"], "x"),
            ("Sharp#", 1, ["Sharp#"], "y"),
        ],
    ),
    (
        "atx variants",
        "   ### Indented\na\n#\tTabbed\nb\n###### Six\nc",
        [
            ("Indented", 3, ["Indented"], "a"),
            ("Tabbed", 1, ["Tabbed"], "b"),
            ("Six", 6, ["Tabbed", "Six"], "c"),
        ],
    ),
    (
        "not atx",
        "#hashtag\n####### seven\n    # indented code\n#\n## ##\ntext",
        [
            (
                "Introduction",
                0,
                ["Introduction"],
                "#hashtag\n####### seven\n    # indented code\n#\n## ##\ntext",
            ),
        ],
    ),
    (
        "empty body keeps its title in the path",
        "# Guide\n## Install\nsteps\n# Empty\n# Last\nz",
        [
            ("Install", 2, ["Guide", "Install"], "steps"),
            ("Last", 1, ["Last"], "z"),
        ],
    ),
    (
        "skipped and rising levels",
        "## B\nb\n# A\na\n### C\nc\n## D\nd",
        [
            ("B", 2, ["B"], "b"),
            ("A", 1, ["A"], "a"),
            ("C", 3, ["A", "C"], "c"),
            ("D", 2, ["A", "D"], "d"),
        ],
    ),
    (
        "backtick fence",
        "# A\n```python\n# comment\nx = 1\n```\n## B\ny",
        [
            ("A", 1, ["A"], "```python\n# comment\nx = 1\n```"),
            ("B", 2, ["A", "B"], "y"),
        ],
    ),
    (
        "tilde fence",
        "# A\n~~~\n# not\nNot\n===\n~~~\n# B\ny",
        [
            ("A", 1, ["A"], "~~~\n# not\nNot\n===\n~~~"),
            ("B", 1, ["B"], "y"),
        ],
    ),
    (
        "fence closes only on its own kind and length",
        "# A\n````\n```\n# in\n~~~\n````\n# B\nb",
        [
            ("A", 1, ["A"], "````\n```\n# in\n~~~\n````"),
            ("B", 1, ["B"], "b"),
        ],
    ),
    (
        "inline backticks are no fence",
        "# A\n``` x ` y\n# B\nb",
        [
            ("A", 1, ["A"], "``` x ` y"),
            ("B", 1, ["B"], "b"),
        ],
    ),
    (
        "unclosed fence runs to the end",
        "# A\n```\n# B\ntext",
        [
            ("A", 1, ["A"], "```\n# B\ntext"),
        ],
    ),
    (
        "setext",
        "Title\n=====\nbody\n\nSub\n---\nmore\n\nThird\n==\nz",
        [
            ("Title", 1, ["Title"], "body"),
            ("Sub", 2, ["Title", "Sub"], "more"),
            ("Third", 1, ["Third"], "z"),
        ],
    ),
    (
        "setext after preamble",
        "Preface.\n\nTitle\n===\nbody",
        [
            ("Introduction", 0, ["Introduction"], "Preface."),
            ("Title", 1, ["Title"], "body"),
        ],
    ),
    (
        "not setext",
        "intro\n\n---\n\n- item\n---\nline one\nline two\n---\n    code\n---\nA\n--",
        [
            (
                "Introduction",
                0,
                ["Introduction"],
                "intro\n\n---\n\n- item\n---\nline one\nline two\n---\n    code\n---\nA\n--",
            ),
        ],
    ),
    (
        "front matter is no setext",
        "---\ntitle: x\n---\n# A\nbody",
        [
            ("Introduction", 0, ["Introduction"], "---\ntitle: x\n---"),
            ("A", 1, ["A"], "body"),
        ],
    ),
    (
        "line endings and trailing space",
        "# A  \r\none   \r\n\r\ntwo\r# B\t\rthree",
        [
            ("A", 1, ["A"], "one\n\ntwo"),
            ("B", 1, ["B"], "three"),
        ],
    ),
    (
        "blank lines trimmed, inner ones and indentation kept",
        "# A\n\n\n  x\n\n\ny\n\n",
        [
            ("A", 1, ["A"], "  x\n\n\ny"),
        ],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in SECTION_CASES], ids=[c[0] for c in SECTION_CASES]
)
def test_sectionise(text: str, expected: list[S]) -> None:
    assert shape(sectionise(text)) == expected


@pytest.mark.parametrize(
    ("hint", "title"),
    [(None, "Introduction"), ("Notes", "Notes"), ("  Notes ", "Notes"), ("  ", "Introduction")],
)
def test_title_hint_names_the_preamble(hint: str | None, title: str) -> None:
    assert shape(sectionise("Plain text.", hint)) == [(title, 0, [title], "Plain text.")]
    assert shape(sectionise("Pre.\n# H\nx", hint))[0] == (title, 0, [title], "Pre.")


markdownish = st.lists(
    st.sampled_from(
        [
            "# A",
            "## B",
            "### C",
            "Title",
            "===",
            "---",
            "```",
            "~~~",
            "",
            "  ",
            "text here",
            "- item",
            "    code",
            "#",
            "a.\r",
            "x\r\n",
        ]
    )
    | st.text(max_size=20)
).map("\n".join)


@given(markdownish | st.text(), st.none() | st.text(max_size=10))
def test_sections_are_well_formed(text: str, hint: str | None) -> None:
    sections = sectionise(text, hint)
    assert sections == sectionise(text, hint)
    preamble = (hint or "").strip() or "Introduction"
    for section in sections:
        assert section.path and section.path[-1] == section.title
        assert 0 <= section.level <= 6 and len(section.path) <= max(section.level, 1)
        if section.level == 0:
            assert section.index == 0 and section.path == [preamble]
        assert section.text.strip()
        assert "\r" not in section.text
        assert all(line == line.rstrip() for line in section.text.split("\n"))
        assert section.text.split("\n")[0].strip() and section.text.split("\n")[-1].strip()
    # Nothing is invented: titles and texts are the document's own words, in its order.
    output = [w for s in sections for w in ((s.title.split() if s.level else []) + s.text.split())]
    remaining = iter(text.split())
    assert all(any(word == source for source in remaining) for word in output)


@given(st.text(st.characters(exclude_characters="#=-`~")))
def test_text_without_markup_is_one_section(text: str) -> None:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    body = "\n".join(lines).strip("\n")
    expected = [("Introduction", 0, ["Introduction"], body)] if body.strip() else []
    assert shape(sectionise(text)) == expected


# ── chunk ───────────────────────────────────────────────────────────────────────────────────

SENTENCES = [
    f"Sentence number {i} says something about the {w} garden and its {w} shed."
    for i, w in enumerate(["green", "quiet", "muddy", "sunny", "windy", "cold"] * 30)
]
PROSE = " ".join(SENTENCES)  # one long paragraph of ~75-character sentences
PARAGRAPHS = "\n\n".join(" ".join(SENTENCES[i : i + 6]) for i in range(0, 120, 6))


@pytest.mark.parametrize(
    ("target", "overlap", "cap"),
    [(100, 100, 200), (100, 150, 200), (100, -1, 200), (100, 50, 99), (0, 0, 10), (-5, 0, 10)],
)
def test_chunk_rejects_bad_sizes(target: int, overlap: int, cap: int) -> None:
    with pytest.raises(ValueError, match="0 <= overlap_chars < target_chars <= max_chars"):
        chunk("some text", target, overlap, cap)


@pytest.mark.parametrize("text", ["", " ", "\n\n\t", "\r\n"])
def test_chunk_of_nothing_is_empty(text: str) -> None:
    assert chunk(text) == []


def test_short_text_is_one_chunk() -> None:
    assert chunk("  Hello there.\r\nSecond line.  \n") == ["Hello there.\nSecond line."]
    assert chunk("x" * 1200) == ["x" * 1200]


def test_defaults_stay_near_the_target() -> None:
    chunks = chunk(PROSE)
    assert len(chunks) > 5
    assert all(600 <= len(c) <= 1200 for c in chunks[:-1])
    assert len(chunks[-1]) <= 1500  # the last may absorb a tail shorter than a quarter target
    assert place(PROSE, chunks, 200) is not None


def test_chunks_end_at_paragraphs_when_they_can() -> None:
    body = normalised(PARAGRAPHS)
    spans = place(PARAGRAPHS, chunk(PARAGRAPHS), 200)
    assert spans is not None and len(spans) > 5
    for _, end in spans[:-1]:
        assert body[end : end + 2] == "\n\n"


def test_chunks_end_at_sentences_and_overlap_from_a_sentence_start() -> None:
    chunks = chunk(PROSE)
    spans = place(PROSE, chunks, 200)
    assert spans is not None
    for text in chunks[:-1]:
        assert text.endswith("shed.")
    for text in chunks[1:]:
        assert text.startswith("Sentence number")
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert 100 <= end - start <= 200  # "about" the overlap, never more


def test_chunks_fall_back_to_line_breaks_then_words() -> None:
    lines = "\n".join(f"item {i} without any full stop at all" for i in range(200))
    for text in chunk(lines)[:-1]:
        assert text.endswith("at all")
    words = " ".join(f"word{i}" for i in range(1500))
    chunks = chunk(words, 100, 20, 150)
    assert words_in_order(words, chunks)
    assert all(60 <= len(c) <= 100 for c in chunks[:-1])


def test_no_overlap_when_asked_for_none() -> None:
    chunks = chunk(PROSE, 500, 0, 800)
    assert " ".join(chunks).split() == PROSE.split()


def test_a_small_tail_joins_the_last_chunk() -> None:
    text = " ".join(SENTENCES[:17])  # about 1290 characters: a split would leave a sliver
    assert 1200 < len(text) < 1500
    assert chunk(text) == [text]
    longer = " ".join(SENTENCES[:28])
    assert len(chunk(longer)) == 2


def test_a_word_longer_than_the_cap_is_cut_at_the_cap() -> None:
    text = "x" * 4500
    chunks = chunk(text)
    assert [len(c) for c in chunks] == [2000, 2000, 500]
    assert "".join(chunks) == text
    mixed = "start " + "y" * 2500 + " end of it"
    assert chunk(mixed, 100, 50, 200)[0] == "start"
    assert place(mixed, chunk(mixed, 100, 50, 200), 50) is not None


def test_the_overlap_gives_way_before_a_word_is_cut() -> None:
    # From an overlapping start, the 90-character word would not fit under the cap of 100.
    text = " ".join(["ab"] * 30) + " " + "w" * 90 + " tail"
    chunks = chunk(text, 100, 60, 100)
    assert any("w" * 90 in piece.split() for piece in chunks)
    assert words_in_order(text, chunks)


def test_cjk_sentences_split_at_their_stops() -> None:
    text = "".join(f"这是第{i}个句子。" for i in range(400))
    chunks = chunk(text)
    assert all(len(c) <= 2000 for c in chunks)
    assert all(c.endswith("。") for c in chunks)
    assert all(c.startswith("这是") for c in chunks)
    assert place(text, chunks, 200) is not None


def test_chunk_normalises_line_endings() -> None:
    assert chunk("a\r\nb\rc") == ["a\nb\nc"]


@st.composite
def sizes(draw: st.DrawFn) -> tuple[int, int, int]:
    target = draw(st.integers(1, 300))
    return target, draw(st.integers(0, target - 1)), draw(st.integers(target, 3 * target))


SPACES = [" ", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n"]
LATIN_GAPS = [*SPACES, ". ", "! ", "? ", ".\n\n", ".\u201d "]
latin_gaps = st.sampled_from(LATIN_GAPS)
gaps = st.sampled_from([*LATIN_GAPS, "\u3002"])  # a CJK full stop ends a sentence without a space


def joined(parts: list[tuple[str, str]]) -> str:
    return "".join(word + gap for word, gap in parts)


short_words = st.text("abcdefxyz", min_size=1, max_size=12)
latin_prose = st.lists(st.tuples(short_words, latin_gaps)).map(joined)
prose = st.lists(st.tuples(short_words, gaps)).map(joined)
any_words = st.lists(
    st.tuples(st.text("abcxyz\u00e9\u6587", min_size=1, max_size=400), gaps), max_size=12
).map(joined)


@settings(max_examples=300)
@given(prose | any_words | st.text(), sizes())
def test_chunks_are_bounded_ordered_and_complete(text: str, size: tuple[int, int, int]) -> None:
    target, overlap, cap = size
    chunks = chunk(text, target, overlap, cap)
    assert chunks == chunk(text, target, overlap, cap)
    assert all(0 < len(c) <= cap and c == c.strip() for c in chunks)
    assert bool(chunks) == bool(text.strip())
    # Each chunk is the text itself, in order, overlapping by at most `overlap`, missing nothing.
    assert place(text, chunks, overlap) is not None


@settings(max_examples=300)
@given(latin_prose, sizes())
def test_words_are_never_cut_unless_longer_than_the_cap(
    text: str, size: tuple[int, int, int]
) -> None:
    target, overlap, cap = size
    chunks = chunk(text, target, overlap, cap)
    if all(len(word) <= cap for word in text.split()):
        # Every chunk is whole words, and together (minus overlaps) they are the text's words.
        assert words_in_order(text, chunks)


@st.composite
def unique_prose(draw: st.DrawFn) -> str:
    # Unique words make each chunk's place in the text unambiguous.
    parts = draw(st.lists(st.tuples(st.text("abcxyz", max_size=5), latin_gaps), min_size=1))
    return "".join(f"{word}{i}{gap}" for i, (word, gap) in enumerate(parts))


@given(unique_prose(), st.integers(40, 300), st.data())
def test_consecutive_chunks_overlap(text: str, target: int, data: st.DataObject) -> None:
    cap = data.draw(st.integers(target, 3 * target))
    overlap = data.draw(st.integers(20, min(target - 1, cap - 12)))
    chunks = chunk(text, target, overlap, cap)
    spans = place(text, chunks, overlap)
    assert spans is not None
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert 0 < end - start <= overlap


# ── content_hash ────────────────────────────────────────────────────────────────────────────

A_B = hashlib.sha256(b"a b").hexdigest()


@pytest.mark.parametrize("text", ["a b", " a  b ", "a\nb", "a\tb\r\n", "\u00a0a\u3000b\n\n"])
def test_content_hash_ignores_whitespace(text: str) -> None:
    assert content_hash(text) == A_B


@pytest.mark.parametrize("text", ["ab", "A b", "a b c", "a-b", ""])
def test_content_hash_sees_everything_else(text: str) -> None:
    assert content_hash(text) != A_B
    assert re.fullmatch(r"[0-9a-f]{64}", content_hash(text))


@given(
    st.lists(st.text(st.characters(exclude_categories=("Zs", "Zl", "Zp", "Cc")), min_size=1)),
    st.lists(st.sampled_from([" ", "  ", "\n", "\r\n", "\t", "\u00a0", "\n\n"]), min_size=1),
)
def test_content_hash_is_stable_under_any_respacing(words: list[str], gaps: list[str]) -> None:
    spaced = "".join(w + gaps[i % len(gaps)] for i, w in enumerate(words))
    assert content_hash(spaced) == content_hash(" ".join(words))


# ── summary ─────────────────────────────────────────────────────────────────────────────────


def test_summary_of_short_text_is_the_text_tidied() -> None:
    assert summary("Hello   world.\n\n\n  Second\n para.  ") == "Hello world.\n\nSecond para."
    assert summary("") == "" and summary(" \n ") == ""


def test_summary_is_bounded_and_ends_at_a_sentence() -> None:
    result = summary(PROSE)
    assert 300 <= len(result) <= 600
    assert result.endswith("shed.")
    assert PROSE.startswith(result)
    assert len(summary(PROSE, 2000)) <= 2000


def test_summary_prefers_whole_paragraphs() -> None:
    first = " ".join(SENTENCES[:5])  # about 380 characters
    text = first + "\n\n" + " ".join(SENTENCES[5:40])
    assert summary(text) == first


def test_summary_cuts_at_a_word_or_hard_at_the_bound() -> None:
    words = " ".join(["lorem"] * 300)
    assert summary(words, 100) == " ".join(["lorem"] * 16)
    assert summary("z" * 1000, 50) == "z" * 50


@pytest.mark.parametrize("bound", [0, -1])
def test_summary_rejects_a_bound_below_one(bound: int) -> None:
    with pytest.raises(ValueError, match="max_chars"):
        summary("text", bound)


@given(prose | any_words | st.text(), st.integers(1, 800))
def test_summary_is_a_bounded_prefix(text: str, bound: int) -> None:
    result = summary(text, bound)
    assert len(result) <= bound
    assert bool(result) == bool(text.strip())
    words, source = result.split(), text.split()
    if words:
        assert words[:-1] == source[: len(words) - 1]
        assert source[len(words) - 1].startswith(words[-1])
