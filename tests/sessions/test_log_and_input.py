"""GET /<id>/log (202 pending, 200, download headers, follow, jsonl-missing-on-disk),
POST /<id>/input and its turn check, closeAfterTurn, and a slow-flushing CLI."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from tests.sessions.conftest import Manager, ended
from tests.support.processes import wait_until
from tests.support.rawhttp import read_response, send_late_body


def lines_of(body: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in body.decode().splitlines()]


def test_log_is_pending_before_the_first_flush(manager: Manager) -> None:
    row = manager.spawn()
    for query in ("", "?follow=1", "?download=1"):
        response = manager.request("GET", f"/{row['id']}/log{query}")
        assert response.status_code == 202, query
        assert response.json() == {"pending": True, "id": row["id"]}


def test_log_after_a_turn_is_the_transcript(manager: Manager) -> None:
    row = manager.spawn("what is in the log")
    manager.wait_row(row["id"], lambda r: r["turnEnded"])
    response = manager.request("GET", f"/{row['id']}/log")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.headers["cache-control"] == "no-store"
    assert "content-disposition" not in response.headers
    entries = lines_of(response.content)
    assert [e["type"] for e in entries if e["type"] in ("user", "assistant")] == [
        "user",
        "assistant",
    ]


@pytest.mark.parametrize(
    ("title", "filename"),
    [
        ("Plain", "Plain"),
        ('Weird / "quoted" \\ name\r\nX-Injected: 1', "Weird-quoted-name-X-Injected-1"),
        ("../../etc/passwd", "etc-passwd"),
        ("Ünïcödé ✓", "n-c-d"),
    ],
)
def test_download_is_an_attachment_with_a_safe_name(
    manager: Manager, title: str, filename: str
) -> None:
    row = manager.spawn("dl [double exit_after_turn=1]")
    manager.wait_row(row["id"], ended)
    [path] = manager.config_dir.glob(f"projects/*/{row['id']}.jsonl")
    with path.open("a") as handle:
        handle.write(json.dumps({"type": "custom-title", "customTitle": title}) + "\n")
    manager.wait_row(row["id"], lambda r: r["title"] == title)
    # download wins over follow
    response = manager.request("GET", f"/{row['id']}/log?download=1&follow=1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.headers["cache-control"] == "no-store"
    expected = f'attachment; filename="{filename}-{row["id"][:8]}.jsonl"'
    assert response.headers["content-disposition"] == expected
    assert response.content == path.read_bytes()


def test_a_transcript_missing_on_disk_is_404(manager: Manager) -> None:
    row = manager.spawn("soon gone [double hold=1]")
    manager.wait_row(row["id"], lambda r: r["transcript"] == "top")
    [path] = manager.config_dir.glob(f"projects/*/{row['id']}.jsonl")
    path.unlink()
    manager.wait_row(row["id"], lambda r: r["transcript"] is None)
    for query in ("", "?download=1", "?follow=1"):
        response = manager.request("GET", f"/{row['id']}/log{query}")
        assert response.status_code == 404, query
        assert response.json()["code"] == "jsonl-missing-on-disk"


def test_follow_flushes_then_tails_until_the_session_ends(manager: Manager) -> None:
    row = manager.spawn("first turn")
    manager.wait_row(row["id"], lambda r: r["turnEnded"])
    received: list[bytes] = []
    done = threading.Event()

    def follow() -> None:
        with manager.client(timeout=30) as client:
            with client.stream("GET", f"/{row['id']}/log?follow=1") as response:
                assert response.headers["content-type"] == "application/x-ndjson"
                for chunk in response.iter_bytes():
                    received.append(chunk)
        done.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    wait_until(lambda: b"first turn" in b"".join(received), 10, "the initial flush")
    manager.request("POST", f"/{row['id']}/input", json={"text": "second turn"})
    wait_until(lambda: b"Reply 2" in b"".join(received), 10, "the tail")
    assert not done.is_set()
    manager.stop(row["id"])
    assert done.wait(10), "the follow stream did not end with the session"
    [path] = manager.config_dir.glob(f"projects/*/{row['id']}.jsonl")
    assert b"".join(received) == path.read_bytes()


def test_input_starts_a_turn_and_logs_the_ack(manager: Manager) -> None:
    row = manager.spawn()
    response = manager.request("POST", f"/{row['id']}/input", json={"text": "typed prompt"})
    assert response.status_code == 200 and response.json()["written"] == len("typed prompt\r")
    done = manager.wait_row(row["id"], lambda r: r["turnEnded"])
    assert done["prompts"] == 1 and done["transcript"] == "top"
    wait_until(
        lambda: f"op=input-submitted id={row['id']} ackMs=" in manager.output(), 10, "ack line"
    )


def test_input_that_starts_no_turn_is_logged(manager: Manager) -> None:
    row = manager.spawn()
    manager.request("POST", f"/{row['id']}/input", json={"text": "/exit"})
    wait_until(lambda: f"op=input-no-turn id={row['id']}" in manager.output(), 15, "no-turn line")


def test_input_to_an_ended_session_is_409(manager: Manager) -> None:
    row = manager.spawn("bye [double exit_after_turn=1]")
    manager.wait_row(row["id"], ended)
    response = manager.request("POST", f"/{row['id']}/input", json={"text": "hello?"})
    assert response.status_code == 409 and response.json()["code"] == "session-not-live"


def test_a_refusal_before_the_body_arrives_leaves_the_connection_usable(manager: Manager) -> None:
    """A 404 for a session that does not exist, answered before the request's body has arrived,
    keeps the connection the app pools to the manager."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(manager.socket))
        headers = {"Host": "manager", "Content-Type": "application/json"}
        send_late_body(conn, "POST /no-such-session/stop HTTP/1.1", headers, b'{"why": "x"}')
        assert read_response(conn).startswith(b"HTTP/1.1 404")
        conn.sendall(b"GET /sessions HTTP/1.1\r\nHost: manager\r\n\r\n")
        assert read_response(conn).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("body", [{"text": 3}, {"submit": True}, {"text": "x", "submit": "yes"}])
def test_bad_input_is_400(manager: Manager, body: dict[str, object]) -> None:
    row = manager.spawn()
    response = manager.request("POST", f"/{row['id']}/input", json=body)
    assert response.status_code == 400 and response.json()["code"] == "bad-request"


def test_a_body_past_the_limit_is_413_and_the_session_gets_nothing(manager: Manager) -> None:
    row = manager.spawn()
    response = manager.request("POST", f"/{row['id']}/input", json={"text": "x" * (2 << 20)})
    assert response.status_code == 413 and response.json()["code"] == "too-large"
    assert f"op=input-submitted id={row['id']}" not in manager.output()


@pytest.mark.parametrize("reason", ["end_turn", "stop_sequence", "max_tokens", "refusal"])
def test_close_after_turn_stops_when_the_turn_ends(manager: Manager, reason: str) -> None:
    row = manager.spawn(f"one shot [double stop_reason={reason}]", closeAfterTurn=True)
    gone = manager.wait_row(row["id"], ended)
    assert gone["stopReason"] == reason and gone["closeAfterTurn"] is True
    assert f"op=close-after-turn id={row['id']} stopReason={reason}" in manager.output()


def test_close_after_turn_waits_through_tool_use(manager: Manager) -> None:
    row = manager.spawn("uses a tool [double stop_reason=tool_use]", closeAfterTurn=True)
    seen = manager.wait_row(row["id"], lambda r: r["stopReason"] == "tool_use" and r["lines"] >= 4)
    assert seen["state"] == "live" and seen["turnEnded"] is False
    assert f"op=close-after-turn id={row['id']}" not in manager.output()
    assert manager.row(row["id"])["state"] == "live"  # type: ignore[index]


def test_a_slow_flush_never_shows_half_a_line(manager: Manager) -> None:
    row = manager.spawn("slow [double slow_flush=0.4 title=Slow]")
    samples: list[bytes] = []

    def sample() -> bool:
        response = manager.request("GET", f"/{row['id']}/log")
        if response.status_code == 200:
            samples.append(response.content)
            lines_of(response.content)  # every line parses: no half-written line is served
        row_now = manager.row(row["id"])
        return row_now is not None and row_now["title"] == "Slow"

    wait_until(sample, 20, "the slow turn to finish", 0.1)
    path: Path = next(manager.config_dir.glob(f"projects/*/{row['id']}.jsonl"))
    assert any(len(s) < len(path.read_bytes()) for s in samples)
    counted = manager.row(row["id"])["lines"]  # type: ignore[index]
    assert counted == len(path.read_bytes().splitlines())


def test_spawn_rejects_a_bad_body(manager: Manager) -> None:
    bodies: list[object] = [[], {"permissionMode": "yolo"}, {"resume": "x"}, {"specialist": "1"}]
    for body in bodies:
        response = manager.request("POST", "/rc-spawn", json=body)
        assert response.status_code == 400, body
        assert response.json()["code"] == "bad-request"
    response = manager.request("POST", "/rc-spawn", content=b"{not json")
    assert response.status_code == 400
