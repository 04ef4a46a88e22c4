"""Documents made in the test, never committed: PDFs (headings in larger type, optionally
password-protected), Word files, and the broken files an upload must refuse.

The PDF writer is a minimal PDF 1.4 (Helvetica, one content stream a page, a correct cross-
reference table): what a word processor's "Save as PDF" produces, without the fonts.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

from pypdf import PdfReader, PdfWriter

Line = tuple[float, str]  # (font size in points, text)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf(pages: Sequence[Sequence[Line]], title: str | None = None) -> bytes:
    """A PDF of these pages, each a list of (size, text) lines from the top."""
    objects: list[bytes] = [b"", b""]  # 1: the catalog, 2: the page tree (filled in last)

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for lines in pages:
        y, ops = 800.0, []
        for size, text in lines:
            ops.append(f"BT /F1 {size:g} Tf 50 {y:g} Td ({_escape(text)}) Tj ET")
            y -= size * 1.5
        stream = "\n".join(ops).encode("cp1252")
        content = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        kids.append(
            add(
                b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
                b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>" % (font, content)
            )
        )
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    refs = " ".join(f"{kid} 0 R" for kid in kids).encode()
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (refs, len(kids))
    info = add(b"<< /Title (%s) >>" % _escape(title).encode("cp1252")) if title else None
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"/Size %d /Root 1 0 R" % (len(objects) + 1) + (
        b" /Info %d 0 R" % info if info else b""
    )
    out += b"trailer\n<< %s >>\nstartxref\n%d\n%%%%EOF\n" % (trailer, xref)
    return bytes(out)


def book(page_count: int, title: str = "The Garden Book") -> bytes:
    """A PDF of ``page_count`` pages: a 20 pt chapter heading, two 14 pt sections of 10 pt text."""
    pages = []
    for p in range(1, page_count + 1):
        lines: list[Line] = [(20, f"Chapter {p}: Bed {p} of the garden")]
        for s in (1, 2):
            lines.append((14, f"Section {p}.{s}: Soil and water"))
            lines.extend(
                (10, f"Line {n} of bed {p}, part {s}: roses want water at dawn, compost in autumn.")
                for n in range(1, 21)
            )
        pages.append(lines)
    return pdf(pages, title)


def encrypted(data: bytes, password: str = "s3cret") -> bytes:  # noqa: S107 -- a test file's
    """The PDF ``data`` protected by a user password (AES-256)."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=password, owner_password=password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" '
    'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
    'officedocument.wordprocessingml.document.main+xml"/>'
    '<Override PartName="/word/styles.xml" ContentType="application/vnd.openxmlformats-'
    'officedocument.wordprocessingml.styles+xml"/></Types>'
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/></Relationships>'
)
_DOC_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/styles" Target="styles.xml"/></Relationships>'
)
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _style(level: int) -> str:
    return (
        f'<w:style w:type="paragraph" w:styleId="Heading{level}">'
        f'<w:name w:val="heading {level}"/></w:style>'
    )


def docx(paragraphs: Sequence[tuple[int, str]]) -> bytes:
    """A Word file of (heading level, text) paragraphs; level 0 is body text."""
    body = []
    for level, text in paragraphs:
        style = f'<w:pPr><w:pStyle w:val="Heading{level}"/></w:pPr>' if level else ""
        escaped = text.replace("&", "&amp;").replace("<", "&lt;")
        body.append(f'<w:p>{style}<w:r><w:t xml:space="preserve">{escaped}</w:t></w:r></w:p>')
    document = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{_W}">'
        f"<w:body>{''.join(body)}</w:body></w:document>"
    )
    styles = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:styles xmlns:w="{_W}">'
        + "".join(_style(level) for level in (1, 2, 3))
        + "</w:styles>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        archive.writestr("word/_rels/document.xml.rels", _DOC_RELS)
        archive.writestr("word/document.xml", document)
        archive.writestr("word/styles.xml", styles)
    return out.getvalue()


def plain_zip() -> bytes:
    """A zip archive that is no Word document (what a renamed .zip is)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("photos/readme.txt", "Holiday photos, 2024.")
    return out.getvalue()
