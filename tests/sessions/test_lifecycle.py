"""Spawn, stop, delete through the manager's HTTP interface, watched on its SSE feed.

Covers the feed's delta order and the three delete shapes, the 404/409 branches, id
resolution, crashes, ignored SIGTERM, stale PID files and a manager restart rebuilding rows.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.sessions.conftest import Manager, ended, restart
from tests.support.processes import wait_until


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] != "Z"


def shape(events: list[Any], session_id: str) -> list[str]:
    """The session's delta kinds, updates left out: created / archived / removed."""
    return [e.event for e in events if e.data["id"] == session_id and e.event != "row-updated"]


def transcript_of(manager: Manager, row: dict[str, Any]) -> Path:
    [path] = manager.config_dir.glob(f"projects/*/{row['id']}.jsonl")
    return path


def test_spawn_answers_when_the_pid_file_exists(manager: Manager) -> None:
    row = manager.spawn("hello [double title=Greeting]")
    assert row["state"] == "live" and row["attached"] is True and row["kind"] == "admin"
    pid_file = manager.config_dir / "sessions" / f"{row['pid']}.json"
    assert json.loads(pid_file.read_text())["sessionId"] == row["id"]
    assert pid_alive(row["pid"])
    done = manager.wait_row(row["id"], lambda r: r["turnEnded"])
    assert done["title"] == "Greeting"
    assert done["status"] == "idle" and done["prompts"] == 1 and done["stopReason"] == "end_turn"


def test_feed_replays_the_index_then_sends_deltas_in_order(manager: Manager) -> None:
    before = manager.spawn("first")
    feed = manager.feed()
    snapshot = feed.next()
    assert snapshot.event == "snapshot"
    assert before["id"] in [r["id"] for r in snapshot.data["rows"]]

    row = manager.spawn("second [double title=Second]")
    events = feed.until(lambda e: e.data["id"] == row["id"] and e.data["row"]["title"] == "Second")
    mine = [e for e in events if e.data["id"] == row["id"]]
    assert mine[0].event == "row-created"
    assert {e.event for e in mine[1:]} == {"row-updated"}

    manager.stop(row["id"])
    archived = feed.until(lambda e: e.data["id"] == row["id"] and e.event != "row-updated")
    assert archived[-1].event == "row-archived"
    assert archived[-1].data["row"]["state"] == "archived"
    assert archived[-1].data["row"]["title"] == "Second"  # the transcript is kept

    assert manager.request("DELETE", f"/{row['id']}").status_code == 200
    # Between the two, "attached" turns false once the process is reaped: an update.
    removed = feed.until(lambda e: e.data["id"] == row["id"] and e.event == "row-removed")
    assert shape(removed, row["id"]) == ["row-removed"]
    ids = [int(e.id.split(":")[1]) for e in [snapshot, *feed.seen[1:]] if e.id]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_pid_gone_with_a_transcript_is_archived_and_stays(manager: Manager) -> None:
    row = manager.spawn("keep me")
    manager.wait_row(row["id"], lambda r: r["turnEnded"])
    feed = manager.feed()
    feed.next()
    assert manager.stop(row["id"])["signal"] == "SIGTERM"
    events = feed.drain()
    assert shape(events, row["id"]) == ["row-archived"]
    assert events[-1].data["row"]["state"] == "archived" and not events[-1].data["row"]["attached"]
    assert transcript_of(manager, row).is_file()
    assert not (manager.config_dir / "sessions" / f"{row['pid']}.json").exists()
    assert not pid_alive(row["pid"])


def test_pid_gone_without_a_transcript_is_removed(manager: Manager) -> None:
    row = manager.spawn()  # no message: the CLI writes no transcript before a first turn
    assert row["transcript"] is None
    feed = manager.feed()
    feed.next()
    manager.stop(row["id"])
    assert shape(feed.drain(), row["id"]) == ["row-removed"]
    assert manager.row(row["id"]) is None


def test_transcript_deleted_for_an_ended_session_is_removed(manager: Manager) -> None:
    row = manager.spawn("short [double exit_after_turn=1]")
    manager.wait_row(row["id"], ended)
    feed = manager.feed()
    feed.next()
    transcript_of(manager, row).unlink()
    [event] = feed.until(lambda e: e.data["id"] == row["id"])
    assert event.event == "row-removed"


def test_moving_between_top_and_archive_is_one_update(manager: Manager) -> None:
    row = manager.spawn("archive me [double exit_after_turn=1]")
    manager.wait_row(row["id"], ended)
    top = transcript_of(manager, row)
    archive = top.parent / "archive" / top.name
    archive.parent.mkdir(exist_ok=True)
    feed = manager.feed()
    feed.next()
    os.rename(top, archive)
    moved = [e for e in feed.drain(0.5) if e.data["id"] == row["id"]]
    assert [e.event for e in moved] == ["row-updated"]
    assert moved[0].data["row"]["transcript"] == "archive"
    os.rename(archive, top)
    back = [e for e in feed.drain(0.5) if e.data["id"] == row["id"]]
    assert [e.event for e in back] == ["row-updated"]
    assert back[0].data["row"]["transcript"] == "top"


def test_stop_is_idempotent_and_delete_refuses_a_live_session(manager: Manager) -> None:
    row = manager.spawn("busy [double hold=1]")
    response = manager.request("DELETE", f"/{row['id']}")
    assert response.status_code == 409 and response.json()["code"] == "session-alive"
    first = manager.stop(row["id"])
    assert first["stopped"] is True and first["row"]["state"] == "archived"
    again = manager.stop(row["id"])
    assert again["stopped"] is False and again["row"]["state"] == "archived"
    assert manager.request("DELETE", f"/{row['id']}").status_code == 200
    assert not list(manager.config_dir.glob(f"projects/*/{row['id']}*"))


def test_delete_removes_transcript_sidecar_and_session_dir(manager: Manager) -> None:
    row = manager.spawn("files [double exit_after_turn=1]")
    manager.wait_row(row["id"], ended)
    project = transcript_of(manager, row).parent
    (project / row["id"] / "subagents").mkdir(parents=True)
    assert (project / f"{row['id']}.meta.json").is_file()
    body = manager.request("DELETE", f"/{row['id']}").json()
    assert body == {"id": row["id"], "deleted": True}
    assert not (project / f"{row['id']}.jsonl").exists()
    assert not (project / f"{row['id']}.meta.json").exists()
    assert not (project / row["id"]).exists()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/{id}"),
        ("POST", "/{id}/stop"),
        ("DELETE", "/{id}"),
        ("GET", "/{id}/log"),
        ("GET", "/{id}/log?download=1"),
        ("GET", "/{id}/log?follow=1"),
        ("POST", "/{id}/input"),
    ],
)
def test_an_unknown_id_is_404_everywhere(manager: Manager, method: str, path: str) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    response = manager.request(method, path.format(id=unknown), json={"text": "x"})
    assert response.status_code == 404
    assert response.json()["code"] == "session-not-found"


def test_any_id_form_resolves_to_the_same_row(manager: Manager) -> None:
    row = manager.spawn("ids [double bridge=cse_01AbCdEf9]")
    for token in (row["id"], str(row["pid"]), "cse_01AbCdEf9", "01AbCdEf9"):
        assert manager.row(token)["id"] == row["id"], token  # type: ignore[index]
    assert manager.stop("01AbCdEf9")["id"] == row["id"]


def test_a_crash_mid_turn_is_reaped_and_its_pid_file_removed(manager: Manager) -> None:
    row = manager.spawn("boom [double crash=turn turn=0.3]")
    gone = manager.wait_row(row["id"], ended)
    assert gone["prompts"] == 1
    assert not (manager.config_dir / "sessions" / f"{row['pid']}.json").exists()
    assert f"op=exit id={row['id']} pid={row['pid']} code=3" in manager.output()


def test_a_crash_before_ready_fails_the_spawn(manager: Manager) -> None:
    response = manager.request("POST", "/rc-spawn", json={"message": "x [double crash=start]"})
    assert response.status_code == 502
    body = response.json()
    assert body["code"] == "spawn-failed" and body["exitCode"] == 3
    assert "told to crash" in body["output"]
    assert manager.status()["caps"]["total"] == 0


def test_a_session_ignoring_sigterm_is_killed(manager: Manager) -> None:
    row = manager.spawn("stubborn [double ignore_term=1]")
    result = manager.stop(row["id"])
    assert result["signal"] == "SIGKILL" and result["row"]["state"] == "archived"
    assert not pid_alive(row["pid"])
    assert f"op=stop-escalate id={row['id']}" in manager.output()


def test_a_stale_pid_file_is_not_a_live_row(manager: Manager) -> None:
    sessions = manager.config_dir / "sessions"
    # A live process (this test) under a PID file written by another, earlier process.
    reused = sessions / f"{os.getpid()}.json"
    stale_id = "11111111-1111-4111-8111-111111111111"
    reused.write_text(
        json.dumps({"pid": os.getpid(), "sessionId": stale_id, "procStart": "1", "status": "idle"})
    )
    dead = sessions / "4194000.json"  # above any pid this machine hands out
    dead.write_text(json.dumps({"pid": 4194000, "sessionId": stale_id, "status": "idle"}))
    wait_until(lambda: not reused.exists() and not dead.exists(), 10, "stale PID files removed")
    assert manager.row(stale_id) is None
    assert "op=stale-pid-file" in manager.output()


def test_a_restarted_manager_rebuilds_rows_from_disk(start_manager: Any) -> None:
    first: Manager = start_manager()
    done = first.spawn("remember [double title=Kept exit_after_turn=1]")
    first.wait_row(done["id"], ended)
    live = first.spawn("running")
    second = restart(first)
    try:
        rows = {r["id"]: r for r in second.request("GET", "/sessions").json()["rows"]}
        assert rows[done["id"]]["title"] == "Kept" and rows[done["id"]]["state"] == "archived"
        # The manager's shutdown stopped the live one; its transcript makes it archived now.
        assert rows[live["id"]]["state"] == "archived"
        assert rows[done["id"]]["senderId"] is None and rows[done["id"]]["kind"] == "admin"
    finally:
        second.shutdown()
    assert "[manager-shutdown] op=master-audit held=0 stopped=1" in first.output()


def test_stop_signals_the_whole_process_group(manager: Manager) -> None:
    row = manager.spawn("group [double hold=1]")
    assert os.getpgid(row["pid"]) == row["pid"] and os.getsid(row["pid"]) == row["pid"]
    manager.stop(row["id"])
    with pytest.raises(ProcessLookupError):
        os.killpg(row["pid"], signal.SIG_DFL or 0)


def test_a_session_that_outlives_its_manager_is_an_orphan_and_can_be_stopped(
    start_manager: Any,
) -> None:
    first: Manager = start_manager()
    row = first.spawn("survivor [double ignore_hup=1]")
    first.wait_row(row["id"], lambda r: r["turnEnded"])
    worker = first.status()["pid"]
    os.kill(worker, signal.SIGKILL)  # a crash: no shutdown, the PTY master just closes
    os.kill(first.process.proc.pid, signal.SIGKILL)
    first.process.proc.wait()
    assert pid_alive(row["pid"])
    second = restart(first)
    try:
        found = second.row(row["id"])
        assert found is not None and found["state"] == "live" and found["attached"] is False
        assert second.status()["audit"]["orphanLiveSessionsNoMaster"] == 1
        result = second.stop(row["id"])
        assert result["stopped"] is True and result["row"]["state"] == "archived"
        assert not pid_alive(row["pid"])
        assert second.status()["audit"]["orphanLiveSessionsNoMaster"] == 0
    finally:
        second.shutdown()
