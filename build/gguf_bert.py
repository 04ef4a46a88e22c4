"""Convert a BERT sentence-embedding model (safetensors) to an f16, bf16 or q8_0 GGUF for
llama.cpp.

Mirrors the rules of llama.cpp's convert_hf_to_gguf.py (BertModel) for models such as
all-MiniLM-L6-v2, but needs only gguf-py, safetensors and numpy (no torch, no transformers).
The output is byte-for-byte deterministic, so its sha256 can be pinned.

q8_0 (llama.cpp's 8-bit blocks: 32 weights and one f16 scale each) quantizes the same 2-D weight
matrices the f16 file holds in f16, with gguf-py's reference quantizer, as llama.cpp's converter
does for ``--outtype q8_0``. bf16 keeps those matrices in bfloat16 (f32's exponent, 7 bits of
mantissa), as ``--outtype bf16`` does: a CPU with AVX512_BF16 multiplies them natively.

Usage: python build/gguf_bert.py MODEL_DIR OUT.gguf [f16|bf16|q8_0]
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from safetensors import safe_open

ARCH = "bert"
DEFAULT_NAME = "all-MiniLM-L6-v2"

# HF BertModel tensor names -> llama.cpp names (same as gguf-py's TensorNameMap for BERT).
EMBEDDING_NAMES: dict[str, str] = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.LayerNorm": "token_embd_norm",
}
LAYER_NAMES: dict[str, str] = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
# Not used for sentence embeddings, so llama.cpp's converter drops them too.
DROPPED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
# llama.cpp keeps these 2-D tensors in F32 even in an f16 file (it adds them to activations).
KEEP_F32 = ("position_embd.weight", "token_types.weight")
# llama.cpp's converter picks the pre-tokenizer by hashing the HF tokenizer's output on a test
# string, which needs transformers; for this WordPiece tokenizer the hash names this entry.
TOKENIZER_PRE = "jina-v2-en"
LOWERCASE_KEY = "tokenizer.ggml.normalizer.lowercase"
LAYER_RE = re.compile(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)")


def gguf_tensor_name(hf_name: str) -> str | None:
    """Map an HF tensor name to its llama.cpp name, or None if the tensor is dropped."""
    if hf_name in DROPPED:
        return None
    if m := LAYER_RE.fullmatch(hf_name):
        block, module, kind = m.groups()
        return f"blk.{block}.{LAYER_NAMES[module]}.{kind}"
    module, _, kind = hf_name.rpartition(".")
    if module in EMBEDDING_NAMES:
        return f"{EMBEDDING_NAMES[module]}.{kind}"
    raise ValueError(f"unexpected tensor {hf_name!r}")


KINDS = {
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "bf16": gguf.LlamaFileType.MOSTLY_BF16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
}


def convert_tensor(
    name: str, data: np.ndarray, kind: str = "f16"
) -> tuple[np.ndarray, gguf.GGMLQuantizationType | None]:
    """A tensor in the storage type llama.cpp's conversion to ``kind`` uses for it, and its
    quantization type when it is stored quantized (the array then holds the raw blocks)."""
    data = data.astype(np.float32, copy=False)
    # Only 2-D weight matrices are narrowed; norms, biases and the additive embeddings stay f32.
    if data.ndim >= 2 and name.endswith(".weight") and name not in KEEP_F32:
        if kind == "q8_0" and data.shape[-1] % 32 == 0:
            q8 = gguf.GGMLQuantizationType.Q8_0
            return gguf.quants.quantize(data, q8), q8
        if kind == "bf16":
            bf16 = gguf.GGMLQuantizationType.BF16
            return gguf.quants.quantize(data, bf16), bf16
        return data.astype(np.float16), None
    return data, None


def iter_tensors(model_dir: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (gguf name, f32 array) in the file's key order, as llama.cpp's converter does."""
    with safe_open(str(model_dir / "model.safetensors"), framework="np") as f:
        for hf_name in f.keys():
            name = gguf_tensor_name(hf_name.removeprefix("bert."))
            if name is not None:
                yield name, f.get_tensor(hf_name)


def load_vocab(model_dir: Path) -> tuple[list[str], list[int]]:
    """Return the WordPiece vocab in phantom-space form with llama.cpp token types."""
    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = tok["model"]["vocab"]
    special = {t["id"] for t in tok["added_tokens"] if t["special"]}
    by_id = sorted((i, t) for t, i in vocab.items())
    assert [i for i, _ in by_id] == list(range(len(by_id))), "vocab ids must be dense"

    tokens: list[str] = []
    types: list[int] = []
    for i, t in by_id:
        if i in special:
            tokens.append(t)
            types.append(gguf.TokenType.CONTROL)
        else:
            # llama.cpp's WPM tokenizer marks word starts with U+2581 instead of marking
            # continuations with "##", so both conventions are flipped here.
            tokens.append(t[2:] if t.startswith("##") else "\u2581" + t)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def pooling_type(model_dir: Path) -> gguf.PoolingType:
    """Read the sentence-transformers pooling mode (modules.json -> Pooling config)."""
    modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
    path = next(m["path"] for m in modules if m["type"].endswith("Pooling"))
    cfg = json.loads((model_dir / path / "config.json").read_text(encoding="utf-8"))
    if cfg.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    if cfg.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    raise NotImplementedError(f"unsupported pooling config: {cfg}")


def write_special_tokens(w: gguf.GGUFWriter, model_dir: Path) -> None:
    """Add special token ids, add_*_token flags and the lowercase flag."""
    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    cfg = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    cls, sep = cfg["cls_token"], cfg["sep_token"]

    # BERT's template is "[CLS] A [SEP]" / "[CLS] A [SEP] B [SEP]": llama.cpp models that as
    # bos=[CLS], eos=[SEP] added around every sequence, and no separate separator insertion
    # (gguf-py's SpecialVocab derives the same from this template).
    single = [next(iter(piece.values()))["id"] for piece in tok["post_processor"]["single"]]
    if tok["post_processor"]["type"] != "TemplateProcessing" or single != [cls, "A", sep]:
        raise NotImplementedError(f"unexpected post-processor template {single}")

    w.add_bos_token_id(ids[cls])
    w.add_eos_token_id(ids[sep])
    w.add_unk_token_id(ids[cfg["unk_token"]])
    w.add_sep_token_id(ids[sep])
    w.add_pad_token_id(ids[cfg["pad_token"]])
    w.add_mask_token_id(ids[cfg["mask_token"]])
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(False)
    # Written by hand: gguf-py 0.19.0 has no add_normalizer_lowercase() yet.
    w.add_bool(LOWERCASE_KEY, bool(tok["normalizer"].get("lowercase", False)))


def write_metadata(
    w: gguf.GGUFWriter, model_dir: Path, hp: dict[str, Any], name: str, kind: str = "f16"
) -> None:
    """Add the general, bert.* and tokenizer key/values."""
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)

    w.add_block_count(hp["num_hidden_layers"])
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_layer_norm_eps(hp["layer_norm_eps"])
    w.add_file_type(KINDS[kind])
    w.add_causal_attention(False)
    w.add_pooling_type(pooling_type(model_dir))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, types = load_vocab(model_dir)
    assert len(tokens) == hp["vocab_size"]
    # llama.cpp checks token_types.weight against this count.
    w.add_token_type_count(hp.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre(TOKENIZER_PRE)
    w.add_token_list(tokens)
    w.add_token_types(types)
    write_special_tokens(w, model_dir)


def convert(model_dir: Path, out_path: Path, name: str = DEFAULT_NAME, kind: str = "f16") -> None:
    """Write MODEL_DIR's BERT model as a GGUF of ``kind`` (f16, bf16 or q8_0) at out_path."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, not {kind!r}")
    hp = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if (
        hp.get("architectures") != ["BertModel"]
        or hp.get("position_embedding_type", "absolute") != "absolute"
    ):
        raise NotImplementedError(f"not a plain BertModel: {hp.get('architectures')}")

    w = gguf.GGUFWriter(out_path, ARCH)
    write_metadata(w, model_dir, hp, name, kind)
    for tensor_name, data in iter_tensors(model_dir):
        stored, qtype = convert_tensor(tensor_name, data, kind)
        w.add_tensor(tensor_name, stored, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str]) -> int:
    """CLI entry point."""
    if len(argv) not in (3, 4):
        print(f"usage: {argv[0]} MODEL_DIR OUT.gguf [f16|bf16|q8_0]", file=sys.stderr)
        return 2
    convert(Path(argv[1]), Path(argv[2]), kind=argv[3] if len(argv) == 4 else "f16")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
