"""`maxy tunnel …` driving a cloudflared double, recording its steps through the real engine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from neo4j import GraphDatabase

from tests.memory.test_service import engine_healthy
from tests.support.processes import Env, Neo4jServer, maxy, wait_until

DOUBLE = Path(__file__).with_name("cloudflared")
SECRET = "double-tunnel-secret-c2VjcmV0"  # what the double writes into cert and credentials


@pytest.fixture
def tunnel_env(maxy_env: Env, tmp_path: Path) -> Env:
    maxy_env.vars.update(
        MAXY_CLOUDFLARED_BIN=str(DOUBLE), CLOUDFLARED_DOUBLE_LOG=str(tmp_path / "double.log")
    )
    return maxy_env


def run(env: Env, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        maxy("tunnel", *args),
        env={**env.vars, **extra},
        capture_output=True,
        text=True,
        timeout=120,
    )


def graph(server: Neo4jServer, account: str) -> list[dict[str, Any]]:
    """Every Task and Cloudflare node of the account, with what PRODUCED it."""
    with GraphDatabase.driver(server.uri, auth=("neo4j", server.password)) as driver:
        records, _, _ = driver.execute_query(
            "MATCH (n) WHERE n.accountId = $a AND (n:Task OR n:CloudflareTunnel "
            "OR n:CloudflareHostname) OPTIONAL MATCH (t:Task)-[:PRODUCED]->(n) "
            "RETURN labels(n)[0] AS label, n {.*, embedding: null} AS props, "
            "collect(t.kind) AS producedBy",
            a=account,
        )
    return [r.data() for r in records]


def test_the_whole_set_up_is_recorded_without_secrets(
    tunnel_env: Env, start_maxy: Any, neo4j_server: Neo4jServer
) -> None:
    engine = start_maxy(tunnel_env, "engine")
    wait_until(lambda: engine_healthy(tunnel_env), 90, f"engine health\n{engine.output()}")
    settings = tunnel_env.settings
    outputs: list[str] = []

    def ok(*args: str) -> subprocess.CompletedProcess[str]:
        done = run(tunnel_env, *args)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stderr)
        return done

    login = ok("login")
    assert "Open this address to authorise" in login.stdout
    assert "https://dash.cloudflare.com/argotunnel?" in login.stdout
    assert "one-time-token" not in login.stderr  # shown to the owner, never logged
    assert os.stat(settings.cloudflared_dir / "cert.pem").st_mode & 0o777 == 0o600

    ok("create", "home")
    config = settings.cloudflared_config
    tunnel_id = json.loads(ok("status", "--json").stdout)["tunnel"]
    assert (settings.cloudflared_dir / f"{tunnel_id}.json").stat().st_mode & 0o777 == 0o600

    ok("route", "Maxy.Example.com", "--role", "admin")
    ok("route", "example.com", "--role", "public")
    status = json.loads(ok("status", "--json").stdout)
    assert status["hostnames"] == {"maxy.example.com": "admin", "example.com": "public"}
    assert status["configured"] is True and status["process"] in ("running", "absent")
    assert "http://localhost:" + str(settings.port) in config.read_text()
    assert "service: http_status:404" in config.read_text().splitlines()[-1]

    # A bad host name is refused before DNS is touched, naming the problem.
    bad = run(tunnel_env, "route", "not a host", "--role", "public")
    assert bad.returncode == 1 and "not a valid host name" in bad.stderr
    log = Path(tunnel_env.vars["CLOUDFLARED_DOUBLE_LOG"]).read_text()
    calls = [json.loads(line) for line in log.splitlines()]
    assert [c for c in calls if "dns" in c] == [
        [
            "tunnel",
            "--origincert",
            str(settings.cloudflared_dir / "cert.pem"),
            "route",
            "dns",
            tunnel_id,
            host,
        ]
        for host in ("maxy.example.com", "example.com")
    ]

    # cloudflared's own validation refusing leaves the running config as it was.
    before = config.read_text()
    refused = run(
        tunnel_env, "route", "shop.example.com", "--role", "public", CLOUDFLARED_DOUBLE_REFUSE="1"
    )
    assert refused.returncode == 1 and "cloudflared refused the config" in refused.stderr
    assert config.read_text() == before

    ok("remove", "example.com")
    assert json.loads(ok("status", "--json").stdout)["hostnames"] == {"maxy.example.com": "admin"}

    nodes = graph(neo4j_server, tunnel_env.account_id)
    kinds = sorted(n["props"]["kind"] for n in nodes if n["label"] == "Task")
    assert kinds == sorted(
        [
            "cloudflare-tunnel-login",
            "cloudflare-tunnel-create",
            "cloudflare-tunnel-route",
            "cloudflare-tunnel-route",
            "cloudflare-hostname-remove",
        ]
    )
    by_id = {n["props"]["id"]: n for n in nodes if n["label"] != "Task"}
    assert by_id[tunnel_id]["producedBy"] == ["cloudflare-tunnel-create"]
    assert by_id["maxy.example.com"]["props"]["role"] == "admin"
    assert by_id["maxy.example.com"]["producedBy"] == ["cloudflare-tunnel-route"]
    assert by_id["example.com"]["props"]["status"] == "removed"
    assert sorted(by_id["example.com"]["producedBy"]) == [
        "cloudflare-hostname-remove",
        "cloudflare-tunnel-route",
    ]

    ok("remove")
    assert not config.exists() and not (settings.cloudflared_dir / f"{tunnel_id}.json").exists()
    everything = json.dumps(graph(neo4j_server, tunnel_env.account_id), default=str)
    assert SECRET not in everything and SECRET not in "".join(outputs)


def test_without_cloudflared_the_command_says_what_to_install(tunnel_env: Env) -> None:
    done = run(tunnel_env, "login", MAXY_CLOUDFLARED_BIN="/nonexistent/cloudflared")
    assert done.returncode == 1
    assert "cloudflared is not installed" in done.stderr and "MAXY_CLOUDFLARED_BIN" in done.stderr
    assert "Traceback" not in done.stderr


def test_route_needs_a_tunnel(tunnel_env: Env) -> None:
    done = run(tunnel_env, "route", "example.com", "--role", "public")
    assert done.returncode == 1 and "maxy tunnel create" in done.stderr
