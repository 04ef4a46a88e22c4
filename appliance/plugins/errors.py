"""What can go wrong with plugins, each a clear message for the owner or the log."""

from __future__ import annotations


class PluginError(Exception):
    """A plugin cannot be read, resolved or written."""


class PluginRefused(PluginError):
    """The installed plugins are inconsistent: the manager does not start.

    ``reason`` is the stable token logged as ``boot-failed reason=<reason> …``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"boot-failed reason={reason} {detail}")
        self.reason = reason


class PluginNotFound(PluginError):
    """No installed plugin, skill or role of that name."""


class PluginLocked(PluginError):
    """A core plugin cannot be turned off (or on: it always is)."""
