"""The memory plugin's document tools through `maxy mcp` over stdio against a real engine:
memory-ingest-file (a Word file and a refused PDF), the versions tools, and the path guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.mcp.tools import tools_of
from appliance.plugins.resolver import core_root
from tests.mcp.test_server import call, engine, server  # noqa: F401 -- the engine fixture
from tests.support import documents
from tests.support.processes import Env

pytestmark = pytest.mark.anyio


async def test_a_word_file_is_ingested_kept_and_versioned(engine: Env, tmp_path: Path) -> None:  # noqa: F811
    params = server(engine)
    plan = tmp_path / "Garden Plan.docx"
    plan.write_bytes(documents.docx([(1, "Garden plan"), (0, "Roses by the south wall.")]))
    done = await call(params, "memory-ingest-file", {"path": str(plan)})
    assert not done.is_error, done.content
    first = done.structured_content
    assert (first["title"], first["kind"], first["version"]) == ("Garden plan", "docx", 1)
    assert first["attachmentId"] == "upload:garden-plan.docx"
    kept = engine.settings.accounts_dir / engine.account_id / "attachments" / "garden-plan.docx"
    assert [p.read_bytes() for p in kept.iterdir()] == [plan.read_bytes()]

    plan.write_bytes(documents.docx([(1, "Garden plan"), (0, "Tulips by the south wall.")]))
    second = (await call(params, "memory-ingest-file", {"path": str(plan)})).structured_content
    assert second["documentId"] == first["documentId"] and second["version"] == 2
    doc = first["documentId"]
    listed = (await call(params, "memory-versions", {"id": doc})).structured_content
    assert [v["number"] for v in listed["versions"]] == [2, 1]
    shown = await call(params, "memory-version", {"id": doc, "number": 2})
    assert (
        "-Roses by the south wall.\n+Tulips by the south wall." in shown.structured_content["diff"]
    )
    back = await call(params, "memory-version-restore", {"id": doc, "number": 1})
    assert back.structured_content["version"] == 3
    found = await call(params, "memory-search", {"query": "what grows by the south wall"})
    assert "Roses" in found.content[0].text
    # Forget it (sections, chunks and versions along), then bring it back whole.
    forgot = await call(params, "memory-delete", {"label": "KnowledgeDocument", "id": doc})
    assert not forgot.is_error, forgot.content
    assert forgot.structured_content["changed"] > 1
    gone = await call(params, "memory-versions", {"id": doc})
    assert gone.is_error and "not-found" in gone.content[0].text
    back = await call(params, "memory-restore", {"label": "KnowledgeDocument", "id": doc})
    assert back.structured_content["changed"] == forgot.structured_content["changed"]
    listed = (await call(params, "memory-versions", {"id": doc})).structured_content
    assert [v["number"] for v in listed["versions"]] == [3, 2, 1]


async def test_a_refused_file_says_why_and_device_files_are_out_of_reach(
    engine: Env,  # noqa: F811
    tmp_path: Path,
) -> None:
    params = server(engine)
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(documents.encrypted(documents.book(1)))
    refused = await call(params, "memory-ingest-file", {"path": str(locked)})
    assert refused.is_error and "protected by a password" in refused.content[0].text
    incoming = engine.settings.accounts_dir / engine.account_id / "attachments" / ".incoming"
    assert list(incoming.iterdir()) == []
    key = engine.settings.keys_dir / "neo4j-password.md"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text("secret")
    for path, says in ((str(key), "device's own files"), (str(tmp_path / "none.md"), "no file")):
        answer = await call(params, "memory-ingest-file", {"path": path})
        assert answer.is_error and says in answer.content[0].text, answer.content


def test_the_plugin_lists_the_new_tools_and_the_librarian_may_use_them() -> None:
    served = {tool.name for tool in tools_of("memory")}
    for name in (
        "memory-ingest-file",
        "memory-versions",
        "memory-version",
        "memory-version-restore",
    ):
        assert name in served
    librarian = (core_root() / "memory" / "agents" / "librarian.md").read_text()
    assert "mcp__memory__memory-ingest-file" in librarian
    assert "mcp__memory__memory-version-restore" in librarian
