"""CSRF tokens and the Origin/Host check."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from appliance.web import csrf

KEY = bytes(range(32))


def test_the_token_belongs_to_one_session_and_one_key() -> None:
    token = csrf.token(KEY, "session-one-abcdefgh")
    assert csrf.check(KEY, "session-one-abcdefgh", token)
    assert not csrf.check(KEY, "session-two-abcdefgh", token)
    assert not csrf.check(bytes(32), "session-one-abcdefgh", token)
    assert not csrf.check(KEY, "session-one-abcdefgh", token[:-1])
    assert not csrf.check(KEY, "session-one-abcdefgh", None)
    assert not csrf.check(KEY, "session-one-abcdefgh", "")
    assert not csrf.check(KEY, "session-one-abcdefgh", "é" * 32)
    assert token == csrf.token(KEY, "session-one-abcdefgh")


@pytest.mark.parametrize(
    ("headers", "required", "ok"),
    [
        ({"host": "maxy.local:19200"}, False, True),
        ({"host": "maxy.local:19200"}, True, False),
        ({"host": "maxy.local:19200", "origin": "http://maxy.local:19200"}, True, True),
        ({"host": "MAXY.local:19200", "origin": "http://maxy.LOCAL:19200"}, True, True),
        ({"host": "maxy.local:19200", "origin": "http://maxy.local:8080"}, False, False),
        ({"host": "maxy.local:19200", "origin": "http://evil.example"}, False, False),
        ({"host": "maxy.local:19200", "origin": "null"}, False, False),
        ({"host": "maxy.local:19200", "origin": "http://maxy.local.evil:19200"}, False, False),
        ({"host": "admin.example.com", "origin": "https://admin.example.com"}, True, True),
        ({"host": "admin.example.com:443", "origin": "https://admin.example.com"}, True, True),
        ({"host": "admin.example.com:443", "origin": "http://admin.example.com"}, True, False),
        ({"host": "maxy.local:19200", "referer": "http://maxy.local:19200/login?x"}, True, True),
        ({"host": "maxy.local:19200", "referer": "http://evil.example/maxy"}, False, False),
        ({"host": "maxy.local:19200", "referer": "not a url"}, False, False),
        ({"host": "maxy.local:19200", "origin": "javascript://maxy.local:19200"}, False, False),
        ({"origin": "http://maxy.local:19200"}, False, False),
        ({"host": "[::1]:19200", "origin": "http://[::1]:19200"}, True, True),
        ({"host": "maxy.local:bad", "origin": "http://maxy.local:19200"}, True, False),
    ],
)
def test_origin_must_name_the_host(headers: dict[str, str], required: bool, ok: bool) -> None:
    assert csrf.origin_matches_host(Headers(headers), required=required) is ok


@pytest.mark.parametrize(
    ("content_type", "ok"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("text/plain", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        ("", False),
    ],
)
def test_json_content_type(content_type: str, ok: bool) -> None:
    assert csrf.is_json(Headers({"content-type": content_type})) is ok
