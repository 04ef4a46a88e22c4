"""Packed embedding through the real GGUF model: the same vectors as one text at a time."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.memory import embedder as embedder_module
from appliance.memory.embedder import Embedder, pack, spread
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
# Enough texts of varied length for many micro-batches, spread over the bulk contexts.
SPREAD = [f"{MIXED[3]} ({i}) {MIXED[1] * (i % 5)}" for i in range(60)]


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
        while not embedder._bulk_lock.locked() and not done.is_set():
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


def test_micro_batches_spread_over_contexts_only_when_they_keep_them_equally_busy() -> None:
    lengths = [30, 200, 5, 120, 60, 250, 10, 90, 100, 100]
    groups = pack(lengths, max_tokens=256, max_sequences=64)
    assert spread(lengths, groups, workers=2)
    assert not spread(lengths, groups, workers=1)
    # One micro-batch, or one long beside a short one: one context on every thread is quicker.
    assert not spread([4, 6, 9], pack([4, 6, 9], 256, 64), workers=2)
    assert not spread([250, 12], pack([250, 12], 256, 64), workers=2)
    # Two long texts of about the same length: one each.
    assert spread([250, 240], pack([250, 240], 256, 64), workers=2)


@pytest.fixture(scope="module")
def two_workers(model_path: Path) -> Iterator[Embedder]:
    """An embedder with two bulk contexts of one thread each, whatever the machine's cores."""
    model = Embedder(model_path, threads=2)
    assert len(model._bulk) == 2
    yield model
    model.close()


def test_bulk_micro_batches_run_on_every_context_each_on_its_own_thread(
    two_workers: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[tuple[int, int]] = []
    real_run = embedder_module._Context.run

    def recorded(self: Any, group: Any) -> Any:
        runs.append((id(self), threading.get_ident()))
        return real_run(self, group)

    monkeypatch.setattr(embedder_module._Context, "run", recorded)
    many = two_workers.embed_many(SPREAD)
    contexts = {context for context, _ in runs}
    assert contexts == {id(c) for c in two_workers._bulk}
    assert len({thread for _, thread in runs}) == 2
    monkeypatch.undo()
    for text, vector in zip(SPREAD[::7], many[::7], strict=True):
        assert float(np.dot(vector, two_workers.embed(text))) >= 0.9999


def test_a_failed_micro_batch_fails_the_call_and_the_next_call_works(
    two_workers: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_run = embedder_module._Context.run
    helper = two_workers._bulk[1]

    def broken(self: Any, group: Any) -> Any:
        if self is helper:
            raise RuntimeError("llama_decode failed with code -3")
        return real_run(self, group)

    monkeypatch.setattr(embedder_module._Context, "run", broken)
    with pytest.raises(RuntimeError, match="code -3"):
        two_workers.embed_many(SPREAD)
    monkeypatch.undo()
    # Every context stopped and let go: the next call gets its vectors.
    again = two_workers.embed_many(MIXED)
    assert len(again) == len(MIXED)
    assert float(np.dot(again[1], two_workers.embed(MIXED[1]))) >= 0.9999
