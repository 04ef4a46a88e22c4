"""``maxy tunnel login|create|route|status|remove|start|stop|restart``: the Cloudflare tunnel.

``create`` starts the tunnel's unit, ``route`` and ``remove HOST`` restart it (cloudflared reads
its ingress rules when it starts), ``remove`` stops it — through root's path unit
(:mod:`appliance.tunnel.control`), since these commands run as the unprivileged ``maxy`` user.

Each durable step is recorded in the memory graph through the engine's ``write`` method: a Task
(``kind: cloudflare-tunnel-login|create|route|remove``) with a ``PRODUCED`` edge to the
CloudflareTunnel or CloudflareHostname node it made or changed. Only names, ids, roles and file
paths are recorded or logged — never the origin certificate, the tunnel credentials or the
login URL (it carries a one-time callback token; it is shown to the owner on stdout only).

Files, all under ``<data_dir>/cloudflared/`` (mode 0700): ``cert.pem`` (the origin certificate
from ``login``), ``<tunnel id>.json`` (credentials from ``create``), ``config.yml`` and
``roles.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.core.proc import ToolError, run
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.tunnel import CloudflaredError, TunnelError
from appliance.tunnel.config import (
    Role,
    check_hostname,
    cloudflared_path,
    describe,
    ensure_catch_all,
    load,
    load_roles,
    remove_route,
    rules,
    save,
    save_roles,
    set_route,
)
from appliance.tunnel.control import Verb, ask, by_hand, run_request
from appliance.tunnel.state import tunnel_health

log = logging.getLogger(__name__)

COMMAND_TIMEOUT = 120.0
LOGIN_TIMEOUT = 900.0  # the owner has this long to open the URL and authorise
RECORD_TIMEOUT = 30.0
_URL = re.compile(r"https://\S+")
_CREATED = re.compile(r"Created tunnel (\S+) with id ([0-9a-fA-F-]{36})")
_TUNNEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _binary(settings: Settings) -> str:
    found = cloudflared_path(settings.cloudflared_bin)
    if found is None:
        raise CloudflaredError(
            f"cloudflared is not installed ({settings.cloudflared_bin!r} is not on PATH). "
            "Install it, or set MAXY_CLOUDFLARED_BIN to its path."
        )
    return found


def _cert(settings: Settings) -> Path:
    return settings.cloudflared_dir / "cert.pem"


def _run(binary: str, settings: Settings, *args: str) -> str:
    """Run ``cloudflared tunnel --origincert … ARGS``; its output, or CloudflaredError."""
    command = [binary, "tunnel", "--origincert", str(_cert(settings)), *args]
    try:
        done = run(command, timeout=COMMAND_TIMEOUT)
    except ToolError as err:
        raise CloudflaredError(f"could not run cloudflared tunnel {args[0]} ({err}).") from err
    output = done.stdout + done.stderr
    if done.returncode != 0:
        lines = [line for line in output.splitlines() if line.strip()]
        raise CloudflaredError(
            f"cloudflared tunnel {' '.join(args[:2])} failed (exit {done.returncode}): "
            + (lines[-1] if lines else "no output")
        )
    return output


def _apply(settings: Settings, verb: Verb) -> None:
    """Have the running tunnel follow config.yml (start, restart or stop its unit)."""
    if not settings.tunnel_unit:
        print(f"Note: {by_hand(settings)}")
        return
    try:
        print(ask(settings, verb))
    except TunnelError as err:
        raise CloudflaredError(
            f"{err} (the configuration is saved; retry `maxy tunnel {verb}`)"
        ) from err


def _record(
    settings: Settings, kind: str, title: str, label: str, node_id: str, props: dict[str, Any]
) -> None:
    """Write a Task and the node it produced; warn (not fail) when the engine is not running."""
    caller = Caller(account_id=settings.require_account_id()).to_wire()
    task_id = f"task-{uuid.uuid4()}"
    client = RpcClient(settings.engine_socket, timeout=RECORD_TIMEOUT)

    async def write() -> None:
        await client.call(
            "write",
            {
                "caller": caller,
                "label": "Task",
                "id": task_id,
                "properties": {"kind": kind, "name": title, "status": "completed"},
                "scope": "admin",
            },
        )
        await client.call(
            "write",
            {
                "caller": caller,
                "label": label,
                "id": node_id,
                "properties": props,
                "scope": "admin",
                "edges": [
                    {"type": "PRODUCED", "toId": task_id, "toLabel": "Task", "direction": "in"}
                ],
            },
        )

    try:
        asyncio.run(write())
    except RpcError as err:
        log.warning("[tunnel] op=record warn reason=engine-unavailable kind=%s", kind)
        print(f"warning: not recorded in memory ({err}).", file=sys.stderr)
        return
    log.info("[tunnel] op=record kind=%s task=%s %s=%s", kind, task_id, label, node_id)


def login(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy tunnel login``: show cloudflared's authorisation URL, wait for the certificate."""
    binary = _binary(settings)
    cert = _cert(settings)
    cert.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    command = [binary, "tunnel", "--origincert", str(cert), "login"]
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as err:
        raise CloudflaredError(f"could not run cloudflared tunnel login ({err}).") from err
    assert process.stdout is not None
    shown = False
    for line in process.stdout:
        match = _URL.search(line)
        if match and not shown:
            shown = True
            print(f"Open this address to authorise Maxy's tunnel:\n\n  {match.group(0)}\n")
            sys.stdout.flush()
            log.info("[tunnel] op=login-url-shown")  # the URL itself carries a token: not logged
    try:
        code = process.wait(timeout=LOGIN_TIMEOUT)
    except subprocess.TimeoutExpired as err:
        process.kill()
        raise CloudflaredError("cloudflared tunnel login was not authorised in time.") from err
    default = Path.home() / ".cloudflared" / "cert.pem"
    if code == 0 and not cert.exists() and default.exists():
        shutil.move(default, cert)  # older cloudflared ignores --origincert when logging in
    if code != 0 or not cert.exists():
        raise CloudflaredError(
            f"cloudflared tunnel login failed (exit {code}); run `maxy tunnel login` again."
        )
    cert.chmod(0o600)
    print(f"Logged in; the origin certificate is in {cert}.")
    _record(
        settings,
        "cloudflare-tunnel-login",
        "Log in to Cloudflare for the tunnel",
        "CloudflareTunnel",
        f"login-{settings.require_account_id()}",
        {"name": "cloudflare-login", "status": "logged-in", "certificatePath": str(cert)},
    )
    return 0


def create(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy tunnel create NAME``: create the tunnel and the config.yml that routes nothing yet."""
    name = args.name
    if not _TUNNEL_NAME.match(name):
        raise TunnelError(f"{name!r} is not a tunnel name: use letters, digits, '.', '_', '-'.")
    config_path = settings.cloudflared_config
    doc = load(config_path)
    if doc.get("tunnel"):
        raise TunnelError(
            f"{config_path} already names tunnel {doc['tunnel']}; `maxy tunnel remove` it first."
        )
    binary = _binary(settings)
    settings.cloudflared_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = settings.cloudflared_dir / f".{name}.credentials.json"
    output = _run(binary, settings, "create", "--credentials-file", str(staging), name)
    match = _CREATED.search(output)
    if match is None:
        raise CloudflaredError("cloudflared created a tunnel but did not say its id.")
    tunnel_id = match.group(2).lower()
    credentials = settings.cloudflared_dir / f"{tunnel_id}.json"
    staging.replace(credentials)
    credentials.chmod(0o600)
    doc["tunnel"] = tunnel_id
    doc["credentials-file"] = str(credentials)
    ensure_catch_all(doc)
    save(config_path, doc, binary)
    print(f"Created tunnel {name} ({tunnel_id}); route a host name with `maxy tunnel route`.")
    _apply(settings, "start")
    _record(
        settings,
        "cloudflare-tunnel-create",
        f"Create Cloudflare tunnel {name}",
        "CloudflareTunnel",
        tunnel_id,
        {
            "name": name,
            "tunnelId": tunnel_id,
            "status": "created",
            "credentialsPath": str(credentials),
            "configPath": str(config_path),
        },
    )
    return 0


def route(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy tunnel route HOST --role admin|public``: DNS, ingress rule and role."""
    host = check_hostname(args.hostname)
    role: Role = args.role
    config_path = settings.cloudflared_config
    doc = load(config_path)
    tunnel_id = doc.get("tunnel")
    if not tunnel_id:
        raise TunnelError("No tunnel yet: run `maxy tunnel create NAME` first.")
    set_route(doc, host, f"http://localhost:{settings.port}")
    rules(doc)  # refuse before touching DNS
    binary = _binary(settings)
    _run(binary, settings, "route", "dns", str(tunnel_id), host)
    save(config_path, doc, binary)
    roles = load_roles(settings.tunnel_roles_path)
    roles[host] = role
    save_roles(settings.tunnel_roles_path, roles)
    print(f"{host} now reaches Maxy through tunnel {tunnel_id} as the {role} host name.")
    _apply(settings, "restart")
    _record(
        settings,
        "cloudflare-tunnel-route",
        f"Route {host} ({role}) through the Cloudflare tunnel",
        "CloudflareHostname",
        host,
        {"hostname": host, "role": role, "tunnelId": str(tunnel_id), "status": "routed"},
    )
    return 0


def status(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy tunnel status``: binary, config, host names with roles, process and connection."""
    facts = describe(load(settings.cloudflared_config))
    roles = load_roles(settings.tunnel_roles_path)
    report = {
        "cloudflared": cloudflared_path(settings.cloudflared_bin),
        "config": str(settings.cloudflared_config),
        "tunnel": facts["tunnel"],
        "hostnames": {h: roles.get(h, "public") for h in facts["hostnames"]},
        **{
            k: v
            for k, v in asyncio.run(tunnel_health(settings.cloudflared_config)).items()
            if k in ("configured", "process", "connected", "error")
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"cloudflared: {report['cloudflared'] or 'not installed'}")
    print(f"config:      {report['config']}")
    print(f"tunnel:      {report['tunnel'] or 'none (run `maxy tunnel create NAME`)'}")
    for host, role in report["hostnames"].items():
        print(f"  {host}  {role}")
    print(f"process:     {report['process']}")
    print(f"connected:   {report['connected'] if report['connected'] is not None else 'unknown'}")
    return 0


def remove(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy tunnel remove [HOST]``: drop one host name, or delete the whole tunnel."""
    config_path = settings.cloudflared_config
    doc = load(config_path)
    if args.hostname:
        host = check_hostname(args.hostname)
        if not remove_route(doc, host):
            raise TunnelError(f"{host} is not routed through the tunnel ({config_path}).")
        save(config_path, doc, cloudflared_path(settings.cloudflared_bin))
        roles = load_roles(settings.tunnel_roles_path)
        roles.pop(host, None)
        save_roles(settings.tunnel_roles_path, roles)
        print(f"{host} no longer reaches Maxy (its DNS record stays; delete it in Cloudflare).")
        _apply(settings, "restart")
        _record(
            settings,
            "cloudflare-hostname-remove",
            f"Stop routing {host}",
            "CloudflareHostname",
            host,
            {"hostname": host, "status": "removed"},
        )
        return 0
    tunnel_id = doc.get("tunnel")
    if not tunnel_id:
        raise TunnelError(f"No tunnel to remove ({config_path} names none).")
    _apply(settings, "stop")
    _run(_binary(settings), settings, "delete", "-f", str(tunnel_id))
    credentials = doc.get("credentials-file")
    for path in (config_path, settings.tunnel_roles_path, Path(credentials or "")):
        if path.name and path.is_file():
            path.unlink()
    print(f"Deleted tunnel {tunnel_id} and its configuration.")
    _record(
        settings,
        "cloudflare-tunnel-remove",
        f"Delete Cloudflare tunnel {tunnel_id}",
        "CloudflareTunnel",
        str(tunnel_id),
        {"tunnelId": str(tunnel_id), "status": "removed"},
    )
    return 0


def unit_verb(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy tunnel start|stop|restart``: ask root to do that to the tunnel's unit."""
    verb: Verb = args.verb
    if verb != "stop" and not load(settings.cloudflared_config).get("tunnel"):
        raise TunnelError("No tunnel yet: run `maxy tunnel create NAME` first.")
    print(ask(settings, verb))
    return 0


def request(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy tunnel run-request`` (root, started by maxy-tunnel-request.path)."""
    return run_request(settings)


def add_parsers(sub: Any) -> None:
    """Register ``tunnel`` on the ``maxy`` parser."""
    tunnel = sub.add_parser("tunnel", help="remote access through a Cloudflare tunnel")
    tunnel_sub = tunnel.add_subparsers(dest="tunnel_command", required=True)
    tunnel_sub.add_parser(
        "login", help="authorise cloudflared with your Cloudflare account"
    ).set_defaults(func=login)
    make = tunnel_sub.add_parser("create", help="create the tunnel and its config.yml")
    make.add_argument("name")
    make.set_defaults(func=create)
    path = tunnel_sub.add_parser("route", help="route a host name to Maxy with a role")
    path.add_argument("hostname")
    path.add_argument("--role", choices=["admin", "public"], required=True)
    path.set_defaults(func=route)
    state = tunnel_sub.add_parser("status", help="the tunnel, its host names and connection")
    state.add_argument("--json", action="store_true")
    state.set_defaults(func=status)
    drop = tunnel_sub.add_parser("remove", help="stop routing a host name, or delete the tunnel")
    drop.add_argument("hostname", nargs="?")
    drop.set_defaults(func=remove)
    for verb in ("start", "stop", "restart"):
        tunnel_sub.add_parser(
            verb, help=f"{verb} the tunnel's systemd unit (on the device)"
        ).set_defaults(func=unit_verb, verb=verb)
    tunnel_sub.add_parser(
        "run-request", help="carry out a start/stop/restart request (root, from its path unit)"
    ).set_defaults(func=request)
