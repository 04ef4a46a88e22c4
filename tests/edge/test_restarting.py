"""The answer while the app is down: JSON for API calls, a self-contained page for people."""

from __future__ import annotations

import json

import pytest

from appliance.edge import restarting


@pytest.mark.parametrize(
    ("method", "path", "accept", "json_wanted"),
    [
        ("GET", "/api/admin/sites", "*/*", True),
        ("GET", "/admin/data", "application/json", True),
        ("POST", "/login", "text/html", True),
        ("DELETE", "/admin/thing", "text/html", True),
        ("GET", "/", "text/html,application/xhtml+xml,*/*;q=0.8", False),
        ("GET", "/admin/graph", "", False),
        ("GET", "/apiary", "text/html", False),
    ],
)
def test_api_calls_get_json_and_navigations_a_page(
    method: str, path: str, accept: str, json_wanted: bool
) -> None:
    assert restarting.wants_json(method, path, accept) is json_wanted
    headers, body = restarting.answer(method, path, accept, "Maxy")
    head = dict(headers)
    assert head[b"retry-after"] == b"2"
    assert int(head[b"content-length"]) == len(body)
    if json_wanted:
        assert head[b"content-type"] == b"application/json"
        assert json.loads(body)["code"] == "app-restarting"
    else:
        assert head[b"content-type"].startswith(b"text/html")


def test_the_page_is_branded_self_contained_and_reloads_itself() -> None:
    page = restarting.page('Ada\'s <Box> & "Co"').decode()
    assert '<meta http-equiv="refresh" content="2">' in page
    assert "Ada&#x27;s &lt;Box&gt; &amp; &quot;Co&quot; is restarting" in page
    assert "<style>" in page
    for external in ("http://", "https://", "src=", "<link", "@import", "url("):
        assert external not in page


def test_the_sse_event_is_one_whole_event() -> None:
    assert restarting.SSE_EVENT == b'event: restarting\ndata: {"retryMs":2000}\n\n'
