"""build/freeze.lock holds the frozen binary's whole dependency set, hashed, as pinned here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def locked() -> dict[str, tuple[str, int]]:
    """Each locked distribution: its version and how many hashes it carries."""
    text = (REPO / "build" / "freeze.lock").read_text().replace("\\\n", " ")
    entries = {}
    for line in text.splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line)
        if match:
            name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
            entries[name] = (match.group(2), line.count("--hash=sha256:"))
    return entries


def test_every_pinned_runtime_and_freeze_dependency_is_locked_at_its_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lock = locked()
    for requirement in project["dependencies"] + project["optional-dependencies"]["freeze"]:
        name, version = requirement.split("==")
        key = re.sub(r"[-_.]+", "-", name).lower()
        assert key in lock, f"{name} is not in build/freeze.lock: run `just lock`"
        assert lock[key][0] == version, f"{name} is locked at {lock[key][0]}: run `just lock`"


def test_every_locked_distribution_carries_hashes() -> None:
    lock = locked()
    assert len(lock) > 40  # the indirect dependencies too, not only what pyproject names
    assert all(hashes for _, hashes in lock.values())
