"""Release versions order the way a downgrade check needs (PEP 440 and semver)."""

from __future__ import annotations

import itertools

import pytest

from appliance.ota.versions import InvalidVersion, parse

ASCENDING = [
    "0.1.0",
    "1.0.dev1",
    "1.0a1",
    "1.0.0-alpha.2",
    "1.0b1",
    "1.0.0-beta.11",
    "1.0rc1",
    "1.0.0-rc.2",
    "1.0.0",
    "1.0.post1",
    "1.0.1",
    "1.9.0",
    "1.10.0",
    "2.0.0-rc.1",
    "2.0.0",
    "v2.0.1",
    "10.0",
]


@pytest.mark.parametrize(("older", "newer"), list(itertools.pairwise(ASCENDING)))
def test_versions_order(older: str, newer: str) -> None:
    assert parse(older) < parse(newer)
    assert not parse(newer) < parse(older)


@pytest.mark.parametrize(
    ("left", "right"),
    [("1.2", "1.2.0"), ("1.0.0+build.5", "1.0.0"), ("v1.4.0", "1.4.0"), ("1.0RC1", "1.0rc1")],
)
def test_equal_versions(left: str, right: str) -> None:
    assert parse(left) == parse(right)


@pytest.mark.parametrize("text", ["", "latest", "1..2", "1.0.0-", "abc1.0"])
def test_nonsense_is_no_version(text: str) -> None:
    with pytest.raises(InvalidVersion, match="PEP 440"):
        parse(text)
