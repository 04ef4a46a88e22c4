"""Uploads, forget and restore, and versions through a real `maxy app` (Granian, Unix socket) in
front of a real `maxy engine`: the routes of appliance/app/knowledge.py.

Prints the upload throughput of a 50-page PDF (MB/s and passages a second, end to end: the
request, the conversion, the embedding and the write); nothing asserts a time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.memory import uploads
from tests.support import documents
from tests.support.processes import Neo4jServer
from tests.support.sse import Event, parse
from tests.support.stacks import Stack, make_env, running_stack

MB = 1024 * 1024


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("knowledge")
    env = make_env(neo4j_server, root / "data")
    with running_stack(env, root / "logs", "engine", "app") as running:
        yield running


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    """A logged-in LAN admin client that sends its CSRF token."""
    with stack.client(stack.admin_cookies()) as client:
        client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
        client.timeout = httpx.Timeout(300.0)
        yield client


def attachments(stack: Stack) -> Path:
    return uploads.attachments_dir(stack.env.settings.accounts_dir, stack.env.account_id)


def documents_named(stack: Stack, title: str) -> list[dict[str, Any]]:
    sample = stack.rpc("graph.sample", {"labels": ["KnowledgeDocument"], "limit": 2000})
    return [n for n in sample["nodes"] if n["title"] == title]


def upload(admin: httpx.Client, name: str, data: bytes) -> list[Event]:
    """POST a file, then read its events stream to the end."""
    answer = admin.post("/api/admin/uploads", params={"name": name}, content=data)
    assert answer.status_code == 202, answer.text
    assert answer.json()["bytes"] == len(data)
    stream = admin.get(answer.json()["events"])
    assert stream.headers["content-type"].startswith("text/event-stream")
    return parse(stream.text)


# Embedding ~200 passages of ~300 tokens: minutes on a loaded two-core machine.
@pytest.mark.timeout(1800)
def test_a_50_page_pdf_uploads_with_progress_and_its_file_links_back(
    stack: Stack, admin: httpx.Client
) -> None:
    data = documents.book(50, title="Fifty Beds")
    started = time.perf_counter()
    events = upload(admin, "fifty-beds.pdf", data)
    seconds = time.perf_counter() - started
    kinds = [e.event for e in events]
    assert kinds[-1] == "done", events[-1].data
    stages = [e.data["stage"] for e in events if e.event == "progress"]
    assert stages[0] == "receiving" and stages.count("reading") == 50 and "embedding" in stages
    done = events[-1].data
    assert (done["title"], done["kind"], done["version"]) == ("Fifty Beds", "pdf", 1)
    assert done["sections"] >= 100 and done["chunks"] >= 100
    size = len(data) / MB
    print(
        f"\nupload throughput, 50-page PDF ({size:.3f} MB, {done['chars']:,} characters, "
        f"{done['sections']} sections, {done['chunks']} chunks): end to end {seconds:.1f} s = "
        f"{size / seconds:.4f} MB/s, {done['chunks'] / seconds:.2f} chunks/s; reading the PDF "
        f"{done['readSeconds']:.2f} s = {size / done['readSeconds']:.2f} MB/s, "
        f"{50 / done['readSeconds']:.0f} pages/s"
    )
    # The attachment links back: the document's file is the upload, byte for byte.
    file = admin.get(f"/api/admin/documents/{done['documentId']}/file")
    assert file.status_code == 200 and file.content == data
    assert file.headers["content-type"] == "application/pdf"
    assert 'filename="fifty-beds.pdf"' in file.headers["content-disposition"]
    found = admin.get("/api/admin/search", params={"q": "Chapter 17 bed of the garden"}).json()
    assert any(r["documentId"] == done["documentId"] for r in found["results"])


def truncated() -> bytes:
    pdf = documents.book(3)
    return pdf[: len(pdf) * 2 // 3]


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("cut.pdf", truncated, "is incomplete"),
        ("locked.pdf", lambda: documents.encrypted(documents.book(2)), "protected by a password"),
        ("holiday.docx", documents.plain_zip, "not a Word document"),
        ("nothing.md", lambda: b"", "is empty (0 bytes)"),
    ],
)
def test_a_bad_file_is_refused_clearly_and_leaves_nothing(
    stack: Stack, admin: httpx.Client, name: str, make: Any, says: str
) -> None:
    before = stack.rpc("graph.sample", {"limit": 2000})["categories"]
    events = upload(admin, name, make())
    assert events[-1].event == "failed"
    assert says in events[-1].data["message"] and name in events[-1].data["message"]
    assert events[-1].data["code"] == "write-rejected"
    assert stack.rpc("graph.sample", {"limit": 2000})["categories"] == before
    assert not (attachments(stack) / uploads.attachment_key(name)).exists()
    assert list((attachments(stack) / uploads.INCOMING).iterdir()) == []


def big_body(total: int) -> Iterator[bytes]:
    block = b"%PDF-1.4\n" + bytes(MB - 9)
    sent = 0
    while sent < total:
        yield block
        sent += len(block)


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_200_mb_file_is_refused_without_keeping_any_of_it(
    stack: Stack, admin: httpx.Client, declared: bool
) -> None:
    headers = {"content-length": str(200 * MB)} if declared else {}
    try:
        answer = admin.post(
            "/api/admin/uploads",
            params={"name": "scan.pdf"},
            content=big_body(200 * MB),
            headers=headers,
        )
    except httpx.TransportError:
        answer = None  # the server may close before the client finished sending
    if answer is not None:
        assert answer.status_code == 413, answer.text
        assert answer.json()["code"] == "too-large"
        assert "larger than 50 MB" in answer.json()["message"]
        assert "MAXY_UPLOAD_MAX_MB" in answer.json()["message"]
    assert list((attachments(stack) / uploads.INCOMING).iterdir()) == []
    assert documents_named(stack, "scan") == []


def test_what_is_not_an_upload_is_refused_at_once(stack: Stack, admin: httpx.Client) -> None:
    answer = admin.post("/api/admin/uploads", params={"name": "setup.exe"}, content=b"MZ")
    assert answer.status_code == 415 and ".pdf" in answer.json()["message"]
    assert admin.post("/api/admin/uploads", content=b"x").status_code == 400
    with stack.client(admin.cookies) as no_token:
        refused = no_token.post("/api/admin/uploads", params={"name": "a.md"}, content=b"# A")
    assert refused.status_code == 403 and refused.json()["code"] == "csrf"
    assert admin.get("/api/admin/uploads/nope/events").status_code == 404


def test_forget_and_undo(stack: Stack, admin: httpx.Client) -> None:
    note = stack.rpc("write", {"label": "Note", "properties": {"name": "Wombat gate code"}})["id"]

    def found() -> bool:
        query = {"q": "wombat gate code", "types": "Note"}
        results = admin.get("/api/admin/search", params=query).json()
        return any(r["id"] == note for r in results["results"])

    assert found()
    gone = admin.post(f"/api/admin/nodes/Note/{note}/delete")
    assert gone.status_code == 200 and gone.json()["changed"]
    assert not found()
    assert admin.get(f"/api/admin/graph/node/{note}").status_code == 404
    back = admin.post(f"/api/admin/nodes/Note/{note}/restore")
    assert back.status_code == 200 and back.json()["changed"]
    assert found()
    assert admin.post("/api/admin/nodes/Note/no-such-id/delete").status_code == 400
    assert admin.post("/api/admin/nodes/Bad-Label/x/delete").status_code == 400


def test_versions_of_an_uploaded_document_and_a_restore(stack: Stack, admin: httpx.Client) -> None:
    first = upload(admin, "plan.md", b"# Beds\n\nRoses by the wall.\n")[-1].data
    second = upload(admin, "plan.md", b"# Beds\n\nTulips by the wall.\n")[-1].data
    doc = first["documentId"]
    assert second["documentId"] == doc and second["version"] == 2
    listed = admin.get(f"/api/admin/documents/{doc}/versions").json()
    assert [v["number"] for v in listed["versions"]] == [2, 1] and listed["current"] == 2
    shown = admin.get(f"/api/admin/documents/{doc}/versions/2").json()
    assert "-Roses by the wall.\n+Tulips by the wall.\n" in shown["diff"]
    restored = admin.post(f"/api/admin/documents/{doc}/versions/1/restore").json()
    assert restored["version"] == 3 and restored["restoredFrom"] == 1
    latest = admin.get(f"/api/admin/documents/{doc}/versions").json()["versions"][0]
    assert (latest["number"], latest["source"], latest["restoredFrom"]) == (3, "restore", 1)
    assert admin.get(f"/api/admin/documents/{doc}/versions/9").status_code == 404
    assert admin.get(f"/api/admin/documents/{doc}/versions/x").status_code == 400
    assert admin.get("/api/admin/documents/nope/versions").status_code == 404
