"""The SSE feed: snapshot on connect, Last-Event-ID resume, keep-alive comments, clean-up."""

from __future__ import annotations

from typing import Any

from tests.sessions.conftest import Manager, ended
from tests.support.processes import wait_until


def test_last_event_id_resumes_with_exactly_the_missed_deltas(manager: Manager) -> None:
    feed = manager.feed()
    snapshot = feed.next()
    assert snapshot.event == "snapshot" and feed.content_type.startswith("text/event-stream")
    first = manager.spawn("one [double exit_after_turn=1]")
    manager.wait_row(first["id"], ended)
    seen = feed.until(lambda e: e.data["id"] == first["id"] and ended(e.data["row"]))
    feed.close()
    middle = seen[len(seen) // 2]
    after_middle = [(e.event, e.id) for e in seen[seen.index(middle) + 1 :]]

    resumed = manager.feed(last_event_id=middle.id)
    got = [(e.event, e.id) for e in resumed.drain()]
    assert got == after_middle  # no snapshot, nothing twice, nothing missing
    second = manager.spawn("two")
    event = resumed.next()
    assert event.event == "row-created" and event.data["id"] == second["id"]


def test_an_unknown_last_event_id_gets_a_fresh_snapshot(manager: Manager) -> None:
    for stale in ("deadbeef:3", "garbage", "0:999999999"):
        feed = manager.feed(last_event_id=stale)
        assert feed.next().event == "snapshot", stale
        feed.close()


def test_keep_alive_comments_hold_an_idle_feed_open(start_manager: Any) -> None:
    manager: Manager = start_manager(manager_keepalive=0.2)
    feed = manager.feed()
    assert feed.next().event == "snapshot"
    comments = [feed.next(skip_comments=False) for _ in range(3)]
    assert [c.event for c in comments] == ["comment"] * 3
    assert {c.data for c in comments} == {"keep-alive"}


def test_a_closed_feed_is_unsubscribed(manager: Manager) -> None:
    feeds = [manager.feed() for _ in range(3)]
    for feed in feeds:
        feed.next()
    assert manager.status()["rows"]["subscribers"] == 3
    for feed in feeds:
        feed.close()
    wait_until(lambda: manager.status()["rows"]["subscribers"] == 0, 10, "feeds unsubscribed")


def test_two_clients_see_the_same_deltas_in_the_same_order(manager: Manager) -> None:
    a, b = manager.feed(), manager.feed()
    a.next(), b.next()
    rows = [manager.spawn(f"n{i} [double exit_after_turn=1]") for i in range(3)]
    last = rows[-1]["id"]
    got_a = a.until(lambda e: e.data["id"] == last and ended(e.data["row"]))
    got_b = b.until(lambda e: e.data["id"] == last and ended(e.data["row"]))
    assert [(e.id, e.event) for e in got_a] == [(e.id, e.event) for e in got_b]
