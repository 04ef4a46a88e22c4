"""Concurrent bulk embeds through the real model: embedded together, answered apart."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from appliance.memory.bulk import BulkEmbeds
from appliance.memory.embedder import Embedder, Vector
from appliance.memory.errors import EmptyText

pytestmark = pytest.mark.anyio

# Eight "documents" of a few node texts each, as an import sends them.
DOCUMENTS = [
    [f"Document {n}", f"Document {n}\nThe wing section number {n} was tested at Mach {n}.", "x" * n]
    for n in range(1, 9)
]


@pytest.fixture
def thread() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-bulk")
    yield pool
    pool.shutdown(wait=True)


class Recorded:
    """embed_many that notes the size of every call."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.sizes: list[int] = []

    def __call__(self, texts: Sequence[str | bytes]) -> list[Vector]:
        self.sizes.append(len(texts))
        return self.embedder.embed_many(texts)


async def test_concurrent_callers_are_embedded_together_and_each_gets_its_own_vectors(
    embedder: Embedder, thread: ThreadPoolExecutor
) -> None:
    recorded = Recorded(embedder)
    bulk = BulkEmbeds(recorded, thread)
    answers = await asyncio.gather(*(bulk(texts) for texts in DOCUMENTS))
    for texts, vectors in zip(DOCUMENTS, answers, strict=True):
        assert len(vectors) == len(texts)
        for text, vector in zip(texts, vectors, strict=True):
            assert float(np.dot(vector, embedder.embed(text))) >= 0.9999
    # All eight were waiting when the model became free: one round, one embed_many.
    assert recorded.sizes == [24] and bulk.rounds == 1


async def test_a_call_that_finds_the_model_idle_starts_at_once_and_later_ones_share_a_round(
    embedder: Embedder, thread: ThreadPoolExecutor
) -> None:
    recorded = Recorded(embedder)
    started, gate = threading.Event(), threading.Event()

    def gated(texts: Sequence[str | bytes]) -> list[Vector]:
        if not started.is_set():
            recorded.sizes.append(len(texts))
            started.set()
            gate.wait(30)  # the first round holds the model until the others are waiting
            return embedder.embed_many(texts)
        return recorded(texts)

    bulk = BulkEmbeds(gated, thread)
    first = asyncio.ensure_future(bulk(DOCUMENTS[0]))
    assert await asyncio.to_thread(started.wait, 30)  # the first call did not wait for company
    later = [asyncio.ensure_future(bulk(texts)) for texts in DOCUMENTS[1:]]
    await asyncio.sleep(0)  # every later call is waiting
    gate.set()
    assert len(await first) == 3 and [len(await v) for v in later] == [3] * 7
    assert recorded.sizes == [3, 21]


async def test_a_round_holds_whole_calls_up_to_its_bound(
    embedder: Embedder, thread: ThreadPoolExecutor
) -> None:
    recorded = Recorded(embedder)
    bulk = BulkEmbeds(recorded, thread, round_texts=7)
    await asyncio.gather(*(bulk(texts) for texts in DOCUMENTS))
    assert recorded.sizes == [6, 6, 6, 6]  # whole calls only, never past 7 texts


async def test_one_callers_bad_text_fails_only_that_caller(
    embedder: Embedder, thread: ThreadPoolExecutor
) -> None:
    bulk = BulkEmbeds(embedder.embed_many, thread)
    calls = [["a first text"], ["fine", "   "], ["another good text"], ["and one more"]]
    answers = await asyncio.gather(*(bulk(texts) for texts in calls), return_exceptions=True)
    assert isinstance(answers[1], EmptyText)
    for texts, vectors in zip(calls[2:], answers[2:], strict=True):
        assert isinstance(vectors, list)
        assert float(np.dot(vectors[0], embedder.embed(texts[0]))) >= 0.9999
    assert isinstance(answers[0], list) and len(answers[0]) == 1


async def test_a_caller_that_gives_up_leaves_the_others_answered(
    embedder: Embedder, thread: ThreadPoolExecutor
) -> None:
    bulk = BulkEmbeds(embedder.embed_many, thread)
    first = asyncio.ensure_future(bulk(["the one that runs first"]))
    leaving = asyncio.ensure_future(bulk(["the one that leaves"]))
    staying = asyncio.ensure_future(bulk(["the one that stays"]))
    await asyncio.sleep(0)  # all three are waiting
    leaving.cancel()
    assert len(await first) == 1 and len(await staying) == 1
    assert leaving.cancelled()


async def test_nothing_to_embed_is_answered_without_the_model(thread: ThreadPoolExecutor) -> None:
    def never(texts: Sequence[str | bytes]) -> list[Vector]:
        raise AssertionError("the model was asked for nothing")

    assert await BulkEmbeds(never, thread)([]) == []
