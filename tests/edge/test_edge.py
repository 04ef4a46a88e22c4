"""`maxy edge` under Granian on loopback: /healthz and /api/admin/version."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import httpx
import pytest

from appliance.plugins.resolver import write_enabled
from tests.support.auth import admin_cookie
from tests.support.processes import Env, get_health, maxy, wait_until
from tests.support.rawhttp import read_response, send_late_body


def healthy(port: int) -> bool:
    response = get_health(port)
    return response is not None and response.status_code == 200


@pytest.fixture
def edge(maxy_env: Env, start_maxy: Any) -> tuple[Env, Any, Any]:
    engine = start_maxy(maxy_env, "engine")
    edge = start_maxy(maxy_env, "edge")
    port = maxy_env.settings.port
    wait_until(lambda: healthy(port), 90, f"healthz 200\n{engine.output()}\n{edge.output()}")
    return maxy_env, engine, edge


def test_healthz_reports_neo4j_and_embedder_healthy(edge: tuple[Env, Any, Any]) -> None:
    env, _, _ = edge
    response = httpx.get(f"http://127.0.0.1:{env.settings.port}/healthz")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["status"] == "healthy"
    assert body["neo4j"]["ok"] is True
    assert body["embedder"]["ok"] is True and body["embedder"]["dimension"] == 384
    assert body["engine"] == {"ok": True}
    assert body["missingPlugins"] == []


def test_healthz_names_an_enabled_plugin_whose_files_are_gone(edge: tuple[Env, Any, Any]) -> None:
    env, _, _ = edge
    write_enabled(env.settings, env.settings.account_id, ["ghost"])
    try:
        body = httpx.get(f"http://127.0.0.1:{env.settings.port}/healthz").json()
        assert body["missingPlugins"] == ["ghost"]
    finally:
        write_enabled(env.settings, env.settings.account_id, [])


def test_version_is_served_by_the_edge(edge: tuple[Env, Any, Any]) -> None:
    env, _, _ = edge
    url = f"http://127.0.0.1:{env.settings.port}/api/admin/version"
    refused = httpx.get(url)
    assert refused.status_code == 401 and refused.json()["code"] == "login-required"
    body = httpx.get(url, headers=admin_cookie(env.settings)).json()
    assert body["installed"]["version"] == "0.1.0"
    assert "gitRevision" in body["installed"]
    assert body["latest"] is None


def test_the_edges_own_refusal_leaves_the_connection_usable(edge: tuple[Env, Any, Any]) -> None:
    """The edge's 401 for a POST whose body arrives late keeps the browser's connection."""
    env, _, _ = edge
    with socket.create_connection(("127.0.0.1", env.settings.port), timeout=10) as conn:
        headers = {"Host": "maxy.local", "Content-Type": "application/json"}
        send_late_body(conn, "POST /api/admin/version HTTP/1.1", headers, b'{"check": true}')
        refused = read_response(conn)
        assert refused.startswith(b"HTTP/1.1 401") and b"login-required" in refused
        assert b"connection: close" not in refused.lower()
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: maxy.local\r\n\r\n")
        assert read_response(conn).startswith(b"HTTP/1.1 200")


def test_healthz_says_unhealthy_when_the_engine_is_gone(edge: tuple[Env, Any, Any]) -> None:
    env, engine, _ = edge
    engine.stop()
    response = httpx.get(f"http://127.0.0.1:{env.settings.port}/healthz", timeout=10)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy"
    assert body["engine"]["ok"] is False
    assert "engine is not running" in body["engine"]["error"]


def test_a_taken_port_is_one_clear_message(maxy_env: Env) -> None:
    with socket.socket() as squatter:  # another program: its own port, no SO_REUSEPORT
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        done = subprocess.run(
            maxy("edge"),
            env={**maxy_env.vars, "MAXY_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"Port {port} is already in use" in done.stderr
    assert "MAXY_PORT" in done.stderr
    assert "Traceback" not in done.stderr
