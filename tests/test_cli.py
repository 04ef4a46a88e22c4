"""The one fatal-error path of the `maxy` command."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from appliance import cli
from appliance.ota.errors import SignatureError
from appliance.tunnel import ConfigError


@pytest.mark.parametrize("name", sorted(cli.FATAL_AREAS))
def test_every_fatal_area_names_an_exception_class(name: str) -> None:
    module, _, qualname = name.rpartition(".")
    kind = getattr(importlib.import_module(module), qualname)
    assert isinstance(kind, type) and issubclass(kind, Exception)


def test_a_subsystems_error_ends_in_its_area_and_a_bug_in_none() -> None:
    assert cli.fatal_area(SignatureError("bad signature")) == "ota"
    assert cli.fatal_area(ConfigError("bad ingress")) == "tunnel"
    assert cli.fatal_area(KeyError("bug")) is None


def test_the_fatal_line_names_area_kind_and_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.fatal("ota", SignatureError("The bundle is not signed.")) == 1
    assert capsys.readouterr().err == "[ota] FATAL SignatureError: The bundle is not signed.\n"


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_the_own_commands_are_exactly_what_the_light_parser_holds() -> None:
    full, light = _commands(cli.build_parser()), _commands(cli.build_parser(subsystems=False))
    assert light == cli.OWN_COMMANDS
    assert light < full


def test_a_role_and_the_mcp_helper_start_without_the_memory_commands_imports() -> None:
    # A fresh interpreter: parsing `maxy mcp-helper` must not import the Neo4j driver, numpy or
    # pypdf (each session runs one helper per plugin server; ~80 MB each when it did).
    probe = (
        "import sys; from appliance import cli;"
        " cli.build_parser(subsystems=False).parse_args(['mcp-helper', '--session', 's',"
        " '--server', 'x', '--log-dir', '/tmp', '--', 'true']);"
        " print(sorted(m for m in ('neo4j', 'numpy', 'pypdf') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_plugins_mcp_server_imports_only_its_own_tools_libraries() -> None:
    # A session runs one `maxy mcp` per plugin: the memory plugin's must not hold Telegram's
    # library, the web's HTML converter, the date parser or the admin tools (with httpx); none
    # holds the MCP SDK (its HTTP stack and pydantic models: ~25 MB a server; stdio.py speaks
    # the protocol).
    heavy = (
        *("telegram", "bs4", "markdownify", "dateparser", "appliance.mcp.admin"),
        *("mcp", "mcp_types", "httpx", "httpx2", "uvicorn", "starlette", "anyio"),
    )
    probe = (
        "import sys; from appliance.mcp import server; from appliance.mcp.tools import tools_of;"
        " plugin = sys.argv[1]; assert tools_of(plugin);"
        f" print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    loaded = {
        plugin: subprocess.run(
            [sys.executable, "-c", probe, plugin], capture_output=True, text=True, check=True
        ).stdout.strip()
        for plugin in ("memory", "contacts", "projects", "web")
    }
    assert loaded == {
        "memory": "[]",
        "contacts": "[]",
        "projects": "[]",
        "web": "['bs4', 'httpx', 'markdownify']",
    }
