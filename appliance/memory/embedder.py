"""In-process text embeddings with llama.cpp (llama-cpp-python) from a GGUF model.

Documented input behaviour (tested):

- Text is cleaned first: invalid UTF-8 (bytes) and lone surrogates become U+FFFD, NUL and other
  C0 control characters except tab and newline become spaces.
- Text longer than ``max_chars`` characters is cut to ``max_chars``, then to the model's
  context length in tokens. Long input is truncated, never rejected.
- Text that is empty or only whitespace after cleaning raises :class:`EmptyText`: an embedding of
  nothing would match everything a little and pollute search.
- Every embedding is L2-normalised float32 of the model's dimension.

The ``Llama`` object is not thread-safe; callers serialise access (the engine runs every embed
on one worker thread). Call :meth:`Embedder.close` before exit: llama-cpp-python's ``__del__``
raises at interpreter shutdown inside a frozen app.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from appliance.memory.errors import EmptyText, ModelLoadFailed, ModelMissing

log = logging.getLogger(__name__)

Vector = npt.NDArray[np.float32]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_text(text: str | bytes, max_chars: int) -> str:
    """Return ``text`` as safe, bounded UTF-8 text (see the module docstring)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    if len(text) > max_chars:
        text = text[:max_chars]
    return _CONTROL.sub(" ", text)


class Embedder:
    """A GGUF embedding model loaded once, in this process."""

    def __init__(self, model_path: Path, *, max_chars: int = 8000, threads: int = 0) -> None:
        if not model_path.is_file():
            raise ModelMissing(
                f"The embedding model {model_path} does not exist. Build the development model "
                "with `just model`, or set MAXY_EMBED_MODEL to a GGUF file."
            )
        import llama_cpp

        started = time.monotonic()
        try:
            self._llama: Any = llama_cpp.Llama(
                model_path=str(model_path),
                embedding=True,
                n_ctx=0,  # the model's own context length
                # A non-causal model must see a whole text in one micro-batch.
                n_batch=512,
                n_ubatch=512,
                n_threads=threads or None,
                pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
                verbose=False,
            )
        except (ValueError, RuntimeError) as err:
            raise ModelLoadFailed(
                f"llama.cpp could not load {model_path} ({err}). Check that it is a GGUF "
                "embedding model, or rebuild the development model with `just model`."
            ) from err
        self.model_path = model_path
        self.model_name = model_path.name.removesuffix(".gguf")
        self.max_chars = max_chars
        self.dimension: int = int(self._llama.n_embd())
        self.context_tokens: int = int(self._llama.n_ctx())
        log.info(
            "[embed] op=load model=%s dim=%s ctx=%s ms=%d",
            self.model_name,
            self.dimension,
            self.context_tokens,
            (time.monotonic() - started) * 1000,
        )

    def embed(self, text: str | bytes) -> Vector:
        """Embed one text (cleaned, truncated) into a unit-length float32 vector."""
        cleaned = clean_text(text, self.max_chars)
        if not cleaned.strip():
            raise EmptyText("There is no text to embed (empty or only whitespace).")
        raw = self._llama.embed(cleaned, normalize=False, truncate=True)
        vector = np.asarray(raw, dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        if norm > 0:
            vector /= norm
        return vector

    def embed_many(self, texts: Sequence[str | bytes]) -> list[Vector]:
        """Embed several texts, one llama.cpp call each.

        One call per text is deliberate: for this non-causal model every text placed in a shared
        micro-batch attends over the whole batch, so batching in llama.cpp is slower here.
        """
        return [self.embed(text) for text in texts]

    def close(self) -> None:
        """Free the model now rather than at interpreter shutdown."""
        llama = getattr(self, "_llama", None)
        if llama is not None:
            llama.close()
            self._llama = None
