"""Maxy, a home AI appliance."""

from __future__ import annotations

from appliance.core.version import __version__

__all__ = ["__version__"]
