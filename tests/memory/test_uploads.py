"""Uploaded files through the engine's ingest_file, against the real Neo4j and model: the file
kept as the attachment the document names, all or nothing, and swept once purged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.memory import uploads, versions
from appliance.memory.convert import ConversionRefused
from appliance.memory.ingest import Ingester
from appliance.memory.lifecycle import purge, soft_delete
from tests.memory.conftest import Memory
from tests.support import documents

pytestmark = pytest.mark.anyio

LIMITS = uploads.Limits(5 * 1024 * 1024, ("md", "txt", "pdf", "docx", "html"))


async def upload(
    memory: Memory, accounts: Path, data: bytes, name: str, limits: uploads.Limits = LIMITS
) -> dict[str, object]:
    staged = uploads.new_staged(accounts, memory.caller.account_id)
    staged.write_bytes(data)
    ingester = Ingester(memory.graph, memory.embed_texts, memory.writer.model_name)
    events: list[tuple[str, int, int]] = []

    async def progress(stage: str, done: int, total: int) -> None:
        events.append((stage, done, total))

    done = await uploads.ingest_file(
        memory.graph,
        ingester,
        accounts,
        memory.caller,
        limits,
        staged=staged.name,
        file_name=name,
        progress=progress,
    )
    assert not staged.exists()
    return {**done, "events": events}


async def count(memory: Memory) -> int:
    rows, _ = await memory.graph.run(
        "MATCH (n) WHERE n.accountId = $a RETURN count(n) AS n", {"a": memory.caller.account_id}
    )
    return int(rows[0]["n"])


async def test_an_uploaded_pdf_is_kept_and_named_by_its_document(
    memory: Memory, tmp_path: Path
) -> None:
    data = documents.book(2)
    done = await upload(memory, tmp_path, data, "Garden Book.pdf")
    assert done["attachmentId"] == "upload:garden-book.pdf" and done["kind"] == "pdf"
    assert done["title"] == "The Garden Book" and done["version"] == 1 and done["chunks"]
    events = done["events"]
    assert isinstance(events, list)
    stages = [e[0] for e in events]
    assert stages[:2] == ["reading", "reading"] and stages[-1] == "embedding"
    rows, _ = await memory.graph.run(
        "MATCH (d:KnowledgeDocument {id: $id}) RETURN d.file AS file, d.fileName AS name, "
        "d.mediaType AS type, d.fileBytes AS bytes",
        {"id": done["documentId"]},
    )
    kept = uploads.file_path(tmp_path, memory.caller.account_id, rows[0]["file"])
    assert kept is not None and kept.read_bytes() == data
    assert (rows[0]["name"], rows[0]["type"], rows[0]["bytes"]) == (
        "Garden Book.pdf",
        "application/pdf",
        len(data),
    )
    # The same name again, another file: version 2, both files kept, each version names its own.
    second = await upload(memory, tmp_path, documents.book(3), "Garden Book.pdf")
    assert second["documentId"] == done["documentId"] and second["version"] == 2
    listed = await versions.listing(memory.graph, memory.caller, str(done["documentId"]))
    assert [v["source"] for v in listed["versions"]] == ["upload", "upload"]
    assert len(list(kept.parent.iterdir())) == 2


@pytest.mark.parametrize(
    ("data", "name", "reason"),
    [
        (documents.book(2)[:3000], "cut.pdf", "damaged"),
        (documents.encrypted(documents.book(1)), "locked.pdf", "encrypted"),
        (documents.plain_zip(), "photos.docx", "not-docx"),
        (b"", "empty.md", "empty-file"),
        (b"x" * 100, "big.txt", "too-large"),
        (b"#!/bin/sh", "run.sh", "unsupported-type"),
    ],
)
async def test_a_refused_file_writes_nothing_and_keeps_nothing(
    memory: Memory, tmp_path: Path, data: bytes, name: str, reason: str
) -> None:
    limits = uploads.Limits(50, LIMITS.types) if reason == "too-large" else LIMITS
    before = await count(memory)
    with pytest.raises(ConversionRefused) as refused:
        await upload(memory, tmp_path, data, name, limits)
    assert refused.value.reason == reason
    assert await count(memory) == before
    folder = uploads.attachments_dir(tmp_path, memory.caller.account_id)
    assert [p.name for p in folder.iterdir()] == [uploads.INCOMING]
    assert list((folder / uploads.INCOMING).iterdir()) == []


def test_staged_names_and_kept_paths_cannot_leave_the_account(tmp_path: Path) -> None:
    for name in ("../../keys/x.part", "a/b.part", ".part", "x" * 20):
        with pytest.raises(ConversionRefused):
            uploads.staged_path(tmp_path, "acc", name)
    (tmp_path / "acc" / "attachments" / "k").mkdir(parents=True)
    (tmp_path / "secret").write_text("no")
    for relative in ("../../secret", "k/../../../secret", "/etc/passwd", ".incoming/x", "k"):
        assert uploads.file_path(tmp_path, "acc", relative) is None
    assert uploads.attachment_key("../../Évening Plan (2).PDF") == "vening-plan-2-.pdf"
    assert uploads.attachment_key("...") == "upload"


async def test_purging_a_document_sweeps_its_files(memory: Memory, tmp_path: Path) -> None:
    done = await upload(memory, tmp_path, b"# Plan\n\nBeds by the wall.", "plan.md")
    await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", str(done["documentId"]))
    folder = uploads.attachments_dir(tmp_path, memory.caller.account_id) / "plan.md"
    assert await uploads.sweep(memory.graph, tmp_path, memory.caller.account_id) == 0
    assert folder.is_dir()  # in its grace period: restorable, file and all
    await purge(memory.graph, 0, account_id=memory.caller.account_id)
    assert await uploads.sweep(memory.graph, tmp_path, memory.caller.account_id) == 0
    assert folder.is_dir()  # too young to sweep: it may be an upload under way
    old = 1_000_000_000
    os.utime(folder, (old, old))
    assert await uploads.sweep(memory.graph, tmp_path, memory.caller.account_id) == 1
    assert not folder.exists()
