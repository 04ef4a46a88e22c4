"""What the edge decides itself: classification headers, unknown hosts, /api/admin/version."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from appliance.core.config import load_settings
from tests.edge.conftest import ADMIN_HOST, PUBLIC_HOST, TRUSTED_PROXY, Stack
from tests.support.auth import admin_cookie

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def classification(echo: dict[str, Any]) -> tuple[str, str, str]:
    seen = dict(echo["headers"])
    return seen["x-maxy-network"], seen["x-maxy-client-ip"], seen["x-maxy-host-role"]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, ("lan", "127.0.0.1", "admin")),
        ({"Host": "maxy.local:19200"}, ("lan", "127.0.0.1", "admin")),
        (
            {"Host": ADMIN_HOST, "Cf-Connecting-Ip": "198.51.100.7", "Cf-Ray": "8a-LHR"},
            ("external", "198.51.100.7", "admin"),
        ),
        (
            {"Host": PUBLIC_HOST, "Cf-Connecting-Ip": "2001:db8::7"},
            ("external", "2001:db8::7", "public"),
        ),
    ],
)
async def test_the_app_is_told_who_is_asking(
    edge: Stack, headers: dict[str, str], expected: tuple[str, str, str]
) -> None:
    async with httpx.AsyncClient(base_url=edge.url) as client:
        response = await client.get("/echo", headers=headers)
    assert classification(response.json()) == expected


async def test_a_trusted_proxys_forwarded_client_is_believed(edge: Stack) -> None:
    transport = httpx.AsyncHTTPTransport(local_address=TRUSTED_PROXY)
    async with httpx.AsyncClient(transport=transport, base_url=edge.url) as client:
        echo = (
            await client.get(
                "/echo", headers={"Host": PUBLIC_HOST, "X-Forwarded-For": "198.51.100.23"}
            )
        ).json()
    assert classification(echo) == ("external", "198.51.100.23", "public")
    assert dict(echo["headers"])["x-forwarded-for"] == f"198.51.100.23, {TRUSTED_PROXY}"


async def test_an_external_request_for_an_unknown_host_never_reaches_the_app(edge: Stack) -> None:
    before = (await asyncio.to_thread(edge.state))["requests"]
    tunnel = {"Host": "maxy-1234.example.net", "Cf-Connecting-Ip": "198.51.100.7"}
    async with httpx.AsyncClient(base_url=edge.url) as client:
        response = await client.get("/echo", headers=tunnel)
        version = await client.get("/api/admin/version", headers=tunnel)
    assert response.status_code == 404 and version.status_code == 404
    assert response.json()["code"] == "not-found"
    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"{edge.ws_url}/ws", additional_headers=tunnel):
            pass
    assert refused.value.response.status_code == 404
    assert (await asyncio.to_thread(edge.state))["requests"] == before
    assert (
        "op=classify peer=127.0.0.1 network=external role=none host=maxy-1234.example.net"
        in edge.edge_output()
    )


TUNNEL_ADMIN = {"Host": ADMIN_HOST, "Cf-Connecting-Ip": "198.51.100.7"}


@pytest.mark.parametrize(
    ("headers", "network", "status"),
    [
        ({}, "lan", 200),
        (TUNNEL_ADMIN, "external", 200),
        ({}, None, 401),  # no cookie
        (TUNNEL_ADMIN, None, 401),
        (TUNNEL_ADMIN, "lan", 401),  # a LAN cookie is no login through the tunnel
        ({}, "external", 401),
        ({"Host": PUBLIC_HOST, "Cf-Connecting-Ip": "198.51.100.7"}, "external", 404),
        ({"Host": PUBLIC_HOST}, "lan", 404),
    ],
)
async def test_version_answers_only_an_admin_session_on_the_admin_host_role(
    edge: Stack, headers: dict[str, str], network: str | None, status: int
) -> None:
    if network is not None:
        headers = headers | admin_cookie(load_settings(edge.vars), network)
    before = (await asyncio.to_thread(edge.state))["requests"]
    async with httpx.AsyncClient(base_url=edge.url) as client:
        response = await client.get("/api/admin/version", headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.json()["code"] == "login-required"
    if status == 200:
        assert response.json()["installed"]["version"]
        assert response.json()["latest"] is None
    assert (await asyncio.to_thread(edge.state))["requests"] == before  # the edge's own answer


@pytest.mark.parametrize(
    "host",
    ["rebound.attacker.example", "maxy.local.attacker.example", "evil:19200"],
)
async def test_a_lan_request_for_another_name_is_misdirected_before_anything_else(
    edge: Stack, host: str
) -> None:
    # DNS rebinding: a page on the owner's network re-points its own name at the device; the
    # browser then sends that name as Host. The edge answers 421 and the app never sees it.
    before = (await asyncio.to_thread(edge.state))["requests"]
    async with httpx.AsyncClient(base_url=edge.url) as client:
        api = await client.post("/api/pin", headers={"Host": host}, json={"pin": "1234"})
        page = await client.get("/", headers={"Host": host})
        version = await client.get(
            "/api/admin/version",
            headers={"Host": host} | admin_cookie(load_settings(edge.vars)),
        )
    for response in (api, page, version):
        assert response.status_code == 421
        assert response.json()["code"] == "unknown-host"
        assert "MAXY_LAN_HOSTNAMES" in response.json()["message"]
    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"{edge.ws_url}/ws", additional_headers={"Host": host}):
            pass
    assert refused.value.response.status_code == 421
    assert (await asyncio.to_thread(edge.state))["requests"] == before
    assert f"host={host.split(':')[0]}" in edge.edge_output()


@pytest.mark.parametrize(
    "host", ["maxy.local", "maxy.local:19200", "localhost", "127.0.0.1:8080", "[::1]", "app.lan"]
)
async def test_the_devices_own_names_reach_the_app(edge: Stack, host: str) -> None:
    async with httpx.AsyncClient(base_url=edge.url) as client:
        response = await client.get("/echo", headers={"Host": host})
    assert response.status_code == 200
    assert classification(response.json())[0] == "lan"
