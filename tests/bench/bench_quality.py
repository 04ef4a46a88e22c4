"""Retrieval quality of ``memory-search`` on an IR collection in BEIR layout.

Run with ``just bench-quality [DIR]`` (default: the shared Cranfield collection). The benchmark
starts its own Neo4j in a store under ``~/.cache/maxy/bench-quality/`` keyed by the collection, the
model and a hash of the corpus and the ingest code; the first run ingests every document of
``corpus.jsonl`` through :class:`~appliance.memory.ingest.Ingester` with the real model into a
fresh account, later runs reuse that store (the schema is applied again, so index changes reach
it as they reach an upgraded appliance; ``--fresh`` ingests into a throw-away store instead), and
runs every query of ``queries.jsonl`` through :meth:`Searcher.search` in four configurations
(keyword-only, vector-only, weighted sum, RRF) plus the boosts and dedup stages, and scores them
against ``qrels.tsv``.

Results are nodes (documents, sections, chunks); each is mapped to its corpus document and the
list is deduplicated to documents in ranked order (a document keeps its best rank). Metrics:
nDCG@10 with linear gain = grade and a log2 discount (grades <= 0 give no gain and never enter
the ideal ranking), MAP and Recall@100 with binary relevance (grade > 0). Averages are over the
queries with at least one relevant document; a relevant document that could not be ingested
(empty text) stays in the judgments, so it counts as missed. The output is a table followed by
one line of JSON. Nothing here tunes the engine to the collection.

The same run computes a plain-BM25 reference over the documents as ingested (title + text, the
refused ones left out): Okapi BM25 with k1 1.2 and b 0.75, idf ``log(1 + (N - df + 0.5) / (df +
0.5))``, tokens the lower-cased runs of ``[a-z0-9]``, no stemming, no stop list; the table prints
it and ``keyword / reference`` (keyword nDCG@10 over the reference's). ``--keyword-only`` loads no
model: documents still go through ``memory-ingest`` (every node written without an embedding,
as after a failed embed) into a store of their own, and only the keyword configuration runs.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core.config import Settings, load_settings
from appliance.core.identity import Caller
from appliance.graphdb.instance import Neo4jInstance, running
from appliance.memory.bulk import BulkEmbeds
from appliance.memory.embedder import Embedder, configured_model
from appliance.memory.errors import ModelMissing, WriteRejected
from appliance.memory.graph import Graph
from appliance.memory.hits import Candidate
from appliance.memory.ingest import Ingester, IngestRequest
from appliance.memory.schema import apply_schema
from appliance.memory.search import Searcher, SearchRequest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO.parent / "shared" / "ir" / "cranfield"
LIMIT = 100
NDCG_AT = 10
INGESTS_AT_ONCE = 16  # documents in flight during the ingest
WEIGHTED = {"mode": "weighted", "vector_weight": 0.7, "keyword_weight": 0.3}
# name -> the SearchRequest fields that make the configuration; everything else is default.
CONFIGS: dict[str, dict[str, Any]] = {
    "keyword": {"vector_weight": 0.0, "keyword_weight": 1.0},
    "vector": {"vector_weight": 1.0, "keyword_weight": 0.0},
    "weighted": WEIGHTED,
    "rrf": {"mode": "rrf"},
    # The optional stages that need no outside service, on top of weighted and RRF.
    # Routing is not measured: without a classifier every query is "general", which is the
    # default's label set. Expansion needs the paraphraser of the agents work.
    "weighted+boosts": {**WEIGHTED, "boosts": True},
    "weighted+dedup": {**WEIGHTED, "dedup": True},
    "rrf+boosts": {"mode": "rrf", "boosts": True},
    # Each leg min-max normalised over its own hits, then mixed (memory/fusion.py); the share of
    # the vector leg is a, the rest keyword. "convex" is the parameter-free even mix.
    "convex": {"mode": "convex", "vector_weight": 0.5, "keyword_weight": 0.5},
    **{
        f"convex a={a / 10:.1f}": {
            "mode": "convex",
            "vector_weight": a / 10,
            "keyword_weight": 1 - a / 10,
        }
        for a in (3, 4, 6, 7)
    },
}
# The convex mix's a is chosen on one half of the queries and reported on the other (two folds:
# odd and even positions in query-id order), so no figure rests on a fit to its own judgments.
CONVEX_GRID = ("convex a=0.3", "convex a=0.4", "convex", "convex a=0.6", "convex a=0.7")
Qrels = dict[str, dict[str, int]]  # query id -> doc id -> grade
KEYWORD_ONLY_DIM = 384  # the vector indexes' size in a keyword-only store (nothing is embedded)


@dataclass
class Collection:
    """The three files of a BEIR-layout collection, parsed."""

    name: str
    corpus: list[dict[str, str]]
    queries: dict[str, str]
    qrels: Qrels


def load_collection(directory: Path) -> Collection:
    """Read corpus.jsonl ({_id,title,text}), queries.jsonl ({_id,text}) and qrels.tsv."""
    with (directory / "corpus.jsonl").open(encoding="utf-8") as handle:
        corpus = [json.loads(line) for line in handle if line.strip()]
    with (directory / "queries.jsonl").open(encoding="utf-8") as handle:
        queries = {str(q["_id"]): str(q["text"]) for q in map(json.loads, handle) if q}
    qrels: Qrels = {}
    with (directory / "qrels.tsv").open(encoding="utf-8") as handle:
        for line in handle:
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 3 or cols[0] == "query-id":  # the header line
                continue
            qrels.setdefault(cols[0], {})[cols[1]] = int(cols[2])
    return Collection(directory.resolve().name, corpus, queries, qrels)


def judged(collection_queries: Mapping[str, str], qrels: Qrels) -> list[str]:
    """The query ids with at least one relevant (grade > 0) document."""
    return [q for q in collection_queries if any(g > 0 for g in qrels.get(q, {}).values())]


def bench_env(data_dir: Path) -> dict[str, str]:
    """The environment of the bench's own Neo4j in ``data_dir``."""
    # Keep the cache and a chosen model; drop every other MAXY_* so the dev store is untouched.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MAXY_") or k == "MAXY_CACHE_DIR" or k.startswith("MAXY_EMBED_")
    }
    env.setdefault("MAXY_CACHE_DIR", str(Path("~/.cache/maxy").expanduser()))
    env.update(
        MAXY_DATA_DIR=str(data_dir),
        MAXY_NEO4J_URI="bolt://127.0.0.1:0",  # it binds a free port
        MAXY_NEO4J_HEAP="1g",
        MAXY_NEO4J_PAGECACHE="256m",
    )
    return env


@contextmanager
def neo4j_server(data_dir: Path) -> Iterator[Settings]:
    """A Neo4j on a free port in ``data_dir``, stopped on exit (like tests/conftest.py)."""
    env = bench_env(data_dir)
    settings = load_settings(env)
    with running(Neo4jInstance.from_settings(settings, env)):
        yield settings


# What decides the stored nodes of an ingest: the corpus, the model and the ingest code. The
# schema (indexes) is applied again on every run, so a reused store also exercises the upgrade.
INGEST_SOURCES = ("appliance/memory/ingest.py", "appliance/memory/chunking.py")


def store_dir(directory: Path, keyword_only: bool = False) -> Path:
    """The reusable store of one collection, model and ingest code (under the shared cache)."""
    settings = load_settings(bench_env(directory))
    digest = hashlib.sha256((directory / "corpus.jsonl").read_bytes())
    model = "keyword-only" if keyword_only else configured_model(settings).stem
    digest.update(model.encode())
    for source in INGEST_SOURCES:
        digest.update((REPO / source).read_bytes())
    name = f"{directory.resolve().name}-{model}-{digest.hexdigest()[:12]}"
    return settings.cache_dir / "bench-quality" / name


# ── The plain-BM25 reference, computed here over the documents as ingested ──────────────────
BM25_K1 = 1.2
BM25_B = 0.75
_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-cased runs of [a-z0-9]: no stemming, no stop list (the NPL SOURCE's tokenisation)."""
    return _TOKEN.findall(text.lower())


def bm25_rankings(
    docs: Mapping[str, str], queries: Mapping[str, str], limit: int = LIMIT
) -> dict[str, list[str]]:
    """Okapi BM25 (k1 1.2, b 0.75, idf log(1 + (N - df + 0.5) / (df + 0.5))) per query."""
    postings: dict[str, dict[str, int]] = {}
    lengths: dict[str, int] = {}
    for doc_id, text in docs.items():
        terms = tokens(text)
        lengths[doc_id] = len(terms)
        for term, tf in Counter(terms).items():
            postings.setdefault(term, {})[doc_id] = tf
    n = len(docs)
    avg = statistics.fmean(lengths.values()) if lengths else 0.0
    out: dict[str, list[str]] = {}
    for qid, query in queries.items():
        scores: dict[str, float] = {}
        for term in tokens(query):  # a repeated query term counts again, as in Okapi's sum
            hits = postings.get(term, {})
            idf = math.log(1 + (n - len(hits) + 0.5) / (len(hits) + 0.5))
            for doc_id, tf in hits.items():
                norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths[doc_id] / avg)
                gain = idf * tf * (BM25_K1 + 1) / (tf + norm)
                scores[doc_id] = scores.get(doc_id, 0.0) + gain
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        out[qid] = [doc_id for doc_id, _ in ranked[:limit]]
    return out


def ingested_text(doc: Mapping[str, str]) -> str:
    """What a document is ingested as: title and text (a title alone is its own text)."""
    return f"{doc.get('title') or ''}\n{doc.get('text') or ''}"


def metrics(rankings: Mapping[str, Sequence[str]], qrels: Qrels) -> dict[str, float]:
    """Mean nDCG@10, MAP and R@100 of one ranking per judged query."""
    per: dict[str, list[float]] = {"ndcg@10": [], "map": [], "recall@100": []}
    for qid, ranking in rankings.items():
        grades = qrels[qid]
        relevant = {d for d, g in grades.items() if g > 0}
        per["ndcg@10"].append(ndcg(ranking, grades))
        per["map"].append(average_precision(ranking, relevant))
        per["recall@100"].append(recall(ranking, relevant))
    return {key: round(statistics.fmean(vals), 4) for key, vals in per.items()}


def bm25_reference(collection: Collection, refused: Sequence[str]) -> dict[str, float]:
    """The plain-BM25 figures over the same documents and judged queries."""
    docs = {
        str(d["_id"]): ingested_text(d) for d in collection.corpus if str(d["_id"]) not in refused
    }
    queries = {q: collection.queries[q] for q in judged(collection.queries, collection.qrels)}
    return metrics(bm25_rankings(docs, queries), collection.qrels)


def doc_of(cand: Candidate) -> str | None:
    """The corpus id behind a result: every ingested node carries ``attachmentId``."""
    value = cand.props.get("attachmentId")
    return str(value) if value is not None else None


def ranked_docs(results: Sequence[Candidate]) -> list[str]:
    """Corpus ids in ranked order, each at its best rank."""
    seen: dict[str, None] = {}
    for cand in results:
        doc = doc_of(cand)
        if doc is not None:
            seen.setdefault(doc, None)
    return list(seen)


def ndcg(ranking: Sequence[str], grades: Mapping[str, int], k: int = NDCG_AT) -> float:
    """nDCG@k with gain = grade (grades <= 0 give nothing) and discount log2(rank + 1)."""
    dcg = sum(max(grades.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def average_precision(ranking: Sequence[str], relevant: set[str]) -> float:
    """AP over the whole returned list, divided by every relevant document."""
    hits, total = 0, 0.0
    for i, doc in enumerate(ranking):
        if doc in relevant:
            hits += 1
            total += hits / (i + 1)
    return total / len(relevant) if relevant else 0.0


def recall(ranking: Sequence[str], relevant: set[str], k: int = LIMIT) -> float:
    """Share of the relevant documents found in the first ``k``."""
    return len(relevant & set(ranking[:k])) / len(relevant) if relevant else 0.0


async def ingest(
    ingester: Ingester, caller: Caller, corpus: list[dict[str, str]]
) -> tuple[int, list[str], int]:
    """Ingest every document, INGESTS_AT_ONCE at a time as an importer does (their texts are
    embedded together, memory/bulk.py); return how many went in, the ids refused, and nodes."""
    done, nodes, refused = 0, 0, []
    turns = asyncio.Semaphore(INGESTS_AT_ONCE)

    async def one(doc: dict[str, str]) -> None:
        nonlocal done, nodes
        doc_id = str(doc["_id"])
        # A document needs a title: one without gets its id (the text is what it is found by).
        title = str(doc.get("title") or "").strip() or doc_id
        if not str(doc.get("title") or "").strip() and not str(doc.get("text") or "").strip():
            refused.append(doc_id)  # nothing to find it by: memory-ingest refuses it too
            return
        async with turns:
            try:
                out = await ingester.ingest(
                    caller,
                    IngestRequest(
                        title=title, text=str(doc.get("text") or ""), attachment_id=doc_id
                    ),
                )
            except WriteRejected as err:  # e.g. an empty document: reported, not fatal
                refused.append(doc_id)
                print(f"  refused doc {doc_id}: {err}", file=sys.stderr)
                return
        done += 1
        nodes += 1 + int(out["sections"]) + int(out["chunks"])
        if done % 500 == 0:
            print(f"  ingested {done}/{len(corpus)}", file=sys.stderr)

    await asyncio.gather(*(one(doc) for doc in corpus))
    return done, sorted(refused, key=lambda d: (len(d), d)), nodes


async def evaluate(
    searcher: Searcher,
    caller: Caller,
    queries: dict[str, str],
    qrels: Qrels,
    configs: Mapping[str, Mapping[str, Any]] = CONFIGS,
) -> tuple[dict[str, dict[str, float]], list[float], dict[str, dict[str, float]]]:
    """Run every judged query in every configuration; return mean metrics, latencies and each
    configuration's nDCG@10 per query."""
    figures: dict[str, dict[str, float]] = {}
    per_query: dict[str, dict[str, float]] = {}
    latencies: list[float] = []
    for name, fields in configs.items():
        per: dict[str, list[float]] = {
            "ndcg@10": [],
            "map": [],
            "recall@100": [],
            "docs_per_query": [],
        }
        times: list[float] = []
        per_query[name] = {}
        for qid in judged(queries, qrels):
            request = SearchRequest(
                query=queries[qid], labels=None, limit=LIMIT, expand_hops=0, **fields
            )
            started = time.perf_counter()
            result = await searcher.search(caller, request)
            times.append((time.perf_counter() - started) * 1000)
            ranking = ranked_docs(result.results)
            grades = qrels[qid]
            relevant = {d for d, g in grades.items() if g > 0}
            per["ndcg@10"].append(ndcg(ranking, grades))
            per_query[name][qid] = per["ndcg@10"][-1]
            per["map"].append(average_precision(ranking, relevant))
            per["recall@100"].append(recall(ranking, relevant))
            per["docs_per_query"].append(float(len(ranking)))
        figures[name] = {key: round(statistics.fmean(vals), 4) for key, vals in per.items()}
        figures[name]["ms_p50"] = round(statistics.median(times), 1)
        latencies.extend(times)
        print(f"  {name}: done", file=sys.stderr)
    return figures, latencies, per_query


def two_fold(per_query: Mapping[str, Mapping[str, float]], grid: Sequence[str]) -> dict[str, Any]:
    """Choose the grid's best configuration on each half of the queries and score it on the
    other; return the held-out nDCG@10 over all queries and the choice of each fold."""
    qids = sorted(per_query[grid[0]], key=lambda q: (len(q), q))
    folds = (qids[0::2], qids[1::2])
    held_out: list[float] = []
    chosen: list[str] = []
    for tune, test in (folds, folds[::-1]):
        best = max(grid, key=lambda n: (statistics.fmean(per_query[n][q] for q in tune), n))
        chosen.append(best)
        held_out.extend(per_query[best][q] for q in test)
    return {"ndcg@10": round(statistics.fmean(held_out), 4), "chosen": chosen}


async def _no_model(text: str) -> list[float]:
    """The embedder of a keyword-only run: every node is written without an embedding."""
    raise ModelMissing("bench-quality --keyword-only loads no model")


async def run(
    collection: Collection, settings: Settings, store: Path, keyword_only: bool = False
) -> dict[str, Any]:
    """Schema, ingest (unless ``store`` holds one) and evaluation; return every figure."""
    # What a device runs when the caller names no mode: the settings' defaults.
    default = {
        "mode": settings.search_mode,
        "vector_weight": settings.search_vector_weight,
        "keyword_weight": settings.search_keyword_weight,
        "rrf_k": settings.search_rrf_k,
    }
    embedder = (
        None
        if keyword_only
        else Embedder(
            configured_model(settings),
            max_chars=settings.embed_max_chars,
            threads=settings.embed_threads,
        )
    )
    # The bulk embeds of concurrent ingests, on their own thread, as the engine runs them.
    bulk_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-bulk")
    bulk = None if embedder is None else BulkEmbeds(embedder.embed_many, bulk_thread)
    graph = Graph(
        settings.neo4j_address(),
        settings.neo4j_user,
        settings.neo4j_password_path.read_text().strip(),
    )
    try:

        async def embed(text: str) -> list[float]:
            assert embedder is not None
            return [float(x) for x in embedder.embed(text)]

        async def embed_texts(texts: Sequence[str]) -> list[list[float]]:
            if bulk is None:
                await _no_model("")
            assert bulk is not None
            return [vector.tolist() for vector in await bulk(texts)]

        if embedder is None:
            embed = _no_model
            # One embed-failed warning per document is the point of this mode, not news.
            logging.getLogger("appliance.memory.ingest").setLevel(logging.ERROR)
            logging.getLogger("appliance.memory.search").setLevel(logging.ERROR)
        model_name = embedder.model_name if embedder else "none (keyword-only)"
        schema = await apply_schema(graph, embedder.dimension if embedder else KEYWORD_ONLY_DIM)
        marker = store / "ingested.json"
        if marker.exists():  # an earlier run ingested this corpus with this model and code
            saved = json.loads(marker.read_text())
            caller = Caller(account_id=saved["account"])
            done, refused, nodes = saved["docs"], saved["refused"], saved["nodes"]
            ingest_s, reused = float(saved["ingest_s"]), True
        else:
            caller = Caller(account_id=f"bench-{uuid.uuid4()}")  # scopes=None: the admin agent
            started = time.monotonic()
            done, refused, nodes = await ingest(
                Ingester(graph, embed_texts, model_name), caller, collection.corpus
            )
            ingest_s, reused = time.monotonic() - started, False
            saved = {
                "account": caller.account_id,
                "docs": done,
                "refused": refused,
                "nodes": nodes,
                "ingest_s": round(ingest_s, 1),
            }
            marker.write_text(json.dumps(saved))
        await graph.run("CALL db.awaitIndexes(600)")  # searches must see every node
        figures, latencies, per_query = await evaluate(
            Searcher(graph, embed),
            caller,
            collection.queries,
            collection.qrels,
            {"keyword": CONFIGS["keyword"]} if keyword_only else {**CONFIGS, "default": default},
        )
        if not keyword_only:
            figures["convex 2-fold"] = two_fold(per_query, CONVEX_GRID)
    finally:
        await graph.close()
        bulk_thread.shutdown(wait=True)
        if embedder is not None:
            embedder.close()
    return {
        "bench": "quality",
        "collection": collection.name,
        "model": model_name,
        "default_mode": default["mode"],
        "docs": done,
        "docs_refused": refused,
        "nodes": nodes,
        "queries": len(judged(collection.queries, collection.qrels)),
        **figures,
        "bm25_reference": bm25_reference(collection, refused),
        "ingest_s": round(ingest_s, 1),
        "store_reused": reused,
        "schema_indexes_added": schema.indexes_added,
        "query_ms_p50": round(statistics.median(latencies), 1),
        "query_ms_p95": round(statistics.quantiles(latencies, n=20)[-1], 1),
    }


# The default fusion must never lose to its better leg, and should beat it by this much.
MARGIN = 0.01


def verdict(out: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the default fusion (the settings' search mode and weights, as a device runs it)
    is at least as good as the better single path on nDCG@10, in words (with whether it beats
    it by MARGIN)."""
    single = max(("keyword", "vector"), key=lambda n: out[n]["ndcg@10"])
    h, s = out["default"]["ndcg@10"], out[single]["ndcg@10"]
    word = "holds against" if h >= s else "LOSES to"
    return h >= s, (
        f"the default ({out['default_mode']}) {h:.4f} {word} the best single path "
        f"({single} {s:.4f}), margin {h - s:+.4f} "
        f"({'at least' if h - s >= MARGIN else 'UNDER'} the {MARGIN} aimed for)"
    )


def report(out: dict[str, Any]) -> None:
    """Print the table, the verdict and the final JSON line."""
    print(
        f"\n{out['collection']}: {out['docs']} docs ({out['nodes']} nodes, refused "
        f"{out['docs_refused'] or 'none'}), {out['queries']} queries, model {out['model']}"
    )
    print(f"{'config':<18}{'nDCG@10':>9}{'MAP':>9}{'R@100':>9}{'docs/q':>9}{'ms p50':>9}")
    for name in (n for n in (*CONFIGS, "default") if n in out):
        f = out[name]
        print(
            f"{name:<18}{f['ndcg@10']:>9.4f}{f['map']:>9.4f}{f['recall@100']:>9.4f}"
            f"{f['docs_per_query']:>9.1f}{f['ms_p50']:>9.1f}"
        )
    if "convex 2-fold" in out:
        fold = out["convex 2-fold"]
        print(
            f"{'convex 2-fold':<18}{fold['ndcg@10']:>9.4f}  (a chosen on one half of the queries,"
            f" scored on the other: {' / '.join(fold['chosen'])})"
        )
    ref = out["bm25_reference"]
    print(
        f"{'bm25 reference':<18}{ref['ndcg@10']:>9.4f}{ref['map']:>9.4f}{ref['recall@100']:>9.4f}"
        f"  (in-bench Okapi BM25 k1 {BM25_K1} b {BM25_B}, title + text, [a-z0-9]+ lower-cased)"
    )
    out["keyword_vs_reference"] = round(out["keyword"]["ndcg@10"] / ref["ndcg@10"], 3)
    print(f"keyword / reference nDCG@10: {out['keyword_vs_reference']:.3f}")
    print(
        f"ingest {out['ingest_s']} s{' (store reused)' if out['store_reused'] else ''}; "
        f"query ms p50 {out['query_ms_p50']} p95 {out['query_ms_p95']}"
    )
    if "vector" in out:
        out["hybrid_beats_single"], words = verdict(out)
        out["hybrid_margin"] = round(
            out["default"]["ndcg@10"] - max(out["keyword"]["ndcg@10"], out["vector"]["ndcg@10"]), 4
        )
        print(words)
    print(json.dumps(out))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``bench_quality.py [DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument(
        "--fresh", action="store_true", help="ingest into a new store and discard it afterwards"
    )
    parser.add_argument(
        "--keyword-only",
        action="store_true",
        help="the keyword leg and the BM25 reference only: documents go through memory-ingest "
        "without embeddings (no model is loaded), so a large collection ingests in minutes",
    )
    args = parser.parse_args(argv)
    directory: Path = args.dir if args.dir.is_absolute() else (Path.cwd() / args.dir)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    collection = load_collection(directory)
    wall = time.monotonic()
    if args.fresh:
        data_dir = Path(tempfile.mkdtemp(prefix="maxy-bench-quality-"))
    else:
        data_dir = store_dir(directory, args.keyword_only)
        if not (data_dir / "ingested.json").exists():
            # An ingest that never finished left part of an account behind, whose terms would
            # skew the full-text index's statistics: start that store again.
            shutil.rmtree(data_dir, ignore_errors=True)
        data_dir.mkdir(parents=True, exist_ok=True)
        print(f"  store {data_dir}", file=sys.stderr)
    try:
        with neo4j_server(data_dir) as settings:
            out = asyncio.run(run(collection, settings, data_dir, args.keyword_only))
    finally:
        if args.fresh:
            shutil.rmtree(data_dir, ignore_errors=True)
    out["wall_s"] = round(time.monotonic() - wall, 1)
    report(out)
    # A default that loses to one of its own legs is a regression: the run says so by its status.
    return 0 if out.get("hybrid_beats_single", True) else 1


if __name__ == "__main__":
    sys.exit(main())
