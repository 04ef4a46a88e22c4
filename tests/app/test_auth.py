"""Onboarding, login, cookies, CSRF, throttling, "Sign out other devices", against a real app.

Requests go over the app's Unix socket. Without X-Maxy-* headers a request is a local process
(LAN, admin host, never throttled); with them it is what the edge classified (the contract).
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from appliance.web import cookies
from appliance.web.bodies import DRAIN_BYTES
from tests.app.running_app import RunningApp, edge_headers, start_app
from tests.support.processes import Env
from tests.support.rawhttp import read_response, send_late_body
from tests.support.stacks import HOST

PIN = "482913"
REMOTE_PASSWORD = "correct horse battery"
ORIGIN = f"http://{HOST}"
LAN = edge_headers(network="lan", ip="192.168.1.20", role="admin")
EXTERNAL = edge_headers(network="external", ip="203.0.113.9", role="admin")
PUBLIC = edge_headers(network="external", ip="203.0.113.9", role="public")


@pytest.fixture
def auth_app(maxy_env: Env, start_maxy: Any) -> RunningApp:
    return start_app(start_maxy, maxy_env)


def call(
    app: RunningApp,
    method: str,
    path: str,
    *,
    cookie: str | None = None,
    csrf: str | None = None,
    headers: Mapping[str, str] | None = None,
    json: Any = None,
    content: bytes | None = None,
) -> httpx.Response:
    """One request from a fresh client: only the cookie given here is sent."""
    sent = dict(headers or {})
    if cookie is not None:
        sent["Cookie"] = f"{cookies.COOKIE_NAME}={cookie}"
    if csrf is not None:
        sent["X-Maxy-CSRF"] = csrf
    with app.client() as client:
        return client.request(method, path, headers=sent, json=json, content=content)


def session_cookie(response: httpx.Response) -> str:
    """The value of the login cookie a response sets."""
    header = response.headers["set-cookie"]
    match = re.match(rf"{cookies.COOKIE_NAME}=([^;]*)", header)
    assert match, header
    return match.group(1)


def cookie_attributes(response: httpx.Response) -> set[str]:
    return {part.strip().lower() for part in response.headers["set-cookie"].split(";")[1:]}


def onboard(app: RunningApp, pin: str = PIN) -> tuple[str, str]:
    """Set the PIN through onboarding; return (cookie, csrf)."""
    response = call(
        app, "POST", "/api/auth/pin/setup", json={"pin": pin, "confirm": pin}, headers=LAN
    )
    assert response.status_code == 200, response.text
    return session_cookie(response), response.json()["csrf"]


def login(app: RunningApp, headers: Mapping[str, str] = LAN, **body: str) -> httpx.Response:
    return call(app, "POST", "/api/auth/login", json=body or {"pin": PIN}, headers=headers)


def test_first_visit_on_the_lan_is_onboarding(auth_app: RunningApp) -> None:
    home = call(auth_app, "GET", "/", headers=LAN)
    assert home.status_code == 303 and home.headers["location"] == "/onboarding"
    assert call(auth_app, "GET", "/admin/data", headers=LAN).headers["location"] == "/onboarding"
    assert call(auth_app, "GET", "/login", headers=LAN).headers["location"] == "/onboarding"
    api = call(auth_app, "GET", "/api/admin/session", headers=LAN)
    assert api.status_code == 401 and api.json()["code"] == "setup-required"
    page = call(auth_app, "GET", "/onboarding", headers=LAN)
    assert page.status_code == 200
    assert 'data-maxy-auth="setup"' in page.text and 'name="confirm"' in page.text
    assert "<title>Welcome · Maxy</title>" in page.text
    # Onboarding exists only on the LAN.
    assert call(auth_app, "GET", "/onboarding", headers=EXTERNAL).status_code == 404
    assert call(auth_app, "GET", "/onboarding", headers=PUBLIC).status_code == 404


def test_onboarding_sets_the_pin_once_and_logs_in(auth_app: RunningApp) -> None:
    response = call(
        auth_app, "POST", "/api/auth/pin/setup", json={"pin": PIN, "confirm": PIN}, headers=LAN
    )
    assert response.status_code == 200
    assert {"httponly", "samesite=strict", "path=/", f"max-age={30 * 24 * 3600}"} <= (
        cookie_attributes(response)
    )
    assert "secure" not in cookie_attributes(response)
    body = response.json()
    assert body["network"] == "lan" and body["csrf"] and body["sessionId"]
    cookie = session_cookie(response)
    info = call(auth_app, "GET", "/api/admin/session", cookie=cookie, headers=LAN)
    assert info.status_code == 200
    assert info.json() == {k: body[k] for k in ("sessionId", "csrf", "network", "expiresAt")}
    # The PIN is stored hashed in a private file.
    pin_file = auth_app.settings.keys_dir / "admin-pin"
    assert stat.S_IMODE(pin_file.stat().st_mode) == 0o600
    assert PIN not in pin_file.read_text()
    # Onboarding is over: the page sends to login, a second setup is refused.
    again = call(auth_app, "GET", "/onboarding", headers=LAN)
    assert again.status_code == 303 and again.headers["location"] == "/login"
    second = call(
        auth_app,
        "POST",
        "/api/auth/pin/setup",
        json={"pin": "1111", "confirm": "1111"},
        headers=LAN,
    )
    assert second.status_code == 409 and second.json()["code"] == "pin-already-set"
    assert login(auth_app, headers={}, pin="1111").status_code == 401
    assert login(auth_app, headers={}).status_code == 200


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"pin": "12", "confirm": "12"}, "invalid-pin"),
        ({"pin": "1234567890123", "confirm": "1234567890123"}, "invalid-pin"),
        ({"pin": "12ab", "confirm": "12ab"}, "invalid-pin"),
        ({"pin": "1234", "confirm": "4321"}, "pin-mismatch"),
        ({"pin": 1234, "confirm": 1234}, "invalid-pin"),
    ],
)
def test_onboarding_rejects_bad_pins(auth_app: RunningApp, body: dict[str, Any], code: str) -> None:
    response = call(auth_app, "POST", "/api/auth/pin/setup", json=body, headers=LAN)
    assert response.status_code == 400 and response.json()["code"] == code
    assert response.json()["message"]
    assert not (auth_app.settings.keys_dir / "admin-pin").exists()


def test_setup_and_login_need_json_from_this_origin(auth_app: RunningApp) -> None:
    form = call(
        auth_app,
        "POST",
        "/api/auth/pin/setup",
        content=b"pin=1234&confirm=1234",
        headers={**LAN, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 415 and form.json()["code"] == "json-required"
    cross = call(
        auth_app,
        "POST",
        "/api/auth/pin/setup",
        json={"pin": PIN, "confirm": PIN},
        headers={**LAN, "Origin": "http://evil.example"},
    )
    assert cross.status_code == 403 and cross.json()["code"] == "csrf"
    same = call(
        auth_app,
        "POST",
        "/api/auth/pin/setup",
        json={"pin": PIN, "confirm": PIN},
        headers={**LAN, "Origin": ORIGIN},
    )
    assert same.status_code == 200
    referer = login(auth_app, headers={**LAN, "Referer": "http://evil.example/x"}, pin=PIN)
    assert referer.status_code == 403
    assert (
        login(auth_app, headers={**LAN, "Referer": f"{ORIGIN}/login"}, pin=PIN).status_code == 200
    )


def test_the_cookie_is_secure_when_the_edge_saw_https(auth_app: RunningApp) -> None:
    onboard(auth_app)
    response = login(auth_app, headers={**LAN, "X-Forwarded-Proto": "https"})
    assert "secure" in cookie_attributes(response)


def test_not_logged_in(auth_app: RunningApp) -> None:
    onboard(auth_app)
    page = call(auth_app, "GET", "/admin/data?q=a b&x=1", headers=LAN)
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=%2Fadmin%2Fdata%3Fq%3Da%2520b%26x%3D1"
    home = call(auth_app, "GET", "/", headers=LAN)
    assert home.headers["location"] == "/login?next=%2F"
    api = call(auth_app, "GET", "/api/admin/session", headers=LAN)
    assert api.status_code == 401
    assert api.json()["code"] == "login-required" and api.json()["message"]
    post = call(auth_app, "POST", "/api/admin/session/rotate", headers=LAN)
    assert post.status_code == 401
    form = call(auth_app, "GET", "/login?next=/admin/graph", headers=LAN)
    assert form.status_code == 200
    assert 'data-next="/admin/graph"' in form.text and 'name="pin"' in form.text
    for evil in ("//evil.example/", "https://evil.example/", "/\\evil.example", "javascript:x"):
        page = call(auth_app, "GET", f"/login?next={quote(evil, safe='')}", headers=LAN)
        assert 'data-next="/"' in page.text, evil
    assert login(auth_app, pin=PIN, next="//evil.example/").json()["next"] == "/"
    assert login(auth_app, pin=PIN, next="/admin/graph").json()["next"] == "/admin/graph"


def test_wrong_pin_is_401_then_throttled(auth_app: RunningApp) -> None:
    onboard(auth_app)
    client = edge_headers(network="lan", ip="192.168.1.77", role="admin")
    wrong = login(auth_app, headers=client, pin="000000")
    assert wrong.status_code == 401 and wrong.json()["code"] == "bad-credentials"
    # The next attempt comes within the wait: refused unchecked, even with the right PIN. (If
    # this machine took longer than the wait between two requests, fail again: the wait doubles.)
    for _ in range(6):
        right = login(auth_app, headers=client, pin=PIN)
        if right.status_code == 429:
            break
        assert right.status_code == 200
        assert login(auth_app, headers=client, pin="000000").status_code == 401
    assert right.status_code == 429
    assert right.json()["code"] == "throttled"
    assert int(right.headers["retry-after"]) >= 1
    assert "set-cookie" not in right.headers
    # Another client is not affected.
    other = login(auth_app, headers=edge_headers(network="lan", ip="192.168.1.78"), pin=PIN)
    assert other.status_code == 200
    assert re.search(
        r"\[auth\] op=login-failed ip=192\.168\.1\.77 network=lan failures=1 retry_after_s=1\b",
        auth_app.output(),
    )


def test_local_processes_are_never_throttled(auth_app: RunningApp) -> None:
    onboard(auth_app)
    for _ in range(8):
        response = login(auth_app, headers={}, pin="000000")
        assert response.status_code == 401
        assert "retry-after" not in response.headers
    assert login(auth_app, headers={}, pin=PIN).status_code == 200
    assert "ip=unix network=lan failures=8 retry_after_s=0" in auth_app.output()


def test_only_a_genuine_cookie_is_a_session(auth_app: RunningApp) -> None:
    cookie, _ = onboard(auth_app)
    assert (
        call(auth_app, "GET", "/api/admin/session", cookie=cookie, headers=LAN).status_code == 200
    )
    session = cookies.verify(cookies.load_key(auth_app.settings.cookie_key_path), cookie, "lan")
    assert session is not None
    payload, mac = cookie.split(".")
    longer = cookies.Session(session.id, "lan", session.issued_at, session.expires_at + 10**6, 0)
    forged_payload = cookies.sign(os.urandom(32), longer).split(".")[0]
    expired = cookies.Session(session.id, "lan", 1_000, 2_000, 0)
    key = cookies.load_key(auth_app.settings.cookie_key_path)
    bad = {
        "truncated": cookie[:-3],
        "payload only": payload,
        "other key": cookies.sign(os.urandom(32), session),
        "forged payload, old mac": f"{forged_payload}.{mac}",
        "expired": cookies.sign(key, expired),
        "empty": "",
        "junk": "x" * 5000,
    }
    for name, value in bad.items():
        api = call(auth_app, "GET", "/api/admin/session", cookie=value, headers=LAN)
        assert api.status_code == 401, name
        assert api.json()["code"] == "login-required", name
        page = call(auth_app, "GET", "/admin/data", cookie=value, headers=LAN)
        assert page.status_code == 303 and page.headers["location"].startswith("/login"), name


def test_new_session_rejects_every_other_cookie(auth_app: RunningApp) -> None:
    first, first_csrf = onboard(auth_app)
    second_response = login(auth_app)
    second = session_cookie(second_response)
    no_csrf = call(auth_app, "POST", "/api/admin/session/rotate", cookie=first, headers=LAN)
    assert no_csrf.status_code == 403 and no_csrf.json()["code"] == "csrf"
    rotated = call(
        auth_app, "POST", "/api/admin/session/rotate", cookie=first, csrf=first_csrf, headers=LAN
    )
    assert rotated.status_code == 200
    fresh = session_cookie(rotated)
    body = rotated.json()
    assert body["csrf"] != first_csrf and body["network"] == "lan"
    for old in (first, second):
        stale = call(auth_app, "GET", "/api/admin/session", cookie=old, headers=LAN)
        assert stale.status_code == 401 and stale.json()["code"] == "session-rotated"
        assert stale.json()["message"]
    info = call(auth_app, "GET", "/api/admin/session", cookie=fresh, headers=LAN)
    assert info.status_code == 200 and info.json()["sessionId"] == body["sessionId"]
    generation = (auth_app.settings.keys_dir / "session-generation").read_text().strip()
    assert generation == "1"
    # A stale cookie navigating to an admin page is sent to log in again.
    page = call(auth_app, "GET", "/admin/data", cookie=first, headers=LAN)
    assert page.status_code == 303 and page.headers["location"].startswith("/login")


def test_state_changes_need_the_csrf_token(auth_app: RunningApp) -> None:
    cookie, token = onboard(auth_app)
    other_token = login(auth_app).json()["csrf"]
    path = "/api/admin/settings/remote-password"
    body = {"password": REMOTE_PASSWORD}
    for sent in (None, "", other_token, token[:-1], token + "x"):
        refused = call(auth_app, "POST", path, cookie=cookie, csrf=sent, headers=LAN, json=body)
        assert refused.status_code == 403 and refused.json()["code"] == "csrf"
    assert not (auth_app.settings.keys_dir / "remote-password").exists()
    done = call(auth_app, "POST", path, cookie=cookie, csrf=token, headers=LAN, json=body)
    assert done.status_code == 200
    assert stat.S_IMODE((auth_app.settings.keys_dir / "remote-password").stat().st_mode) == 0o600


def test_a_refused_request_leaves_its_connection_usable(auth_app: RunningApp) -> None:
    """A refused POST whose body arrives after its headers is answered on a connection that takes
    the next request: a client that reuses it (httpx, a page's next fetch) is never reset. A
    body larger than the app reads before refusing is left, and the answer says close."""
    cookie, _ = onboard(auth_app)
    headers = {"Host": HOST, "Cookie": f"{cookies.COOKIE_NAME}={cookie}", **LAN}
    headers["Content-Type"] = "application/json"
    body = json.dumps({"password": REMOTE_PASSWORD}).encode()
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(auth_app.socket))
        send_late_body(conn, "POST /api/admin/settings/remote-password HTTP/1.1", headers, body)
        refused = read_response(conn)
        assert refused.startswith(b"HTTP/1.1 403") and b'"csrf"' in refused
        assert b"connection: close" not in refused.lower()
        conn.sendall(f"GET /api/admin/session HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        assert read_response(conn).startswith(b"HTTP/1.1 401")
        # And a POST to no route at all (404 from the router, not the guard).
        send_late_body(conn, "POST /api/no-such-route HTTP/1.1", headers, body)
        assert read_response(conn).startswith(b"HTTP/1.1 404")
        conn.sendall(f"GET /api/admin/session HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        assert read_response(conn).startswith(b"HTTP/1.1 401")
    # A body declared larger than the drain, of which only a part has arrived: it is left unread,
    # and the answer tells the client that the connection ends with it.
    big = {**headers, "Content-Length": str(16 * DRAIN_BYTES)}
    head = "POST /api/admin/settings/remote-password HTTP/1.1\r\n"
    head += "".join(f"{key}: {value}\r\n" for key, value in big.items()) + "\r\n"
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(auth_app.socket))
        conn.sendall(head.encode() + b"x" * 1024)
        refused = read_response(conn)
        assert refused.startswith(b"HTTP/1.1 403") and b"connection: close" in refused.lower()
        assert conn.recv(1) == b""
    assert not (auth_app.settings.keys_dir / "remote-password").exists()


def test_the_public_host_never_reaches_admin_routes(auth_app: RunningApp) -> None:
    cookie, token = onboard(auth_app)
    for network in ("lan", "external"):
        public = edge_headers(network=network, ip="198.51.100.3", role="public")
        for method, path in (
            ("GET", "/admin"),
            ("GET", "/admin/data"),
            ("GET", "/api/admin/session"),
            ("POST", "/api/admin/session/rotate"),
            ("GET", "/login"),
            ("POST", "/api/auth/login"),
            ("POST", "/api/auth/pin/setup"),
            ("POST", "/api/auth/logout"),
        ):
            response = call(
                auth_app,
                method,
                path,
                cookie=cookie,
                csrf=token,
                headers=public,
                json={"pin": PIN},
            )
            assert response.status_code == 404, (network, path)
            assert response.json()["code"] == "not-found"
        # "/" on the public host is the public agent page, never the admin guard.
        home = call(auth_app, "GET", "/", headers=public)
        assert home.status_code != 303 and "location" not in home.headers


def test_the_external_admin_host_needs_the_remote_password(auth_app: RunningApp) -> None:
    cookie, token = onboard(auth_app)
    page = call(auth_app, "GET", "/login", headers=EXTERNAL)
    assert page.status_code == 200
    assert "Remote access is not set up yet" in page.text and 'name="pin"' not in page.text
    unset = login(auth_app, headers=EXTERNAL, password=REMOTE_PASSWORD)
    assert unset.status_code == 403 and unset.json()["code"] == "remote-password-unset"
    assert "remote password" in unset.json()["message"]
    # A LAN cookie is worthless remotely.
    api = call(auth_app, "GET", "/api/admin/session", cookie=cookie, headers=EXTERNAL)
    assert api.status_code == 401
    # Setting it needs a logged-in LAN admin and 10 characters.
    path = "/api/admin/settings/remote-password"
    anonymous = call(auth_app, "POST", path, headers=LAN, json={"password": REMOTE_PASSWORD})
    assert anonymous.status_code == 401
    short = call(
        auth_app, "POST", path, cookie=cookie, csrf=token, headers=LAN, json={"password": "short"}
    )
    assert short.status_code == 400 and short.json()["code"] == "invalid-password"
    ok = call(
        auth_app,
        "POST",
        path,
        cookie=cookie,
        csrf=token,
        headers=LAN,
        json={"password": REMOTE_PASSWORD, "confirm": REMOTE_PASSWORD},
    )
    assert ok.status_code == 200
    page = call(auth_app, "GET", "/login", headers=EXTERNAL)
    assert 'name="password"' in page.text and 'name="pin"' not in page.text
    # The PIN does not open the remote door; the password does, for 12 hours.
    assert login(auth_app, headers=EXTERNAL, password=PIN).status_code == 401
    assert login(auth_app, headers=EXTERNAL, pin=PIN).status_code in (401, 429)
    remote = login(
        auth_app, headers=edge_headers("external", "203.0.113.200"), password=REMOTE_PASSWORD
    )
    assert remote.status_code == 200
    assert f"max-age={12 * 3600}" in cookie_attributes(remote)
    remote_cookie, remote_csrf = session_cookie(remote), remote.json()["csrf"]
    info = call(auth_app, "GET", "/api/admin/session", cookie=remote_cookie, headers=EXTERNAL)
    assert info.status_code == 200 and info.json()["network"] == "external"
    # ... which is not valid on the LAN, and cannot change the remote password.
    assert (
        call(auth_app, "GET", "/api/admin/session", cookie=remote_cookie, headers=LAN).status_code
        == 401
    )
    change = call(
        auth_app,
        "POST",
        path,
        cookie=remote_cookie,
        csrf=remote_csrf,
        headers=EXTERNAL,
        json={"password": "another long password"},
    )
    assert change.status_code == 403 and change.json()["code"] == "lan-only"
    assert login(auth_app, headers=LAN, password=REMOTE_PASSWORD).status_code == 401


def test_logout_clears_the_cookie(auth_app: RunningApp) -> None:
    cookie, _ = onboard(auth_app)
    response = call(auth_app, "POST", "/api/auth/logout", cookie=cookie, headers=LAN)
    assert response.status_code == 200
    header = response.headers["set-cookie"]
    assert header.startswith(f"{cookies.COOKIE_NAME}=")
    assert "max-age=0" in cookie_attributes(response)
    cross = call(
        auth_app, "POST", "/api/auth/logout", headers={**LAN, "Origin": "http://x.example"}
    )
    assert cross.status_code == 403


def test_change_pin_needs_the_current_one(auth_app: RunningApp) -> None:
    cookie, token = onboard(auth_app)
    path = "/api/admin/settings/pin"
    wrong = call(
        auth_app,
        "POST",
        path,
        cookie=cookie,
        csrf=token,
        headers={},
        json={"current": "000000", "pin": "7777", "confirm": "7777"},
    )
    assert wrong.status_code == 401
    done = call(
        auth_app,
        "POST",
        path,
        cookie=cookie,
        csrf=token,
        headers={},
        json={"current": PIN, "pin": "7777", "confirm": "7777"},
    )
    assert done.status_code == 200
    assert login(auth_app, headers={}, pin="7777").status_code == 200
    assert login(auth_app, headers={}, pin=PIN).status_code == 401


@pytest.mark.anyio
async def test_admin_websockets_need_a_session_and_this_origin(auth_app: RunningApp) -> None:
    from websockets.asyncio.client import unix_connect
    from websockets.exceptions import InvalidStatus

    cookie, _ = onboard(auth_app)
    attempts = {
        "no cookie": {"Origin": ORIGIN, **LAN},
        "cross origin": {
            "Origin": "http://evil.example",
            "Cookie": f"maxy_session={cookie}",
            **LAN,
        },
        "no origin": {"Cookie": f"maxy_session={cookie}", **LAN},
        "public host": {"Origin": ORIGIN, "Cookie": f"maxy_session={cookie}", **PUBLIC},
    }
    for name, headers in attempts.items():
        with pytest.raises(InvalidStatus) as caught:
            async with unix_connect(
                str(auth_app.socket), f"ws://{HOST}/admin/ws-probe", additional_headers=headers
            ):
                pass
        assert caught.value.response.status_code == 403, name
    refusals = auth_app.output().count("[auth] op=websocket-refused path=/admin/ws-probe")
    assert refusals == len(attempts)
    # With both, the guard lets it through (no such socket exists, so the router closes it).
    with pytest.raises(InvalidStatus):
        async with unix_connect(
            str(auth_app.socket),
            f"ws://{HOST}/admin/ws-probe",
            additional_headers={"Origin": ORIGIN, "Cookie": f"maxy_session={cookie}", **LAN},
        ):
            pass
    assert auth_app.output().count("op=websocket-refused path=/admin/ws-probe") == refusals


def test_a_restarted_app_keeps_everyone_logged_in(
    auth_app: RunningApp, maxy_env: Env, start_maxy: Any
) -> None:
    cookie, csrf = onboard(auth_app)
    assert auth_app.process.stop() is not None
    again = start_app(start_maxy, maxy_env)  # same data dir: same key file, same generation
    session = call(again, "GET", "/api/admin/session", cookie=cookie, headers=LAN)
    assert session.status_code == 200, session.text
    assert session.json()["csrf"] == csrf
