"""Fixtures for the retrieval engine's stages against the session's real Neo4j and model."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from appliance.core.identity import Caller
from appliance.memory.embedder import Embedder
from appliance.memory.graph import Graph
from appliance.memory.projects import Projects
from appliance.memory.schema import apply_schema
from appliance.memory.search import Searcher
from appliance.memory.tasks import Tasks
from appliance.memory.write import EmbedText, EmbedTexts, Writer
from tests.support.processes import Neo4jServer


@dataclass
class Memory:
    """A graph, a writer and a searcher for one fresh account."""

    graph: Graph
    writer: Writer
    searcher: Searcher
    caller: Caller
    embeds: list[str]
    embed_texts: EmbedTexts  # the batched path ingest and reindex take (Embedder.embed_many)

    def other(self, **changes: object) -> Caller:
        """A caller of this account with other scopes/agent/session."""
        fields = {"account_id": self.caller.account_id, **changes}
        return Caller(**fields)  # type: ignore[arg-type]


def together(embed: EmbedText) -> EmbedTexts:
    """A list-at-a-time embed made of a one-text fake: one failing text fails the whole call."""

    async def embed_texts(texts: Sequence[str]) -> list[list[float]]:
        return [await embed(text) for text in texts]

    return embed_texts


@pytest.fixture
async def memory(neo4j_server: Neo4jServer, embedder: Embedder) -> AsyncIterator[Memory]:
    graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
    await apply_schema(graph, embedder.dimension)
    embeds: list[str] = []

    async def embed(text: str) -> list[float]:
        embeds.append(text)
        return [float(x) for x in embedder.embed(text)]

    async def embed_texts(texts: Sequence[str]) -> list[list[float]]:
        embeds.extend(texts)
        return [[float(x) for x in vector] for vector in embedder.embed_many(texts)]

    caller = Caller(account_id=f"test-{uuid.uuid4()}")
    yield Memory(
        graph,
        Writer(graph, embed, embedder.model_name),
        Searcher(graph, embed),
        caller,
        embeds,
        embed_texts,
    )
    await graph.run(
        "MATCH (n) WHERE n.accountId STARTS WITH $a DETACH DELETE n", {"a": caller.account_id}
    )
    await graph.close()


# The owner's work on a fixed clock: a Wednesday morning in Paris.
PARIS = ZoneInfo("Europe/Paris")
WORK_NOW = datetime(2026, 4, 15, 8, 0, tzinfo=UTC)


def work_of(memory: Memory, zone: ZoneInfo = PARIS, now: datetime = WORK_NOW) -> Projects:
    """The projects and tasks services of ``memory``'s graph, in ``zone``, at ``now``."""
    tasks = Tasks(
        memory.graph, memory.writer.embed, memory.writer.model_name, lambda: zone, lambda: now
    )
    return Projects(tasks)


@pytest.fixture
def projects(memory: Memory) -> Projects:
    return work_of(memory)
