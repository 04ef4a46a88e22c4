"""The Plugins page in headless Chromium, through the real edge and app.

The owner opens Plugins from the sidebar, finds every built-in plugin locked on, turns an
account plugin on and off with its switch, and account.json's ``enabledPlugins`` follows.
The account is branded "Hearth": no text on the page says anything else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.plugins.resolver import account_root, core_root
from tests.app import test_browser as shell_tests
from tests.app.test_plugins import GARDEN, GARDEN_FILES
from tests.plugins.test_resolver import plugin
from tests.support.processes import wait_until
from tests.support.stacks import Stack, app_env, running_stack

pytestmark = pytest.mark.timeout(240)

# The shell tests' Chromium and logged-in admin tab, resolved against this module's `stack`.
browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

BRAND = "Hearth"
WAIT = 20_000  # ms; a deadline against hangs, not a timing assertion
CORE = sorted(p.name for p in core_root().iterdir() if (p / "PLUGIN.md").is_file())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("plugins-browser")
    env = app_env(root, brand=BRAND)
    plugin(account_root(env.settings, env.account_id), "garden", GARDEN, GARDEN_FILES)
    with running_stack(env, root / "logs", "app", "edge") as running:
        yield running


def enabled_plugins(stack: Stack) -> Any:
    path = stack.env.settings.accounts_dir / stack.env.account_id / "account.json"
    return json.loads(path.read_text()).get("enabledPlugins")


def test_the_owner_turns_an_account_plugin_on_and_off(
    admin: Any, base_url: str, stack: Stack
) -> None:
    admin.goto(base_url + "/")
    admin.locator('[data-nav="plugins"]').click()
    admin.wait_for_url(base_url + "/admin/plugins")
    assert admin.title() == f"Plugins · {BRAND}"
    assert admin.locator('[data-nav="plugins"]').get_attribute("aria-current") == "page"
    text = admin.locator("body").inner_text()
    assert "Maxy" not in text and "{{productName}}" not in text
    assert f"The user guide to {BRAND}" in text
    assert "Changes take effect from the next session" in text

    # Every built-in plugin is shown locked on, with no switch to turn it off.
    for name in CORE:
        card = admin.locator(f'article.plugin[data-plugin="{name}"]')
        assert card.get_attribute("data-locked") == "true", name
        assert card.get_attribute("data-enabled") == "true", name
        assert card.locator('[data-testid="plugin-locked"]').inner_text().strip() == "Always on"
        assert card.locator('[data-testid="plugin-toggle"]').count() == 0, name
    memory = admin.locator('article.plugin[data-plugin="memory"]')
    assert "librarian" in memory.inner_text()

    # The account's plugin: what it does, its tools (the public one marked), roles and skills.
    garden = admin.locator('article.plugin[data-plugin="garden"]')
    toggle = garden.locator('[data-testid="plugin-toggle"]')
    assert garden.get_attribute("data-root") == "account"
    assert not toggle.is_checked() and garden.get_attribute("data-enabled") == "false"
    assert garden.locator('[data-tool="plant-find"] .badge-public').inner_text() == "public"
    assert garden.locator('[data-tool="plant-water"] .badge-public').count() == 0
    shown = garden.inner_text()
    for words in (f"A plugin of the owner's for {BRAND}.", "gardener", "personal-assistant"):
        assert words in shown, words
    screenshot(admin, "plugins")

    # On: account.json lists it, the page says when it applies.
    assert enabled_plugins(stack) is None
    garden.locator(".plugin-switch").click()
    wait_until(lambda: enabled_plugins(stack) == ["garden"], 20, "garden in enabledPlugins")
    message = garden.locator('[data-testid="plugin-status"]')
    message.filter(has_text="garden is now on.").wait_for(timeout=WAIT)
    assert "next session" in message.inner_text()
    assert toggle.is_checked() and garden.get_attribute("data-enabled") == "true"
    assert garden.locator(".switch-label").inner_text() == "On"

    # A reload shows what the server has.
    admin.reload()
    garden = admin.locator('article.plugin[data-plugin="garden"]')
    assert garden.locator('[data-testid="plugin-toggle"]').is_checked()

    # Off again.
    garden.locator(".plugin-switch").click()
    wait_until(lambda: enabled_plugins(stack) == [], 20, "garden out of enabledPlugins")
    message.filter(has_text="garden is now off.").wait_for(timeout=WAIT)
    assert garden.get_attribute("data-enabled") == "false"
    assert not garden.locator('[data-testid="plugin-toggle"]').is_checked()
    screenshot(admin, "plugins-off")
