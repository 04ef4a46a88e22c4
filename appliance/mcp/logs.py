"""The admin plugin's ``logs-read``: recent log lines of the device's roles, secrets removed.

Where the lines come from:

- **development** (``maxy run``): each role's output in ``<data_dir>/logs/<role>.log`` (every
  line stamped with the time it was written, see :mod:`appliance.supervisor`), Neo4j's console
  log in its home;
- **the device**: the journal of each role's unit (``journalctl -u maxy-<role>``), when there are
  no development logs and ``journalctl`` is installed;
- **mcp**, on both: each session's plugin servers, ``<account>/claude/mcp/<session>/`` (the
  helper's spawn/boot/exit lines and each server's stderr, see :mod:`appliance.mcp.helper`).

Filters: ``role`` (one of :data:`ROLES`, or all), ``session`` (a session id or its first
characters: lines naming it, and that session's MCP logs), ``contains`` (a case-insensitive
substring). The newest :data:`MAX_LINES` at most, each cut to :data:`MAX_LINE_CHARS`. Every line is
shown through the one redactor (:func:`appliance.core.redact.redact_text`), and any stored
secret (the keys folder, the Anthropic key, the Neo4j password) that still appears verbatim is
replaced too.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.core import proc
from appliance.core.config import Settings
from appliance.core.redact import REDACTED, redact_text
from appliance.graphdb.instance import console_log
from appliance.mcp.owner import device_account
from appliance.mcp.tool import Tool, ToolContext, ToolError

ROLES = ("edge", "app", "engine", "manager", "neo4j", "mcp")
UNITS = {role: f"maxy-{role}.service" for role in ROLES if role != "mcp"}
DEFAULT_LINES = 100
MAX_LINES = 500
MAX_LINE_CHARS = 2000
TAIL_BYTES = 2 * 1024 * 1024  # of each file, read from its end
JOURNAL_SCAN = 5000  # entries asked of the journal before filtering
JOURNAL_TIMEOUT = 20.0
MCP_SESSIONS = 5  # the newest sessions' MCP logs read when no session is named
MAX_SECRET_FILE = 4096
_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{3,63}$")
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT[0-9:.]+(?:[+-]\d\d:\d\d|Z)?) ")


@dataclass(frozen=True)
class Line:
    """One log line: when (an ISO time when known), which role, the text."""

    at: str
    role: str
    text: str


def _tail(path: Path) -> list[str]:
    """The complete lines at the end of a file (at most :data:`TAIL_BYTES` of it)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except (FileNotFoundError, IsADirectoryError):
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > TAIL_BYTES else lines  # the first may be cut


def _stamped(role: str, raw: str) -> Line:
    found = _STAMP.match(raw)
    if found is None:
        return Line("", role, raw)
    return Line(found.group(1), role, raw[found.end() :])


def role_files(settings: Settings) -> dict[str, Path]:
    """The development log file of each role that has one."""
    files = {role: settings.log_dir / f"{role}.log" for role in UNITS if role != "neo4j"}
    files["neo4j"] = console_log(settings.neo4j_home_path)
    return {role: path for role, path in files.items() if path.is_file()}


def mcp_dirs(settings: Settings, account_id: str, session: str | None) -> list[Path]:
    """The per-session MCP log folders of the account: the named session's, or the newest."""
    root = settings.accounts_dir / account_id / "claude" / "mcp"
    try:
        folders = [p for p in root.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return []
    if session is not None:
        return [p for p in folders if p.name.startswith(session)]
    folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return folders[:MCP_SESSIONS]


def _mcp_lines(folders: list[Path]) -> list[Line]:
    lines = []
    for folder in folders:
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.suffix in (".log", ".stderr"):
                role = f"mcp:{folder.name[:8]}:{path.stem}"
                lines += [_stamped(role, raw) for raw in _tail(path)]
    return lines


def journal_available() -> str | None:
    """``journalctl``'s path, or None."""
    return shutil.which("journalctl")


def _journal(program: str, roles: list[str]) -> list[Line]:
    """The journal's newest entries of the roles' units."""
    args = [program, "--no-pager", "-o", "json", "-n", str(JOURNAL_SCAN)]
    for role in roles:
        args += ["-u", UNITS[role]]
    try:
        done = proc.run(args, timeout=JOURNAL_TIMEOUT)
    except proc.ToolError as err:
        raise ToolError(f"The journal cannot be read: {err}", code="journal-unreadable") from err
    if "insufficient permissions" in done.stderr or (done.returncode != 0 and not done.stdout):
        raise ToolError(
            "The journal cannot be read by this user "
            f"({done.stderr.strip()[:200] or f'exit {done.returncode}'}); the maxy user needs "
            "the systemd-journal group (SupplementaryGroups= of maxy-manager.service).",
            code="journal-unreadable",
        )
    by_unit = {unit: role for role, unit in UNITS.items()}
    lines = []
    for raw in done.stdout.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # the journal's form of a message that is not UTF-8
            message = bytes(message).decode("utf-8", errors="replace")
        if not isinstance(message, str):
            continue
        micros = int(entry.get("__REALTIME_TIMESTAMP") or 0)
        at = datetime.fromtimestamp(micros / 1e6, UTC).astimezone().isoformat("T", "milliseconds")
        unit = str(entry.get("_SYSTEMD_UNIT") or "")
        lines.append(Line(at, by_unit.get(unit, unit or "journal"), message))
    return lines


def secrets_of(settings: Settings) -> list[str]:
    """The stored secrets, to be removed verbatim wherever a line repeats one."""
    paths = {settings.anthropic_api_key_path, settings.neo4j_password_path}
    try:
        paths |= {p for p in settings.keys_dir.iterdir() if p.is_file()}
    except FileNotFoundError:
        pass
    found = set()
    for path in paths:
        try:
            if path.stat().st_size > MAX_SECRET_FILE:
                continue
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue  # binary keys (the cookie key) never appear in text logs
        if len(text) >= 8:
            found.add(text)
    return sorted(found, key=len, reverse=True)


def shown(text: str, secrets: list[str]) -> str:
    """A line as the agent may see it: redacted, cut."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    text = redact_text(text)
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def _arguments(arguments: dict[str, Any]) -> tuple[list[str], str | None, str | None, int]:
    role = arguments.get("role") or "all"
    if role != "all" and role not in ROLES:
        raise ToolError(f"role must be one of {', '.join(ROLES)} or all (got {role!r}).")
    session = arguments.get("session") or None
    if session is not None and (not isinstance(session, str) or not _SESSION.match(session)):
        raise ToolError("session must be a session id or its first characters (4 or more).")
    contains = arguments.get("contains") or None
    if contains is not None and not isinstance(contains, str):
        raise ToolError("contains must be text.")
    count = arguments.get("lines", DEFAULT_LINES)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_LINES:
        raise ToolError(f"lines must be a whole number from 1 to {MAX_LINES}.")
    roles = list(ROLES) if role == "all" else [role]
    return roles, session, contains, count


def read_logs(settings: Settings, account_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The filtered, redacted newest lines (blocking: file and journal reads)."""
    roles, session, contains, count = _arguments(arguments)
    services = [role for role in roles if role != "mcp"]
    files = role_files(settings)
    journal = journal_available()
    lines: list[Line] = []
    if services and files:
        source = "files"
        for role in services:
            if role in files:
                lines += [_stamped(role, raw) for raw in _tail(files[role])]
    elif services and journal is not None:
        source = "journald"
        lines += _journal(journal, services)
    else:
        source = "none"
    if "mcp" in roles:
        lines += _mcp_lines(mcp_dirs(settings, account_id, session))
    if session is not None:
        needle = session[:8]
        lines = [ln for ln in lines if ln.role.startswith("mcp:") or needle in ln.text]
    if contains is not None:
        lines = [ln for ln in lines if contains.lower() in ln.text.lower()]
    lines.sort(key=lambda ln: ln.at)  # stable: lines without a time keep their order
    matched = len(lines)
    secrets = secrets_of(settings)
    kept = [
        {"at": ln.at or None, "role": ln.role, "line": shown(ln.text, secrets)}
        for ln in lines[-count:]
    ]
    answer: dict[str, Any] = {
        "source": source,
        "lines": kept,
        "matched": matched,
        "shown": len(kept),
    }
    if source == "none" and services:
        answer["note"] = (
            f"No role logs here: {settings.log_dir} holds none (`maxy run` writes them) and "
            "journalctl is not installed."
        )
    return answer


async def logs_read(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Recent log lines of the roles, filtered, secrets removed."""
    account = device_account(context)
    return await asyncio.to_thread(read_logs, context.settings, account.id, arguments)


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="logs-read",
        plugin="admin",
        handler=logs_read,
        input_schema={
            "type": "object",
            "properties": {
                "role": {
                    "type": "string",
                    "enum": [*ROLES, "all"],
                    "description": "Whose lines: a role, mcp (sessions' plugin servers) or all.",
                },
                "session": {
                    "type": "string",
                    "description": "Only lines about one session (its id or first 8 characters).",
                },
                "contains": {"type": "string", "description": "Only lines containing this."},
                "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES},
            },
            "additionalProperties": False,
        },
        description=(
            "Read the newest log lines of the device's parts (edge, app, engine, manager, "
            "Neo4j, the sessions' plugin servers), filtered by part, session or text; secrets "
            "are removed."
        ),
    ),
)
