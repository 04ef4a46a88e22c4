"""Independent numpy forward pass of a BERT sentence-embedding model (e.g. all-MiniLM-L6-v2).

This is the "computed another way" reference for fidelity tests of the GGUF produced by
build/gguf_bert.py: it reads the original float32 safetensors directly and shares no code
with llama.cpp. Needs numpy, safetensors and tokenizers only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MAX_TOKENS = 512  # BERT's position-embedding table size

# math.erf is correctly rounded in double precision; vectorising it keeps GELU exact
# without scipy, at a speed that is fine for a test reference.
_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf-based) GELU, as used by HF BERT's "gelu" activation."""
    x64 = x.astype(np.float64)
    erf = np.asarray(_erf(x64 / math.sqrt(2.0)), dtype=np.float64)
    return (0.5 * x64 * (1.0 + erf)).astype(np.float32)


def layer_norm(x: np.ndarray, w: dict[str, np.ndarray], prefix: str, eps: float) -> np.ndarray:
    """Apply the LayerNorm (over the last axis) named prefix.weight / prefix.bias."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    normed = (x - mean) / np.sqrt(var + eps)
    return np.asarray(normed * w[prefix + ".weight"] + w[prefix + ".bias"], dtype=np.float32)


def linear(x: np.ndarray, w: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """Apply a torch-layout Linear (weight is [out, in]) named prefix.weight / prefix.bias."""
    return np.asarray(x @ w[prefix + ".weight"].T + w[prefix + ".bias"], dtype=np.float32)


def encoder_layer(
    x: np.ndarray, mask_bias: np.ndarray, w: dict[str, np.ndarray], p: str, n_head: int, eps: float
) -> np.ndarray:
    """One post-norm BERT encoder layer: self-attention then feed-forward."""
    n_tok, n_embd = x.shape
    d_head = n_embd // n_head

    def heads(t: np.ndarray) -> np.ndarray:
        return t.reshape(n_tok, n_head, d_head).transpose(1, 0, 2)  # [head, tok, d]

    q = heads(linear(x, w, p + "attention.self.query"))
    k = heads(linear(x, w, p + "attention.self.key"))
    v = heads(linear(x, w, p + "attention.self.value"))
    scores = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(d_head)) + mask_bias
    scores -= scores.max(axis=-1, keepdims=True)  # for a stable softmax
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    ctx = (probs @ v).transpose(1, 0, 2).reshape(n_tok, n_embd)

    attn = linear(ctx, w, p + "attention.output.dense")
    x = layer_norm(x + attn, w, p + "attention.output.LayerNorm", eps)
    ff = linear(gelu(linear(x, w, p + "intermediate.dense")), w, p + "output.dense")
    return layer_norm(x + ff, w, p + "output.LayerNorm", eps)


def reference_embed(model_dir: Path, text: str) -> np.ndarray:
    """Return the mean-pooled, L2-normalised float32 sentence embedding of text."""
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    w = {
        k.removeprefix("bert."): v.astype(np.float32)
        for k, v in load_file(str(model_dir / "model.safetensors")).items()
    }
    eps = float(config["layer_norm_eps"])
    n_head = int(config["num_attention_heads"])

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # tokenizer.json ships with fixed padding/truncation at 128; we want the raw sequence.
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    enc = tokenizer.encode(text)
    ids = np.array(enc.ids, dtype=np.int64)
    type_ids = np.array(enc.type_ids, dtype=np.int64)
    mask = np.array(enc.attention_mask, dtype=np.float32)

    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][np.arange(len(ids))]
        + w["embeddings.token_type_embeddings.weight"][type_ids]
    )
    x = layer_norm(x, w, "embeddings.LayerNorm", eps)

    # Additive key mask, as HF does: masked positions get a large negative score.
    mask_bias = ((1.0 - mask) * np.finfo(np.float32).min)[None, None, :].astype(np.float32)
    for i in range(int(config["num_hidden_layers"])):
        x = encoder_layer(x, mask_bias, w, f"encoder.layer.{i}.", n_head, eps)

    pooled = (x * mask[:, None]).sum(axis=0) / max(float(mask.sum()), 1e-9)
    return np.asarray(pooled / max(float(np.linalg.norm(pooled)), 1e-12), dtype=np.float32)
