"""Packed embedding through the real GGUF model: the same vectors as one text at a time."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from appliance.memory.embedder import Embedder, pack
from appliance.memory.errors import EmptyText

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "minilm-reference.json"
# Short, medium and long (over one micro-batch's token bound) texts, with a repeat.
MIXED = [
    "short",
    "Where does the owner keep the spare key?",
    "The boundary layer thickens downstream of the leading edge. " * 40,
    "Pressure distribution on a slender cone at incidence in hypersonic flow.",
    "short",
    "ünïcödé ✓ 数据",
]


def test_embed_many_equals_one_at_a_time_on_the_reference_fixture(embedder: Embedder) -> None:
    fixture = json.loads(FIXTURE.read_text())
    texts = fixture["texts"]
    many = embedder.embed_many(texts)
    for text, vector, reference in zip(texts, many, fixture["embeddings"], strict=True):
        assert float(np.dot(vector, embedder.embed(text))) >= 0.9999
        assert float(np.dot(vector, np.asarray(reference, dtype=np.float32))) >= 0.999


def test_embed_many_keeps_order_and_equals_one_at_a_time(embedder: Embedder) -> None:
    many = embedder.embed_many(MIXED)
    assert len(many) == len(MIXED)
    for text, vector in zip(MIXED, many, strict=True):
        assert vector.dtype == np.float32
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
        assert float(np.dot(vector, embedder.embed(text))) >= 0.9999


def test_embed_many_of_nothing_is_nothing(embedder: Embedder) -> None:
    assert embedder.embed_many([]) == []


def test_an_empty_text_in_a_list_is_a_clear_error(embedder: Embedder) -> None:
    with pytest.raises(EmptyText, match="no text to embed"):
        embedder.embed_many(["fine", "   "])


def test_pack_bounds_tokens_and_sequences_and_sorts_by_length() -> None:
    lengths = [5, 300, 3, 4, 100, 2]
    groups = pack(lengths, max_tokens=10, max_sequences=2)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups == [[5, 2], [3, 0], [4], [1]]
    for group in groups:
        assert len(group) <= 2
        assert len(group) == 1 or sum(lengths[i] for i in group) <= 10


def test_a_query_does_not_wait_behind_a_bulk_embed(embedder: Embedder) -> None:
    bulk_texts = [f"{MIXED[2]} ({i})" for i in range(40)]
    started = threading.Event()
    done = threading.Event()

    def bulk() -> None:
        started.set()
        embedder.embed_many(bulk_texts)
        done.set()

    worker = threading.Thread(target=bulk)
    worker.start()
    try:
        started.wait()
        while not embedder._bulk.lock.locked() and not done.is_set():
            threading.Event().wait(0.001)
        vector = embedder.embed("Where does the owner keep the spare key?")
        # The query has its own context and lock: it came back while the bulk still ran.
        assert not done.is_set()
        assert vector.shape == (embedder.dimension,)
    finally:
        worker.join()


def test_bulk_micro_batches_wait_while_a_query_runs(embedder: Embedder) -> None:
    done = threading.Event()

    def bulk() -> None:
        embedder.embed_many(MIXED)
        done.set()

    worker = threading.Thread(target=bulk)
    with embedder._turns.query():  # as Embedder.embed holds it while a query is embedded
        worker.start()
        # The bulk call has its texts tokenized and its lock, but starts no micro-batch.
        assert not done.wait(1.0)
    worker.join(30)
    assert done.is_set()
