"""/api/admin/sessions/* relays the real session manager through the real app.

`maxy manager` runs the `claude` double in real PTYs; `maxy app` serves on its Unix socket and is
asked the way the edge asks it (the X-Maxy-* classification headers, the login cookie, the CSRF
token). Spawning, the live feed, stopping, the transcript and the terminal all go through the
app; the manager is also asked directly where only it can say what happened (feed clients).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import unix_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from appliance.app.sessions import request_headers
from tests.app.running_app import edge_headers
from tests.support.processes import wait_until
from tests.support.sse import Event, sse_events
from tests.support.stacks import BASE_URL, HOST, Stack, running_stack, sessions_env, start_manager

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

API = "/api/admin/sessions"
UNAVAILABLE = (
    "The session manager is not running: start it with `just run` "
    "(or systemctl start maxy-manager)."
)
DEADLINE = 15.0  # against hangs only; nothing here asserts how long anything takes


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("sessions-api")
    env = sessions_env(root)
    with running_stack(env, root / "logs", "app") as running:
        start_manager(running)
        yield running


@pytest.fixture(scope="module")
def login(stack: Stack) -> tuple[httpx.Cookies, str]:
    """The admin's cookie and CSRF token."""
    cookies = stack.admin_cookies()
    with stack.client(cookies) as client:
        token = client.get("/api/admin/session").json()["csrf"]
    return cookies, str(token)


@pytest.fixture
def manager_up(stack: Stack) -> Stack:
    """The stack with its manager running (restarted if a test stopped it)."""
    process = stack.processes.get("manager")
    if process is None or process.proc.poll() is not None:
        start_manager(stack)
    return stack


@contextlib.asynccontextmanager
async def app_client(
    stack: Stack, login: tuple[httpx.Cookies, str], *, role: str = "admin", csrf: bool = True
) -> AsyncIterator[httpx.AsyncClient]:
    """An async client on the app's socket, classified by the edge as a LAN admin."""
    cookies, token = login
    headers = edge_headers(role=role)
    if csrf:
        headers["X-Maxy-CSRF"] = token
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(stack.env.settings.app_socket)),
        base_url=BASE_URL,
        headers=headers,
        cookies=cookies,
        timeout=30.0,
    ) as client:
        yield client


def manager_status(stack: Stack) -> dict[str, Any]:
    """What the manager itself counts (asked on its own socket)."""
    transport = httpx.HTTPTransport(uds=str(stack.env.settings.manager_socket))
    with httpx.Client(transport=transport, base_url="http://manager", timeout=10) as client:
        body: dict[str, Any] = client.get("/status").json()
        return body


async def next_event(events: AsyncIterator[Event], match: Callable[[Event], bool]) -> Event:
    with anyio.fail_after(DEADLINE):
        async for event in events:
            if match(event):
                return event
    pytest.fail("the event stream ended")


async def spawn(client: httpx.AsyncClient, message: str) -> dict[str, Any]:
    response = await client.post(f"{API}/spawn", json={"message": message})
    assert response.status_code == 201, response.text
    row: dict[str, Any] = response.json()["row"]
    return row


async def test_a_spawn_shows_in_the_list_and_on_the_feed_then_stops(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    async with app_client(manager_up, login) as client:
        async with client.stream("GET", f"{API}/events") as feed:
            assert feed.status_code == 200
            assert feed.headers["content-type"].startswith("text/event-stream")
            events = sse_events(feed)
            snapshot = await next_event(events, lambda e: True)
            assert snapshot.event == "snapshot" and isinstance(snapshot.data["rows"], list)

            row = await spawn(client, "Hello from the app [double title=Boiler-check]")
            created = await next_event(events, lambda e: e.event == "row-created")
            assert created.data["id"] == row["id"]

            listed = (await client.get(API)).json()
            assert row["id"] in {r["id"] for r in listed["rows"]}
            shown = await client.get(f"{API}/{row['id']}")
            assert shown.status_code == 200 and shown.json()["row"]["state"] == "live"

            stopped = await client.post(f"{API}/{row['id']}/stop")
            assert stopped.status_code == 200, stopped.text
            archived = await next_event(
                events, lambda e: e.event == "row-archived" and e.data["id"] == row["id"]
            )
            assert archived.data["row"]["state"] == "archived"


async def test_last_event_id_resumes_with_the_missed_deltas(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    async with app_client(manager_up, login) as client:
        async with client.stream("GET", f"{API}/events") as feed:
            snapshot = await next_event(sse_events(feed), lambda e: True)
        assert snapshot.event == "snapshot" and snapshot.id
        row = await spawn(client, "Missed while away")
        await client.post(f"{API}/{row['id']}/stop")
        resume = {"Last-Event-ID": snapshot.id}
        async with client.stream("GET", f"{API}/events", headers=resume) as feed:
            first = await next_event(sse_events(feed), lambda e: True)
    assert (first.event, first.data["id"]) == ("row-created", row["id"])


async def test_a_browser_that_leaves_closes_the_managers_feed(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    def feeds() -> int:
        return int(manager_status(manager_up)["rows"]["subscribers"])

    wait_until(lambda: feeds() == 0, DEADLINE, "earlier tests' feeds to close")
    async with app_client(manager_up, login) as client:
        async with client.stream("GET", f"{API}/events") as feed:
            await next_event(sse_events(feed), lambda e: True)
            assert feeds() == 1
    wait_until(lambda: feeds() == 0, DEADLINE, "the manager to drop the feed of a client that left")


async def test_the_transcript_passes_through_with_the_managers_headers(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    async with app_client(manager_up, login) as client:
        row = await spawn(client, "Keep this line [double title=Log-test]")
        stopped = await client.post(f"{API}/{row['id']}/stop")
        assert stopped.status_code == 200

        download = await client.get(f"{API}/{row['id']}/log", params={"download": "1"})
        assert download.status_code == 200
        assert download.headers["content-type"] == "application/x-ndjson"
        assert download.headers["cache-control"] == "no-store"
        disposition = download.headers["content-disposition"]
        assert disposition.startswith('attachment; filename="') and disposition.endswith('.jsonl"')
        lines = [json.loads(line) for line in download.text.splitlines()]
        users = [line["message"]["content"] for line in lines if line.get("type") == "user"]
        assert users == ["Keep this line [double title=Log-test]"]

        # follow=1 on an ended session flushes the transcript and ends the stream.
        async with client.stream("GET", f"{API}/{row['id']}/log?follow=1") as followed:
            assert "content-disposition" not in followed.headers
            body = b"".join([chunk async for chunk in followed.aiter_bytes()])
        assert body == download.content


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/no-such-session"),
        ("DELETE", "/no-such-session"),
        ("POST", "/no-such-session/stop"),
        ("GET", "/no-such-session/log"),
        ("POST", "/no-such-session/input"),
        ("GET", "/status"),  # the manager's own routes are not sessions
        ("GET", "/public-spawn"),
    ],
)
async def test_an_unknown_session_is_404(
    manager_up: Stack, login: tuple[httpx.Cookies, str], method: str, path: str
) -> None:
    async with app_client(manager_up, login) as client:
        response = await client.request(method, API + path, json={"text": "hi"})
    assert response.status_code == 404
    assert response.json()["code"] == "session-not-found"


async def test_public_sessions_cannot_be_started_from_the_admin_api(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    async with app_client(manager_up, login) as client:
        response = await client.post(f"{API}/public-spawn", json={"message": "hi"})
    assert response.status_code == 405


async def test_a_public_host_name_has_no_session_api(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    async with app_client(manager_up, login, role="public") as client:
        for path in ("", "/events"):
            response = await client.get(API + path)
            assert response.status_code == 404, path
        spawned = await client.post(f"{API}/spawn", json={"message": "hi"})
        assert spawned.status_code == 404


async def test_a_spawn_without_the_csrf_token_is_refused(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    rows_before = manager_status(manager_up)["rows"]["rows"]
    async with app_client(manager_up, login, csrf=False) as client:
        response = await client.post(f"{API}/spawn", json={"message": "forged"})
    assert response.status_code == 403 and response.json()["code"] == "csrf"
    assert manager_status(manager_up)["rows"]["rows"] == rows_before


async def test_not_logged_in_is_401(manager_up: Stack) -> None:
    transport = httpx.AsyncHTTPTransport(uds=str(manager_up.env.settings.app_socket))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        response = await client.get(API, headers=edge_headers())
    assert response.status_code == 401 and response.json()["code"] == "login-required"


def test_the_browsers_login_and_classification_never_reach_the_manager() -> None:
    scope = {
        "headers": [
            (b"cookie", b"maxy_session=secret"),
            (b"x-maxy-csrf", b"token"),
            (b"x-maxy-network", b"lan"),
            (b"authorization", b"Basic c2VjcmV0"),
            (b"last-event-id", b"1:2"),
            (b"content-type", b"application/json"),
            (b"accept", b"text/event-stream"),
        ]
    }
    assert request_headers(scope) == [
        (b"last-event-id", b"1:2"),
        (b"content-type", b"application/json"),
        (b"accept", b"text/event-stream"),
    ]


async def test_the_terminal_relays_the_session_pty(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    cookies, _ = login
    async with app_client(manager_up, login) as client:
        row = await spawn(client, "Terminal check")
    sock = str(manager_up.env.settings.app_socket)
    headers = {**edge_headers(), "Cookie": f"maxy_session={cookies['maxy_session']}"}
    headers["Origin"] = f"http://{HOST}"
    uri = f"ws://{HOST}{API}/{row['id']}/terminal"
    with anyio.fail_after(DEADLINE):
        async with unix_connect(sock, uri=uri, additional_headers=headers) as terminal:
            sync = json.loads(await terminal.recv())
            assert sync["type"] == "sync"
            seen = b""
            while b"claude double" not in seen:
                frame = await terminal.recv()
                if isinstance(frame, bytes):
                    seen += frame
            await terminal.send(json.dumps({"type": "input", "data": "!size\r"}))
            while b"size " not in seen:
                frame = await terminal.recv()
                if isinstance(frame, bytes):
                    seen += frame
        # An unknown session: the manager's own close (4404) reaches the browser.
        async with unix_connect(
            sock, uri=f"ws://{HOST}{API}/nobody-here/terminal", additional_headers=headers
        ) as missing:
            refusal = json.loads(await missing.recv())
            with pytest.raises(ConnectionClosed):
                await missing.recv()
    assert refusal["code"] == "session-not-found"
    assert missing.close_code == 4404


async def test_a_cross_site_page_cannot_open_a_terminal(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    cookies, _ = login
    async with app_client(manager_up, login) as client:
        row = await spawn(client, "Not for other sites")
    headers = {
        **edge_headers(),
        "Cookie": f"maxy_session={cookies['maxy_session']}",
        "Origin": "http://evil.example",
    }
    uri = f"ws://{HOST}{API}/{row['id']}/terminal"
    with pytest.raises(InvalidStatus) as refused:
        async with unix_connect(
            str(manager_up.env.settings.app_socket), uri=uri, additional_headers=headers
        ):
            pass
    assert refused.value.response.status_code == 403


# Last: stops the manager (the next test that needs it starts it again).
async def test_a_stopped_manager_is_503_manager_unavailable(
    manager_up: Stack, login: tuple[httpx.Cookies, str]
) -> None:
    manager_up.processes["manager"].stop()
    async with app_client(manager_up, login) as client:
        for method, path in (("GET", ""), ("GET", "/events"), ("POST", "/spawn")):
            response = await client.request(method, API + path, json={"message": "hi"})
            assert response.status_code == 503, path
            assert response.json() == {"code": "manager-unavailable", "message": UNAVAILABLE}
    assert "op=manager-unavailable" in manager_up.processes["app"].output()
    start_manager(manager_up)
    async with app_client(manager_up, login) as client:
        assert (await client.get(API)).status_code == 200
