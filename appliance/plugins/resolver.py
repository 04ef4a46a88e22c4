"""Which plugins an account has, from three roots, and which of them are on.

Roots, in order:

1. **core**: shipped inside the program (``appliance/plugins/core/``); always on (locked).
2. **premium**: bundles (``<premium_dir>/<bundle>/BUNDLE.md`` + ``plugins/<name>/``) the account's
   brand ships: ``brand.shipsPremiumBundles`` is false (none), true (all) or a list of bundle
   names. A bundle the brand does not list is not read, and its plugins are stripped from the
   account's ``enabledPlugins`` (``[plugins] op=strip``).
3. **account**: written by the owner or ``store-skill``, ``<data_dir>/accounts/<id>/plugins/``.

Premium and account plugins are on when the account's ``enabledPlugins`` (account.json) names
them. The same name under two roots is refused when the copies differ (``boot-failed
reason=mcp-plugin-duplicate``); a byte-identical account copy of a shipped plugin is removed
(``[plugins] op=reap``). A plugin with tools and no server is refused when it is read
(``reason=mcp-allowlist-without-server``). Refusals stop the manager: it would otherwise start
sessions with a different tool set from the one the owner set up.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core import accounts
from appliance.core.accounts import AccountError
from appliance.core.config import Settings
from appliance.core.resources import resource_path
from appliance.plugins.errors import PluginError, PluginLocked, PluginNotFound, PluginRefused
from appliance.plugins.format import MANIFEST, NAME, Plugin, Root, missing_files, read_plugin

log = logging.getLogger(__name__)

BUNDLE_MANIFEST = "BUNDLE.md"
ENABLED_KEY = "enabledPlugins"


def core_root() -> Path:
    """The core plugins shipped inside the program."""
    return resource_path("appliance/plugins/core")


def premium_root(settings: Settings) -> Path:
    """Where premium bundles are looked for."""
    return settings.premium_dir or resource_path("appliance/plugins/premium")


def account_root(settings: Settings, account_id: str) -> Path:
    """The account's own plugins."""
    return settings.accounts_dir / account_id / "plugins"


def _folders(root: Path) -> list[Path]:
    try:
        return sorted(p for p in root.iterdir() if (p / MANIFEST).is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _bundles(root: Path) -> list[Path]:
    try:
        return sorted(p for p in root.iterdir() if (p / BUNDLE_MANIFEST).is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []


def shipped_bundles(brand: dict[str, Any], available: Iterable[str]) -> set[str]:
    """The bundles a brand ships: none, all, or the ones it lists."""
    ships = brand.get("shipsPremiumBundles", False)
    if ships is True:
        return set(available)
    if isinstance(ships, list):
        return {name for name in ships if isinstance(name, str)} & set(available)
    return set()


def shipped_names(settings: Settings) -> dict[str, str]:
    """Every plugin name the program or a premium bundle ships (listed or not), and where.

    An account plugin may take none of them: the day its brand ships that bundle, the two
    copies would differ and the manager would refuse to start.
    """
    names = {folder.name: "core" for folder in _folders(core_root())}
    for bundle in _bundles(premium_root(settings)):
        for folder in _folders(bundle / "plugins"):
            names.setdefault(folder.name, f"premium bundle {bundle.name}")
    return names


@dataclass(frozen=True)
class Installed:
    """An account's plugins: every one it has, and which are on."""

    plugins: tuple[Plugin, ...]
    enabled_names: frozenset[str]
    # Names enabledPlugins lists that no root has.
    unknown: tuple[str, ...] = ()

    @property
    def enabled(self) -> tuple[Plugin, ...]:
        """The plugins on for this account (core ones always)."""
        return tuple(p for p in self.plugins if p.locked or p.name in self.enabled_names)

    def get(self, name: str) -> Plugin:
        """One installed plugin by name."""
        for plugin in self.plugins:
            if plugin.name == name:
                return plugin
        raise PluginNotFound(f"There is no plugin {name!r} (installed: {self.names()}).")

    def names(self) -> str:
        """The installed plugin names, comma-separated."""
        return ", ".join(p.name for p in self.plugins) or "none"

    def public(self) -> tuple[Plugin, ...]:
        """The enabled plugins a public agent sees: those with a public tool."""
        return tuple(p for p in self.enabled if p.public_tools)

    def embedded(self) -> tuple[Plugin, ...]:
        """The enabled plugins whose body and skills public agents get."""
        return tuple(p for p in self.enabled if p.public_embed)

    def role(self, name: str) -> Plugin:
        """The enabled plugin that defines a role."""
        for plugin in self.enabled:
            if name in plugin.agents:
                return plugin
        raise PluginNotFound(f"No enabled plugin defines the role {name!r}.")

    def skill(self, name: str) -> Plugin:
        """The enabled plugin that has a skill (``plugin:skill`` or a unique ``skill``)."""
        plugin_name, _, skill = name.rpartition(":")
        found = [
            p
            for p in self.enabled
            if skill in p.skills and (not plugin_name or p.name == plugin_name)
        ]
        if not found:
            raise PluginNotFound(f"No enabled plugin has the skill {name!r}.")
        if len(found) > 1:
            names = ", ".join(f"{p.name}:{skill}" for p in found)
            raise PluginNotFound(f"The skill {skill!r} is in several plugins: name one of {names}.")
        return found[0]

    def missing(self) -> list[str]:
        """Enabled plugins whose files are gone (or that no root has any more)."""
        gone = [p.name for p in self.enabled if missing_files(p)]
        return sorted([*gone, *self.unknown])


def read_account_file(settings: Settings, account_id: str) -> dict[str, Any]:
    """The account's account.json as stored (every key kept)."""
    try:
        return accounts.read_account_file(settings.accounts_dir, account_id)
    except AccountError as err:
        raise PluginError(str(err)) from err


def _store_enabled(
    settings: Settings, account_id: str, change: Callable[[set[str]], set[str]]
) -> list[str]:
    """Change the stored ``enabledPlugins`` under the account file's lock; return them."""

    def edit(data: dict[str, Any]) -> list[str]:
        enabled = sorted(change(set(_enabled_of(data))))
        data[ENABLED_KEY] = enabled
        return enabled

    try:
        _, enabled = accounts.update_account_file(settings.accounts_dir, account_id, edit)
    except AccountError as err:
        raise PluginError(str(err)) from err
    log.info("[plugins] op=enabled account=%s plugins=%s", account_id, ",".join(enabled) or "-")
    return enabled


def write_enabled(settings: Settings, account_id: str, names: Iterable[str]) -> list[str]:
    """Store the account's ``enabledPlugins`` (sorted, unique); return them."""
    wanted = set(names)
    return _store_enabled(settings, account_id, lambda _: wanted)


def _enabled_of(data: dict[str, Any]) -> list[str]:
    value = data.get(ENABLED_KEY) or []
    return (
        [v for v in value if isinstance(v, str) and NAME.match(v)]
        if isinstance(value, list)
        else []
    )


def _read_root(root: Path, kind: Root, bundle: str | None = None) -> list[Plugin]:
    return [read_plugin(folder, kind, bundle) for folder in _folders(root)]


def _merge(found: list[Plugin]) -> list[Plugin]:
    """One plugin per name: refuse differing copies, reap identical account copies."""
    kept: dict[str, Plugin] = {}
    for plugin in found:
        first = kept.get(plugin.name)
        if first is None:
            kept[plugin.name] = plugin
            continue
        if first.sha != plugin.sha:
            raise PluginRefused(
                "mcp-plugin-duplicate",
                f"{plugin.name} {first.path} (sha={first.sha[:12]}) vs "
                f"{plugin.path} (sha={plugin.sha[:12]})",
            )
        if plugin.root == "account":
            shutil.rmtree(plugin.path, ignore_errors=True)
        log.info(
            "[plugins] op=reap plugin=%s kept=%s duplicate=%s", plugin.name, first.path, plugin.path
        )
    return list(kept.values())


def resolve(settings: Settings, account_id: str) -> Installed:
    """Read every root for the account; strip enabled plugins of bundles its brand lacks."""
    data = read_account_file(settings, account_id)
    brand = data.get("brand") if isinstance(data.get("brand"), dict) else {}
    bundles = {folder.name: folder for folder in _bundles(premium_root(settings))}
    ships = shipped_bundles(brand or {}, bundles)
    found = _read_root(core_root(), "core")
    for name in sorted(ships):
        found += _read_root(bundles[name] / "plugins", "premium", name)
    found += _read_root(account_root(settings, account_id), "account")
    plugins = _merge(found)
    enabled = _enabled_of(data)
    withheld = {
        folder.name
        for name, bundle in bundles.items()
        if name not in ships
        for folder in _folders(bundle / "plugins")
    }
    names = {p.name for p in plugins}
    stripped = [n for n in enabled if n in withheld and n not in names]
    if stripped:
        log.info("[plugins] op=strip account=%s plugins=%s", account_id, ",".join(stripped))
        gone = set(stripped)
        enabled = _store_enabled(settings, account_id, lambda names: names - gone)
    unknown = tuple(sorted(n for n in enabled if n not in names))
    return Installed(tuple(sorted(plugins, key=lambda p: p.name)), frozenset(enabled), unknown)


def set_enabled(settings: Settings, account_id: str, name: str, on: bool) -> Installed:
    """Turn one plugin on or off for the account; core plugins cannot be turned off."""
    installed = resolve(settings, account_id)
    plugin = installed.get(name)
    if plugin.locked:
        raise PluginLocked(f"{name} is a core plugin: it is always on.")
    _store_enabled(settings, account_id, lambda names: names | {name} if on else names - {name})
    return resolve(settings, account_id)
