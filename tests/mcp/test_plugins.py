"""The admin plugin's plugin and skill tools on a real account folder and the shipped plugins:
what is here, reading with the brand filled in, storing a skill the next session gets, switching
plugins on and off, and every refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.core.accounts import create_account
from appliance.core.config import Settings, load_settings
from appliance.mcp import plugins
from appliance.mcp.tool import ToolContext, ToolError
from appliance.plugins.claude import register
from appliance.plugins.resolver import account_root, read_account_file, resolve
from tests.support.tools import call_tool, tool_context, tool_refusal

BRAND = "Gardenia"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    data = tmp_path / "data"
    account = create_account(data / "accounts", "Owner", product_name=BRAND)
    return load_settings(
        {
            "MAXY_DATA_DIR": str(data),
            "MAXY_ACCOUNT_ID": account.id,
            "MAXY_PREMIUM_DIR": str(tmp_path / "premium"),
        }
    )


def context_of(settings: Settings, **caller: Any) -> ToolContext:
    return tool_context(settings, **caller)


@pytest.fixture
def context(settings: Settings) -> ToolContext:
    return context_of(settings, session_id="s-owner")


def call(name: str, context: ToolContext, /, **arguments: Any) -> dict[str, Any]:
    return call_tool(plugins.TOOLS, name, context, arguments)


def refused(name: str, context: ToolContext, /, **arguments: Any) -> ToolError:
    return tool_refusal(plugins.TOOLS, name, context, arguments)


def store(context: ToolContext, **extra: Any) -> dict[str, Any]:
    arguments = {
        "plugin": "household",
        "skill": "weekly-shopping",
        "description": "Use on Mondays to plan the week's shopping for {{productName}}'s owner.",
        "body": "1. Search memory for the meal plan.\n2. Write the list with {{productName}}.",
        **extra,
    }
    return call("store-skill", context, **arguments)


def test_capabilities_are_the_live_install_set(context: ToolContext) -> None:
    found = call("capabilities-here", context)
    enabled = {p["name"]: p for p in found["enabled"]}
    assert {"admin", "memory", "web", "cloudflare", "maxy-guide", "projects"} <= set(enabled)
    admin = enabled["admin"]
    assert admin["locked"] and admin["root"] == "core"
    assert {t["name"] for t in admin["tools"]} >= {"store-skill", "specialist-start"}
    assert "database-operator" in admin["agents"] and admin["skills"] == ["skill-builder"]
    assert "admin:skill-builder" in found["skills"] and "librarian" in found["roles"]
    assert found["available"] == [] and found["missing"] == []
    store(context)  # a new owner's plugin shows at once, enabled
    again = call("capabilities-here", context)
    household = next(p for p in again["enabled"] if p["name"] == "household")
    assert household["root"] == "account" and not household["locked"]
    assert "household:weekly-shopping" in again["skills"]


def test_plugin_read_fills_the_brand_and_reads_references(context: ToolContext) -> None:
    body = call("plugin-read", context, plugin="admin")
    assert body["enabled"] is True
    assert f"look after {BRAND}" in body["text"] or BRAND in body["text"]
    assert "{{productName}}" not in body["text"]
    guide = call("plugin-read", context, plugin="maxy-guide")
    [reference] = guide["references"]
    text = call("plugin-read", context, plugin="maxy-guide", reference=reference)
    assert text["reference"] == reference and BRAND in text["text"]
    assert "{{productName}}" not in text["text"]


@pytest.mark.parametrize("reference", ["../PLUGIN.md", "/etc/passwd", "nope.md", "..", 3])
def test_plugin_read_refuses_other_files(context: ToolContext, reference: Any) -> None:
    error = refused("plugin-read", context, plugin="maxy-guide", reference=reference)
    assert error.code == "reference-not-found" and "user-guide.md" in str(error)


def test_plugin_read_of_an_unknown_plugin_names_the_installed(context: ToolContext) -> None:
    error = refused("plugin-read", context, plugin="nothing-here")
    assert error.code == "plugin-not-found" and "memory" in str(error)


def test_a_missing_product_name_is_a_hard_error(settings: Settings, context: ToolContext) -> None:
    path = settings.accounts_dir / settings.account_id / "account.json"
    data = json.loads(path.read_text())
    data["brand"] = {}
    path.write_text(json.dumps(data))
    for name, arguments in (
        ("plugin-read", {"plugin": "admin"}),
        ("skill-load", {"name": "skill-builder"}),
    ):
        error = refused(name, context, **arguments)
        assert error.code == "brand-missing" and "productName" in str(error)


def test_skill_load_by_name_and_by_plugin(context: ToolContext) -> None:
    skill = call("skill-load", context, name="skill-builder")
    assert skill["plugin"] == "admin" and skill["skill"] == "skill-builder"
    assert "store-skill" in skill["text"] and not skill["text"].startswith("---")
    assert skill == call("skill-load", context, name="admin:skill-builder")
    error = refused("skill-load", context, name="memory:skill-builder")
    assert error.code == "skill-not-found" and "admin:skill-builder" in str(error)


def test_skill_load_says_which_plugin_when_a_name_is_ambiguous(context: ToolContext) -> None:
    store(context, plugin="kitchen", skill="skill-builder")
    error = refused("skill-load", context, name="skill-builder")
    assert "admin:skill-builder" in str(error) and "kitchen:skill-builder" in str(error)
    assert call("skill-load", context, name="kitchen:skill-builder")["plugin"] == "kitchen"


def test_store_skill_writes_the_plugin_the_next_session_gets(
    settings: Settings, context: ToolContext
) -> None:
    stored = store(context, references=[{"name": "shops.md", "text": "Market on Saturdays."}])
    assert stored["stored"] == "plugins/household/skills/weekly-shopping/SKILL.md"
    assert stored["replaced"] is False and stored["enabled"] is True
    folder = account_root(settings, settings.account_id) / "household"
    assert (folder / "references" / "shops.md").read_text() == "Market on Saturdays.\n"
    installed = resolve(settings, settings.account_id)
    plugin = installed.get("household")
    assert plugin.skills == ("weekly-shopping",) and plugin.references == ("shops.md",)
    assert plugin in installed.enabled and not plugin.public_embed
    assert read_account_file(settings, settings.account_id)["enabledPlugins"] == ["household"]
    loaded = call("skill-load", context, name="weekly-shopping")
    assert loaded["text"].startswith("1. Search memory") and BRAND in loaded["text"]
    # The next admin spawn's generated plugin folder carries the skill, the brand filled in.
    config = settings.accounts_dir / settings.account_id / "claude"
    admin = register(installed, "admin", BRAND, "s-next", ["maxy"], {}, config)
    assert admin.plugin_dir is not None
    generated = admin.plugin_dir / "household" / "skills" / "weekly-shopping" / "SKILL.md"
    assert BRAND in generated.read_text() and "{{productName}}" not in generated.read_text()
    public = register(installed, "public", BRAND, "s-visitor", ["maxy"], {}, config)
    assert (
        "weekly-shopping" not in public.instructions and "Search memory" not in public.instructions
    )


def test_public_embed_decides_whether_public_agents_get_it(
    settings: Settings, context: ToolContext
) -> None:
    store(context, plugin="opening-hours", skill="hours", body="We open at nine.", publicEmbed=True)
    installed = resolve(settings, settings.account_id)
    config = settings.accounts_dir / settings.account_id / "claude"
    public = register(installed, "public", BRAND, "s-visitor", ["maxy"], {}, config)
    assert "We open at nine." in public.instructions
    store(context, plugin="opening-hours", skill="hours", body="We open at ten.", publicEmbed=False)
    again = register(
        resolve(settings, settings.account_id), "public", BRAND, "s2", ["maxy"], {}, config
    )
    assert "We open at" not in again.instructions


def test_storing_again_replaces_the_skill_and_keeps_the_others(
    settings: Settings, context: ToolContext
) -> None:
    store(context, instructions="Household matters of {{productName}}'s owner.")
    store(context, skill="bin-day", description="Use on Sunday nights.", body="Put the bins out.")
    again = store(context, body="1. Ask the owner what is missing.")
    assert again["replaced"] is True
    plugin = resolve(settings, settings.account_id).get("household")
    assert plugin.skills == ("bin-day", "weekly-shopping")
    assert plugin.body == "Household matters of {{productName}}'s owner."
    assert call("skill-load", context, name="weekly-shopping")["text"] == (
        "1. Ask the owner what is missing."
    )


@pytest.mark.parametrize("name", ["memory", "admin", "maxy-guide"])
def test_a_shipped_plugins_name_is_refused_with_a_structured_error(
    settings: Settings, context: ToolContext, name: str
) -> None:
    error = refused("store-skill", context, plugin=name, skill="x", description="d", body="b")
    assert error.to_json() == {
        "code": "plugin-name-taken",
        "message": str(error),
        "plugin": name,
        "shippedBy": "core",
    }
    assert not (account_root(settings, settings.account_id) / name).exists()


def test_a_premium_bundles_name_is_refused_even_when_not_shipped(
    settings: Settings, context: ToolContext
) -> None:
    bundle = settings.premium_dir / "studio"  # type: ignore[operator]
    (bundle / "plugins" / "pricing").mkdir(parents=True)
    (bundle / "BUNDLE.md").write_text("---\nname: studio\n---\n")
    (bundle / "plugins" / "pricing" / "PLUGIN.md").write_text(
        "---\nname: pricing\ndescription: Prices.\n---\nBody.\n"
    )
    error = refused("store-skill", context, plugin="pricing", skill="x", description="d", body="b")
    assert error.code == "plugin-name-taken" and error.details["shippedBy"] == (
        "premium bundle studio"
    )


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"plugin": "../escape"}, "plugin"),
        ({"plugin": "Household"}, "plugin"),
        ({"skill": "a/b"}, "skill"),
        ({"skill": "x" * 65}, "skill"),
        ({"description": "two\nlines"}, "description"),
        ({"body": "   "}, "body"),
        ({"references": [{"name": "../../account.json", "text": "x"}]}, "references"),
    ],
)
def test_bad_names_and_text_are_refused_and_nothing_is_written(
    settings: Settings, context: ToolContext, arguments: dict[str, Any], field: str
) -> None:
    with pytest.raises(ToolError) as caught:
        store(context, **arguments)
    assert caught.value.details.get("field") == field
    root = account_root(settings, settings.account_id)
    assert not root.exists() or list(root.iterdir()) == []
    assert "enabledPlugins" not in read_account_file(settings, settings.account_id)


def test_enable_and_disable_an_owners_plugin(settings: Settings, context: ToolContext) -> None:
    store(context)
    off = call("plugin-disable", context, plugin="household")
    assert off["enabled"] is False and off["enabledPlugins"] == []
    assert resolve(settings, settings.account_id).get("household") not in (
        resolve(settings, settings.account_id).enabled
    )
    assert refused("skill-load", context, name="weekly-shopping").code == "skill-not-found"
    on = call("plugin-enable", context, plugin="household")
    assert on["enabled"] is True and on["enabledPlugins"] == ["household"]


@pytest.mark.parametrize("name", ["plugin-enable", "plugin-disable"])
def test_core_plugins_are_locked_on(context: ToolContext, name: str) -> None:
    error = refused(name, context, plugin="memory")
    assert error.code == "plugin-locked" and "always on" in str(error)
    assert refused(name, context, plugin="no-such").code == "plugin-not-found"


def test_only_the_callers_own_account(settings: Settings, tmp_path: Path) -> None:
    other = create_account(settings.accounts_dir, "Neighbour", product_name="Other")
    neighbour = context_of(settings, account_id=other.id)
    store(neighbour, plugin="secret-recipes")
    mine = context_of(settings)
    names = {p["name"] for p in call("capabilities-here", mine)["enabled"]}
    assert "secret-recipes" not in names
    assert refused("plugin-read", mine, plugin="secret-recipes").code == "plugin-not-found"
    assert (settings.accounts_dir / other.id / "plugins" / "secret-recipes").is_dir()
    stranger = context_of(settings, account_id="00000000-0000-0000-0000-000000000000")
    assert refused("capabilities-here", stranger).code == "account"
    traversal = context_of(settings, account_id="../" + settings.account_id)
    assert refused("store-skill", traversal, plugin="x", skill="y", description="d", body="b")


def test_a_public_caller_is_refused(settings: Settings) -> None:
    public = context_of(settings, scopes=("public",), agent="concierge")
    for tool in plugins.TOOLS:
        arguments = {"plugin": "memory", "name": "skill-builder"}
        assert tool_refusal(plugins.TOOLS, tool.name, public, arguments).code == "owner-only"
