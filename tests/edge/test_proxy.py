"""The edge proxies HTTP, SSE and WebSockets to a real Granian app on a Unix socket."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from appliance.core.config import load_settings
from tests.edge.conftest import PUBLIC_HOST, Stack
from tests.support.auth import admin_cookie
from tests.support.processes import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

RESTARTING_EVENT = b'event: restarting\ndata: {"retryMs":2000}\n\n'


def state_says(edge: Stack, check: Any) -> Callable[[], Awaitable[bool]]:
    async def predicate() -> bool:
        return bool(check(await asyncio.to_thread(edge.state)))

    return predicate


def headers_seen(echo: dict[str, Any]) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for name, value in echo["headers"]:
        seen.setdefault(name, []).append(value)
    return seen


async def test_request_arrives_with_host_body_and_forwarded_headers(edge: Stack) -> None:
    async with httpx.AsyncClient(base_url=edge.url) as client:
        response = await client.post(
            "/echo?q=a%20b&x=1", content=b"hello app", headers={"Host": "maxy.local:19200"}
        )
    assert response.status_code == 200
    echo = response.json()
    assert (echo["method"], echo["path"], echo["query"], echo["body"]) == (
        "POST",
        "/echo",
        "q=a%20b&x=1",
        "hello app",
    )
    seen = headers_seen(echo)
    assert seen["host"] == ["maxy.local:19200"]
    assert seen["x-forwarded-for"] == ["127.0.0.1"]
    assert seen["x-forwarded-proto"] == ["http"]
    assert seen["x-forwarded-host"] == ["maxy.local:19200"]
    assert seen["x-maxy-network"] == ["lan"]
    assert seen["x-maxy-host-role"] == ["admin"]


async def test_hop_by_hop_headers_stay_on_their_hop(edge: Stack) -> None:
    hop = {
        "Connection": "keep-alive, X-Private",
        "X-Private": "for the edge only",
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "Trailer": "X-Checksum",
        "Proxy-Authorization": "Basic c2VjcmV0",
        "Proxy-Connection": "keep-alive",
        "Upgrade": "example/1",
        "X-End-To-End": "kept",
    }
    async with httpx.AsyncClient(base_url=edge.url) as client:
        echo = (await client.get("/echo", headers=hop)).json()
        response = await client.get("/hop")
    seen = headers_seen(echo)
    dropped = ("x-private", "keep-alive", "te", "trailer", "proxy-authorization")
    for name in (*dropped, "proxy-connection", "upgrade", "transfer-encoding"):
        assert name not in seen, name
    assert "keep-alive" not in seen.get("connection", [""])[0]
    assert seen["x-end-to-end"] == ["kept"]
    # And on the way back: the app's Connection-listed header and Keep-Alive stop at the edge.
    assert response.text == "ok"
    assert "x-private" not in response.headers
    assert "keep-alive" not in response.headers
    assert response.headers["x-end-to-end"] == "kept"


async def test_spoofed_maxy_headers_are_replaced_by_the_edges_own(edge: Stack) -> None:
    spoof = {
        "Host": PUBLIC_HOST,
        "Cf-Connecting-Ip": "203.0.113.50",
        "X-Maxy-Network": "lan",
        "X-Maxy-Client-IP": "127.0.0.1",
        "X-Maxy-Host-Role": "admin",
        "X-Maxy-Anything": "made up",
        "X-Maxy-CSRF": "token-from-the-page",
        "X-Forwarded-For": "10.0.0.1",
    }
    async with httpx.AsyncClient(base_url=edge.url) as client:
        echo = (await client.get("/echo", headers=spoof)).json()
    seen = headers_seen(echo)
    assert seen["x-maxy-network"] == ["external"]
    assert seen["x-maxy-client-ip"] == ["203.0.113.50"]
    assert seen["x-maxy-host-role"] == ["public"]
    assert "x-maxy-anything" not in seen
    assert seen["x-maxy-csrf"] == ["token-from-the-page"]  # the browser's CSRF header passes
    # The tunnel connector is believed: its chain is kept and the connector is appended.
    assert seen["x-forwarded-for"] == ["10.0.0.1, 127.0.0.1"]


async def test_a_streamed_response_arrives_before_it_is_finished(edge: Stack) -> None:
    ident = uuid.uuid4().hex
    async with (
        httpx.AsyncClient(base_url=edge.url, timeout=10) as client,
        edge.app_client() as app,
        client.stream("GET", f"/stream/{ident}") as response,
    ):
        chunks = response.aiter_raw()
        assert await anext(chunks) == b"first\n"
        # The app has not produced the last chunk yet: it waits for us to release it.
        assert (await app.get("/_state")).json()["produced"][ident] == 1
        await app.post(f"/_release/{ident}")
        assert b"".join([chunk async for chunk in chunks]) == b"last\n"
    assert (await asyncio.to_thread(edge.state))["produced"][ident] == 2


async def test_an_upload_streams_through_before_the_client_finishes(edge: Stack) -> None:
    piece = bytes(range(256)) * 256  # 64 KiB
    sent: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        sent.append(piece)
        yield piece
        # Hold the rest back until the app has the first piece: proof it was not buffered.
        await wait_until_async(
            state_says(edge, lambda s: s["upload_chunks"] >= 1), 10, "the first piece"
        )
        for _ in range(31):
            sent.append(piece)
            yield piece

    async with httpx.AsyncClient(base_url=edge.url, timeout=30) as client:
        response = await client.post("/upload", content=body())
    result = response.json()
    data = b"".join(sent)
    assert result["length"] == len(data) == 2 * 1024 * 1024
    assert result["sha256"] == hashlib.sha256(data).hexdigest()
    assert result["chunks"] > 1


async def test_sse_events_and_keepalives_arrive_one_by_one(edge: Stack) -> None:
    channel = uuid.uuid4().hex
    async with (
        httpx.AsyncClient(base_url=edge.url, timeout=10) as client,
        edge.app_client() as app,
        client.stream("GET", f"/sse?channel={channel}") as response,
    ):
        assert response.headers["content-type"] == "text/event-stream"
        chunks = response.aiter_raw()
        assert await anext(chunks) == b": hello\n\n"
        # Each event is read before the next is published: nothing waits in a buffer.
        for event in (b"event: tick\ndata: 1\n\n", b": keep-alive\n\n", b'data: {"n": 2}\n\n'):
            assert (await app.post(f"/_publish?channel={channel}", content=event)).json() == {
                "delivered": 1
            }
            assert await anext(chunks) == event


async def test_closing_the_client_cancels_the_upstream_stream(edge: Stack) -> None:
    channel = uuid.uuid4().hex
    async with (
        httpx.AsyncClient(base_url=edge.url, timeout=10) as client,
        client.stream("GET", f"/sse?channel={channel}") as response,
    ):
        chunks = response.aiter_raw()  # kept: dropping the iterator would close the stream
        assert await anext(chunks) == b": hello\n\n"
        assert (await asyncio.to_thread(edge.state))["subscribers"][channel] == 1
    await wait_until_async(
        state_says(edge, lambda s: s["disconnects"].get(channel) == 1),
        10,
        "the app to see the client leave",
    )
    assert (await asyncio.to_thread(edge.state))["subscribers"][channel] == 0


async def test_websocket_echo_text_binary_and_the_apps_close(edge: Stack) -> None:
    async with connect(
        f"{edge.ws_url}/ws",
        origin=f"http://127.0.0.1:{edge.port}",  # type: ignore[arg-type]
        subprotocols=["maxy.v1", "other"],  # type: ignore[list-item]
        additional_headers={"X-Maxy-Network": "external", "X-Trace": "t1"},
    ) as ws:
        assert ws.subprotocol == "maxy.v1"
        handshake = json.loads(await ws.recv())["headers"]
        assert handshake["x-maxy-network"] == "lan"
        assert handshake["x-trace"] == "t1"
        assert handshake["host"] == f"127.0.0.1:{edge.port}"
        await ws.send("hello")
        assert await ws.recv() == "hello"
        await ws.send(b"\x00\x01\xfe\xff")
        assert await ws.recv() == b"\x00\x01\xfe\xff"
        await ws.send("close:4001:the app says bye")
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert (ws.close_code, ws.close_reason) == (4001, "the app says bye")


async def test_the_clients_close_code_reaches_the_app(edge: Stack) -> None:
    before = len((await asyncio.to_thread(edge.state))["ws_closed"])
    async with connect(f"{edge.ws_url}/ws") as ws:
        await ws.recv()
        await ws.close(4002, "the browser says bye")
    await wait_until_async(
        state_says(edge, lambda s: len(s["ws_closed"]) > before), 10, "the app to see it"
    )
    code, _reason = (await asyncio.to_thread(edge.state))["ws_closed"][before]
    # Granian's ASGI websocket.disconnect carries the code but not the client's reason.
    assert code == 4002


async def test_a_cross_origin_websocket_is_refused_before_the_app(edge: Stack) -> None:
    before = (await asyncio.to_thread(edge.state))["ws_opened"]
    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"{edge.ws_url}/ws", origin="http://evil.example"):  # type: ignore[arg-type]
            pass
    assert refused.value.response.status_code == 403
    assert (await asyncio.to_thread(edge.state))["ws_opened"] == before


async def test_the_apps_refusal_of_a_websocket_is_relayed(edge: Stack) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"{edge.ws_url}/ws", additional_headers={"X-Reject": "1"}):
            pass
    assert refused.value.response.status_code == 403


async def test_while_the_app_is_down_the_edge_answers_503(edge: Stack) -> None:
    edge.kill_app()
    async with httpx.AsyncClient(base_url=edge.url, timeout=10) as client:
        api = await client.get("/api/admin/sites")
        page = await client.get("/admin/data", headers={"Accept": "text/html,*/*;q=0.8"})
        form = await client.post("/login", headers={"Accept": "text/html"}, content=b"x")
        version = await client.get(
            "/api/admin/version", headers=admin_cookie(load_settings(edge.vars))
        )
    assert api.status_code == 503
    assert api.headers["retry-after"] == "2"
    assert api.json() == {
        "code": "app-restarting",
        "message": "Server is restarting — reconnect will happen automatically.",
    }
    assert page.status_code == 503 and page.headers["retry-after"] == "2"
    assert page.headers["content-type"].startswith("text/html")
    assert '<meta http-equiv="refresh" content="2">' in page.text
    assert "Testbrand is restarting" in page.text
    assert form.status_code == 503 and form.json()["code"] == "app-restarting"
    assert version.status_code == 200 and version.json()["latest"] is None
    assert "op=app-unavailable" in edge.edge_output()

    edge.start_app()
    async with httpx.AsyncClient(base_url=edge.url, timeout=10) as client:
        assert (await client.get("/echo")).status_code == 200


async def test_an_open_event_stream_is_told_the_app_is_restarting(edge: Stack) -> None:
    channel = uuid.uuid4().hex
    async with (
        httpx.AsyncClient(base_url=edge.url, timeout=10) as client,
        client.stream("GET", f"/sse?channel={channel}") as response,
    ):
        chunks = response.aiter_raw()
        assert await anext(chunks) == b": hello\n\n"
        await asyncio.to_thread(edge.kill_app)
        rest = b"".join([chunk async for chunk in chunks])  # ends: the edge closed it
    assert rest == RESTARTING_EVENT


async def test_an_open_websocket_is_closed_service_restart_when_the_app_dies(edge: Stack) -> None:
    async with connect(f"{edge.ws_url}/ws") as ws:
        await ws.recv()
        await asyncio.to_thread(edge.kill_app)
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert (ws.close_code, ws.close_reason) == (1012, "app-restarting")


async def test_a_websocket_to_a_stopped_app_is_told_to_try_again(edge: Stack) -> None:
    edge.kill_app()
    async with connect(f"{edge.ws_url}/ws") as ws:
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert (ws.close_code, ws.close_reason) == (1013, "app-restarting")
