"""The admin plugin's tools about plugins and skills: what is here, read it, add to it, switch it.

- ``capabilities-here``: the live install set of the caller's account (the resolver's answer
  now, not what this session started with): enabled plugins with their tools, roles and skills,
  the installed ones that are off, and enabled ones whose files are gone.
- ``plugin-read``: a plugin's instructions (its ``PLUGIN.md`` body) or one of its reference
  files; ``skill-load``: a skill's ``SKILL.md`` by ``plugin:skill`` or a unique ``skill``. Both
  fill ``{{productName}}`` with the brand's product name; without one they refuse.
- ``store-skill``: writes ``<data_dir>/accounts/<id>/plugins/<plugin>/PLUGIN.md`` and
  ``skills/<skill>/SKILL.md`` (and ``references/*.md``). The tool computes every path from
  checked names; a name the program or a premium bundle ships is refused (``plugin-name-taken``).
  Files are written durably, the manifest last, so it never names a file that is not there; the
  plugin is then turned on, so the next session has it. ``publicEmbed`` decides whether public
  agents get the plugin's instructions and skills.
- ``plugin-enable`` / ``plugin-disable``: the account's ``enabledPlugins``; core plugins are
  always on (``plugin-locked``).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from appliance.core.accounts import fill_brand
from appliance.core.fsio import write_atomic
from appliance.mcp.owner import account_of, product_name
from appliance.mcp.tool import Tool, ToolContext, ToolError
from appliance.plugins.errors import PluginError, PluginNotFound
from appliance.plugins.format import MANIFEST, NAME, SKILL_FILE, Plugin, split_front_matter
from appliance.plugins.resolver import (
    Installed,
    account_root,
    resolve,
    set_enabled,
    shipped_names,
)

REFERENCE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}\.md$")
MAX_DESCRIPTION = 300
MAX_BODY = 50_000
MAX_REFERENCE = 200_000
MAX_REFERENCES = 10
RETURN_CAP = 40_000
NEXT_SESSION = "New sessions have it; this session keeps the set it started with."


def installed_of(context: ToolContext) -> Installed:
    """The caller's account's plugins as they are on disk now."""
    account = account_of(context)
    try:
        return resolve(context.settings, account.id)
    except PluginError as err:
        raise ToolError(
            f"The account's plugins cannot be read: {err}. Fix or remove that plugin.",
            code="plugins-broken",
        ) from err


def _plugin(installed: Installed, name: Any) -> Plugin:
    if not isinstance(name, str) or not name.strip():
        raise ToolError("Name the plugin (`plugin`); capabilities-here lists them.")
    try:
        return installed.get(name.strip())
    except PluginNotFound as err:
        raise ToolError(str(err), code="plugin-not-found", plugin=name) from err


def _cut(text: str) -> dict[str, Any]:
    if len(text) <= RETURN_CAP:
        return {"text": text, "length": len(text)}
    return {"text": text[:RETURN_CAP], "length": len(text), "note": f"cut at {RETURN_CAP}"}


def references_of(plugin: Plugin) -> list[str]:
    """The reference files a plugin has."""
    folder = plugin.path / "references"
    try:
        return sorted(p.name for p in folder.iterdir() if p.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []


async def capabilities_here(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """The live install set: enabled plugins with tools, roles, skills; the others; the gone."""
    installed = installed_of(context)
    enabled = {p.name for p in installed.enabled}
    return {
        "enabled": [p.summary() | {"references": references_of(p)} for p in installed.enabled],
        "available": [
            {"name": p.name, "description": p.description, "root": p.root}
            for p in installed.plugins
            if p.name not in enabled
        ],
        "missing": installed.missing(),
        "roles": sorted(role for p in installed.enabled for role in p.agents),
        "skills": sorted(f"{p.name}:{skill}" for p in installed.enabled for skill in p.skills),
    }


async def plugin_read(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """A plugin's instructions, or one of its reference files, with the brand filled in."""
    installed = installed_of(context)
    plugin = _plugin(installed, arguments.get("plugin"))
    product = product_name(account_of(context))
    reference = arguments.get("reference")
    answer: dict[str, Any] = {
        "plugin": plugin.name,
        "description": fill_brand(plugin.description, product),
        "enabled": plugin in installed.enabled,
        "references": references_of(plugin),
    }
    if reference is None or reference == "":
        return answer | _cut(fill_brand(plugin.body, product))
    if not isinstance(reference, str) or reference not in answer["references"]:
        raise ToolError(
            f"{plugin.name} has no reference {reference!r} "
            f"(it has: {', '.join(answer['references']) or 'none'}).",
            code="reference-not-found",
        )
    text = (plugin.path / "references" / reference).read_text(encoding="utf-8")
    return answer | {"reference": reference} | _cut(fill_brand(text, product))


async def skill_load(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """A skill's instructions by ``plugin:skill`` or a unique ``skill``."""
    name = arguments.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ToolError("Name the skill (`name`: `plugin:skill` or `skill`).")
    installed = installed_of(context)
    try:
        plugin = installed.skill(name.strip())
    except PluginNotFound as err:
        known = ", ".join(f"{p.name}:{s}" for p in installed.enabled for s in p.skills)
        raise ToolError(f"{err} Skills here: {known or 'none'}.", code="skill-not-found") from err
    skill = name.strip().rpartition(":")[2]
    product = product_name(account_of(context))
    path = plugin.skill_path(skill)
    front, body = split_front_matter(path.read_text(encoding="utf-8"), str(path))
    return {
        "plugin": plugin.name,
        "skill": skill,
        "description": fill_brand(str(front.get("description", "")), product),
        "references": references_of(plugin),
    } | _cut(fill_brand(body, product))


def _name(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not NAME.match(value):
        raise ToolError(
            f"{key} must be a name: lower-case letters, digits and hyphens, starting with a "
            f"letter or digit, at most 64 characters (got {value!r}).",
            code="bad-name",
            field=key,
        )
    return value


def _text(arguments: dict[str, Any], key: str, limit: int, *, one_line: bool = False) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{key} must be non-empty text.", code="bad-text", field=key)
    value = value.strip()
    if len(value) > limit or (one_line and "\n" in value):
        shape = "one line of " if one_line else ""
        raise ToolError(
            f"{key} must be {shape}at most {limit} characters.", code="bad-text", field=key
        )
    return value


def _references(arguments: dict[str, Any]) -> dict[str, str]:
    given = arguments.get("references") or []
    if not isinstance(given, list) or len(given) > MAX_REFERENCES:
        raise ToolError(f"references must be a list of at most {MAX_REFERENCES} {{name, text}}.")
    found: dict[str, str] = {}
    for entry in given:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not REFERENCE.match(name):
            raise ToolError(
                f"A reference's name is a file name like `price-list.md` (got {name!r}).",
                code="bad-name",
                field="references",
            )
        found[name] = _text(entry, "text", MAX_REFERENCE)
    return found


def _yaml() -> YAML:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    yaml.width = 4096
    return yaml


def document(front: dict[str, Any], body: str) -> str:
    """A Markdown file with YAML front matter: ``---``, the keys, ``---``, the body."""
    out = io.StringIO()
    _yaml().dump(front, out)
    return f"---\n{out.getvalue()}---\n{body.strip()}\n"


def _manifest(
    folder: Path, plugin: str, skill: str, references: list[str], arguments: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """The plugin's front matter with the skill and references added, and its body."""
    path = folder / MANIFEST
    if path.is_file():
        front, body = split_front_matter(path.read_text(encoding="utf-8"), str(path))
    else:
        front, body = {"name": plugin}, ""
    if arguments.get("pluginDescription") is not None or "description" not in front:
        given = arguments.get("pluginDescription") or arguments.get("description")
        front["description"] = _text(
            {"pluginDescription": given}, "pluginDescription", MAX_DESCRIPTION, one_line=True
        )
    front["skills"] = sorted({*(front.get("skills") or []), skill})
    if references or front.get("references"):
        front["references"] = sorted({*(front.get("references") or []), *references})
    if "publicEmbed" in arguments:
        if not isinstance(arguments["publicEmbed"], bool):
            raise ToolError("publicEmbed must be true or false.", field="publicEmbed")
        front["publicEmbed"] = arguments["publicEmbed"]
    front.setdefault("publicEmbed", False)
    if arguments.get("instructions"):
        body = _text(arguments, "instructions", MAX_BODY)
    return front, body


async def store_skill(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Write a skill into an account plugin (made if new), and turn the plugin on."""
    account = account_of(context)
    settings = context.settings
    plugin, skill = _name(arguments, "plugin"), _name(arguments, "skill")
    shipped = shipped_names(settings)
    if plugin in shipped:
        raise ToolError(
            f"{plugin!r} is the name of a plugin this product ships ({shipped[plugin]}); "
            "choose another plugin name for the owner's own skills.",
            code="plugin-name-taken",
            plugin=plugin,
            shippedBy=shipped[plugin],
        )
    description = _text(arguments, "description", MAX_DESCRIPTION, one_line=True)
    body = _text(arguments, "body", MAX_BODY)
    references = _references(arguments)
    installed_of(context)  # the account's plugins must read before one is added
    folder = account_root(settings, account.id) / plugin
    front, manifest_body = _manifest(folder, plugin, skill, sorted(references), arguments)
    skill_path = folder / "skills" / skill / SKILL_FILE
    replaced = skill_path.is_file()
    for name, text in references.items():
        (folder / "references").mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "references" / name, text.rstrip() + "\n")
    skill_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(skill_path, document({"name": skill, "description": description}, body))
    write_atomic(folder / MANIFEST, document(front, manifest_body))
    try:
        installed = set_enabled(settings, account.id, plugin, True)
    except PluginError as err:
        raise ToolError(f"The skill was written but the plugin does not read: {err}") from err
    stored = installed.get(plugin)
    return {
        "plugin": plugin,
        "skill": skill,
        "stored": str(skill_path.relative_to(settings.accounts_dir / account.id)),
        "replaced": replaced,
        "references": sorted(references),
        "enabled": True,
        "publicEmbed": stored.public_embed,
        "note": f"Saved. {NEXT_SESSION} skill-load {plugin}:{skill} shows it.",
    }


async def _switch(context: ToolContext, arguments: dict[str, Any], on: bool) -> dict[str, Any]:
    account = account_of(context)
    plugin = _plugin(installed_of(context), arguments.get("plugin"))
    if plugin.locked:
        raise ToolError(
            f"{plugin.name} is a core plugin: it is always on and cannot be turned "
            f"{'on' if on else 'off'}.",
            code="plugin-locked",
            plugin=plugin.name,
        )
    try:
        installed = set_enabled(context.settings, account.id, plugin.name, on)
    except PluginError as err:
        raise ToolError(str(err), code="plugins-broken") from err
    return {
        "plugin": plugin.name,
        "enabled": on,
        "enabledPlugins": sorted(installed.enabled_names),
        "note": NEXT_SESSION,
    }


async def plugin_enable(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Turn an installed plugin on for the account."""
    return await _switch(context, arguments, True)


async def plugin_disable(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Turn a plugin off for the account (core plugins refuse)."""
    return await _switch(context, arguments, False)


_NOTHING: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
_PLUGIN = {"type": "string", "description": "A plugin's name (capabilities-here lists them)."}
_ONE_PLUGIN = {
    "type": "object",
    "properties": {"plugin": _PLUGIN},
    "required": ["plugin"],
    "additionalProperties": False,
}

TOOLS: tuple[Tool, ...] = (
    Tool(
        name="capabilities-here",
        plugin="admin",
        handler=capabilities_here,
        input_schema=_NOTHING,
        description=(
            "What this assistant can do here, live: the enabled plugins with their tools, roles "
            "and skills, the installed plugins that are off, and any whose files are missing."
        ),
    ),
    Tool(
        name="plugin-read",
        plugin="admin",
        handler=plugin_read,
        input_schema={
            "type": "object",
            "properties": {
                "plugin": _PLUGIN,
                "reference": {
                    "type": "string",
                    "description": "A reference file of the plugin (e.g. guide.md); "
                    "without it, the plugin's instructions.",
                },
            },
            "required": ["plugin"],
            "additionalProperties": False,
        },
        description="Read a plugin's instructions, or one of its reference documents.",
    ),
    Tool(
        name="skill-load",
        plugin="admin",
        handler=skill_load,
        input_schema={
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "description": "`plugin:skill`, or a skill name only one plugin has.",
                }
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        description="Load a skill's step-by-step instructions before following them.",
    ),
    Tool(
        name="store-skill",
        plugin="admin",
        handler=store_skill,
        input_schema={
            "type": "object",
            "properties": {
                "plugin": {
                    "type": "string",
                    "description": "The owner's plugin to keep it in (made if new); "
                    "lower-case, digits, hyphens; not a shipped plugin's name.",
                },
                "skill": {"type": "string", "description": "The skill's name (same rules)."},
                "description": {
                    "type": "string",
                    "description": "One sentence: when to use the skill.",
                },
                "body": {"type": "string", "description": "The steps, in Markdown."},
                "pluginDescription": {
                    "type": "string",
                    "description": "One sentence about the plugin (a new one takes the "
                    "skill's description without it).",
                },
                "instructions": {
                    "type": "string",
                    "description": "The plugin's standing instructions (optional).",
                },
                "references": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "text": {"type": "string"}},
                        "required": ["name", "text"],
                    },
                    "description": "Reference documents, each {name: 'x.md', text}.",
                },
                "publicEmbed": {
                    "type": "boolean",
                    "description": "Public agents get this plugin's instructions and skills "
                    "(only for nothing private).",
                },
            },
            "required": ["plugin", "skill", "description", "body"],
            "additionalProperties": False,
        },
        description=(
            "Save a procedure the owner taught as a skill in one of the owner's own plugins "
            "(follow the skill-builder skill first). The tool chooses where it is stored; "
            "new sessions have it."
        ),
    ),
    Tool(
        name="plugin-enable",
        plugin="admin",
        handler=plugin_enable,
        input_schema=_ONE_PLUGIN,
        description="Turn an installed plugin on (only when the owner asks).",
    ),
    Tool(
        name="plugin-disable",
        plugin="admin",
        handler=plugin_disable,
        input_schema=_ONE_PLUGIN,
        description="Turn a plugin off (only when the owner asks; core plugins stay on).",
    ),
)
