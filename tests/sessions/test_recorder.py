"""Which transcript lines the conversation recorder sends, and where it resumes after a restart.

The recording itself (a real manager, engine and `claude` double, a restart that records nothing
twice) is tests/sessions/test_admin_memory.py."""

from __future__ import annotations

import json

from appliance.sessions.recorder import Said, after, messages_in


def line(**entry: object) -> bytes:
    return json.dumps(entry).encode()


LINES = [
    line(type="permission-mode", permissionMode="plan"),
    line(type="user", uuid="u1", message={"role": "user", "content": "Plant the bulbs"}),
    line(type="assistant", uuid="a1", message={"content": [{"type": "tool_use", "name": "R"}]}),
    line(type="user", uuid="t1", message={"content": [{"type": "tool_result", "content": "ok"}]}),
    line(type="assistant", uuid="a2", message={"content": [{"type": "text", "text": "Planted."}]}),
    b"{not json",
    line(type="user", message={"content": "no uuid: skipped"}),
    line(type="user", uuid="u2", message={"content": "Thanks"}),
]


def test_only_what_was_said_is_sent_in_order_keyed_by_line() -> None:
    assert messages_in(LINES) == [
        Said("u1", "user", "Plant the bulbs"),
        Said("a2", "assistant", "Planted."),
        Said("u2", "user", "Thanks"),
    ]


def test_a_restart_resumes_after_the_last_recorded_key() -> None:
    said = messages_in(LINES)
    assert [m.key for m in after(said, "a2")] == ["u2"]
    assert after(said, "u2") == []
    assert after(said, None) == said
    # A key the transcript does not hold (another file): everything, the engine skips the rest.
    assert after(said, "elsewhere") == said
