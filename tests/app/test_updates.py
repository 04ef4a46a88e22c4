"""The Updates page and its API, served by a real `maxy app` (Granian, Unix socket).

No Neo4j and no engine: nothing on these routes asks them. Offers are recorded the way the USB
watcher records them (:func:`appliance.ota.offers.save_offers`); progress lines are appended the
way ``maxy ota run-request`` appends them (:class:`appliance.ota.offers.Run`).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.ota import offers
from appliance.ota.offers import Offer, Run, UpdatePaths
from appliance.web import cookies
from tests.app.running_app import RunningApp, edge_headers, start_app
from tests.support import sse
from tests.support.stacks import app_env

pytestmark = pytest.mark.timeout(120)

PIN = "482913"
REMOTE_PASSWORD = "correct horse battery"
LAN = edge_headers(network="lan", ip="192.168.1.20", role="admin")
EXTERNAL = edge_headers(network="external", ip="203.0.113.9", role="admin")
PUBLIC = edge_headers(network="external", ip="203.0.113.9", role="public")
SHA_OK = "a1" * 32
SHA_BAD = "b2" * 32


def sample_offers() -> list[Offer]:
    """A verified and a refused offer, as the watcher records them."""
    return [
        Offer(
            id=SHA_OK[:16],
            name="maxy-1.4.0-rpi5.maxyupdate",
            size=123_456_789,
            sha256=SHA_OK,
            verified=True,
            source="/dev/sda1 (SanDisk Cruzer Blade)",
            found_at="2026-05-01T10:00:00Z",
            version="1.4.0",
            boards=("rpi4", "rpi5"),
        ),
        Offer(
            id=SHA_BAD[:16],
            name="tampered.maxyupdate",
            size=1000,
            sha256=SHA_BAD,
            verified=False,
            source="/dev/sda1 (SanDisk Cruzer Blade)",
            found_at="2026-05-01T09:00:00Z",
            error="manifest.json has an invalid signature for key 0123: it was changed.",
        ),
    ]


@pytest.fixture
def app(tmp_path: Path, start_maxy: Any) -> RunningApp:
    env = app_env(tmp_path)
    offers.save_offers(UpdatePaths.from_settings(env.settings), sample_offers())
    return start_app(start_maxy, env)


def paths_of(app: RunningApp) -> UpdatePaths:
    return UpdatePaths.from_settings(app.settings)


def call(
    app: RunningApp,
    method: str,
    path: str,
    *,
    cookie: str | None = None,
    csrf: str | None = None,
    headers: Mapping[str, str] = LAN,
    json: Any = None,
) -> httpx.Response:
    """One request from a fresh client: only the cookie given here is sent."""
    sent = dict(headers)
    if cookie is not None:
        sent["Cookie"] = f"{cookies.COOKIE_NAME}={cookie}"
    if csrf is not None:
        sent["X-Maxy-CSRF"] = csrf
    with app.client() as client:
        return client.request(method, path, headers=sent, json=json)


def session_of(response: httpx.Response) -> tuple[str, str]:
    """(cookie, csrf) of a login answer."""
    assert response.status_code == 200, response.text
    value = response.cookies.get(cookies.COOKIE_NAME)
    assert value
    return value, response.json()["csrf"]


def lan_admin(app: RunningApp) -> tuple[str, str]:
    """Set the PIN on the LAN; return the admin's (cookie, csrf)."""
    return session_of(call(app, "POST", "/api/auth/pin/setup", json={"pin": PIN, "confirm": PIN}))


def remote_admin(app: RunningApp, lan: tuple[str, str]) -> tuple[str, str]:
    """Set the remote password from the LAN, then log in through the tunnel's admin host."""
    cookie, csrf = lan
    body = {"password": REMOTE_PASSWORD, "confirm": REMOTE_PASSWORD}
    answer = call(
        app, "POST", "/api/admin/settings/remote-password", cookie=cookie, csrf=csrf, json=body
    )
    assert answer.status_code == 200, answer.text
    return session_of(
        call(app, "POST", "/api/auth/login", headers=EXTERNAL, json={"password": REMOTE_PASSWORD})
    )


def confirm(app: RunningApp, admin: tuple[str, str], offer_id: str) -> httpx.Response:
    cookie, csrf = admin
    return call(
        app,
        "POST",
        "/api/admin/updates/confirm",
        cookie=cookie,
        csrf=csrf,
        json={"offer": offer_id},
    )


def install(app: RunningApp, admin: tuple[str, str], offer_id: str, nonce: Any) -> httpx.Response:
    cookie, csrf = admin
    return call(
        app,
        "POST",
        "/api/admin/updates/install",
        cookie=cookie,
        csrf=csrf,
        json={"offer": offer_id, "nonce": nonce},
    )


ROUTES = [
    ("GET", "/admin/updates"),
    ("GET", "/api/admin/updates"),
    ("GET", "/api/admin/updates/progress"),
    ("POST", "/api/admin/updates/confirm"),
    ("POST", "/api/admin/updates/install"),
]


def test_without_login_nothing_answers_but_the_login(app: RunningApp) -> None:
    lan_admin(app)
    for method, path in ROUTES:
        answer = call(app, method, path, json={} if method == "POST" else None)
        if path.startswith("/admin/"):
            assert answer.status_code == 303, path
            assert answer.headers["location"] == "/login?next=%2Fadmin%2Fupdates"
        else:
            assert answer.status_code == 401, (path, answer.text)
            assert answer.json()["code"] == "login-required"
    assert not paths_of(app).request.exists()


def test_public_host_names_have_no_updates_page(app: RunningApp) -> None:
    admin = lan_admin(app)
    for method, path in ROUTES:
        answer = call(
            app,
            method,
            path,
            cookie=admin[0],
            csrf=admin[1],
            headers=PUBLIC,
            json={} if method == "POST" else None,
        )
        assert answer.status_code == 404, (path, answer.text)


def test_the_page_and_status_show_the_version_and_the_offers(app: RunningApp) -> None:
    cookie, _ = lan_admin(app)
    page = call(app, "GET", "/admin/updates", cookie=cookie)
    assert page.status_code == 200
    assert "<title>Updates · Maxy</title>" in page.text
    assert 'href="/admin/updates" class="nav-item" data-nav="updates"' in page.text
    assert 'aria-current="page">' in page.text.split('data-nav="updates"')[1].split("</a>")[0]
    assert "/static/js/updates.js" in page.text
    status = call(app, "GET", "/api/admin/updates", cookie=cookie).json()
    assert status["version"]
    assert status["version"] in page.text
    assert status["slots"] is None and status["outcome"] is None  # no OTA state file yet
    assert status["pending"] is False and status["running"] is False and status["lan"] is True
    listed = {o["id"]: o for o in status["offers"]}
    good, bad = sample_offers()
    assert listed[good.id]["verified"] is True and listed[good.id]["version"] == "1.4.0"
    assert listed[bad.id]["verified"] is False
    assert "invalid signature" in listed[bad.id]["error"]
    assert [o["id"] for o in status["offers"]] == [good.id, bad.id]  # newest first


def test_install_needs_the_confirm_step_first(app: RunningApp) -> None:
    admin = lan_admin(app)
    good, bad = sample_offers()
    request = paths_of(app).request
    for nonce in (None, "", "made-up-nonce-0123456789", 42):
        answer = install(app, admin, good.id, nonce)
        assert answer.status_code == 409 and answer.json()["code"] == "confirm-required", nonce
    assert not request.exists()

    refused = confirm(app, admin, bad.id)
    assert refused.status_code == 409 and refused.json()["code"] == "offer-refused"
    assert "invalid signature" in refused.json()["message"]
    missing = confirm(app, admin, "0" * 16)
    assert missing.status_code == 404 and missing.json()["code"] == "no-such-offer"

    step_one = confirm(app, admin, good.id)
    assert step_one.status_code == 200, step_one.text
    nonce = step_one.json()["nonce"]
    assert step_one.json()["offer"]["version"] == "1.4.0"
    assert not request.exists(), "confirming alone must not request an install"

    step_two = install(app, admin, good.id, nonce)
    assert step_two.status_code == 202, step_two.text
    written = json.loads(request.read_text())
    assert written["offer"] == good.id and written["nonce"] == nonce
    assert written["sha256"] == good.sha256 and written["bootId"] == offers.boot_id()
    assert offers.parse_iso(written["requestedAt"])

    # The confirmation is good once; a second install waits for the first.
    again = install(app, admin, good.id, nonce)
    assert again.status_code == 409 and again.json()["code"] == "confirm-required"
    busy = confirm(app, admin, good.id)
    assert busy.status_code == 409 and busy.json()["code"] == "install-pending"
    assert call(app, "GET", "/api/admin/updates", cookie=admin[0]).json()["pending"] is True


def test_a_confirmation_is_for_one_offer_only(app: RunningApp) -> None:
    admin = lan_admin(app)
    good, _ = sample_offers()
    other = Offer(
        id="c3" * 8,
        name="other.maxyupdate",
        size=10,
        sha256="c3" * 32,
        verified=True,
        source="/dev/sdb1",
        found_at="2026-05-02T10:00:00Z",
        version="1.5.0",
    )
    offers.save_offers(paths_of(app), [*sample_offers(), other])
    nonce = confirm(app, admin, good.id).json()["nonce"]
    answer = install(app, admin, other.id, nonce)
    assert answer.status_code == 409 and answer.json()["code"] == "confirm-mismatch"
    assert not paths_of(app).request.exists()


def test_an_offer_of_the_running_version_is_shown_as_installed(app: RunningApp) -> None:
    admin = lan_admin(app)
    running = call(app, "GET", "/api/admin/updates", cookie=admin[0]).json()["version"]
    same = Offer(
        id="d4" * 8,
        name="same.maxyupdate",
        size=10,
        sha256="d4" * 32,
        verified=True,
        source="/dev/sdb1",
        found_at="2026-05-03T10:00:00Z",
        version=running,
    )
    offers.save_offers(paths_of(app), [*sample_offers(), same])
    listed = {
        o["id"]: o for o in call(app, "GET", "/api/admin/updates", cookie=admin[0]).json()["offers"]
    }
    assert listed[same.id]["installed"] is True
    assert listed[sample_offers()[0].id]["installed"] is False  # 1.4.0 is newer than this tree
    answer = confirm(app, admin, same.id)
    assert answer.status_code == 409 and answer.json()["code"] == "already-installed"


def test_changing_anything_needs_the_csrf_header_and_the_home_network(app: RunningApp) -> None:
    lan = lan_admin(app)
    good, _ = sample_offers()
    no_csrf = call(
        app, "POST", "/api/admin/updates/confirm", cookie=lan[0], json={"offer": good.id}
    )
    assert no_csrf.status_code == 403 and no_csrf.json()["code"] == "csrf"

    remote = remote_admin(app, lan)
    status = call(app, "GET", "/api/admin/updates", cookie=remote[0], headers=EXTERNAL)
    assert status.status_code == 200 and status.json()["lan"] is False
    for path, body in (
        ("/api/admin/updates/confirm", {"offer": good.id}),
        ("/api/admin/updates/install", {"offer": good.id, "nonce": "x" * 24}),
    ):
        answer = call(
            app, "POST", path, cookie=remote[0], csrf=remote[1], headers=EXTERNAL, json=body
        )
        assert answer.status_code == 403 and answer.json()["code"] == "lan-only", path
    assert not paths_of(app).request.exists()


def test_the_outcome_of_a_rolled_back_update_is_told_in_a_sentence(app: RunningApp) -> None:
    cookie, _ = lan_admin(app)
    state = app.settings.data_dir / "ota" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text("{not json")
    assert call(app, "GET", "/api/admin/updates", cookie=cookie).json()["outcome"] is None
    # What `maxy ota commit` records after a failed trial (appliance/ota/state.py's format).
    state.write_text(
        json.dumps(
            {
                "format": 1,
                "committed": {"slot": "a", "version": "1.3.2"},
                "slots": {"a": {"version": "1.3.2"}, "b": {"version": "1.4.0"}},
                "trial": None,
                "history": [
                    {
                        "at": "2026-05-01T10:00:00Z",
                        "outcome": "committed",
                        "version": "1.3.2",
                        "from": "1.3.1",
                    },
                    {
                        "at": "2026-05-02T10:00:00Z",
                        "outcome": "health-check-failed",
                        "version": "1.4.0",
                        "from": "1.3.2",
                        "message": "the engine search self-test failed",
                    },
                ],
            }
        )
    )
    status = call(app, "GET", "/api/admin/updates", cookie=cookie).json()
    assert status["outcome"]["result"] == "health-check-failed"
    assert status["outcome"]["message"] == (
        "The update to 1.4.0 failed its health check (the engine search self-test failed); "
        "Maxy went back to 1.3.2."
    )
    assert status["slots"]["committed"] == {"slot": "a", "version": "1.3.2"}
    assert status["slots"]["versions"] == {"a": "1.3.2", "b": "1.4.0"}
    assert status["slots"]["trial"] is None


# ── The progress stream ─────────────────────────────────────────────────────────────────────


def read_events(response: httpx.Response, out: queue.Queue[tuple[str, Any]]) -> None:
    """Put each SSE event of a streamed response on ``out`` as (event, data)."""
    try:
        for event in sse.events(response.iter_lines()):
            out.put((event.event, event.data))
    except httpx.HTTPError:
        pass


@pytest.fixture
def stream(app: RunningApp) -> Iterator[queue.Queue[tuple[str, Any]]]:
    """The progress stream of a logged-in LAN admin, read on a thread."""
    cookie, _ = lan_admin(app)
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    client = app.client(**LAN, Cookie=f"{cookies.COOKIE_NAME}={cookie}")
    with client, client.stream("GET", "/api/admin/updates/progress") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = threading.Thread(target=read_events, args=(response, events), daemon=True)
        reader.start()
        yield events
        response.close()


def next_event(events: queue.Queue[tuple[str, Any]]) -> tuple[str, Any]:
    return events.get(timeout=20)  # a deadline against hangs, not a timing assertion


def test_progress_lines_stream_as_they_are_appended(
    app: RunningApp, stream: queue.Queue[tuple[str, Any]]
) -> None:
    paths = paths_of(app)
    run = Run(paths, offer=sample_offers()[0])
    run.start_file(run.line("start", "Installing Maxy 1.4.0 from maxy-1.4.0-rpi5.maxyupdate."))
    event, first = next_event(stream)
    assert event == "progress" and first["phase"] == "start" and first["run"] == run.id
    for phase, done in (("verify", 10), ("write-root", 50)):
        run.append(run.line(phase, f"{phase} …", done, 100))
        event, line = next_event(stream)
        assert (event, line["phase"], line["done"], line["total"]) == ("progress", phase, done, 100)
    # A new run replaces the file: the stream says so, then follows the new file.
    second = Run(paths, offer=sample_offers()[0])
    second.start_file(second.line("start", "Installing again."))
    assert next_event(stream)[0] == "reset"
    event, line = next_event(stream)
    assert event == "progress" and line["run"] == second.id and line["phase"] == "start"


def test_a_new_connection_replays_the_current_run(app: RunningApp) -> None:
    cookie, _ = lan_admin(app)
    run = Run(paths_of(app))
    run.start_file(run.line("start", "one"))
    run.append(run.line("error", "two"))
    client = app.client(**LAN, Cookie=f"{cookies.COOKIE_NAME}={cookie}")
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    with client, client.stream("GET", "/api/admin/updates/progress") as response:
        threading.Thread(target=read_events, args=(response, events), daemon=True).start()
        assert [next_event(events)[1]["message"] for _ in range(2)] == ["one", "two"]
        response.close()
