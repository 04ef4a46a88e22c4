"""Uploaded documents to Markdown text with their headings kept, or a refusal saying why.

One entry point, :func:`convert`: the file's bytes and name in, a :class:`Converted` (title,
Markdown text, kind) out. Pure functions, no I/O, so a refusal never leaves anything behind.

Kinds, told by the name's extension and checked against the bytes themselves:

- **Markdown and text** (``.md``, ``.markdown``, ``.txt``): UTF-8 (a byte-order mark is
  dropped); UTF-16 with its mark; else Windows-1252. Bytes with NULs are not text.
- **HTML** (``.html``, ``.htm``): BeautifulSoup's built-in parser and markdownify, both pure
  Python; scripts, styles and the head dropped, ``<h1>`` to ``<h6>`` become ``#`` headings.
- **PDF** (``.pdf``): pypdf (pure Python, no dependencies). A PDF has no headings, only sizes:
  the size most of the text is set in is the body; a short line set at least
  :data:`HEADING_RATIO` times larger is a heading, the largest size ``#``, the next ``##``, the
  rest ``###``. The document's own title (its metadata) is kept when it has one.
- **Word** (``.docx``): mammoth (pure Python, no lxml) maps the document's heading styles to
  ``<h1>``…, the HTML path above makes it Markdown.

Refusals (:class:`ConversionRefused`, an engine ``write-rejected`` error with a ``reason``):
``empty-file``, ``unsupported-type``, ``not-text``, ``not-pdf``, ``damaged`` (a truncated or
corrupt PDF or Word file), ``encrypted`` (a password-protected PDF or Word file), ``not-docx``
(a zip that is no Word document; an old ``.doc``), ``too-large`` (a Word file that inflates past
:data:`MAX_INFLATED`), ``no-text`` (a scanned PDF: images, no text layer).
"""

from __future__ import annotations

import io
import logging
import math
import re
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING
from xml.parsers.expat import ExpatError

from bs4 import BeautifulSoup
from markdownify import markdownify

from appliance.memory.errors import WriteRejected, rejected

if TYPE_CHECKING:
    from pypdf import PdfReader

log = logging.getLogger(__name__)

TEXT_KINDS = {"md": "markdown", "markdown": "markdown", "txt": "text"}
KINDS = {**TEXT_KINDS, "html": "html", "htm": "html", "pdf": "pdf", "docx": "docx"}
MEDIA_TYPES = {
    "markdown": "text/markdown",
    "text": "text/plain",
    "html": "text/html",
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}
HEADING_RATIO = 1.15  # a line this much larger than the body text is a heading
MAX_HEADING_CHARS = 150
MAX_INFLATED = 200 * 1024 * 1024  # a Word file's parts, uncompressed: past this it is a zip bomb
_DROP = ("script", "style", "noscript", "template", "svg", "iframe", "head")
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a password-protected .docx, or an old .doc

Progress = Callable[[int, int], None]  # (pages done, pages in all)


class ConversionRefused(WriteRejected):
    """The file cannot be made into text; ``reason`` says why (nothing was written)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Converted:
    """A document as text: its title, its Markdown, the kind of file it came from."""

    title: str
    text: str
    kind: str

    @property
    def media_type(self) -> str:
        """The file's media type."""
        return MEDIA_TYPES[self.kind]


def kind_of(name: str) -> str | None:
    """The kind of a file by its name's extension (None: not one Maxy reads)."""
    return KINDS.get(PurePosixPath(name).suffix.lower().lstrip("."))


def refuse(reason: str, message: str, **details: object) -> ConversionRefused:
    """A refusal with the engine's usual log line and wire shape."""
    error = rejected("upload", reason, message, **details)
    return ConversionRefused(str(error), reason)


def title_from_name(name: str) -> str:
    """A readable title from a file name: ``garden-plan_2024.pdf`` → ``garden plan 2024``."""
    stem = PurePosixPath(name).stem
    return re.sub(r"[\s_\-.]+", " ", stem).strip() or "Untitled"


def to_markdown(html: str) -> str:
    """The readable text of an HTML page as Markdown (scripts, styles and the head dropped)."""
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(list(_DROP)):
        tag.decompose()
    text = markdownify(str(soup), heading_style="ATX", strip=["img"])
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def html_title(html: str) -> str:
    """The ``<title>`` of an HTML page ("" when it has none)."""
    found = BeautifulSoup(html, "html.parser").title
    return found.get_text(strip=True) if found else ""


def convert(data: bytes, name: str, progress: Progress | None = None) -> Converted:
    """The file as Markdown with its headings, or :class:`ConversionRefused`."""
    kind = kind_of(name)
    if kind is None:
        known = ", ".join(f".{k}" for k in KINDS)
        raise refuse(
            "unsupported-type",
            f"{name!r} is not a kind of file Maxy reads. Upload one of: {known}.",
            name=name,
        )
    if not data:
        raise refuse("empty-file", f"{name!r} is empty (0 bytes): there is nothing to read.")
    if kind == "pdf":
        converted = _pdf(data, name, progress)
    elif kind == "docx":
        converted = _docx(data, name)
    else:
        text = _decode(data, name)
        if kind == "html":
            converted = Converted(
                html_title(text) or title_from_name(name), to_markdown(text), kind
            )
        else:
            text = text.strip()
            title = (_first_heading(text) if kind == "markdown" else "") or title_from_name(name)
            converted = Converted(title, text, kind)
    if not converted.text.strip():
        raise refuse("no-text", f"{name!r} has no readable text.", name=name)
    return converted


def _decode(data: bytes, name: str) -> str:
    """Text bytes as a string: UTF-8, UTF-16 by its mark, else Windows-1252."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    elif b"\x00" not in data:
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            return data.decode("cp1252", errors="replace")
    raise refuse(
        "not-text",
        f"{name!r} is not text (it holds binary data). Upload the document itself "
        "(Markdown, text, HTML, PDF or Word).",
        name=name,
    )


# --- PDF -------------------------------------------------------------------------------------


def _pdf(data: bytes, name: str, progress: Progress | None) -> Converted:
    # The PDF and Word readers load when a file of their kind comes (about 30 MB that a
    # session's MCP server, which converts only web pages, does not carry).
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    if not data[:1024].lstrip().startswith(b"%PDF-") and b"%PDF-" not in data[:1024]:
        raise refuse("not-pdf", f"{name!r} is not a PDF (it does not start like one).")
    # pypdf repairs what it can of a cut file; a PDF with no end marker lost its tail, with
    # whatever pages or fonts were there: refuse it rather than ingest part of it.
    if b"%%EOF" not in data[-2048:]:
        raise refuse(
            "damaged",
            f"{name!r} is incomplete: the file ends before the PDF does (a cut download or "
            "copy?). Upload the whole file.",
        )
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # An empty user password (restrictions only) still opens; a real one does not.
            try:
                opened = reader.decrypt("")
            except (NotImplementedError, PyPdfError) as err:
                raise _encrypted(name) from err
            if not opened:
                raise _encrypted(name)
        lines = _pdf_lines(reader, progress)
        meta_title = (reader.metadata.title if reader.metadata else None) or ""
    except ConversionRefused:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise refuse(
            "damaged",
            f"{name!r} is damaged and cannot be read as a PDF ({type(err).__name__}: {err}).",
        ) from err
    text = _markdown_of(lines)
    title = str(meta_title).strip() or _first_heading(text) or title_from_name(name)
    return Converted(title, text, "pdf")


def _encrypted(name: str) -> ConversionRefused:
    return refuse(
        "encrypted",
        f"{name!r} is protected by a password. Open it, save or print it as a PDF without a "
        "password, and upload that.",
    )


@dataclass
class _Line:
    text: str
    size: float


def _pdf_lines(reader: PdfReader, progress: Progress | None) -> list[_Line | None]:
    """Every line of text with the size it is mostly set in; None between pages."""
    out: list[_Line | None] = []
    total = len(reader.pages)
    for number, page in enumerate(reader.pages, 1):
        parts: list[tuple[str, float]] = []

        def visit(
            text: str,
            cm: list[float],
            tm: list[float],
            font: object,
            size: float,
            parts: list[tuple[str, float]] = parts,
        ) -> None:
            scale = math.hypot(tm[2], tm[3]) * math.hypot(cm[2], cm[3])
            parts.append((text, float(size) * (scale or 1.0)))

        page.extract_text(visitor_text=visit)
        text, sizes = "", Counter[float]()
        for fragment, size in parts:
            pieces = fragment.split("\n")
            for i, piece in enumerate(pieces):
                if i:
                    out.append(_line(text, sizes))
                    text, sizes = "", Counter()
                text += piece
                sizes[round(size * 2) / 2] += len(piece.strip())
        out.append(_line(text, sizes))
        out.append(None)
        if progress is not None:
            progress(number, total)
    return out


def _line(text: str, sizes: Counter[float]) -> _Line:
    size = sizes.most_common(1)[0][0] if sizes and sum(sizes.values()) else 0.0
    return _Line(" ".join(text.split()), size)


def _markdown_of(lines: list[_Line | None]) -> str:
    """PDF lines as Markdown: larger short lines become headings, pages blank-line apart."""
    body = Counter[float]()
    for line in lines:
        if line is not None and line.text:
            body[line.size] += len(line.text)
    if not body:
        return ""
    body_size = body.most_common(1)[0][0]
    larger = sorted(
        {line.size for line in lines if line is not None and _is_heading(line, body_size)},
        reverse=True,
    )
    levels = {size: min(i + 1, 3) for i, size in enumerate(larger)}
    out: list[str] = []
    for line in lines:
        if line is None:
            out.append("")
        elif not line.text:
            continue
        elif line.size in levels and _is_heading(line, body_size):
            out.extend(["", "#" * levels[line.size] + " " + line.text, ""])
        else:
            out.append(line.text)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _is_heading(line: _Line, body_size: float) -> bool:
    return (
        line.size >= body_size * HEADING_RATIO
        and 0 < len(line.text) <= MAX_HEADING_CHARS
        and any(c.isalpha() for c in line.text)
    )


def _first_heading(text: str) -> str:
    found = re.search(r"^#{1,6} +(.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else ""


# --- Word ------------------------------------------------------------------------------------


def _docx(data: bytes, name: str) -> Converted:
    import mammoth  # type: ignore[import-untyped]

    if data.startswith(_OLE_MAGIC):
        raise refuse(
            "encrypted",
            f"{name!r} is password-protected or an old Word (.doc) file. Open it in Word, save "
            "it as .docx without a password, and upload that.",
        )
    if not data.startswith(b"PK"):
        raise refuse("not-docx", f"{name!r} is not a Word (.docx) file.")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            if "word/document.xml" not in names:
                raise refuse(
                    "not-docx",
                    f"{name!r} is a zip archive but not a Word document (it has no "
                    "word/document.xml). Upload the .docx Word saved.",
                )
            inflated = sum(info.file_size for info in archive.infolist())
            if inflated > MAX_INFLATED:
                raise refuse(
                    "too-large",
                    f"{name!r} unpacks to {inflated // (1024 * 1024)} MB, more than "
                    f"{MAX_INFLATED // (1024 * 1024)} MB: it cannot be read safely.",
                )
            archive.testzip()
        result = mammoth.convert_to_html(io.BytesIO(data))
    except ConversionRefused:
        raise
    except (zipfile.BadZipFile, EOFError, KeyError, ValueError, ExpatError) as err:
        raise refuse(
            "damaged",
            f"{name!r} is damaged and cannot be read as a Word document ({err}).",
        ) from err
    html = str(result.value)
    text = to_markdown(html)
    return Converted(_first_heading(text) or title_from_name(name), text, "docx")
