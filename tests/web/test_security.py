"""The security headers table: what is added, what is kept, and the restarting page's style hash."""

from __future__ import annotations

import base64
import hashlib
import re

from appliance.edge import restarting
from appliance.web import security


def test_missing_headers_are_added_and_present_ones_kept() -> None:
    own = [(b"content-type", b"text/html"), (b"content-security-policy", b"script-src 'none'")]
    headers = dict(security.add_missing(own, security.ADMIN))
    assert headers[b"content-security-policy"] == b"script-src 'none'"
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert headers[b"x-frame-options"] == b"DENY"
    assert headers[b"referrer-policy"] == b"same-origin"
    assert dict(security.add_missing([]))[b"content-security-policy"] == security.STRICT.encode()


def test_no_policy_allows_inline_scripts_and_only_admin_pages_inline_styles() -> None:
    for policy in (security.STRICT, security.ADMIN, security.SITES):
        script = re.search(r"script-src ([^;]*)", policy)
        assert script is not None and "unsafe" not in script.group(1)
        assert "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in security.STRICT and "unsafe-inline" in security.ADMIN


def test_the_restarting_page_allows_exactly_its_own_style() -> None:
    headers, body = restarting.answer("GET", "/", "text/html", "Testbrand")
    policy = dict(headers)[b"content-security-policy"].decode()
    css = body.decode().split("<style>", 1)[1].split("</style>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in policy
    assert "unsafe-inline" not in policy and "script-src 'self'" in policy
