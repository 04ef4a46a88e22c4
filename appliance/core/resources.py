"""Locate files shipped beside the code: in the source tree, or inside the frozen binary.

Also undo what the frozen binary's bootloader does to the environment before starting a program
that is not ours (the ``claude`` CLI): PyInstaller points ``LD_LIBRARY_PATH`` at its unpacked
libraries and marks the environment with ``_PYI_*`` variables. A ``maxy mcp`` started by that
program would otherwise take itself for a PyInstaller worker of a parent that is not ``maxy``
and refuse to start.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

_LIBRARY_PATH = "LD_LIBRARY_PATH"
_LIBRARY_PATH_SAVED = "LD_LIBRARY_PATH_ORIG"


def resource_path(relative: str) -> Path:
    """Return the path of a shipped file such as ``schema/schema.cypher``."""
    bundle = getattr(sys, "_MEIPASS", None)
    root = Path(bundle) if bundle else Path(__file__).resolve().parents[2]
    return root / relative


def self_command() -> list[str]:
    """How to run this program again: the frozen binary, or this interpreter with the package."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "appliance"]


def external_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """Return ``environ`` as it was before the frozen binary's bootloader changed it."""
    env = {k: v for k, v in environ.items() if not k.startswith("_PYI_") and k != "_MEIPASS2"}
    if _LIBRARY_PATH_SAVED in env:
        env[_LIBRARY_PATH] = env.pop(_LIBRARY_PATH_SAVED)
    elif getattr(sys, "frozen", False):
        env.pop(_LIBRARY_PATH, None)
    return env
