"""Compare release versions: PEP 440 (``1.2.0rc1``, ``1.2.post1``) and semver (``1.2.0-rc.1``).

A downgrade check must not think ``1.10.0`` older than ``1.9.0`` or ``1.0.0rc1`` newer than
``1.0.0``. Both notations map onto one sort key: the release numbers (trailing zeros dropped, so
``1.2`` equals ``1.2.0``), then the phase — development < pre-release (a/alpha < b/beta < rc) <
final < post-release — then its number. Local and build metadata (``+…``) never order.
"""

from __future__ import annotations

import re
from functools import total_ordering

_PEP440 = re.compile(
    r"""^v?(?P<release>\d+(?:\.\d+)*)
        (?:[-_.]?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d+)?)?
        (?P<post>-(?P<post_n1>\d+)|[-_.]?(?:post|rev|r)[-_.]?(?P<post_n2>\d+)?)?
        (?P<dev>[-_.]?dev[-_.]?(?P<dev_n>\d+)?)?
        (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$""",
    re.VERBOSE | re.IGNORECASE,
)
_SEMVER = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}

# Phase ranks: dev release < pre-release < final < post-release.
_DEV, _PRE, _FINAL, _POST = 0, 1, 2, 3

Key = tuple[tuple[int, ...], int, tuple[object, ...]]


class InvalidVersion(ValueError):
    """The text is neither a PEP 440 nor a semantic version."""


@total_ordering
class Version:
    """A comparable release version."""

    def __init__(self, text: str) -> None:
        self.text = text.strip()
        self.key = _key(self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self.key == other.key

    def __lt__(self, other: Version) -> bool:
        return self.key < other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Version({self.text!r})"

    def __str__(self) -> str:
        return self.text


def _release(text: str) -> tuple[int, ...]:
    numbers = [int(part) for part in text.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def _ident(part: str) -> tuple[int, int, str]:
    """One dot-separated pre-release identifier: numbers sort before words, numerically."""
    return (0, int(part), "") if part.isdigit() else (1, 0, part.lower())


def _key(text: str) -> Key:
    match = _PEP440.match(text)
    if match:
        # A dev release comes before the release it leads to (1.0.dev1 < 1.0a1 < 1.0).
        dev = (0, int(match["dev_n"] or 0)) if match["dev"] is not None else (1, 0)
        if match["pre"]:
            number = (_ident(match["pre_n"] or "0"),)
            return (
                _release(match["release"]),
                _PRE,
                (_PRE_RANK[match["pre"].lower()], "", number, dev),
            )
        if match["post"] is not None:
            return (
                _release(match["release"]),
                _POST,
                (int(match["post_n1"] or match["post_n2"] or 0), dev),
            )
        if match["dev"] is not None:
            return _release(match["release"]), _DEV, (dev,)
        return _release(match["release"]), _FINAL, ()
    match = _SEMVER.match(text)
    if match:
        first, *rest = match["pre"].split(".")
        label = first.lower()
        # Semver orders pre-release labels as text; alpha < beta < rc agrees with PEP 440.
        head = (_PRE_RANK[label], "") if label in _PRE_RANK else (len(_PRE_RANK), label)
        return _release(match["release"]), _PRE, (*head, tuple(_ident(p) for p in rest), (1, 0))
    raise InvalidVersion(
        f"{text!r} is not a version: use PEP 440 (1.2.0, 1.2.0rc1) or semver (1.2.0-rc.1)"
    )


def parse(text: str) -> Version:
    """Parse a version, raising :class:`InvalidVersion` with what a valid one looks like."""
    return Version(text)
