"""The admin plugin's session tools against a real `maxy manager` running the `claude` double:
list, read a reply, stop, and specialists started as roles under the manager's caps (four
requested with a cap of three: the oldest idle one is evicted, or the fourth is refused while
all are busy; the idle reaper stops a silent one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from appliance.core.accounts import create_account
from appliance.core.config import load_settings
from appliance.mcp import sessions
from appliance.mcp.tool import ToolContext, ToolError
from tests.sessions.conftest import Manager
from tests.sessions.test_spawn import option
from tests.support.tools import call_tool, tool_context, tool_refusal


def context_for(manager: Manager, **caller: Any) -> ToolContext:
    return tool_context(load_settings(manager.env), **caller)


def call(name: str, context: ToolContext, /, **arguments: Any) -> dict[str, Any]:
    return call_tool(sessions.TOOLS, name, context, arguments)


def refused(name: str, context: ToolContext, /, **arguments: Any) -> ToolError:
    return tool_refusal(sessions.TOOLS, name, context, arguments)


def finished(row: dict[str, Any]) -> bool:
    return bool(row["status"] == "idle" and row["turnEnded"])


def test_session_list_newest_first_and_one_with_its_last_reply(start_manager: Any) -> None:
    manager: Manager = start_manager()
    first = manager.spawn("first job")
    second = manager.spawn("second job", hidden=True, channel="web")
    for row in (first, second):
        manager.wait_row(row["id"], finished)
    context = context_for(manager, session_id=second["id"])
    listed = call("session-list", context)
    assert [row["id"] for row in listed["sessions"]] == [second["id"], first["id"]]
    assert listed["total"] == 2 and listed["you"] == second["id"]
    assert listed["sessions"][0]["hidden"] is True and listed["sessions"][0]["kind"] == "admin"
    one = call("session-list", context, id=first["id"][:8])["session"]
    assert one["id"] == first["id"] and one["reply"] == "Reply 1 to: first job"
    assert call("session-list", context, limit=1)["shown"] == 1
    manager.stop(first["id"])
    archived = call("session-list", context, state="archived")["sessions"]
    assert [row["id"] for row in archived] == [first["id"]]
    assert refused("session-list", context, id="no-such-session").code == "session-not-found"
    assert "limit" in str(refused("session-list", context, limit=0))


def test_session_stop_stops_another_but_never_its_own(start_manager: Any) -> None:
    manager: Manager = start_manager()
    mine = manager.spawn("the admin's own")
    other = manager.spawn("a stuck one [double hold=1]")
    manager.wait_row(other["id"], lambda r: r["status"] == "busy")
    context = context_for(manager, session_id=mine["id"])
    stopped = call("session-stop", context, id=other["id"])
    assert stopped["stopped"] is True and stopped["signal"] == "SIGTERM"
    assert manager.wait_row(other["id"], lambda r: r["state"] == "archived")
    again = call("session-stop", context, id=other["id"])
    assert again["stopped"] is False and again["note"] == "It was not running."
    own = refused("session-stop", context, id=mine["id"][:8])
    assert own.code == "own-session"
    assert manager.row(mine["id"])["state"] == "live"  # type: ignore[index]
    assert refused("session-stop", context, id="nobody").code == "session-not-found"


def test_sessions_of_another_account_are_not_the_callers(start_manager: Any) -> None:
    manager: Manager = start_manager()
    manager.spawn("private work")
    other = create_account(manager.data_dir / "accounts", "Neighbour")
    context = context_for(manager, account_id=other.id)
    for name, arguments in (
        ("session-list", {}),
        ("session-stop", {"id": "x"}),
        ("specialist-start", {"role": "librarian", "task": "look"}),
    ):
        assert refused(name, context, **arguments).code == "other-account"


def test_an_absent_manager_is_a_clear_error(start_manager: Any, tmp_path: Path) -> None:
    manager: Manager = start_manager()
    settings = load_settings({**manager.env, "MAXY_RUNTIME_DIR": str(tmp_path / "nowhere")})
    context = tool_context(settings)
    error = refused("session-list", context)
    assert error.code == "manager-unavailable" and "does not answer" in str(error)


def specialists(manager: Manager, tasks: list[str]) -> list[dict[str, Any]]:
    context = context_for(manager, session_id="s-admin")
    started = [call("specialist-start", context, role="database-operator", task=t) for t in tasks]
    return [answer["session"] for answer in started]


def test_four_specialists_with_a_cap_of_three_evict_the_oldest_idle(
    start_manager: Any, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    manager: Manager = start_manager(
        env={"CLAUDE_DOUBLE_RECORD": str(record)}, specialist_cap=3, operator_reserve=2, pty_cap=8
    )
    rows = specialists(manager, [f"check part {i}" for i in range(3)])
    for row in rows:
        manager.wait_row(row["id"], finished)
    [fourth] = specialists(manager, ["check part 3"])
    assert manager.row(rows[0]["id"])["state"] == "archived"  # type: ignore[index]
    assert [manager.row(r["id"])["state"] for r in rows[1:]] == ["live", "live"]  # type: ignore[index]
    assert manager.row(fourth["id"])["state"] == "live"  # type: ignore[index]
    assert manager.status()["caps"]["specialists"] == 3
    assert f"op=evict id={rows[0]['id']} reason=specialist-cap" in manager.output()
    # Each ran as the role: the CLI was told which agent, from the generated plugin folder.
    argv = json.loads((record / f"{fourth['id']}.json").read_text())["argv"]
    assert option(argv, "--agent") == ["admin:database-operator"]
    [plugin_dir] = option(argv, "--plugin-dir")
    assert (Path(plugin_dir) / "admin" / "agents" / "database-operator.md").is_file()
    assert fourth["specialist"] is True and fourth["role"] == "database-operator"
    manager.spawn("the operator still gets a session")


def test_a_fourth_specialist_is_refused_while_all_three_are_busy(start_manager: Any) -> None:
    manager: Manager = start_manager(specialist_cap=3, operator_reserve=2, pty_cap=8)
    rows = specialists(manager, [f"long job {i} [double hold=1]" for i in range(3)])
    for row in rows:
        manager.wait_row(row["id"], lambda r: r["status"] == "busy")
    context = context_for(manager, session_id="s-admin")
    error = refused("specialist-start", context, role="librarian", task="one more")
    assert error.code == "specialist-cap-reached" and error.details["cap"] == 3
    assert "MAXY_SPECIALIST_CAP" in str(error)
    assert manager.status()["caps"]["specialists"] == 3


def test_an_idle_specialist_is_reaped(start_manager: Any) -> None:
    manager: Manager = start_manager(idle_reap_interval=0.2, idle_limit=1)
    [row] = specialists(manager, ["a quick look"])
    manager.wait_row(row["id"], lambda r: r["state"] == "archived", timeout=15)
    assert f"op=idle-reap id={row['id']}" in manager.output()


def test_an_unknown_role_is_refused_before_any_spawn(start_manager: Any) -> None:
    manager: Manager = start_manager()
    context = context_for(manager)
    error = refused("specialist-start", context, role="astronaut", task="fly")
    assert error.code == "role-not-found" and "database-operator" in str(error)
    assert manager.status()["caps"]["total"] == 0
    assert "task" in str(refused("specialist-start", context, role="librarian", task=""))
