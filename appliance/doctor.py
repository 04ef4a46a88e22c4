"""``maxy doctor``: check what a running Maxy needs and say what to fix."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from appliance.core.accounts import AccountError, validate_account_id
from appliance.core.config import Settings
from appliance.core.fsio import sha256_file
from appliance.core.ports import PortInUse, check_port_free
from appliance.graphdb.errors import Neo4jSetupError
from appliance.graphdb.instance import bolt_ready, distribution_dir, verify_distribution
from appliance.graphdb.java import find_java, required_java_major
from appliance.memory.embedder import configured_model
from appliance.memory.graph import rust_packstream
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.sessions.caps import available_mb


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    ok: bool
    detail: str


def _data_dir(settings: Settings) -> Check:
    path = settings.data_dir
    if not path.exists():
        return Check("data directory", False, f"{path} is missing; create it or set MAXY_DATA_DIR")
    if not os.access(path, os.W_OK | os.X_OK):
        return Check("data directory", False, f"{path} is not writable by this user")
    return Check("data directory", True, str(path))


def _account(settings: Settings) -> Check:
    try:
        account = validate_account_id(settings.accounts_dir, settings.account_id)
    except AccountError as err:
        return Check("account", False, str(err))
    return Check("account", True, f"{account.id} ({account.owner})")


def _java(settings: Settings, environ: Mapping[str, str]) -> Check:
    try:
        java = find_java(required_java_major(settings.neo4j_version), environ)
    except Neo4jSetupError as err:
        return Check("java", False, str(err))
    return Check("java", True, f"Java {java.major} at {java.home} (from {java.source})")


def _neo4j_jars(settings: Settings) -> Check:
    dist = distribution_dir(settings)
    try:
        count = verify_distribution(dist, full=True)
    except Neo4jSetupError as err:
        return Check("neo4j distribution", False, str(err))
    return Check("neo4j distribution", True, f"{count} jars verified in {dist}")


def _neo4j_bolt(settings: Settings) -> Check:
    try:
        password = settings.neo4j_password_path.read_text().strip()
    except OSError:
        return Check(
            "neo4j", False, f"no password file at {settings.neo4j_password_path}; run `maxy run`"
        )
    reason = bolt_ready(settings.neo4j_address(), settings.neo4j_user, password)
    if reason:
        return Check(
            "neo4j", False, f"{settings.neo4j_address()}: {reason}; start it with `maxy run`"
        )
    return Check("neo4j", True, f"answers at {settings.neo4j_address()}")


def _model(settings: Settings) -> Check:
    path = configured_model(settings)
    if not path.is_file():
        return Check("embedding model", False, f"{path} is missing; build it with `just model`")
    sidecar = Path(str(path) + ".sha256")
    if sidecar.is_file():
        expected = sidecar.read_text().split()[0]
        if sha256_file(path) != expected:
            return Check("embedding model", False, f"{path} fails its checksum; rebuild it")
        return Check("embedding model", True, f"{path} (sha256 verified)")
    return Check("embedding model", True, f"{path} (no .sha256 beside it to verify)")


def _driver() -> Check:
    if not rust_packstream():
        return Check(
            "neo4j driver",
            False,
            "its Rust extension (neo4j-rust-ext) is missing, so searches decode in pure Python; "
            "rebuild the binary (`just build`) or reinstall the dependencies (`just test`)",
        )
    return Check("neo4j driver", True, "packstream in Rust (neo4j-rust-ext)")


def _edge(settings: Settings) -> Check:
    try:
        check_port_free(settings.host, settings.port, "MAXY_PORT")
    except PortInUse:
        url = f"http://127.0.0.1:{settings.port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except urllib.error.HTTPError as err:
            body = json.load(err)
        except (OSError, ValueError):
            return Check("port", False, f"{settings.port} is taken by a program that is not Maxy")
        return Check("edge", body.get("status") == "healthy", f"{url} says {body.get('status')}")
    return Check("port", True, f"{settings.port} is free (the edge is not running)")


def _engine(settings: Settings) -> Check:
    try:
        health = asyncio.run(RpcClient(settings.engine_socket, timeout=5).call("health"))
    except RpcError as err:
        return Check("engine", False, str(err))
    return Check("engine", bool(health.get("ok")), json.dumps(health, sort_keys=True))


def _memory(settings: Settings) -> Check:
    """Room for Claude Code sessions, as the manager's admission counts it (MemAvailable)."""
    free, need = available_mb(), settings.session_memory_mb
    if free is None:
        return Check("memory", True, "unknown (/proc/meminfo has no MemAvailable)")
    if not need:
        return Check("memory", True, f"{free} MB free (MAXY_SESSION_MEMORY_MB=0: no check)")
    if free < need:
        return Check(
            "memory",
            False,
            f"{free} MB free, under the {need} MB a new session needs: a spawn would be refused; "
            "stop a session or lower MAXY_SESSION_MEMORY_MB",
        )
    return Check("memory", True, f"{free} MB free: room for {free // need} more session(s)")


def run_checks(settings: Settings, environ: Mapping[str, str]) -> list[Check]:
    """Run every check in order."""
    checks: list[Callable[[], Check]] = [
        lambda: _data_dir(settings),
        lambda: _account(settings),
        lambda: _java(settings, environ),
        lambda: _neo4j_jars(settings),
        lambda: _neo4j_bolt(settings),
        lambda: _model(settings),
        _driver,
        lambda: _engine(settings),
        lambda: _edge(settings),
        lambda: _memory(settings),
    ]
    return [check() for check in checks]
