"""In-process text embeddings with llama.cpp (llama-cpp-python) from a GGUF model.

Documented input behaviour (tested):

- Text is cleaned first: invalid UTF-8 (bytes) and lone surrogates become U+FFFD, NUL and other
  C0 control characters except tab and newline become spaces.
- Text longer than ``max_chars`` characters is cut to ``max_chars``, then to the model's
  context length in tokens. Long input is truncated, never rejected.
- Text that is empty or only whitespace after cleaning raises :class:`EmptyText`: an embedding of
  nothing would match everything a little and pollute search.
- Every embedding is L2-normalised float32 of the model's dimension.

How texts reach llama.cpp: each text is tokenized and truncated exactly as llama-cpp-python's
``Llama.embed`` does, then placed in a ``llama_batch`` with its own sequence id and positions from
0, and llama.cpp mean-pools every sequence on its own. :meth:`Embedder.embed_many` sorts texts by
token count and packs them into micro-batches of at most ``BATCH_TOKENS`` tokens: this model's
attention is non-causal, and llama.cpp computes attention over the whole micro-batch (masked per
sequence), so its cost grows with the square of the micro-batch, not of each text. A small bound
keeps that cost per text while the matrix products still see many rows at once. The vectors equal
the one-at-a-time path (tested: cosine >= 0.9999).

llama.cpp contexts share the one set of weights: one for :meth:`Embedder.embed` (an
interactive query), and up to ``BULK_WORKERS`` for :meth:`Embedder.embed_many` (bulk ingest), so
a query never waits for a bulk batch to finish. They do share the cores: a bulk micro-batch
does not start while a query is being embedded (:class:`_Turns`), so a query shares the CPU with
at most the micro-batches already running (tens of milliseconds), never with an ingest's
stream of them. Each method is safe to call from any thread.

Threads: one text is embedded on every core, except a search's query (``shared_cpu``), which
gets half of them (at least one). A search embeds its query while Neo4j already runs the
search's keyword statement: split over every core, the query's matrix products wait at each step
for a thread the scheduler gave to Neo4j. On 2 vCPUs that halving took a search's p95 with its
embedding from 56 to 39 ms at 100k nodes (``just bench-search``); a lone text (a write, ``maxy
embed``) has the cores to itself and takes 3.8 ms on both instead of 6.6 on one (``just
bench-embed``). Bulk work uses every core the same way round: its micro-batches run on several
contexts at once, each on its share of the threads, rather than each micro-batch split over
every thread. ggml makes a micro-batch's threads meet after every step of the model (hundreds a
micro-batch), and on a shared machine one of them often waits for a core; contexts of their own
meet nobody. A call whose micro-batches would not keep the contexts equally busy (:func:`spread`),
one text or a few, runs on one context with every thread, as before.

Which machine code runs: llama.cpp's CPU code is built for several processor generations, each a
library beside libllama (``libggml-cpu-<variant>.so``, see build/llama-wheel.sh).
:func:`load_cpu_backend` lets ggml score each against this CPU and load the best, once per
process, before a model loads: the same binary uses AVX-512 where the CPU has it and AVX2
where not, and on arm64 the dot-product and half-precision instructions of a Pi 5's
Cortex-A76 but plain ARMv8-A on a Pi 4. Which form of the model: where the backend has
AVX512_BF16 (the ``zen4`` variant), the engine loads the development model's bf16 file instead
of its f16 one (:func:`fastest_form`): the same vectors (cosine 0.99998), 1.45 times the batch
speed on a Zen 4; elsewhere bf16 is converted in software, no faster than f16, so f16 stays.

Call :meth:`Embedder.close` before exit: llama-cpp-python's ``__del__`` raises at interpreter
shutdown inside a frozen app.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from appliance.core.config import Settings
from appliance.memory.errors import EmptyText, ModelLoadFailed, ModelMissing

log = logging.getLogger(__name__)

Vector = npt.NDArray[np.float32]

# Tokens per packed micro-batch in embed_many (measured on 2 vCPUs; see README, bench-embed).
BATCH_TOKENS = 256
# Texts per micro-batch: well under llama.cpp's sequence limit, and a bound on output rows.
BATCH_SEQUENCES = 64
# Bulk contexts at work at once (never more than the bulk threads): each costs ~35 MB.
BULK_WORKERS = 2
# Micro-batches go to several contexts only when none gets more than this times its even share
# (measured on 2 vCPUs: one micro-batch per context is up to ~10% faster than each on both
# threads, and several times faster while other work holds a core; README, Embeddings).
SPREAD_SLACK = 1.1

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_text(text: str | bytes, max_chars: int) -> str:
    """Return ``text`` as safe, bounded UTF-8 text (see the module docstring)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    if len(text) > max_chars:
        text = text[:max_chars]
    return _CONTROL.sub(" ", text)


_backend_lock = threading.Lock()
_backend_features: str | None = None


def load_cpu_backend() -> str:
    """Load llama.cpp's CPU backend built for this processor (once per process); return the
    instruction sets it uses, e.g. ``AVX2 AVX512 AVX512_VNNI`` (see the module docstring).

    Raises :class:`ModelLoadFailed` when none of the variants runs on this CPU.
    """
    global _backend_features
    with _backend_lock:
        if _backend_features is None:
            import ctypes

            import llama_cpp
            from llama_cpp.llama_cpp import _lib

            # Through libllama's own handle: ggml as libllama linked it. llama_cpp._ggml opens
            # libggml.so by path, a second copy of the file with a registry of its own.
            libggml = _lib
            # ggml says which library it loaded through llama-cpp-python's logger, which prints
            # every level until a Llama is made: the load line below says it, structured.
            logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
            libggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
            libggml.ggml_backend_load_all_from_path.restype = None
            libggml.ggml_backend_reg_count.argtypes = []
            libggml.ggml_backend_reg_count.restype = ctypes.c_size_t
            folder = Path(llama_cpp.__file__).parent / "lib"
            libggml.ggml_backend_load_all_from_path(str(folder).encode())
            if libggml.ggml_backend_reg_count() == 0:
                raise ModelLoadFailed(
                    f"llama.cpp has no CPU backend that runs on this processor: none of the "
                    f"libggml-cpu-*.so in {folder} does (the x86-64 build needs AVX2, the arm64 "
                    "build ARMv8-A). Run Maxy on such a CPU."
                )
            info = llama_cpp.llama_print_system_info().decode(errors="replace")
            _backend_features = " ".join(re.findall(r"(\w+) = 1", info))
        return _backend_features


def fastest_form(model_path: Path) -> Path:
    """``model_path``, or where it is an f16 GGUF and the CPU backend multiplies bfloat16 natively
    (AVX512_BF16), its bf16 form beside it when that file is there (build/model.py makes both).

    Measured on a 2-vCPU AMD Zen 4: the bf16 file embeds a batch 1.45 times as fast as the f16
    one and Cranfield's documents 1.33 times, with the same vectors (cosine to f16's 0.99998 at
    least); on the ``icelake`` or ``haswell`` variants, which convert bf16 in software, it runs
    at 1.0 and 0.8 times f16's speed. A Sapphire Rapids Xeon has AVX512_BF16 too, and there bf16
    measured 0.92 of f16's speed (README, Embeddings). An explicit path is the owner's choice and
    is loaded as it is: the engine calls this only for the default model.
    """
    if not model_path.name.endswith(".f16.gguf"):
        return model_path
    bf16 = model_path.with_name(model_path.name.removesuffix(".f16.gguf") + ".bf16.gguf")
    if bf16.is_file() and "AVX512_BF16" in load_cpu_backend().split():
        return bf16
    return model_path


def configured_model(settings: Settings) -> Path:
    """The GGUF the engine loads: MAXY_EMBED_MODEL as set, else the development model in the
    form this CPU embeds fastest."""
    return settings.embed_model or fastest_form(settings.embed_model_path)


class _Context:
    """One llama.cpp context with its own batch buffer; weights are shared. One caller at a time."""

    def __init__(self, llama: Any, context: Any, n_tokens: int) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self._llama = llama
        self.context = context
        self.n_tokens = n_tokens
        self.n_embd = int(llama.n_embd())
        self.batch = llama_cpp.llama_batch_init(n_tokens, 0, 1)
        self._threads = 0

    def use_threads(self, threads: int) -> None:
        """Run the next micro-batches on ``threads`` threads."""
        if threads != self._threads:
            self._lib.llama_set_n_threads(self.context.ctx, threads, threads)
            self._threads = threads

    def run(self, group: Sequence[list[int]]) -> list[Vector]:
        """Decode token lists as one micro-batch, one sequence each; unit vectors in order."""
        lib = self._lib
        batch = self.batch
        n = 0
        for seq, tokens in enumerate(group):
            for pos, token in enumerate(tokens):
                batch.token[n] = token
                batch.pos[n] = pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq
                batch.logits[n] = 1  # embeddings need every token marked as an output
                n += 1
        batch.n_tokens = n
        self.context.kv_cache_clear()
        code = lib.llama_decode(self.context.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode failed with code {code}")
        vectors: list[Vector] = []
        for seq in range(len(group)):
            pointer = lib.llama_get_embeddings_seq(self.context.ctx, seq)
            vector = np.ctypeslib.as_array(pointer, shape=(self.n_embd,)).astype(np.float32)
            norm = float(np.linalg.norm(vector))
            if norm > 0:
                vector /= norm
            vectors.append(vector)
        return vectors

    def close(self) -> None:
        batch, self.batch = self.batch, None
        if batch is not None:
            self._lib.llama_batch_free(batch)
        self.context.close()


class _Turns:
    """Interactive queries before bulk work: a bulk micro-batch waits while a query runs."""

    def __init__(self) -> None:
        self._queries = 0
        self._changed = threading.Condition()

    @contextmanager
    def query(self) -> Iterator[None]:
        """Hold back bulk micro-batches for the time of one query."""
        with self._changed:
            self._queries += 1
        try:
            yield
        finally:
            with self._changed:
                self._queries -= 1
                if not self._queries:
                    self._changed.notify_all()

    def bulk(self) -> None:
        """Wait until no query runs (a bulk micro-batch is about to start)."""
        with self._changed:
            self._changed.wait_for(lambda: not self._queries)


def pack(lengths: Sequence[int], max_tokens: int, max_sequences: int) -> list[list[int]]:
    """Indices sorted by length, grouped to at most ``max_tokens`` (a longer text goes alone)."""
    groups: list[list[int]] = []
    group: list[int] = []
    total = 0
    for index in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if group and (total + lengths[index] > max_tokens or len(group) >= max_sequences):
            groups.append(group)
            group, total = [], 0
        group.append(index)
        total += lengths[index]
    if group:
        groups.append(group)
    return groups


def spread(lengths: Sequence[int], groups: list[list[int]], workers: int) -> bool:
    """Whether ``groups`` keep ``workers`` contexts about equally busy: dealt largest first,
    each to the least loaded, no context gets more than ``SPREAD_SLACK`` times its even share of
    the tokens. Otherwise one context on every thread finishes first (two or three texts, or one
    long text beside short ones)."""
    if workers < 2 or len(groups) < workers:
        return False
    loads = [0] * workers
    for size in sorted((sum(lengths[i] for i in group) for group in groups), reverse=True):
        loads[loads.index(min(loads))] += size
    return max(loads) * workers <= SPREAD_SLACK * sum(loads)


class Embedder:
    """A GGUF embedding model loaded once, in this process."""

    def __init__(
        self,
        model_path: Path,
        *,
        max_chars: int = 8000,
        threads: int = 0,
        batch_tokens: int = BATCH_TOKENS,
    ) -> None:
        if not model_path.is_file():
            raise ModelMissing(
                f"The embedding model {model_path} does not exist. Build the development model "
                "with `just model`, or set MAXY_EMBED_MODEL to a GGUF file."
            )
        import llama_cpp
        from llama_cpp._internals import LlamaContext

        started = time.monotonic()
        self.cpu_features = load_cpu_backend()
        cores = len(os.sched_getaffinity(0))
        # ``threads`` (MAXY_EMBED_THREADS) sets both; 0: see "Threads" in the module docstring.
        self.bulk_threads = threads or cores
        self.query_threads = threads or max(1, cores // 2)  # a search's query, beside Neo4j
        try:
            self._llama: Any = llama_cpp.Llama(
                model_path=str(model_path),
                embedding=True,
                n_ctx=0,  # the model's own context length
                # A non-causal model must see a whole text in one micro-batch.
                n_batch=512,
                n_ubatch=512,
                # Attention computed per tile without materialising the micro-batch's whole
                # score matrix: the same vectors, a fifth faster on 2 cores (README, Embeddings).
                flash_attn=True,
                n_threads=self.bulk_threads,
                n_threads_batch=self.bulk_threads,
                pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
                verbose=False,
            )
            n_tokens = int(self._llama.n_batch)
            self._bulk = [
                _Context(
                    self._llama,
                    LlamaContext(
                        model=self._llama._model, params=self._llama.context_params, verbose=False
                    ),
                    n_tokens,
                )
                for _ in range(min(BULK_WORKERS, self.bulk_threads))
            ]
            self._query = _Context(self._llama, self._llama._ctx, n_tokens)
            self._turns = _Turns()
        except (ValueError, RuntimeError) as err:
            raise ModelLoadFailed(
                f"llama.cpp could not load {model_path} ({err}). Check that it is a GGUF "
                "embedding model, or rebuild the development model with `just model`."
            ) from err
        self.model_path = model_path
        self.model_name = model_path.name.removesuffix(".gguf")
        self.max_chars = max_chars
        self.batch_tokens = min(batch_tokens, n_tokens)
        self.dimension: int = int(self._llama.n_embd())
        self.context_tokens: int = int(self._llama.n_ctx())
        # One lock for the query context, one for the bulk contexts together.
        self._query_lock = threading.Lock()
        self._bulk_lock = threading.Lock()
        # The calling thread drives the first bulk context, these threads the others.
        self._helpers = ThreadPoolExecutor(len(self._bulk) - 1 or 1, "embed-bulk")
        log.info(
            "[embed] op=load model=%s dim=%s ctx=%s threads=%s/%s bulk_contexts=%d cpu=%r ms=%d",
            self.model_name,
            self.dimension,
            self.context_tokens,
            self.query_threads,
            self.bulk_threads,
            len(self._bulk),
            self.cpu_features,
            (time.monotonic() - started) * 1000,
        )

    def _tokens(self, text: str | bytes) -> list[int]:
        """Clean, check and tokenize one text, truncated as llama-cpp-python's embed does."""
        cleaned = clean_text(text, self.max_chars)
        if not cleaned.strip():
            raise EmptyText("There is no text to embed (empty or only whitespace).")
        tokens: list[int] = self._llama.tokenize(cleaned.encode("utf-8"))
        return tokens[: self._query.n_tokens]

    def embed(self, text: str | bytes, *, shared_cpu: bool = False) -> Vector:
        """Embed one text (cleaned, truncated) into a unit-length float32 vector.

        Runs on the interactive context: it never waits behind :meth:`embed_many`. On every
        core, or with ``shared_cpu`` (a search's query, embedded while Neo4j runs the search's
        keyword statement) on half of them: see "Threads" in the module docstring.
        """
        tokens = self._tokens(text)
        with self._turns.query(), self._query_lock:
            self._query.use_threads(self.query_threads if shared_cpu else self.bulk_threads)
            return self._query.run([tokens])[0]

    def embed_many(self, texts: Sequence[str | bytes]) -> list[Vector]:
        """Embed several texts, packed by length into bounded micro-batches; vectors in order.

        Every text is checked first: one empty text raises :class:`EmptyText` before any work.
        """
        tokens = [self._tokens(text) for text in texts]
        vectors: list[Vector | None] = [None] * len(tokens)
        with self._bulk_lock:
            lengths = [len(t) for t in tokens]
            groups = pack(lengths, self.batch_tokens, BATCH_SEQUENCES)
            contexts = self._bulk if spread(lengths, groups, len(self._bulk)) else self._bulk[:1]
            # The bulk threads dealt out: 3 over two contexts are 2 and 1.
            threads = [
                self.bulk_threads // len(contexts) + (k < self.bulk_threads % len(contexts))
                for k in range(len(contexts))
            ]
            # Largest first, so the last micro-batches to start are short ones.
            queue = iter(sorted(groups, key=lambda group: -sum(lengths[i] for i in group)))
            taking = threading.Lock()
            failed = threading.Event()

            def work(context: _Context, threads: int) -> None:
                """Embed the next micro-batch on ``context`` until none is left (or one failed)."""
                context.use_threads(threads)
                while not failed.is_set():
                    with taking:
                        group = next(queue, None)
                    if group is None:
                        return
                    self._turns.bulk()
                    try:
                        found = context.run([tokens[i] for i in group])
                    except BaseException:
                        failed.set()
                        raise
                    for index, vector in zip(group, found, strict=True):
                        vectors[index] = vector

            helpers = [
                self._helpers.submit(work, context, share)
                for context, share in zip(contexts[1:], threads[1:], strict=True)
            ]
            errors: list[BaseException] = []
            try:
                work(contexts[0], threads[0])
            except BaseException as err:  # raised below, once every context has stopped
                errors.append(err)
            for helper in helpers:
                error = helper.exception()  # waits for it to stop
                if error is not None:
                    errors.append(error)
            if errors:
                raise errors[0]
        return [vector for vector in vectors if vector is not None]

    def close(self) -> None:
        """Free the model now rather than at interpreter shutdown."""
        llama = getattr(self, "_llama", None)
        if llama is not None:
            with self._bulk_lock, self._query_lock:
                for context in self._bulk:
                    context.close()
                self._query.close()
                llama.close()  # frees the query context (the Llama's own) and the weights
            self._helpers.shutdown()
            self._llama = None
