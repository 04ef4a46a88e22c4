"""Maxy, a home AI appliance."""

from __future__ import annotations

from appliance.version import __version__

__all__ = ["__version__"]
