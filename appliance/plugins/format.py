"""One plugin folder on disk, read and checked: ``PLUGIN.md`` and what it names.

A plugin is a folder::

    <name>/PLUGIN.md             YAML front matter (below), then the behaviour instructions
    <name>/skills/<skill>/SKILL.md   loadable instructions (Claude Code's skill format)
    <name>/agents/<role>.md      roles: Claude Code subagent files with their ``tools:`` line
    <name>/references/*.md       reference documents

Front matter keys: ``name`` (the folder's name), ``description``, ``tools`` (``{name, public,
description?}`` each), ``mcp`` (``{command: [...], env?: {...}}``: the server that serves the
tools; ``maxy`` as the command's first word means this program), ``skills``, ``agents``,
``enhances`` (roles the plugin helps), ``publicEmbed`` (public agents get its body and skills),
``references``. A plugin that declares tools names its server; everything it names exists.

The ``sha`` of a plugin is the sha256 over every file's relative path and bytes, so two copies
of a plugin compare equal exactly when they are byte-identical.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from appliance.plugins.errors import PluginError, PluginRefused

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
MANIFEST = "PLUGIN.md"
SKILL_FILE = "SKILL.md"
Root = Literal["core", "premium", "account"]
_FENCE = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_KEYS = {
    "name",
    "description",
    "tools",
    "mcp",
    "skills",
    "agents",
    "enhances",
    "publicEmbed",
    "references",
}


@dataclass(frozen=True)
class ToolDecl:
    """One tool a plugin's server offers, and whether public agents may call it."""

    name: str
    public: bool = False
    description: str = ""


@dataclass(frozen=True)
class Server:
    """The MCP server that serves a plugin's tools."""

    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def ours(self) -> bool:
        """True when the command is this program (``maxy …``)."""
        return self.command[0] == "maxy"


@dataclass(frozen=True)
class Plugin:
    """A plugin as read from its folder."""

    name: str
    description: str
    path: Path
    root: Root
    body: str
    sha: str
    tools: tuple[ToolDecl, ...] = ()
    server: Server | None = None
    skills: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    enhances: tuple[str, ...] = ()
    public_embed: bool = False
    references: tuple[str, ...] = ()
    bundle: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def locked(self) -> bool:
        """Core plugins are always on."""
        return self.root == "core"

    @property
    def public_tools(self) -> tuple[ToolDecl, ...]:
        """The tools public agents may call."""
        return tuple(tool for tool in self.tools if tool.public)

    def skill_path(self, skill: str) -> Path:
        """Where one of the plugin's skills lives."""
        return self.path / "skills" / skill / SKILL_FILE

    def agent_path(self, role: str) -> Path:
        """Where one of the plugin's roles lives."""
        return self.path / "agents" / f"{role}.md"

    def summary(self) -> dict[str, Any]:
        """The plugin as the admin tools and pages show it."""
        return {
            "name": self.name,
            "description": self.description,
            "root": self.root,
            "bundle": self.bundle,
            "locked": self.locked,
            "tools": [{"name": t.name, "public": t.public} for t in self.tools],
            "skills": list(self.skills),
            "agents": list(self.agents),
            "enhances": list(self.enhances),
            "publicEmbed": self.public_embed,
            "sha": self.sha,
        }


@functools.lru_cache(maxsize=512)
def _load_yaml(text: str) -> Any:
    """Parsed YAML, kept by its text: every spawn resolves every plugin, and the pure-Python
    parser took ~25 ms a manifest (most of a spawn's registration) for text that rarely changes."""
    return YAML(typ="safe").load(io.StringIO(text))


def split_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """The YAML mapping between the leading ``---`` lines, and the body after it."""
    match = _FENCE.match(text)
    if match is None:
        raise PluginError(f"{where}: no front matter (a --- line, YAML keys, a --- line).")
    try:
        data = copy.deepcopy(_load_yaml(match.group(1)))
    except YAMLError as err:
        raise PluginError(f"{where}: its front matter is not YAML ({err}).") from err
    if not isinstance(data, dict):
        raise PluginError(f"{where}: its front matter must be a mapping of keys.")
    return data, text[match.end() :].strip()


def folder_sha(folder: Path) -> str:
    """sha256 over every file's path (relative to ``folder``) and bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _names(data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and NAME.match(v) for v in value):
        raise PluginError(f"{where}: {key} must be a list of names (lower-case, digits, -).")
    return tuple(value)


def _tools(data: dict[str, Any], where: str) -> tuple[ToolDecl, ...]:
    value = data.get("tools") or []
    if not isinstance(value, list):
        raise PluginError(f"{where}: tools must be a list of {{name, public}}.")
    tools = []
    for entry in value:
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise PluginError(f"{where}: each tool is {{name, public}}; got {entry!r}.")
        if not NAME.match(entry["name"]) or not isinstance(entry.get("public", False), bool):
            raise PluginError(f"{where}: tool {entry['name']!r}: a name and public true/false.")
        tools.append(
            ToolDecl(entry["name"], entry.get("public", False), str(entry.get("description", "")))
        )
    if len({t.name for t in tools}) != len(tools):
        raise PluginError(f"{where}: a tool is listed twice.")
    return tuple(tools)


def _server(data: dict[str, Any], where: str) -> Server | None:
    value = data.get("mcp")
    if value is None:
        return None
    command = value.get("command") if isinstance(value, dict) else None
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise PluginError(f"{where}: mcp.command must be a non-empty list of strings.")
    env = value.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise PluginError(f"{where}: mcp.env must map names to strings.")
    return Server(tuple(command), tuple(sorted((str(k), v) for k, v in env.items())))


def read_plugin(folder: Path, root: Root, bundle: str | None = None) -> Plugin:
    """Read and check one plugin folder; :class:`PluginError` says what is wrong and where."""
    manifest = folder / MANIFEST
    where = str(manifest)
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise PluginError(f"{where}: cannot be read ({err}).") from err
    data, body = split_front_matter(text, where)
    unknown = sorted(set(data) - _KEYS)
    name = data.get("name")
    if not isinstance(name, str) or name != folder.name or not NAME.match(name):
        raise PluginError(f"{where}: name must be the folder's name, {folder.name!r}.")
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise PluginError(f"{where}: description must be one sentence.")
    tools, server = _tools(data, where), _server(data, where)
    if tools and server is None:
        raise PluginRefused("mcp-allowlist-without-server", name)
    plugin = Plugin(
        name=name,
        description=description.strip(),
        path=folder,
        root=root,
        body=body,
        sha=folder_sha(folder),
        tools=tools,
        server=server,
        skills=_names(data, "skills", where),
        agents=_names(data, "agents", where),
        enhances=_names(data, "enhances", where),
        public_embed=bool(data.get("publicEmbed", False)),
        references=tuple(str(r) for r in data.get("references") or []),
        bundle=bundle,
        extra={key: data[key] for key in unknown},
    )
    missing = [str(p) for p in _named_files(plugin) if not p.is_file()]
    if missing:
        raise PluginError(f"{where}: names files that are not there: {', '.join(missing)}.")
    return plugin


def _named_files(plugin: Plugin) -> list[Path]:
    references = [plugin.path / "references" / Path(ref).name for ref in plugin.references]
    return (
        [plugin.skill_path(s) for s in plugin.skills]
        + [plugin.agent_path(a) for a in plugin.agents]
        + references
    )


def missing_files(plugin: Plugin) -> list[str]:
    """Files the plugin names that are gone since it was read (its manifest included)."""
    paths = [plugin.path / MANIFEST, *_named_files(plugin)]
    return [str(p) for p in paths if not p.is_file()]
