"""Uploaded files to Markdown with headings, and the refusals of files that cannot be read."""

from __future__ import annotations

import pytest

from appliance.memory.convert import ConversionRefused, convert, kind_of, title_from_name
from tests.support import documents

BOOK = documents.book(3)


def test_a_pdf_keeps_its_title_and_its_headings_by_type_size() -> None:
    done = convert(BOOK, "garden.pdf")
    assert (done.title, done.kind, done.media_type) == ("The Garden Book", "pdf", "application/pdf")
    lines = done.text.splitlines()
    assert lines[0] == "# Chapter 1: Bed 1 of the garden"
    assert "## Section 1.2: Soil and water" in lines
    assert "# Chapter 3: Bed 3 of the garden" in lines
    assert "Line 20 of bed 3, part 2: roses want water at dawn, compost in autumn." in lines
    assert not any(line.startswith("#") and "Line" in line for line in lines)


def test_reading_a_pdf_reports_each_page() -> None:
    ticks: list[tuple[int, int]] = []
    convert(BOOK, "garden.pdf", lambda done, total: ticks.append((done, total)))
    assert ticks == [(1, 3), (2, 3), (3, 3)]


def test_a_word_file_keeps_its_heading_styles() -> None:
    data = documents.docx(
        [(1, "Garden plan"), (0, "Beds by the wall."), (2, "Roses"), (0, "Dawn.")]
    )
    done = convert(data, "Plan.DOCX")
    assert done.kind == "docx" and done.title == "Garden plan"
    assert done.text == "# Garden plan\n\nBeds by the wall.\n\n## Roses\n\nDawn."


def test_html_becomes_markdown_with_its_title() -> None:
    html = (
        b"<html><head><title>Boiler</title><style>p{}</style></head><body><h2>Service</h2>"
        b"<p>In March.</p><script>x()</script></body></html>"
    )
    done = convert(html, "boiler.html")
    assert (done.title, done.text) == ("Boiler", "## Service\n\nIn March.")


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ("# Notes\n\nCaf\u00e9 at six.".encode("utf-8-sig"), "# Notes\n\nCaf\u00e9 at six."),
        ("Caf\u00e9".encode("utf-16"), "Caf\u00e9"),
        ("Caf\u00e9".encode("cp1252"), "Caf\u00e9"),
    ],
)
def test_text_in_any_usual_encoding(data: bytes, text: str) -> None:
    assert convert(data, "notes.md").text == text


def truncated() -> bytes:
    return BOOK[: len(BOOK) // 2]


def cut_tail() -> bytes:
    return BOOK[:-12]


@pytest.mark.parametrize(
    ("make", "name", "reason", "says"),
    [
        (truncated, "garden.pdf", "damaged", "incomplete"),
        (cut_tail, "garden.pdf", "damaged", "Upload the whole file"),
        (lambda: documents.encrypted(BOOK), "garden.pdf", "encrypted", "protected by a password"),
        (lambda: documents.plain_zip(), "photos.docx", "not-docx", "not a Word document"),
        (lambda: b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500), "old.docx", "encrypted", ".doc"),
        (lambda: b"", "empty.pdf", "empty-file", "0 bytes"),
        (lambda: b"", "empty.txt", "empty-file", "0 bytes"),
        (lambda: b"\x89PNG\r\n\x1a\n\x00\x00", "photo.txt", "not-text", "binary"),
        (lambda: b"hello", "fake.pdf", "not-pdf", "not a PDF"),
        (lambda: b"MZ\x90\x00", "setup.exe", "unsupported-type", ".pdf, .docx"),
        (
            lambda: b"<html><body><script>x()</script></body></html>",
            "empty.html",
            "no-text",
            "no readable text",
        ),
        (lambda: documents.pdf([[]]), "scan.pdf", "no-text", "no readable text"),
    ],
)
def test_a_file_that_cannot_be_read_is_refused_saying_why(
    make: object, name: str, reason: str, says: str
) -> None:
    assert callable(make)
    with pytest.raises(ConversionRefused) as refused:
        convert(make(), name)
    assert refused.value.reason == reason
    assert says in str(refused.value) and repr(name) in str(refused.value)


def test_a_damaged_word_file_is_refused() -> None:
    data = bytearray(documents.docx([(1, "Plan"), (0, "Text.")]))
    data[len(data) // 3 : len(data) // 3 + 40] = bytes(40)
    with pytest.raises(ConversionRefused) as refused:
        convert(bytes(data), "plan.docx")
    assert refused.value.reason == "damaged"


def test_names() -> None:
    assert kind_of("A.PDF") == "pdf" and kind_of("notes.markdown") == "markdown"
    assert kind_of("archive.zip") is None and kind_of("README") is None
    assert title_from_name("garden-plan_2024.pdf") == "garden plan 2024"
