"""Locate files shipped beside the code: in the source tree, or inside the frozen binary."""

from __future__ import annotations

import sys
from pathlib import Path


def resource_path(relative: str) -> Path:
    """Return the path of a shipped file such as ``schema/schema.cypher``."""
    bundle = getattr(sys, "_MEIPASS", None)
    root = Path(bundle) if bundle else Path(__file__).resolve().parent.parent
    return root / relative
