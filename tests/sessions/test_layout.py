"""Where session files live, and how the watcher's paths are told apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.sessions.layout import Layout, Place, slug

CONFIG = Path("/data/accounts/a/claude")
LAYOUT = Layout(CONFIG)
SID = "8c38dcf0-ab3b-4511-ba34-f627e7002752"
PROJECT = CONFIG / "projects" / "-data-accounts-a"


def test_slug_matches_the_cli() -> None:
    # Observed with the real CLI: every character but letters and digits becomes "-".
    assert slug("/tmp/cli-exp/work_dir.x") == "-tmp-cli-exp-work-dir-x"


@pytest.mark.parametrize(
    ("path", "place"),
    [
        (CONFIG / "sessions" / "1234.json", Place("pid", "1234")),
        (CONFIG / "sessions" / "1234.abc.key", None),
        (CONFIG / "sessions" / "x.json", None),
        (PROJECT / f"{SID}.jsonl", Place("transcript", SID, PROJECT)),
        (PROJECT / "archive" / f"{SID}.jsonl", Place("transcript", SID, PROJECT)),
        (PROJECT / f"{SID}.meta.json", Place("sidecar", SID, PROJECT)),
        (PROJECT, Place("project", "-data-accounts-a", PROJECT)),
        (PROJECT / "archive", Place("project", "-data-accounts-a", PROJECT)),
        (PROJECT / SID / "subagents" / "a.jsonl", None),
        (PROJECT / "memory", None),
        (CONFIG / "history.jsonl", None),
        (Path("/elsewhere/sessions/1.json"), None),
    ],
)
def test_classify(path: Path, place: Place | None) -> None:
    assert LAYOUT.classify(path) == place


def test_paths_round_trip() -> None:
    project = LAYOUT.project_dir("/data/accounts/a")
    assert project == PROJECT
    for path in (
        LAYOUT.transcript(project, SID),
        LAYOUT.transcript(project, SID, archived=True),
        LAYOUT.sidecar(project, SID),
    ):
        found = LAYOUT.classify(path)
        assert found is not None and found.key == SID
