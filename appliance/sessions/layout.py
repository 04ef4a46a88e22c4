"""Where the CLI and the manager keep a session's files inside one ``CLAUDE_CONFIG_DIR``.

::

    <config>/sessions/<pid>.json                       PID file (the CLI's)
    <config>/projects/<slug>/<sessionId>.jsonl         live transcript (the CLI's)
    <config>/projects/<slug>/archive/<sessionId>.jsonl archived transcript
    <config>/projects/<slug>/<sessionId>.meta.json     sidecar (the manager's)
    <config>/projects/<slug>/<sessionId>/              per-session directory (the CLI's)

``<slug>`` is the working directory with every character but ASCII letters and digits replaced
by ``-``, as the CLI names it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SESSIONS = "sessions"
PROJECTS = "projects"
ARCHIVE = "archive"
TRANSCRIPT_SUFFIX = ".jsonl"
SIDECAR_SUFFIX = ".meta.json"

_SLUG = re.compile(r"[^A-Za-z0-9]")
_PID_FILE = re.compile(r"^([0-9]+)\.json$")

Kind = Literal["pid", "transcript", "sidecar", "project"]


def slug(cwd: Path | str) -> str:
    """The CLI's directory name for a working directory."""
    return _SLUG.sub("-", str(cwd))


@dataclass(frozen=True)
class Place:
    """What a path under the config directory is."""

    kind: Kind
    key: str  # pid for "pid", session id for transcripts and sidecars, slug for "project"
    project: Path | None = None


@dataclass(frozen=True)
class Layout:
    """The files of one account's sessions."""

    config_dir: Path

    @property
    def sessions_dir(self) -> Path:
        """The CLI's PID files."""
        return self.config_dir / SESSIONS

    @property
    def projects_dir(self) -> Path:
        """One directory per working directory."""
        return self.config_dir / PROJECTS

    def pid_file(self, pid: int) -> Path:
        """The PID file of one process."""
        return self.sessions_dir / f"{pid}.json"

    def project_dir(self, cwd: Path | str) -> Path:
        """The directory holding the transcripts of sessions started in ``cwd``."""
        return self.projects_dir / slug(cwd)

    @staticmethod
    def transcript(project: Path, session_id: str, archived: bool = False) -> Path:
        """The transcript of a session, live or archived."""
        folder = project / ARCHIVE if archived else project
        return folder / f"{session_id}{TRANSCRIPT_SUFFIX}"

    @staticmethod
    def sidecar(project: Path, session_id: str) -> Path:
        """The manager's metadata beside a transcript."""
        return project / f"{session_id}{SIDECAR_SUFFIX}"

    def classify(self, path: Path) -> Place | None:
        """Say which session file ``path`` is, or None for anything else."""
        try:
            rel = path.relative_to(self.config_dir)
        except ValueError:
            return None
        parts = rel.parts
        if len(parts) == 2 and parts[0] == SESSIONS:
            match = _PID_FILE.match(parts[1])
            return Place("pid", match.group(1)) if match else None
        if len(parts) < 2 or parts[0] != PROJECTS:
            return None
        project = self.projects_dir / parts[1]
        if len(parts) == 2:
            return Place("project", parts[1], project)
        name = parts[-1]
        if len(parts) == 3:
            if name == ARCHIVE:
                return Place("project", parts[1], project)
            if name.endswith(SIDECAR_SUFFIX):
                return Place("sidecar", name[: -len(SIDECAR_SUFFIX)], project)
            if name.endswith(TRANSCRIPT_SUFFIX):
                return Place("transcript", name[: -len(TRANSCRIPT_SUFFIX)], project)
            return None
        if len(parts) == 4 and parts[2] == ARCHIVE and name.endswith(TRANSCRIPT_SUFFIX):
            return Place("transcript", name[: -len(TRANSCRIPT_SUFFIX)], project)
        return None
