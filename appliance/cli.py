"""The ``maxy`` command: one binary, one subcommand per role and per chore.

    maxy run                      development: Neo4j + engine + edge, supervised
    maxy edge                     TCP :19200 (Granian + Starlette), proxies to the app
    maxy app                      the web UI and JSON API on a Unix socket
    maxy manager                  Claude Code sessions in PTYs, HTTP + SSE on a Unix socket
    maxy engine                   retrieval engine (Neo4j pool + embedding model), RPC socket
    maxy channels                 Telegram and WhatsApp: the connections and the inbound lifeline
    maxy channels whatsapp import FILE [--owner NAME]   a chat export into the archive
    maxy mcp [--plugin NAME]      one plugin's tools over MCP/stdio, for claude sessions
    maxy mcp-helper … -- CMD      the parent of a session's plugin MCP server (logs its life)
    maxy memory search|ingest|delete|restore   search, ingest, forget, bring back
    maxy reindex                  embed nodes whose embedding is missing or stale
    maxy backup create|list|restore   archives of the graph and accounts' files, and their restore
    maxy doctor                   check the environment and say what to fix
    maxy version                  version, git revision, build date
    maxy account create|list      accounts under <data_dir>/accounts
    maxy neo4j run|start|stop|status  Neo4j: in the foreground (systemd) or the background
    maxy firstboot                first boot of a card: grow data, keys, account from the preset
    maxy tunnel login|create|route|status|remove   remote access through cloudflared
    maxy ota apply|commit|status  signed A/B updates of the card
    maxy sites publish FOLDER     publish a folder under /sites, print its LAN and public URLs
    maxy agents knowledge SLUG    regenerate an agent's KNOWLEDGE.md from the memory graph

Every command reads the settings once, here, and passes them down.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence

from appliance.core import logs
from appliance.core.accounts import (
    AccountIdError,
    create_account,
    list_accounts,
    validate_account_id,
)
from appliance.core.config import Settings, SettingsError, load_settings, settings_table
from appliance.core.version import build_info

log = logging.getLogger("appliance.cli")

# Errors that end a command with one clear line instead of a traceback, and their log area,
# by qualified class name (matched along the error's MRO, so no subcommand module needs to be
# imported to name its errors; tests/test_cli.py checks every name exists).
FATAL_AREAS: dict[str, str] = {
    "appliance.core.config.SettingsError": "settings",
    "appliance.core.accounts.AccountError": "accounts",
    "appliance.core.fsio.DiskFull": "disk",
    "appliance.graphdb.errors.Neo4jSetupError": "neo4j",
    "appliance.memory.errors.EngineError": "engine",
    "appliance.core.ports.PortInUse": "edge",
    "appliance.rpc.protocol.RpcError": "rpc",
    "appliance.ota.errors.OtaError": "ota",
    "appliance.tunnel.TunnelError": "tunnel",
    "appliance.agents.errors.AgentStoreError": "agents",
    "appliance.app.publish.PublishError": "sites",
    "appliance.firstboot.FirstbootError": "firstboot",
    "appliance.plugins.errors.PluginError": "plugins",
}


def fatal_area(err: BaseException) -> str | None:
    """The log area of an error that ends a command with one line, None for a bug."""
    for kind in type(err).__mro__:
        area = FATAL_AREAS.get(f"{kind.__module__}.{kind.__qualname__}")
        if area is not None:
            return area
    return None


def fatal(area: str, err: BaseException, code: int = 1) -> int:
    """The one way a command fails: ``[area] FATAL Kind: message`` on stderr; its exit status."""
    print(f"[{area}] FATAL {type(err).__name__}: {err}", file=sys.stderr, flush=True)
    return code


def _require_account(settings: Settings) -> None:
    try:
        validate_account_id(settings.accounts_dir, settings.account_id)
    except AccountIdError as err:
        hint = str(err).replace('"', "'")
        print(f'{err.line} hint="{hint}"', file=sys.stderr, flush=True)
        raise SystemExit(1) from err


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """Supervise every role for development."""
    from appliance import supervisor

    _require_account(settings)
    return supervisor.run(settings, os.environ)


def cmd_edge(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the edge."""
    from appliance.edge import server

    _require_account(settings)
    server.serve(settings)
    return 0


def cmd_app(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the web app on its Unix socket."""
    from appliance.app import server

    _require_account(settings)
    server.serve(settings)
    return 0


def cmd_manager(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the PTY session manager on its Unix socket."""
    from appliance.sessions import server

    _require_account(settings)
    server.serve(settings)
    return 0


def cmd_channels(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the channels (Telegram, WhatsApp and the inbound lifeline), or import an export."""
    from appliance.channels import role
    from appliance.core.systemd import Notifier

    _require_account(settings)
    if getattr(args, "channel", None) == "whatsapp":
        return _whatsapp_import(settings, args)
    asyncio.run(role.run(settings, Notifier.from_environ(os.environ)))
    return 0


def _whatsapp_import(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy channels whatsapp import FILE``: the senders first, then (with --owner) the import."""
    from pathlib import Path

    from appliance.channels.whatsapp.export import ExportError
    from appliance.channels.whatsapp.importer import import_export, read
    from appliance.core.accounts import owner_zone
    from appliance.core.identity import Caller
    from appliance.rpc.client import RpcClient
    from appliance.rpc.protocol import RpcError

    account = validate_account_id(settings.accounts_dir, settings.account_id)
    zone = owner_zone(settings.accounts_dir, account.id).key
    engine = RpcClient(settings.engine_socket, timeout=120)
    caller = Caller(account_id=account.id).to_wire()
    try:
        text = read(Path(args.file))
        answer = asyncio.run(import_export(engine, caller, text, zone, args.owner, args.chat))
    except ExportError as err:
        print(f"maxy: {err}", file=sys.stderr)
        return 2
    except RpcError as err:
        print(
            f"maxy: the memory engine did not take the import ({err}); is it running?",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(answer, indent=2, ensure_ascii=False))
    if not answer["imported"]:
        print(
            "Nothing imported yet: say which sender is you, e.g. "
            f"maxy channels whatsapp import {args.file} --owner {next(iter(answer['senders']))!r}",
            file=sys.stderr,
        )
    return 0


def cmd_engine(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the retrieval engine, or rebuild its vector indexes."""
    from appliance.agents.expansion import paraphraser
    from appliance.core.systemd import Notifier
    from appliance.memory.embedder import Embedder, configured_model
    from appliance.memory.graph import Graph
    from appliance.memory.schema import rebuild_vector_indexes
    from appliance.memory.service import Engine, read_password

    _require_account(settings)
    account = validate_account_id(settings.accounts_dir, settings.account_id)
    notifier = Notifier.from_environ(os.environ)
    model = configured_model(settings)
    notifier.status(f"loading the embedding model {model.name}")
    embedder = Embedder(
        model,
        max_chars=settings.embed_max_chars,
        threads=settings.embed_threads,
    )
    try:
        if args.rebuild_vector_indexes:

            async def rebuild() -> dict[str, int]:
                graph = Graph(
                    settings.neo4j_address(), settings.neo4j_user, read_password(settings)
                )
                try:
                    return await rebuild_vector_indexes(graph, embedder.dimension)
                finally:
                    await graph.close()

            cleared = asyncio.run(rebuild())
            for name, count in cleared.items():
                print(f"rebuilt {name} ({embedder.dimension} dims), cleared {count} embeddings")
            if not cleared:
                print(f"every vector index already has {embedder.dimension} dimensions")
            return 0
        asyncio.run(Engine(settings, account, embedder, paraphraser(settings)).run(notifier))
    finally:
        embedder.close()
    return 0


def cmd_mcp(settings: Settings, args: argparse.Namespace) -> int:
    """Serve one plugin's tools over MCP on stdin/stdout (spawned by each claude session)."""
    from appliance.mcp import server
    from appliance.mcp.tools import plugins_with_tools
    from appliance.plugins.errors import PluginNotFound

    if args.plugin not in plugins_with_tools():
        raise PluginNotFound(
            f"maxy mcp --plugin {args.plugin}: no shipped plugin of that name has tools "
            f"(those that do: {', '.join(plugins_with_tools())})."
        )

    environ = dict(os.environ)
    # The PTY manager sets ACCOUNT_ID; a hand-run `maxy mcp` falls back to MAXY_ACCOUNT_ID.
    environ.setdefault("ACCOUNT_ID", settings.account_id)
    server.serve(settings, environ, args.plugin)
    return 0


def cmd_mcp_helper(settings: Settings, args: argparse.Namespace) -> int:
    """Run one plugin MCP server as its parent: stderr teed, spawn/boot/exit logged."""
    from appliance.mcp import helper

    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    # `main` itself: a server that is this program's own `maxy mcp` is forked and run by it.
    return helper.main(args.session, args.server, args.log_dir, command, run_self=main)


def cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    """Check the environment."""
    from appliance.doctor import run_checks

    if args.settings:
        print(settings_table())
        return 0
    checks = run_checks(settings, os.environ)
    width = max(len(c.name) for c in checks)
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        print(f"{mark} {check.name.ljust(width)}  {check.detail}")
    failed = [c for c in checks if not c.ok]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed.")
    return 1 if failed else 0


def cmd_version(settings: Settings, args: argparse.Namespace) -> int:
    """Print version metadata."""
    info = build_info()
    if args.json:
        print(json.dumps(info))
    else:
        print(f"maxy {info['version']} (revision {info['gitRevision'] or 'unknown'})")
    return 0


def cmd_embed(settings: Settings, args: argparse.Namespace) -> int:
    """Print one text's embedding by the configured model (checks a build's llama.cpp)."""
    from appliance.memory.embedder import Embedder, configured_model

    embedder = Embedder(configured_model(settings), max_chars=settings.embed_max_chars, threads=1)
    try:
        vector = embedder.embed(args.text)
    finally:
        embedder.close()
    print(json.dumps({"model": embedder.model_name, "vector": [float(x) for x in vector]}))
    return 0


def cmd_account(settings: Settings, args: argparse.Namespace) -> int:
    """Create or list accounts."""
    if args.account_command == "create":
        account = create_account(
            settings.accounts_dir, args.owner, args.product_name, time_zone=args.time_zone
        )
        print(account.id)
        return 0
    accounts = list_accounts(settings.accounts_dir)
    if args.json:
        print(json.dumps([a.to_json() for a in accounts], indent=2))
    else:
        for account in accounts:
            print(f"{account.id}  {account.owner}  {account.created_at}")
    return 0


def cmd_firstboot(settings: Settings, args: argparse.Namespace) -> int:
    """Prepare a freshly flashed card, once (root, before the services start)."""
    from appliance import firstboot

    firstboot.run(settings, lambda line: print(line, flush=True))
    return 0


def cmd_neo4j(settings: Settings, args: argparse.Namespace) -> int:
    """Run, start, stop or report the Neo4j instance."""
    from appliance.graphdb.instance import Neo4jInstance, bolt_ready

    instance = Neo4jInstance.from_settings(settings, os.environ)
    if args.neo4j_command == "run":
        from appliance.core.systemd import Notifier
        from appliance.graphdb import launcher

        notifier = Notifier.from_environ(os.environ)
        return launcher.run(instance, notifier, user=settings.neo4j_user)
    if args.neo4j_command == "start":
        pid = instance.start_background()
        print(f"neo4j running, pid {pid}, bolt {settings.neo4j_address()}, home {instance.home}")
        return 0
    if args.neo4j_command == "stop":
        stopped = instance.stop()
        print("neo4j stopped" if stopped else "neo4j was not running")
        return 0
    running = instance.running_pid()
    reason = None
    if instance.password_file.is_file():
        password = instance.password_file.read_text().strip()
        reason = bolt_ready(settings.neo4j_address(), settings.neo4j_user, password)
    else:
        reason = f"no password file at {instance.password_file}"
    state = "answering" if reason is None else f"not answering ({reason})"
    print(
        f"pid: {running or 'none'}\nbolt: {settings.neo4j_address()} {state}\nhome: {instance.home}"
    )
    print(f"java: {instance.java.major} at {instance.java.home}")
    return 0 if reason is None else 3


# The commands this module defines (tests/test_cli.py keeps this list true). They are parsed
# without importing the subsystems' command modules: a role or a session's `maxy mcp-helper` does
# not carry the Neo4j driver, numpy and pypdf that `maxy memory` needs (about 80 MB per process).
# Anything else, a typo or `--help` included, gets the whole parser and its whole list.
OWN_COMMANDS = frozenset(
    {"run", "edge", "app", "manager", "channels", "engine", "mcp", "mcp-helper", "doctor"}
    | {"version", "embed", "account", "neo4j", "firstboot"}
)


def build_parser(subsystems: bool = True) -> argparse.ArgumentParser:
    """The argument parser of every subcommand (``subsystems=False``: only this module's)."""
    parser = argparse.ArgumentParser(prog="maxy", description="Maxy, a home AI appliance.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("run", help="development: Neo4j, engine, app and edge, supervised").set_defaults(
        func=cmd_run
    )
    sub.add_parser("edge", help="serve TCP :19200").set_defaults(func=cmd_edge)
    sub.add_parser("app", help="serve the web app on its Unix socket").set_defaults(func=cmd_app)
    sub.add_parser("manager", help="serve the PTY session manager on its Unix socket").set_defaults(
        func=cmd_manager
    )
    channels = sub.add_parser(
        "channels", help="serve Telegram and WhatsApp (the inbound lifeline); import an export"
    )
    channels.set_defaults(func=cmd_channels)
    channel = channels.add_subparsers(dest="channel", metavar="CHANNEL")
    whatsapp = channel.add_parser("whatsapp", help="WhatsApp chores")
    whatsapp_sub = whatsapp.add_subparsers(dest="whatsapp_command", required=True, metavar="CMD")
    imported = whatsapp_sub.add_parser(
        "import", help="a chat export (_chat.txt) into the archive: senders first, then --owner"
    )
    imported.add_argument("file", help="the export's _chat.txt")
    imported.add_argument("--owner", help="which sender is the owner (as the export names them)")
    imported.add_argument("--chat", help="the chat's name (default: the other senders' names)")
    engine = sub.add_parser("engine", help="serve the retrieval engine over RPC")
    engine.add_argument(
        "--rebuild-vector-indexes",
        action="store_true",
        help="drop vector indexes of another dimension than the model, clear stale embeddings",
    )
    engine.set_defaults(func=cmd_engine)
    if subsystems:
        from appliance.agents import knowledge as agent_knowledge
        from appliance.app import publish
        from appliance.memory import commands as memory_commands
        from appliance.ota import commands as ota_commands
        from appliance.tunnel import commands as tunnel_commands

        memory_commands.add_parsers(sub)
        tunnel_commands.add_parsers(sub)
        ota_commands.add_parsers(sub)
        publish.add_parsers(sub)
        agent_knowledge.add_parsers(sub)
    mcp = sub.add_parser("mcp", help="one plugin's tools for a claude session, MCP over stdio")
    mcp.add_argument("--plugin", default="memory", help="the plugin whose tools to serve")
    mcp.set_defaults(func=cmd_mcp)
    helper = sub.add_parser("mcp-helper", help="the parent of a session's plugin MCP server")
    helper.add_argument("--session", required=True, help="the session's id")
    helper.add_argument("--server", required=True, help="the server's (plugin's) name")
    helper.add_argument("--log-dir", required=True, help="where its stderr and log lines go")
    helper.add_argument("command_line", nargs=argparse.REMAINDER, help="-- COMMAND…")
    helper.set_defaults(func=cmd_mcp_helper)
    doctor = sub.add_parser("doctor", help="check the environment and say what to fix")
    doctor.add_argument("--settings", action="store_true", help="print every setting")
    doctor.set_defaults(func=cmd_doctor)
    version = sub.add_parser("version", help="print version metadata")
    version.add_argument("--json", action="store_true")
    version.set_defaults(func=cmd_version)
    embed = sub.add_parser("embed", help="print one text's embedding as JSON (checks llama.cpp)")
    embed.add_argument("text")
    embed.set_defaults(func=cmd_embed)

    account = sub.add_parser("account", help="create or list accounts")
    account_sub = account.add_subparsers(dest="account_command", required=True)
    create = account_sub.add_parser("create", help="create an account; prints its id")
    create.add_argument("--owner", required=True, help="the owner's name")
    create.add_argument("--product-name", default="Maxy", help="brand name shown to visitors")
    create.add_argument(
        "--time-zone", help="the owner's IANA time zone, e.g. Europe/Paris (default: UTC)"
    )
    listing = account_sub.add_parser("list", help="list accounts")
    listing.add_argument("--json", action="store_true")
    account.set_defaults(func=cmd_account)

    neo4j = sub.add_parser("neo4j", help="the development Neo4j instance")
    neo4j.add_argument(
        "neo4j_command",
        choices=["run", "start", "stop", "status"],
        help="run: in the foreground, for systemd; start: in the background",
    )
    neo4j.set_defaults(func=cmd_neo4j)
    sub.add_parser(
        "firstboot", help="first boot of a card: grow the data partition, keys, the account"
    ).set_defaults(func=cmd_firstboot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``maxy`` command."""
    words = list(sys.argv[1:] if argv is None else argv)
    own = bool(words) and words[0] in OWN_COMMANDS
    args = build_parser(subsystems=not own).parse_args(words)
    try:
        settings = load_settings()
    except SettingsError as err:
        return fatal("settings", err, code=2)
    logs.configure(settings.log_level, role=args.command)
    try:
        code: int = args.func(settings, args)
    except KeyboardInterrupt:
        print(f"[{args.command}] interrupted.", file=sys.stderr, flush=True)
        return 130
    except Exception as err:
        area = fatal_area(err)
        if area is None:
            raise  # a bug: its traceback is what to read
        return fatal(area, err)
    return code
