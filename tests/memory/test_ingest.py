"""memory-ingest against the real Neo4j and model: hierarchy, embedding reuse, replacement."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from appliance.core.identity import Caller
from appliance.memory import ingest as ingest_module
from appliance.memory.chunking import chunk, sectionise
from appliance.memory.errors import EmbedError, ModelLoadFailed, WriteRejected
from appliance.memory.ingest import MAX_TEXT_CHARS, Ingester, IngestRequest
from appliance.memory.lifecycle import soft_delete
from appliance.memory.search import SearchRequest
from tests.memory.conftest import Memory, together

pytestmark = pytest.mark.anyio

TITLE = "Garden handbook"
OPENING = "The garden behind the house has four raised beds and a small greenhouse."
ORCHARD = " ".join(
    f"Fact {i}: orchard tree number {i} bears its first fruit in week {i} of the season."
    for i in range(45)
)
KEY = "The spare key hides under the blue zanzibar pot."
COMPOST = "Turn the compost heap every fortnight and keep it as damp as a wrung-out sponge."


def document(opening: str = OPENING, key: str = KEY, compost: bool = True) -> str:
    parts = [
        opening,
        "# Watering",
        "Water the tomatoes every morning in summer. The rain barrel by the shed lasts a week.",
        "# Orchard",
        f"{ORCHARD} {key}",
    ]
    if compost:
        parts += ["## Compost", COMPOST]
    return "\n\n".join(parts)


def ingester(memory: Memory, embed: Any = None) -> Ingester:
    embed_texts = together(embed) if embed else memory.embed_texts
    return Ingester(memory.graph, embed_texts, memory.writer.model_name)


async def ingest(memory: Memory, text: str | None = None, **kw: Any) -> dict[str, Any]:
    fields = {
        "title": TITLE,
        "text": document() if text is None else text,
        "attachment_id": "att-1",
        **kw,
    }
    return await ingester(memory).ingest(memory.caller, IngestRequest(**fields))


async def hierarchy(memory: Memory, doc_id: str) -> list[dict[str, Any]]:
    """Every node of the document, with its label and its parent's id."""
    rows, _ = await memory.graph.run(
        "MATCH (d:KnowledgeDocument {id: $id}) "
        "MATCH (p)-[:HAS_SECTION|HAS_CHUNK]->(n) WHERE p = d OR (d)-[:HAS_SECTION]->(p) "
        "RETURN labels(n)[0] AS label, p.id AS parent, properties(n) AS props "
        "UNION ALL MATCH (d:KnowledgeDocument {id: $id}) "
        "RETURN 'KnowledgeDocument' AS label, null AS parent, properties(d) AS props",
        {"id": doc_id},
    )
    return rows


def of(nodes: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    return sorted(
        (n["props"] for n in nodes if n["label"] == label),
        key=lambda p: (p.get("order", 0), p.get("index", 0)),
    )


def expected_counts(text: str) -> tuple[int, int]:
    sections = sectionise(text, TITLE)
    return len(sections), sum(len(chunk(s.text)) for s in sections)


async def test_a_document_becomes_an_embedded_hierarchy(memory: Memory) -> None:
    done = await ingest(memory)
    n_sections, n_chunks = expected_counts(document())
    assert (n_sections, n_chunks) == (4, 7)  # preamble, Watering, Orchard (4 chunks), Compost
    assert done["sections"] == n_sections and done["chunks"] == n_chunks
    assert done["embedded"] == 1 + n_sections + n_chunks == len(memory.embeds)
    assert done["reused"] == 0 and done["warnings"] == []

    nodes = await hierarchy(memory, done["documentId"])
    doc = of(nodes, "KnowledgeDocument")[0]
    sections, chunks = of(nodes, "Section"), of(nodes, "Chunk")
    assert len(sections) == n_sections and len(chunks) == n_chunks
    assert doc["attachmentId"] == "att-1" and doc["title"] == TITLE
    assert doc["summary"].startswith(OPENING)
    assert [s["title"] for s in sorted(sections, key=lambda s: s["index"])] == [
        TITLE,
        "Watering",
        "Orchard",
        "Compost",
    ]
    compost = next(s for s in sections if s["title"] == "Compost")
    assert compost["path"] == [TITLE, "Orchard", "Compost"] and compost["level"] == 2
    assert [c["order"] for c in chunks] == list(range(n_chunks))
    assert [c["index"] for c in chunks if c["sectionId"] != chunks[0]["sectionId"]][:3] == [
        0,
        0,
        1,
    ]
    for props in [doc, *sections, *chunks]:
        assert props["accountId"] == memory.caller.account_id
        assert len(props["embedding"]) == 384
        assert props["embeddingModel"] == memory.writer.model_name
        assert len(props["contentHash"]) == 64
        assert props["createdAt"] and props["updatedAt"] and "deletedAt" not in props
    # Each chunk hangs under the section it came from.
    section_ids = {s["id"] for s in sections}
    assert all(n["parent"] in section_ids for n in nodes if n["label"] == "Chunk")


async def test_every_level_is_findable_through_search(memory: Memory) -> None:
    done = await ingest(memory)
    nodes = await hierarchy(memory, done["documentId"])
    holder = [c for c in of(nodes, "Chunk") if "zanzibar" in c["content"]]
    assert len(holder) == 1  # the word is in one chunk only, not in any summary

    result = await memory.searcher.search(memory.caller, SearchRequest("zanzibar"))
    assert result.results[0].node_id == holder[0]["id"]
    assert result.results[0].props["content"].endswith(KEY)
    assert sum("zanzibar" in str(c.props) for c in result.results) == 1
    # The vector path alone finds it too: chunks are embedded and in the chunk index, and a
    # search for passages (chunks only) ranks the document's chunks each on its own.
    semantic = await memory.searcher.search(
        memory.caller,
        SearchRequest(
            "where is the spare key hidden", ["Chunk"], keyword_weight=0.0, vector_weight=1.0
        ),
    )
    assert holder[0]["id"] in [c.node_id for c in semantic.results[:3]]
    assert len(semantic.results) == len(of(nodes, "Chunk"))
    # A search over everything ranks documents: the whole hierarchy takes one place.
    anything = await memory.searcher.search(memory.caller, SearchRequest("where is the spare key"))
    assert len(anything.results) == 1 and "document: best of its" in anything.results[0].trace[-1]
    # Unless the caller lists nodes (the Data page): then each node has a place of its own.
    apart = await memory.searcher.search(
        memory.caller, SearchRequest("where is the spare key", per_document=False)
    )
    assert len(apart.results) > 1 and done["documentId"] in [c.node_id for c in apart.results]

    by_title = await memory.searcher.search(
        memory.caller, SearchRequest("garden handbook", labels=["KnowledgeDocument"])
    )
    assert by_title.results[0].node_id == done["documentId"]
    section = await memory.searcher.search(
        memory.caller, SearchRequest("compost heap", labels=["Section"])
    )
    assert section.results[0].props["title"] == "Compost"


async def test_reingesting_unchanged_text_embeds_nothing(memory: Memory) -> None:
    first = await ingest(memory)
    memory.embeds.clear()
    again = await ingest(memory)
    assert memory.embeds == []
    assert again == {**first, "embedded": 0, "reused": first["embedded"]}


async def test_a_changed_paragraph_reembeds_only_what_it_touches(memory: Memory) -> None:
    first = await ingest(memory)
    before = {n["props"]["id"] for n in await hierarchy(memory, first["documentId"])}

    # The opening paragraph is in its chunk, its section's summary and the document's summary.
    memory.embeds.clear()
    opened = await ingest(memory, document(opening=OPENING.replace("four", "five")))
    assert len(memory.embeds) == 3
    assert opened["embedded"] == 3 and opened["reused"] == first["embedded"] - 3
    assert [t.split("\n")[0] for t in memory.embeds] == [
        TITLE,
        TITLE,
        OPENING.replace("four", "five"),
    ]

    # The last sentence of a long section is in its last chunk only: nothing else moves.
    memory.embeds.clear()
    keyed = await ingest(
        memory,
        document(opening=OPENING.replace("four", "five"), key=KEY.replace("blue", "grey")),
    )
    assert len(memory.embeds) == 1 and memory.embeds[0].endswith("grey zanzibar pot.")
    assert keyed["embedded"] == 1 and keyed["sections"] == first["sections"]
    after = {n["props"]["id"] for n in await hierarchy(memory, first["documentId"])}
    assert len(before - after) == 2 and len(after - before) == 2  # two chunk nodes replaced
    rows, _ = await memory.graph.run(
        "MATCH (c:Chunk {documentId: $d}) WHERE c.content CONTAINS 'zanzibar' "
        "RETURN c.content AS content",
        {"d": first["documentId"]},
    )
    assert [r["content"].endswith("grey zanzibar pot.") for r in rows] == [True]


async def test_a_removed_section_disappears(memory: Memory) -> None:
    first = await ingest(memory)
    nodes = await hierarchy(memory, first["documentId"])
    compost = next(s for s in of(nodes, "Section") if s["title"] == "Compost")
    memory.embeds.clear()
    done = await ingest(memory, document(compost=False))
    assert (done["sections"], done["chunks"]) == (3, 6)
    # Neither the document's nor any remaining node's embedded text changed.
    assert memory.embeds == [] and done["reused"] == 1 + 3 + 6
    rows, _ = await memory.graph.run(
        "MATCH (n) WHERE n.accountId = $a AND (n:Section OR n:Chunk) RETURN count(n) AS n, "
        "sum(CASE WHEN n.id = $gone OR n.sectionId = $gone THEN 1 ELSE 0 END) AS gone",
        {"a": memory.caller.account_id, "gone": compost["id"]},
    )
    assert rows[0] == {"n": 9, "gone": 0}
    result = await memory.searcher.search(
        memory.caller, SearchRequest("compost", keyword_weight=1.0, vector_weight=0.0)
    )
    assert all("compost" not in str(c.props).lower() for c in result.results)


async def test_reingesting_a_soft_deleted_document_revives_it(memory: Memory) -> None:
    first = await ingest(memory)
    await soft_delete(memory.graph, memory.caller, "KnowledgeDocument", first["documentId"])
    hidden = await memory.searcher.search(memory.caller, SearchRequest("zanzibar"))
    assert hidden.results == []
    memory.embeds.clear()
    again = await ingest(memory)
    assert again["documentId"] == first["documentId"] and memory.embeds == []
    nodes = await hierarchy(memory, first["documentId"])
    assert len(nodes) == 1 + 4 + 7
    assert all("deletedAt" not in n["props"] for n in nodes)
    found = await memory.searcher.search(memory.caller, SearchRequest("zanzibar"))
    assert "zanzibar" in found.results[0].props["content"]


async def test_scope_and_agents_are_inherited_and_guarded(memory: Memory) -> None:
    done = await ingest(memory, scope="shared", agents=["gardener"])
    nodes = await hierarchy(memory, done["documentId"])
    assert {(n["props"]["scope"], tuple(n["props"]["agents"])) for n in nodes} == {
        ("shared", ("gardener",))
    }
    public = memory.other(scopes=("public",))
    assert (await memory.searcher.search(public, SearchRequest("zanzibar"))).results == []
    gardener = memory.other(scopes=("public", "shared"), agent="gardener")
    assert (await memory.searcher.search(gardener, SearchRequest("zanzibar"))).results
    with pytest.raises(WriteRejected, match="may not write at that scope"):
        await ingester(memory).ingest(
            public, IngestRequest(TITLE, document(), "att-1", scope="admin")
        )


async def test_the_same_attachment_in_another_account_is_another_document(
    memory: Memory,
) -> None:
    mine = await ingest(memory)
    stranger = Caller(account_id=memory.caller.account_id + "-other")
    theirs = await ingester(memory).ingest(
        stranger, IngestRequest("Their notes", "Nothing about gardens.", "att-1")
    )
    assert theirs["documentId"] != mine["documentId"]
    assert len(await hierarchy(memory, mine["documentId"])) == 1 + 4 + 7
    rows, _ = await memory.graph.run(
        "MATCH (n) WHERE n.documentId = $d RETURN collect(DISTINCT n.accountId) AS a",
        {"d": theirs["documentId"]},
    )
    assert rows[0]["a"] == [stranger.account_id]


async def test_concurrent_ingests_commit_together_and_a_refused_one_fails_alone(
    memory: Memory,
) -> None:
    # A document id another account already holds: its ingest is refused inside the write.
    taken = ingest_module.document_id(memory.caller.account_id, "att-taken")
    await memory.graph.run(
        "CREATE (:KnowledgeDocument {id: $id, accountId: $other})",
        {"id": taken, "other": memory.caller.account_id + "-other"},
    )
    shared = ingester(memory)
    attachments = ["att-0", "att-1", "att-taken", "att-2", "att-3"]
    outcomes = await asyncio.gather(
        *(
            shared.ingest(memory.caller, IngestRequest(f"Notes {a}", document(), a))
            for a in attachments
        ),
        return_exceptions=True,
    )
    refused = outcomes.pop(2)
    assert isinstance(refused, WriteRejected) and "another account" in str(refused)
    for done in outcomes:
        assert isinstance(done, dict) and done["version"] == 1
        assert len(await hierarchy(memory, done["documentId"])) == 1 + 4 + 7
    rows, _ = await memory.graph.run(
        "MATCH (n) WHERE n.documentId = $d OR n.id = $d RETURN count(n) AS n", {"d": taken}
    )
    assert rows[0]["n"] == 1  # the other account's node, untouched; nothing written under it


async def test_a_failed_embed_never_aborts_the_ingest(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    async def broken(text: str) -> list[float]:
        calls.append(text)
        raise ModelLoadFailed("model made to fail")

    with caplog.at_level(logging.INFO):
        done = await ingester(memory, broken).ingest(
            memory.caller, IngestRequest(TITLE, document(), "att-1")
        )
    assert (done["sections"], done["chunks"], done["embedded"]) == (4, 7, 0)
    assert done["warnings"] == ["embed-failed"]
    assert len(calls) == 1  # a broken model is not asked again for every node
    assert "[graph-write] warn reason=embed-failed" in caplog.text
    assert "[ingest] op=done attachment=att-1" in caplog.text
    nodes = await hierarchy(memory, done["documentId"])
    assert len(nodes) == 1 + 4 + 7
    assert all("embedding" not in n["props"] and n["props"]["contentHash"] for n in nodes)
    # Keyword search still finds the text; the next ingest with a working model embeds it all.
    keyword = await memory.searcher.search(
        memory.caller, SearchRequest("zanzibar", keyword_weight=1.0, vector_weight=0.0)
    )
    assert keyword.results
    healed = await ingest(memory)
    assert healed["embedded"] == 1 + 4 + 7 and healed["reused"] == 0


async def test_writes_are_batched(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 2)
    done = await ingest(memory)
    assert len(await hierarchy(memory, done["documentId"])) == 1 + 4 + 7
    memory.embeds.clear()
    again = await ingest(memory, document(compost=False))
    assert again["chunks"] == 6 and memory.embeds == []


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"title": "", "text": ""}, "neither a title nor text"),
        ({"title": " ", "text": " \n\t "}, "neither a title nor text"),
        ({"text": "# Only\n\n## Headings"}, "no text under them"),
        ({"text": "x" * (MAX_TEXT_CHARS + 1)}, "at most 2,000,000"),
        ({"attachment_id": ""}, "attachmentId is required"),
        ({"scope": "secret"}, "scope must be one of"),
        ({"agents": [""]}, "agents must be"),
    ],
)
async def test_bad_input_is_refused_and_writes_nothing(
    memory: Memory, fields: dict[str, Any], reason: str
) -> None:
    request = {"title": TITLE, "text": document(), "attachment_id": "att-1", **fields}
    with pytest.raises(WriteRejected, match=reason):
        await ingester(memory).ingest(memory.caller, IngestRequest(**request))
    rows, _ = await memory.graph.run(
        "MATCH (n) WHERE n.accountId = $a RETURN count(n) AS n", {"a": memory.caller.account_id}
    )
    assert rows[0]["n"] == 0 and memory.embeds == []


@pytest.mark.parametrize("text", ["", " \n\t "])
async def test_a_title_alone_is_a_document(memory: Memory, text: str) -> None:
    title = "Boundary layer transition on a swept wing"
    done = await ingester(memory).ingest(memory.caller, IngestRequest(title, text, "att-title"))
    assert (done["sections"], done["chunks"]) == (1, 1)
    nodes = await hierarchy(memory, done["documentId"])
    assert [c["content"] for c in of(nodes, "Chunk")] == [title]
    assert all(n["props"].get("embedding") for n in nodes)  # every node was embedded
    await memory.graph.run("CALL db.awaitIndexes(60)")
    found = await memory.searcher.search(
        memory.caller, SearchRequest("swept wing", keyword_weight=1.0, vector_weight=0.0)
    )
    assert {c.props.get("attachmentId") for c in found.results} == {"att-title"}


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("---\nlayout: note\n---\n# Heat shields\n\nAblative tiles char.", "Heat shields"),
        ("  Ablative tiles char and carry the heat away.\n\nMore.", None),
        ("word " * 40, "word " * 15 + "word\u2026"),
    ],
    ids=["first-heading", "first-line", "long-line-cut-at-a-word"],
)
async def test_text_alone_is_a_document_named_by_its_opening(
    memory: Memory, text: str, title: str | None
) -> None:
    done = await ingester(memory).ingest(memory.caller, IngestRequest("", text, "att-untitled"))
    nodes = await hierarchy(memory, done["documentId"])
    (doc,) = of(nodes, "KnowledgeDocument")
    assert doc["title"] == (title or "Ablative tiles char and carry the heat away.")
    assert len(doc["title"]) <= 80


async def test_a_documents_changed_nodes_are_embedded_in_one_call(memory: Memory) -> None:
    calls: list[list[str]] = []

    async def embed_texts(texts: Sequence[str]) -> list[list[float]]:
        calls.append(list(texts))
        return await memory.embed_texts(texts)

    packed = Ingester(memory.graph, embed_texts, memory.writer.model_name)
    done = await packed.ingest(memory.caller, IngestRequest(TITLE, document(), "att-1"))
    assert [len(call) for call in calls] == [1 + done["sections"] + done["chunks"]]
    calls.clear()
    edited = await packed.ingest(
        memory.caller, IngestRequest(TITLE, document(key="The key is with Jo."), "att-1")
    )
    assert len(calls) == 1 and len(calls[0]) == edited["embedded"] > 0
    assert edited["reused"] > 0  # the untouched sections and chunks are not embedded again


async def test_nodes_that_share_a_text_share_one_vector(memory: Memory) -> None:
    note = "A one-paragraph note: the boiler is serviced every March by the same engineer."
    done = await ingest(memory, text=note, attachment_id="att-note")
    assert (done["sections"], done["chunks"]) == (1, 1)
    # The document and its one section are both "title + summary": one text, embedded once.
    assert done["embedded"] == 3 and len(memory.embeds) == 2
    nodes = await hierarchy(memory, done["documentId"])
    doc, section = of(nodes, "KnowledgeDocument")[0], of(nodes, "Section")[0]
    assert doc["embedding"] == section["embedding"] != of(nodes, "Chunk")[0]["embedding"]


async def test_a_text_that_fails_alone_costs_only_its_own_vector(memory: Memory) -> None:
    async def picky(text: str) -> list[float]:
        if "zanzibar" in text:
            raise EmbedError("this text upsets the model")
        return (await memory.embed_texts([text]))[0]

    done = await ingester(memory, picky).ingest(
        memory.caller, IngestRequest(TITLE, document(), "att-1")
    )
    every = 1 + done["sections"] + done["chunks"]
    assert (done["embedded"], done["warnings"]) == (every - 1, ["embed-failed"])
    nodes = await hierarchy(memory, done["documentId"])
    missing = [n["props"] for n in nodes if "embedding" not in n["props"]]
    assert len(missing) == 1 and KEY in str(missing[0])  # the chunk that holds the key


async def test_chunks_carry_their_section_path(memory: Memory) -> None:
    done = await ingest(memory)
    nodes = await hierarchy(memory, done["documentId"])
    paths = {tuple(n["props"]["path"]) for n in nodes if n["label"] == "Chunk"}
    assert paths == {
        (TITLE,),
        (TITLE, "Watering"),
        (TITLE, "Orchard"),
        (TITLE, "Orchard", "Compost"),
    }


async def test_the_text_is_kept_before_the_graph_is_written(memory: Memory, tmp_path: Any) -> None:
    from appliance.core.documents import keep_text, read_text

    kept = Ingester(
        memory.graph,
        memory.embed_texts,
        memory.writer.model_name,
        keep=lambda doc_id, text: keep_text(tmp_path, doc_id, text),
    )
    request = IngestRequest(title=TITLE, text=document(), attachment_id="att-kept")
    done = await kept.ingest(memory.caller, request)
    assert read_text(tmp_path, done["documentId"]) == document()
    assert (tmp_path / "documents").stat().st_mode & 0o777 == 0o700
    edited = document(key="The spare key now hides in the shed.")
    again = await kept.ingest(memory.caller, IngestRequest(TITLE, edited, "att-kept"))
    assert read_text(tmp_path, done["documentId"]) == edited
    assert again["reused"] > 0

    # A text that cannot be kept refuses the ingest, and the graph keeps what it had.
    def full(doc_id: str, text: str) -> None:
        raise OSError(28, "No space left on device")

    refused = Ingester(memory.graph, memory.embed_texts, memory.writer.model_name, keep=full)
    with pytest.raises(WriteRejected, match="could not be kept on disk"):
        await refused.ingest(memory.caller, IngestRequest(TITLE, "Something new", "att-kept"))
    rows, _ = await memory.graph.run(
        "MATCH (c:Chunk {documentId: $id}) RETURN count(c) AS n, "
        "any(c IN collect(c.content) WHERE c CONTAINS 'Something new') AS changed",
        {"id": done["documentId"]},
    )
    assert rows[0]["n"] > 0 and rows[0]["changed"] is False
