"""What the edge decides itself: classification headers, unknown hosts, /api/admin/version."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.edge.conftest import ADMIN_HOST, PUBLIC_HOST, TRUSTED_PROXY, Stack

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


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 200),
        ({"Host": ADMIN_HOST, "Cf-Connecting-Ip": "198.51.100.7"}, 200),
        ({"Host": PUBLIC_HOST, "Cf-Connecting-Ip": "198.51.100.7"}, 404),
        ({"Host": PUBLIC_HOST}, 404),
    ],
)
async def test_version_answers_only_on_the_admin_host_role(
    edge: Stack, headers: dict[str, str], status: int
) -> None:
    before = (await asyncio.to_thread(edge.state))["requests"]
    async with httpx.AsyncClient(base_url=edge.url) as client:
        response = await client.get("/api/admin/version", headers=headers)
    assert response.status_code == status
    if status == 200:
        assert response.json()["installed"]["version"]
        assert response.json()["latest"] is None
    assert (await asyncio.to_thread(edge.state))["requests"] == before  # the edge's own answer
