"""The shipped core plugins: front matter keys, the files they name, roles, and no literal brand."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

CORE = Path(__file__).resolve().parents[2] / "appliance" / "plugins" / "core"
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
KEYS = {
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
FENCE = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*\n", re.DOTALL)
# The program's own name is a word of commands (``maxy tunnel …``, ``[maxy, mcp, …]``) and of the
# guide plugin's folder; anything else spelled like the product is a brand leak.
PROGRAM = re.compile(r"\bmaxy(?=[ ,]+(?:mcp|tunnel)\b)|\bmaxy-(?:guide|reset-pin)\b")
# The roles shipped so far (the thirteen of the platform).
ROLES = {
    "archive-ingest-operator",
    "citation-auditor",
    "coding-assistant",
    "compiled-truth-rewriter",
    "content-producer",
    "data-manager",
    "database-operator",
    "librarian",
    "personal-assistant",
    "project-manager",
    "public-session-reviewer",
    "research-assistant",
    "typed-edge-classifier",
}
PLUGINS = sorted(path.name for path in CORE.iterdir() if (path / "PLUGIN.md").is_file())


def front(path: Path) -> dict[str, Any]:
    found = FENCE.match(path.read_text(encoding="utf-8"))
    assert found, f"{path}: no front matter"
    data = YAML(typ="safe").load(found.group(1))
    assert isinstance(data, dict), path
    return data


def test_no_literal_brand_in_shipped_content() -> None:
    hits = []
    for path in sorted(CORE.rglob("*")):
        if path.is_file():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search("maxy", PROGRAM.sub("", line), re.IGNORECASE):
                    hits.append(f"{path.relative_to(CORE)}:{number}: {line}")
    assert hits == []


def test_the_core_plugins_are_shipped() -> None:
    expected = {
        "admin",
        "cloudflare",
        "contacts",
        "maxy-guide",
        "memory",
        "projects",
        "scheduling",
        "tasks",
        "telegram",
        "web",
        "whatsapp",
    }
    assert set(PLUGINS) == expected


@pytest.mark.parametrize("name", PLUGINS)
def test_plugin_front_matter_and_named_files(name: str) -> None:
    folder = CORE / name
    data = front(folder / "PLUGIN.md")
    assert set(data) <= KEYS
    assert data["name"] == name and NAME.match(name)
    assert isinstance(data["description"], str) and data["description"]
    tools = data.get("tools") or []
    for tool in tools:
        assert set(tool) <= {"name", "public", "description"} and NAME.match(tool["name"])
        assert isinstance(tool["public"], bool)
    if tools:
        assert data["mcp"] == {"command": ["maxy", "mcp", "--plugin", name]}
    else:
        assert "mcp" not in data
    assert isinstance(data.get("publicEmbed", False), bool)
    for skill in data.get("skills") or []:
        skill_front = front(folder / "skills" / skill / "SKILL.md")
        assert skill_front["name"] == skill and skill_front["description"]
    for role in data.get("agents") or []:
        assert (folder / "agents" / f"{role}.md").is_file()
    for reference in data.get("references") or []:
        assert (folder / "references" / reference).is_file()
    assert set(data.get("enhances") or []) <= ROLES


def test_each_role_once_with_a_limited_tools_line() -> None:
    declared: dict[str, set[str]] = {
        name: {tool["name"] for tool in front(CORE / name / "PLUGIN.md").get("tools") or []}
        for name in PLUGINS
    }
    builtins = {"Read", "Write", "Edit", "Glob", "Grep", "Bash"}
    seen = set()
    for name in PLUGINS:
        for role in front(CORE / name / "PLUGIN.md").get("agents") or []:
            data = front(CORE / name / "agents" / f"{role}.md")
            assert data["name"] == role and data["description"]
            tools = [tool.strip() for tool in data["tools"].split(",")]
            assert tools
            for tool in tools:
                if tool.startswith("mcp__"):
                    _, plugin, tool_name = tool.split("__")
                    assert tool_name in declared[plugin], f"{role}: {tool}"
                else:
                    assert tool in builtins, f"{role}: {tool}"
            seen.add(role)
    assert seen == ROLES


def test_every_plugins_declared_tools_are_the_ones_its_server_serves() -> None:
    from appliance.mcp.tools import plugins_with_tools, tools_of

    served = set(plugins_with_tools())
    for name in PLUGINS:
        declared = [tool["name"] for tool in front(CORE / name / "PLUGIN.md").get("tools") or []]
        assert sorted(declared) == sorted(t.name for t in tools_of(name)), name
        served.discard(name)
    assert not served, f"tools of no shipped plugin: {served}"
