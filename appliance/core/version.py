"""Version metadata of this build: version, git revision, build date."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from appliance.core.proc import ToolError, run

__version__ = "0.1.0"

# The frozen binary carries build metadata in this file (written by `just build`).
_BUILD_INFO = Path(__file__).parent.parent / "_build_info.json"


def _git_revision() -> str | None:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], timeout=5)
    except ToolError:
        return None
    return out.stdout.strip() or None


def build_info() -> dict[str, Any]:
    """Return version, git revision and build date of the running code."""
    if _BUILD_INFO.is_file():
        info: dict[str, Any] = json.loads(_BUILD_INFO.read_text())
        return info
    try:
        version = metadata.version("maxy")
    except metadata.PackageNotFoundError:
        version = __version__
    return {
        "version": version,
        "gitRevision": _git_revision(),
        "buildDate": None,
        "frozen": bool(getattr(sys, "frozen", False)),
    }
