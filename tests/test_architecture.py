"""ARCHITECTURE.md stays true: its package table, import layers, commands and RPC methods."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

from appliance.cli import build_parser
from appliance.rpc.engine import methods_table

REPO = Path(__file__).resolve().parent.parent
DOC = (REPO / "ARCHITECTURE.md").read_text()


def _section(title: str) -> str:
    start = DOC.index(f"## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else len(DOC)]


def test_the_package_table_names_every_package_and_top_level_module() -> None:
    listed = set(re.findall(r"^\| `(appliance/[a-z_]+(?:/|\.py))` \|", DOC, re.M))
    package = REPO / "appliance"
    actual = {f"appliance/{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    actual |= {
        f"appliance/{p.name}"
        for p in package.glob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }
    assert listed == actual


def test_the_import_layers_are_the_ones_import_linter_holds() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    block = _section("The packages and the import direction").split("```")[1]
    assert [line for line in block.splitlines() if line.strip()] == layers


def _commands() -> dict[str, set[str]]:
    parser = build_parser()
    (top,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands = {}
    for name, sub in top.choices.items():
        nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        commands[name] = set(nested[0].choices) if nested else set()
    commands["neo4j"] = {"run", "start", "stop", "status"}  # a positional with choices
    return commands


def test_the_commands_table_lists_every_maxy_command_and_its_subcommands() -> None:
    rows = re.findall(r"^\| `maxy ([a-z0-9-]+)` \| ([^|]*) \|", _section("Commands"), re.M)
    documented = {name: set(re.findall(r"`([a-z0-9-]+)`", what)) for name, what in rows}
    assert documented == _commands()


def test_the_rpc_methods_table_is_generated_from_the_contract() -> None:
    block = DOC.split("<!-- methods:start -->\n")[1].split("\n<!-- methods:end -->")[0]
    # To regenerate it: python -c 'from appliance.rpc.engine import *; print(methods_table())'
    assert block == methods_table()
