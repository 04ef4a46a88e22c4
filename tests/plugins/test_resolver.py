"""The resolver's roots, refusals, bundles and enabled set; the generated Claude Code plugins;
``maxy mcp-helper``'s log lines when its server dies."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.core.accounts import BrandMissing, create_account
from appliance.core.config import Settings, load_settings
from appliance.plugins.claude import register
from appliance.plugins.errors import PluginError, PluginRefused
from appliance.plugins.resolver import (
    account_root,
    read_account_file,
    resolve,
    set_enabled,
    write_enabled,
)
from tests.support.processes import wait_until

PLAIN = """---
name: {name}
description: A plugin of the owner's for {{{{productName}}}}.
{extra}---
Use it well, {{{{productName}}}}.
"""


def plugin(root: Path, name: str, extra: str = "", files: dict[str, str] | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "PLUGIN.md").write_text(PLAIN.format(name=name, extra=extra))
    for relative, text in (files or {}).items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    data = tmp_path / "data"
    account = create_account(data / "accounts", "Owner", product_name="Gardenia")
    return load_settings(
        {
            "MAXY_DATA_DIR": str(data),
            "MAXY_ACCOUNT_ID": account.id,
            "MAXY_PREMIUM_DIR": str(tmp_path / "premium"),
        }
    )


def test_core_plugins_are_installed_and_locked_on(settings: Settings) -> None:
    installed = resolve(settings, settings.account_id)
    memory = installed.get("memory")
    assert memory.locked and memory in installed.enabled
    assert memory.server is not None and memory.server.ours
    assert "memory-search" in {t.name for t in memory.tools}
    with pytest.raises(PluginError, match="core plugin"):
        set_enabled(settings, settings.account_id, "memory", False)


def test_an_account_plugin_is_on_only_when_enabled(settings: Settings) -> None:
    plugin(account_root(settings, settings.account_id), "garden")
    installed = resolve(settings, settings.account_id)
    assert "garden" not in {p.name for p in installed.enabled}
    installed = set_enabled(settings, settings.account_id, "garden", True)
    assert "garden" in {p.name for p in installed.enabled}
    assert read_account_file(settings, settings.account_id)["enabledPlugins"] == ["garden"]
    assert read_account_file(settings, settings.account_id)["brand"]  # other keys kept
    installed = set_enabled(settings, settings.account_id, "garden", False)
    assert "garden" not in {p.name for p in installed.enabled}


def test_tools_without_a_server_are_refused(settings: Settings) -> None:
    plugin(account_root(settings, settings.account_id), "loose", "tools:\n  - {name: dig}\n")
    with pytest.raises(PluginRefused) as refused:
        resolve(settings, settings.account_id)
    assert str(refused.value) == "boot-failed reason=mcp-allowlist-without-server loose"


def test_the_same_plugin_twice_with_different_content_is_refused(settings: Settings) -> None:
    root = account_root(settings, settings.account_id)
    plugin(root, "memory")  # a copy of a core plugin that differs from it
    with pytest.raises(PluginRefused) as refused:
        resolve(settings, settings.account_id)
    message = str(refused.value)
    assert message.startswith("boot-failed reason=mcp-plugin-duplicate memory ")
    assert message.count("(sha=") == 2 and " vs " in message


def test_a_byte_identical_duplicate_is_reaped(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    import shutil

    core = resolve(settings, settings.account_id).get("memory").path
    copy = account_root(settings, settings.account_id) / "memory"
    shutil.copytree(core, copy)
    with caplog.at_level(logging.INFO):
        installed = resolve(settings, settings.account_id)
    assert installed.get("memory").root == "core" and not copy.exists()
    assert "[plugins] op=reap plugin=memory" in caplog.text


@pytest.mark.parametrize(
    ("ships", "seen"),
    [(False, set()), (True, {"ledger", "studio"}), (["books"], {"ledger"})],
)
def test_premium_bundles_come_with_the_brand(
    settings: Settings, ships: object, seen: set[str]
) -> None:
    assert settings.premium_dir is not None
    for bundle, name in (("books", "ledger"), ("media", "studio")):
        (settings.premium_dir / bundle / "plugins").mkdir(parents=True)
        (settings.premium_dir / bundle / "BUNDLE.md").write_text(f"# {bundle}\n")
        plugin(settings.premium_dir / bundle / "plugins", name)
    path = settings.accounts_dir / settings.account_id / "account.json"
    data = json.loads(path.read_text())
    data["brand"]["shipsPremiumBundles"] = ships
    path.write_text(json.dumps(data))
    write_enabled(settings, settings.account_id, ["ledger", "studio"])
    installed = resolve(settings, settings.account_id)
    premium = {p.name for p in installed.plugins if p.root == "premium"}
    assert premium == seen
    # A bundle the brand does not ship is stripped from the account's enabled plugins.
    assert set(read_account_file(settings, settings.account_id)["enabledPlugins"]) == seen
    assert {p.name for p in installed.enabled if p.root == "premium"} == seen


def test_missing_files_and_unknown_names_are_reported(settings: Settings) -> None:
    root = account_root(settings, settings.account_id)
    folder = plugin(root, "notes", "skills: [jot]\n", {"skills/jot/SKILL.md": "---\n---\njot\n"})
    write_enabled(settings, settings.account_id, ["notes", "vanished"])
    installed = resolve(settings, settings.account_id)
    assert installed.missing() == ["vanished"]
    (folder / "skills" / "jot" / "SKILL.md").unlink()
    assert installed.missing() == ["notes", "vanished"]


def test_generated_roles_and_skills_carry_the_brand(settings: Settings, tmp_path: Path) -> None:
    role = "---\nname: scout\ndescription: Scouts for {{productName}}.\ntools: Read\n---\nGo.\n"
    plugin(
        account_root(settings, settings.account_id),
        "garden",
        "agents: [scout]\nskills: [prune]\n",
        {
            "agents/scout.md": role,
            "skills/prune/SKILL.md": "---\nname: prune\n---\n{{productName}}",
        },
    )
    write_enabled(settings, settings.account_id, ["garden"])
    installed = resolve(settings, settings.account_id)
    config = tmp_path / "claude"
    reg = register(installed, "admin", "Gardenia", "s-1", ["maxy"], {}, config)
    assert reg.plugin_dir is not None
    scout = (reg.plugin_dir / "garden" / "agents" / "scout.md").read_text()
    assert "Scouts for Gardenia." in scout and "{{productName}}" not in scout
    assert (
        (reg.plugin_dir / "garden" / "skills" / "prune" / "SKILL.md")
        .read_text()
        .endswith("Gardenia")
    )
    assert '<plugin name="garden">\nUse it well, Gardenia.\n</plugin>' in reg.instructions
    again = register(installed, "admin", "Gardenia", "s-2", ["maxy"], {}, config)
    assert again.plugin_dir == reg.plugin_dir  # content-addressed: made once
    public = register(installed, "public", "Gardenia", "s-3", ["maxy"], {}, config)
    # Only the shipped public tools (the time); no roles, no skills, nothing of garden's.
    assert set(public.servers) == {"scheduling"} and public.plugin_dir is None
    assert public.allowed == (
        "mcp__scheduling__current-datetime",
        "mcp__scheduling__time-resolve",
    )


def test_a_missing_product_name_is_a_hard_failure(settings: Settings) -> None:
    path = settings.accounts_dir / settings.account_id / "account.json"
    data = json.loads(path.read_text())
    data["brand"] = {}
    path.write_text(json.dumps(data))
    from appliance.core.accounts import Account

    with pytest.raises(BrandMissing, match="productName"):
        Account.from_json(data).product_name()


def test_the_helper_logs_a_killed_servers_exit(tmp_path: Path) -> None:
    logs = tmp_path / "mcp"
    command = [sys.executable, "-m", "appliance", "mcp-helper", "--session", "0123456789ab"]
    command += ["--server", "sleeper", "--log-dir", str(logs), "--", "sleep", "60"]
    helper = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    log = logs / "helper.log"
    wait_until(lambda: log.is_file() and "op=spawn" in log.read_text(), 30, "the spawn line")
    pid = int(log.read_text().split("pid=")[1].split()[0])
    os.kill(pid, signal.SIGKILL)
    assert helper.wait(30) == 128 + signal.SIGKILL
    lines = log.read_text().splitlines()
    assert "mode=exec" in lines[0]  # not this program's `mcp`: started as it is
    exit_line = next(line for line in lines if "op=exit" in line)
    assert "session=01234567 server=sleeper code=- signal=SIGKILL lifetimeMs=" in exit_line
    assert "stderr-tail=" in exit_line


def helper_of_own_mcp(tmp_path: Path, plugin: str) -> tuple[list[str], dict[str, str], Path]:
    """`maxy mcp-helper … -- maxy mcp --plugin PLUGIN`: its command, environment and log folder."""
    logs = tmp_path / "mcp"
    maxy = [sys.executable, "-m", "appliance"]
    command = [*maxy, "mcp-helper", "--session", "0123456789ab", "--server", plugin]
    command += ["--log-dir", str(logs), "--", *maxy, "mcp", "--plugin", plugin]
    env = {**os.environ, "ACCOUNT_ID": "acct-fork", "MAXY_RUNTIME_DIR": str(tmp_path)}
    return command, env, logs


def test_the_helper_forks_its_own_mcp_server_which_serves_and_whose_death_is_logged(
    tmp_path: Path,
) -> None:
    command, env, logs = helper_of_own_mcp(tmp_path, "memory")
    helper = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert helper.stdin is not None and helper.stdout is not None
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    for number, method, params in ((1, "initialize", hello), (2, "tools/list", {})):
        message = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
        helper.stdin.write(json.dumps(message).encode() + b"\n")
        helper.stdin.flush()
    assert json.loads(helper.stdout.readline())["result"]["serverInfo"]["name"] == "maxy-memory"
    tools = json.loads(helper.stdout.readline())["result"]["tools"]
    assert "memory-search" in {tool["name"] for tool in tools}

    log = logs / "helper.log"
    spawn = next(line for line in log.read_text().splitlines() if "op=spawn" in line)
    assert "mode=fork" in spawn
    pid = int(spawn.split("pid=")[1].split()[0])
    stat = Path(f"/proc/{pid}/stat").read_text()
    assert int(stat[stat.rindex(")") + 2 :].split()[1]) == helper.pid  # the helper's own child
    # One interpreter's modules, not two: the server runs the code the helper imported.
    assert Path(f"/proc/{pid}/exe").resolve() == Path(f"/proc/{helper.pid}/exe").resolve()
    assert (
        Path(f"/proc/{pid}/cmdline").read_bytes()
        == Path(f"/proc/{helper.pid}/cmdline").read_bytes()
    )
    os.kill(pid, signal.SIGKILL)
    assert helper.wait(30) == 128 + signal.SIGKILL
    exit_line = next(line for line in log.read_text().splitlines() if "op=exit" in line)
    assert "server=memory code=- signal=SIGKILL" in exit_line
    helper.stdin.close()
    helper.stdout.close()


def test_the_helper_passes_a_forked_servers_failure_and_its_stderr_on(tmp_path: Path) -> None:
    command, env, logs = helper_of_own_mcp(tmp_path, "no-such-plugin")
    done = subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=60, check=False
    )
    text = (logs / "helper.log").read_text()
    assert "mode=fork" in text
    # The child says what the server would have said, and its status is the helper's.
    assert done.returncode != 0
    assert "no-such-plugin" in (logs / "no-such-plugin.stderr").read_text()
    assert f"code={done.returncode}" in text
