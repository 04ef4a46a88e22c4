"""Split a Markdown or plain-text document into sections and overlapping chunks for embedding.

Pure functions, no I/O: the engine writes the ``KnowledgeDocument → Section → Chunk`` hierarchy.

Sizes are in characters, not tokens: no tokenizer needed, and chunks do not change when the
embedding model does. English prose runs about four characters a token.

- **Target 1200 characters** (about 300 tokens): long enough to hold one idea with its context,
  short enough that one vector still stands for it. Long chunks blur into an average that matches
  everything a little.
- **Overlap 200 characters** (a sentence or two): a fact that straddles a boundary is whole in at
  least one chunk. The next chunk starts at a sentence start if one is near, else a word start.
- **Cap 2000 characters** (about 500 tokens): a hard limit that keeps a chunk inside a 512-token
  embedding context (the development model's), so the embedder never silently truncates English
  text. A chunk only grows past the target to reach a boundary or to absorb a sliver of tail.
  CJK text (about a token a character) can still exceed it; the embedder then truncates.

Boundaries, best first: a blank line, a sentence end or line break (CJK stops need no space
after them), any whitespace. A word is cut only when it alone is longer than the cap.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from appliance.core.fsio import sha256_hex

TARGET_CHARS = 1200
OVERLAP_CHARS = 200
MAX_CHARS = 2000
SUMMARY_CHARS = 600
PREAMBLE_TITLE = "Introduction"

_PARAGRAPH, _SENTENCE, _WORD = 0, 1, 2  # boundary kinds; lower is better

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
# "=" lines are nearly always underlines; "-" needs three because "-" and "--" also start list
# items and e-mail signatures in plain text.
_SETEXT = re.compile(r" {0,3}(=+|-{3,})[ \t]*")
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-*+][ \t]|\d{1,9}[.)][ \t]|>|$)|[ ]{4}|\t")
_WHITESPACE = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"[.!?\u2026][\"')\]\u2019\u201d\u00bb]*$")
# CJK sentences end without a following space, so the stop itself is the boundary.
_CJK_STOP = re.compile(r"[\u3002\uff01\uff1f][\u300d\u300f\uff09\u3011\u3015\u201d\u2019]*")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")

Boundary = tuple[int, int, int]  # (where a chunk may end, where the next one starts, kind)


@dataclass(frozen=True)
class Section:
    """One heading's own text, with its position in the document's heading tree."""

    index: int  # position among the sections returned, from 0
    title: str
    level: int  # 1-6 for a heading; 0 for the text before the first heading
    path: list[str]  # heading trail from the top, ending with this title
    text: str


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _atx(line: str) -> tuple[int, str] | None:
    match = _ATX.fullmatch(line)
    if match is None:
        return None
    title = _ATX_CLOSING.sub("", (match[2] or "").strip()).strip()
    # An empty heading ("#", "## ##") carries no title; treat it as text rather than invent one.
    return (len(match[1]), title) if title else None


def _front_matter_end(lines: list[str]) -> int:
    """How many leading lines are YAML front matter (its closing --- would look like setext)."""
    if lines[0] != "---":
        return 0
    return next((i + 1 for i in range(1, len(lines)) if lines[i] in ("---", "...")), 0)


def sectionise(text: str, title_hint: str | None = None) -> list[Section]:
    """Split a document on its ATX and setext headings, ignoring any inside fenced code."""
    lines = [line.rstrip() for line in _normalise_newlines(text).split("\n")]
    literal = _front_matter_end(lines)
    sections: list[Section] = []
    trail: list[tuple[int, str]] = []
    preamble = (title_hint or "").strip() or PREAMBLE_TITLE
    current: tuple[str, int, list[str]] = (preamble, 0, [preamble])
    body: list[str] = []
    fence: tuple[str, int] | None = None  # (fence character, length) while inside a code block
    boundary = True  # the previous line ended a block: start of text, blank line, heading, fence
    candidate = False  # the previous line is a one-line paragraph a setext underline can claim

    def flush() -> None:
        content = "\n".join(body).strip("\n")
        if content.strip():
            title, level, path = current
            sections.append(Section(len(sections), title, level, path, content))
        body.clear()

    def open_section(level: int, title: str) -> None:
        nonlocal current
        flush()
        while trail and trail[-1][0] >= level:
            trail.pop()
        trail.append((level, title))
        current = (title, level, [t for _, t in trail])

    for i, line in enumerate(lines):
        if i < literal or fence is not None:
            body.append(line)
            if fence is not None:
                closing = _FENCE_CLOSE.fullmatch(line)
                if closing and closing[1][0] == fence[0] and len(closing[1]) >= fence[1]:
                    fence = None
            boundary, candidate = fence is None, False
            continue
        opening = _FENCE.fullmatch(line)
        if opening and not (opening[1][0] == "`" and "`" in opening[2]):
            fence = (opening[1][0], len(opening[1]))
            body.append(line)
            boundary = candidate = False
            continue
        heading = _atx(line)
        if heading is not None:
            open_section(*heading)
            boundary, candidate = True, False
            continue
        underline = _SETEXT.fullmatch(line)
        if candidate and underline:
            open_section(1 if underline[1][0] == "=" else 2, body.pop().strip())
            boundary, candidate = True, False
            continue
        blank = not line.strip()
        candidate = boundary and not blank and _NOT_PARAGRAPH.match(line) is None
        boundary = blank
        body.append(line)
    flush()
    return sections


def _boundaries(text: str) -> list[Boundary]:
    """Every place a chunk of ``text`` may end, ascending; ``text`` has no outer whitespace."""
    found: list[Boundary] = []
    for gap in _WHITESPACE.finditer(text):
        end, start = gap.span()
        newlines = gap[0].count("\n")
        # A single line break ends a list item or a line of code: as good as a sentence end.
        sentence = newlines == 1 or _SENTENCE_END.search(text, max(0, end - 8), end)
        found.append((end, start, _PARAGRAPH if newlines > 1 else _SENTENCE if sentence else _WORD))
    for stop in _CJK_STOP.finditer(text):
        end = stop.end()
        if end < len(text) and not text[end].isspace():
            found.append((end, end, _SENTENCE))
    found.sort()
    return found


def _pick_end(
    bounds: list[Boundary], ends: list[int], pos: int, floor: int, target: int, cap: int
) -> Boundary | None:
    """The best boundary for a chunk starting at ``pos`` that must end after ``floor``."""
    lowest = bisect_right(ends, max(pos, floor))

    def window(low: int, high: int) -> list[Boundary]:
        return bounds[max(lowest, bisect_left(ends, low)) : bisect_right(ends, high)]

    # Near the target, the best kind wins and then the longest chunk.
    near = window(pos + target // 2, pos + target)
    if near:
        return max(near, key=lambda b: (-b[2], b[0]))
    # Past the target (a very long word sat there), stop as soon as possible.
    past = window(pos + target + 1, pos + cap)
    if past:
        return past[0]
    short = window(0, pos + target // 2 - 1)
    return max(short, key=lambda b: (-b[2], b[0])) if short else None


def _overlap_start(
    bounds: list[Boundary], starts: list[int], pos: int, end: int, fresh: int, overlap: int
) -> int:
    """Where the chunk after ``text[pos:end]`` starts: ``overlap`` or fewer characters back."""
    within = bounds[bisect_left(starts, max(end - overlap, pos + 1)) : bisect_left(starts, end)]
    # A sentence start gives the next chunk a clean opening, if it keeps at least half the overlap.
    for _, start, kind in within:
        if kind <= _SENTENCE and end - start >= overlap // 2:
            return start
    return within[0][1] if within else fresh


def chunk(
    text: str,
    target_chars: int = TARGET_CHARS,
    overlap_chars: int = OVERLAP_CHARS,
    max_chars: int = MAX_CHARS,
) -> list[str]:
    """Split one section's text into overlapping chunks near ``target_chars``."""
    if not 0 <= overlap_chars < target_chars <= max_chars:
        raise ValueError(
            "chunk sizes need 0 <= overlap_chars < target_chars <= max_chars, got "
            f"{overlap_chars=}, {target_chars=}, {max_chars=}"
        )
    text = _normalise_newlines(text).strip()
    if not text:
        return []
    bounds = _boundaries(text)
    ends, starts = [b[0] for b in bounds], [b[1] for b in bounds]
    chunks: list[str] = []
    pos = floor = fresh = 0  # chunk start; the previous chunk's end; its start without overlap
    while True:
        if len(text) - pos <= target_chars:
            chunks.append(text[pos:])
            return chunks
        picked = _pick_end(bounds, ends, pos, floor, target_chars, max_chars)
        if picked is not None:
            end, fresh, _ = picked
        elif pos < fresh:
            pos = fresh  # the overlap left no room to reach a boundary: drop it, cut no word
            continue
        else:  # no whitespace within the cap: this word alone is longer than max_chars
            end = fresh = min(pos + max_chars, len(text))
        # A tail under a quarter of the target would be a sliver of new text in a mostly
        # repeated chunk; take it now if the cap allows.
        if len(text) - end < target_chars // 4 and len(text) - pos <= max_chars:
            end = len(text)
        chunks.append(text[pos:end])
        if end >= len(text):
            return chunks
        pos, floor = _overlap_start(bounds, starts, pos, end, fresh, overlap_chars), end


def content_hash(text: str) -> str:
    """Hex sha256 of ``text`` with whitespace runs collapsed, so layout-only edits keep it."""
    # surrogatepass: a lone surrogate (from a bad decode upstream) still hashes, never raises.
    return sha256_hex(" ".join(text.split()).encode("utf-8", "surrogatepass"))


def summary(text: str, max_chars: int = SUMMARY_CHARS) -> str:
    """The opening paragraphs of ``text``, at most ``max_chars``, cut at a sentence or word."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    paragraphs = (" ".join(p.split()) for p in _BLANK_LINE.split(_normalise_newlines(text)))
    flat = "\n\n".join(p for p in paragraphs if p)
    if len(flat) <= max_chars:
        return flat
    bounds = _boundaries(flat)
    picked = _pick_end(bounds, [b[0] for b in bounds], 0, 0, max_chars, max_chars)
    return flat[: picked[0] if picked else max_chars]


TITLE_CHARS = 80


def title_of(text: str, max_chars: int = TITLE_CHARS) -> str:
    """A title for a text that came without one: its first heading or first line (front matter
    skipped), at most ``max_chars``, cut at a word and ending in "…" when cut."""
    lines = _normalise_newlines(text).split("\n")
    for line in lines[_front_matter_end(lines) :]:
        heading = _atx(line)
        words = " ".join((heading[1] if heading else line.strip().lstrip(">#*-+ ")).split())
        if not words:
            continue
        if len(words) <= max_chars:
            return words
        cut = words[: max_chars - 1]
        if words[max_chars - 1] != " " and " " in cut:  # the cut is inside a word: drop it
            cut = cut.rsplit(" ", 1)[0]
        return cut.rstrip() + "\u2026"
    return ""
