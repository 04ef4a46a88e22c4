"""Errors of the image builder.

ImageError
├── NeedsRoot          the Debian base needs root once (debootstrap); the message says how
├── ToolMissing        a program the builder runs is not installed
├── InputMissing       an input (binary, Neo4j, Java, model, preset, base image) is absent
│                      or of the wrong kind (another architecture, a bad checksum)
└── BuildFailed        a step of the build failed (its output is in the message)
"""

from __future__ import annotations


class ImageError(Exception):
    """The image could not be built."""


class NeedsRoot(ImageError):
    """The one privileged step (the Debian base) was asked for without root."""


class ToolMissing(ImageError):
    """A program the build runs is missing."""


class InputMissing(ImageError):
    """An input of the image is missing or unusable."""


class BuildFailed(ImageError):
    """A build step failed."""
