"""The one SSE writer, read back by the tests' one SSE parser."""

from __future__ import annotations

from appliance.web.sse import frame
from tests.support.sse import Parser, parse


def test_frames_read_back_with_their_event_id_and_json_data() -> None:
    body = (
        b"retry: 1000\n\n"
        + frame("snapshot", {"rows": [{"title": "Café ☕"}]}, "7:1")
        + b": keep-alive\n\n"
        + frame("delta", {"text": "line one\nline two"})
    ).decode()
    got = [(e.event, e.id, e.data) for e in parse(body)]
    assert got == [
        ("snapshot", "7:1", {"rows": [{"title": "Café ☕"}]}),
        ("delta", None, {"text": "line one\nline two"}),
    ]


def test_comments_are_events_only_when_asked_for() -> None:
    parser = Parser(comments=True)
    comment = parser.line(": keep-alive")
    assert comment is not None and (comment.event, comment.data) == ("comment", "keep-alive")
    assert Parser().line(": keep-alive") is None
