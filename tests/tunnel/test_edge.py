"""The real edge with host names from cloudflared's config.yml: roles, reloads and /healthz."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.core.config import load_settings
from appliance.tunnel.config import load, save, save_roles, set_route
from tests.edge.conftest import Stack, edge_stack
from tests.support.processes import wait_until

ADMIN = "maxy.example.com"
PUBLIC = "example.com"
TUNNEL_ID = "6ff42ae2-765d-4adf-8112-31c55c1551ef"
DOUBLE = Path(__file__).with_name("cloudflared")


class Ready(BaseHTTPRequestHandler):
    """cloudflared's metrics endpoint: /ready with its count of connections to Cloudflare."""

    connections = 4

    def do_GET(self) -> None:
        body = json.dumps({"status": 200, "readyConnections": self.connections}).encode()
        self.send_response(200 if self.connections else 503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def metrics() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def write_config(data: Path, hosts: dict[str, str], metrics: str | None = None) -> None:
    config = data / "cloudflared" / "config.yml"
    doc = load(config)
    doc["tunnel"] = TUNNEL_ID
    if metrics:
        doc["metrics"] = metrics
    for host in hosts:
        set_route(doc, host, "http://localhost:19200")
    save(config, doc)
    save_roles(data / "cloudflared" / "roles.json", hosts)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, metrics: str) -> Iterator[Stack]:
    """The test upstream and `maxy edge`, with no host names in the settings at all."""
    home = tmp_path_factory.mktemp("tunnel-edge")
    write_config(home / "data", {ADMIN: "admin", PUBLIC: "public"}, metrics)
    with edge_stack(home, owner="Tunnel Owner") as stack:
        yield stack


def echo(stack: Stack, headers: dict[str, str]) -> httpx.Response:
    return httpx.get(stack.url + "/echo", headers=headers, timeout=10)


def verdict(response: httpx.Response) -> tuple[str, str, str]:
    assert response.status_code == 200, response.text
    seen = dict(response.json()["headers"])
    return seen["x-maxy-network"], seen["x-maxy-client-ip"], seen["x-maxy-host-role"]


def cloudflared_shaped(host: str, client: str = "203.0.113.9") -> dict[str, str]:
    """What cloudflared sends the origin: Cloudflare's client-IP headers and the public Host."""
    return {
        "Host": host,
        "Cf-Connecting-Ip": client,
        "Cf-Ray": "8a1b2c3d4e5f-LHR",
        "Cf-Visitor": '{"scheme":"https"}',
        "X-Forwarded-Proto": "https",
    }


def test_tunnel_requests_are_external_and_routed_by_the_config_role(stack: Stack) -> None:
    assert verdict(echo(stack, cloudflared_shaped(ADMIN))) == ("external", "203.0.113.9", "admin")
    assert verdict(echo(stack, cloudflared_shaped(PUBLIC, "2001:db8::9"))) == (
        "external",
        "2001:db8::9",
        "public",
    )
    # A public host name never reaches admin routes; an unknown one never reaches the app.
    version = httpx.get(stack.url + "/api/admin/version", headers=cloudflared_shaped(PUBLIC))
    assert version.status_code == 404
    assert echo(stack, cloudflared_shaped("other.example.net")).status_code == 404


def test_the_lan_stays_lan(stack: Stack) -> None:
    # The same loopback peer without cloudflared's headers, naming the device, is the LAN.
    assert verdict(echo(stack, {"Host": f"localhost:{stack.port}"})) == (
        "lan",
        "127.0.0.1",
        "admin",
    )


def test_a_changed_config_is_picked_up_and_a_broken_one_ignored(stack: Stack) -> None:
    data = Path(stack.vars["MAXY_DATA_DIR"])
    late = "shop.example.com"
    assert echo(stack, cloudflared_shaped(late)).status_code == 404
    write_config(data, {ADMIN: "admin", PUBLIC: "public", late: "public"})
    assert verdict(echo(stack, cloudflared_shaped(late)))[2] == "public"

    config = data / "cloudflared" / "config.yml"
    good = config.read_text()
    config.write_text("ingress:\n  - hostname: shop.example.com\n    service: nowhere\n")
    try:
        assert verdict(echo(stack, cloudflared_shaped(late)))[2] == "public"  # last good kept
        assert "op=roles-reload kept=previous" in stack.edge_output()
    finally:
        config.write_text(good)


def tunnel_health(stack: Stack) -> dict[str, Any]:
    tunnel: dict[str, Any] = httpx.get(stack.url + "/healthz", timeout=10).json()["tunnel"]
    return tunnel


def test_healthz_reports_the_tunnel(stack: Stack, metrics: str) -> None:
    body = httpx.get(stack.url + "/healthz", timeout=10).json()
    assert "engine" in body and "neo4j" in body  # the existing fields stay
    tunnel = body["tunnel"]
    assert tunnel["configured"] is True and tunnel["tunnelId"] == TUNNEL_ID
    assert tunnel["connected"] is True and tunnel["connections"] == 4
    assert "TunnelSecret" not in json.dumps(body)


def test_healthz_without_metrics_falls_back_to_the_process(tmp_path: Path, stack: Stack) -> None:
    settings = load_settings(stack.vars)
    config = settings.cloudflared_config
    saved = config.read_text()
    doc = load(config)
    del doc["metrics"]
    save(config, doc)
    connector = subprocess.Popen([str(DOUBLE), "tunnel", "--config", str(config), "run"])
    try:
        wait_until(
            lambda: tunnel_health(stack)["process"] == "running",
            30,
            "the edge to see the cloudflared process",
        )
        assert tunnel_health(stack)["connected"] is None
    finally:
        connector.kill()
        connector.wait()
        config.write_text(saved)
