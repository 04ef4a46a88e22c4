"""What one ``claude`` spawn is given from the account's enabled plugins.

- **MCP servers** (``--mcp-config``): one per plugin with tools, named after the plugin, so its
  tools reach the model as ``mcp__<plugin>__<tool>``. Each is started through ``maxy
  mcp-helper`` (its real parent: it tees the server's stderr to a per-session file and logs
  spawn, boot and exit).
- **Roles and skills** (``--plugin-dir``): a Claude Code plugin per enabled plugin, generated
  with the brand filled in: ``.claude-plugin/plugin.json``, ``agents/*.md``,
  ``skills/<skill>/SKILL.md``. The tree is content-addressed (a hash of the plugins, the kind
  and the brand), so spawns reuse it and a change makes a new one.
- **Instructions**: the body of each enabled plugin, for ``--append-system-prompt``.

A public spawn sees only the plugins with a public tool, and only those tools: its servers list
nothing else (``MAXY_MCP_TOOLS``), and the plugins' other declared tools are denied too. It gets
no roles and no skill tool; the bodies and skills of ``publicEmbed`` plugins are in its prompt.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from appliance.core.accounts import fill_brand
from appliance.core.fsio import fsync_dir
from appliance.plugins.format import Plugin
from appliance.plugins.resolver import Installed

Kind = Literal["admin", "public"]
GENERATED = "maxy-plugins"
ALLOWED_TOOLS_ENV = "MAXY_MCP_TOOLS"


def tool_name(plugin: str, tool: str) -> str:
    """The name the model sees for a plugin's tool."""
    return f"mcp__{plugin}__{tool}"


@dataclass(frozen=True)
class Registration:
    """The plugin part of one spawn's argv."""

    servers: dict[str, dict[str, Any]]
    plugin_dir: Path | None
    instructions: str
    allowed: tuple[str, ...] = ()
    denied: tuple[str, ...] = ()
    plugins: tuple[str, ...] = field(default=())


def _server_command(plugin: Plugin, self_command: Sequence[str]) -> list[str]:
    assert plugin.server is not None
    command = list(plugin.server.command)
    return [*self_command, *command[1:]] if plugin.server.ours else command


def servers_for(
    plugins: Sequence[Plugin],
    kind: Kind,
    session_id: str,
    self_command: Sequence[str],
    env: Mapping[str, str],
    log_dir: Path,
) -> dict[str, dict[str, Any]]:
    """The ``mcpServers`` entries: each plugin's server, wrapped by ``maxy mcp-helper``."""
    servers: dict[str, dict[str, Any]] = {}
    for plugin in plugins:
        if plugin.server is None:
            continue
        server_env = {**env, **dict(plugin.server.env)}
        # The declared tools are the allow-list: a public spawn's, only the public ones.
        tools = plugin.public_tools if kind == "public" else plugin.tools
        server_env[ALLOWED_TOOLS_ENV] = ",".join(t.name for t in tools)
        if kind == "public":
            server_env["ALLOWED_SCOPES"] = "public"
        wrapper = [
            *self_command[1:],
            "mcp-helper",
            "--session",
            session_id,
            "--server",
            plugin.name,
            "--log-dir",
            str(log_dir),
            "--",
            *_server_command(plugin, self_command),
        ]
        servers[plugin.name] = {
            "type": "stdio",
            "command": self_command[0],
            "args": wrapper,
            "env": server_env,
        }
    return servers


def _front_matter_line(key: str, value: str) -> str:
    return f"{key}: {json.dumps(value)}"


def _put(path: Path, text: str) -> None:
    # Inside a staging tree: the rename of the whole tree is what makes it appear at once.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _generate(plugins: Sequence[Plugin], product: str, folder: Path) -> None:
    """Write one Claude Code plugin per Maxy plugin under ``folder`` (roles and skills only)."""
    for plugin in plugins:
        if not plugin.agents and not plugin.skills:
            continue
        out = folder / plugin.name
        manifest = {"name": plugin.name, "description": fill_brand(plugin.description, product)}
        _put(out / ".claude-plugin" / "plugin.json", json.dumps(manifest, indent=2) + "\n")
        for role in plugin.agents:
            text = plugin.agent_path(role).read_text(encoding="utf-8")
            _put(out / "agents" / f"{role}.md", fill_brand(text, product))
        for skill in plugin.skills:
            text = plugin.skill_path(skill).read_text(encoding="utf-8")
            _put(out / "skills" / skill / "SKILL.md", fill_brand(text, product))


def generated_dir(plugins: Sequence[Plugin], product: str, root: Path) -> Path | None:
    """The content-addressed Claude Code plugin tree of these plugins (made once)."""
    if not any(p.agents or p.skills for p in plugins):
        return None
    key = hashlib.sha256(
        json.dumps([product, *[(p.name, p.sha) for p in plugins]]).encode()
    ).hexdigest()[:16]
    folder = root / GENERATED / key
    if folder.is_dir():
        return folder
    staging = root / GENERATED / f".{key}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    _generate(plugins, product, staging)
    fsync_dir(staging)
    staging.rename(folder)
    for old in (root / GENERATED).iterdir():  # keep only the current tree
        if old.name != key and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    return folder


def _instructions(plugins: Sequence[Plugin], product: str, public: bool) -> str:
    parts = []
    for plugin in plugins:
        text = plugin.body
        if public:
            skills = [plugin.skill_path(s).read_text(encoding="utf-8") for s in plugin.skills]
            text = "\n\n".join([text, *skills]).strip()
        if text:
            parts.append(f'<plugin name="{plugin.name}">\n{fill_brand(text, product)}\n</plugin>')
    return "\n\n".join(parts)


def register(
    installed: Installed,
    kind: Kind,
    product: str,
    session_id: str,
    self_command: Sequence[str],
    env: Mapping[str, str],
    config_dir: Path,
) -> Registration:
    """Everything a spawn of ``kind`` gets from the enabled plugins."""
    log_dir = config_dir / "mcp" / session_id
    if kind == "admin":
        plugins = installed.enabled
        return Registration(
            servers=servers_for(plugins, kind, session_id, self_command, env, log_dir),
            plugin_dir=generated_dir(plugins, product, config_dir),
            instructions=_instructions(plugins, product, public=False),
            plugins=tuple(p.name for p in plugins),
        )
    public = installed.public()
    allowed = tuple(tool_name(p.name, t.name) for p in public for t in p.public_tools)
    denied = tuple(tool_name(p.name, t.name) for p in public for t in p.tools if not t.public)
    return Registration(
        servers=servers_for(public, kind, session_id, self_command, env, log_dir),
        plugin_dir=None,
        instructions=_instructions(installed.embedded(), product, public=True),
        allowed=allowed,
        denied=denied,
        plugins=tuple(p.name for p in public),
    )
