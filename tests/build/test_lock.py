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


def test_the_arm64_requirements_hold_one_version_each_and_no_markers() -> None:
    """pip download evaluates markers against its own interpreter, not the card's 3.11.2."""
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "build" / "freeze_requirements.py"),
            "--python-full-version",
            "3.11.2",
            str(REPO / "build" / "freeze.lock"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    pins = [line for line in done.stdout.splitlines() if re.match(r"[A-Za-z0-9_.-]+==", line)]
    names = [re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() for line in pins]
    assert len(names) == len(set(names)), "a package appears under both sides of a marker"
    assert not [line for line in pins if ";" in line.split(" --hash")[0]]
    assert "llama-cpp-python" not in names
    assert set(names) <= set(locked())
    assert {"soupsieve", "pyinstaller", "neo4j"} <= set(names)  # soupsieve: only under a marker
