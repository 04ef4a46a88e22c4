"""Bad input on every JSON route: malformed, oversized, wrongly typed and deeply nested bodies.

Against a real engine and `maxy app` over its socket, logged in as the admin with a valid CSRF
token (so the bodies reach the handlers, not just the guard). Every route of the app that takes
a body is listed from the app itself (a new route is fuzzed without editing this file). Every
refusal must be a 4xx with a JSON error ``{"code", "message"}`` (a random body that happens to be
valid may succeed): never a 5xx, a traceback or a hang. The counts per route are printed (`-s`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from appliance.app.main import create_app
from tests.support.auth import admin_headers
from tests.support.processes import Neo4jServer
from tests.support.stacks import BASE_URL, Stack, add_agent, make_env, running_stack

pytestmark = pytest.mark.timeout(900)

# Changes these make are real but would end the test's own login or its sessions.
SKIP = {("POST", "/api/auth/logout"), ("POST", "/api/admin/session/rotate")}
EXAMPLES = 15
MAX_BODY = 2 * 1024 * 1024  # past every route's limit

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)


def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


bodies = st.one_of(
    st.binary(max_size=300),  # not JSON at all, or not UTF-8
    json_values.map(lambda value: json.dumps(value).encode()),  # JSON, but not the shape
    st.dictionaries(
        st.sampled_from(
            [
                "name",
                "text",
                "pin",
                "key",
                "slug",
                "mode",
                "query",
                "password",
                "message",
                "label",
                "properties",
                "id",
            ]
        ),
        json_values,
        max_size=4,
    ).map(lambda d: json.dumps(d).encode()),
    st.integers(1000, 100_000).map(lambda depth: f"NESTED {depth}".encode()),  # deeply nested
    st.just(b"OVERSIZED"),  # past every limit (made below: a 2 MiB repr helps nobody)
    st.just(b'{"name": "unterminated'),
)
content_types = st.sampled_from(
    ["application/json", "text/plain", "application/x-www-form-urlencoded", ""]
)
segments = st.sampled_from(["maxy", "x", "..", "%00", "a" * 300, "0", "-1", "nope"])


def body_routes(app_routes: list[Any]) -> list[tuple[str, str]]:
    """(method, path) of every app route that takes a body, as the app declares them."""
    found: list[tuple[str, str]] = []

    def walk(routes: list[Any]) -> None:
        for route in routes:
            if isinstance(route, Route) and route.methods:
                for method in sorted(route.methods - {"GET", "HEAD"}):
                    if (method, route.path) not in SKIP:
                        found.append((method, route.path))
            elif hasattr(route, "routes"):
                walk(route.routes)

    walk(app_routes)
    return found


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("fuzz")
    env = make_env(neo4j_server, root / "data")
    add_agent(env, "maxy", {"displayName": "Max"})
    with running_stack(env, root / "logs", "engine", "app") as running:
        yield running


COUNTS: Counter[tuple[str, str, int]] = Counter()


def test_every_body_route_answers_bad_input_with_a_4xx_json_error(stack: Stack) -> None:
    routes = body_routes(create_app(stack.env.settings).routes)
    assert len(routes) >= 15, routes  # the listing works (the app has about 30 such routes)
    transport = httpx.HTTPTransport(uds=str(stack.env.settings.app_socket))
    client = httpx.Client(transport=transport, base_url=BASE_URL, timeout=30.0)
    lan = {"X-Maxy-Network": "lan", "X-Maxy-Client-IP": "192.168.1.20", "X-Maxy-Host-Role": "admin"}
    failures: list[str] = []

    @settings(
        max_examples=EXAMPLES * len(routes),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(route=st.sampled_from(routes), body=bodies, kind=content_types, segment=segments)
    def one(route: tuple[str, str], body: bytes, kind: str, segment: str) -> None:
        method, template = route
        path = re.sub(r"\{[^}]+\}", segment, template)
        if body == b"OVERSIZED":
            body = b"x" * MAX_BODY
        elif body.startswith(b"NESTED "):
            body = _nested(int(body.split()[1]))
        headers = {**lan, **admin_headers(stack.env.settings)}
        if kind:
            headers["Content-Type"] = kind
        try:
            answer = client.request(method, path, content=body, headers=headers)
        except httpx.TimeoutException:
            failures.append(f"{method} {path}: no answer in 30 s")
            return
        COUNTS[(method, template, answer.status_code // 100 * 100)] += 1
        if answer.status_code >= 500 or (not 400 <= answer.status_code < 500 and body[:1] != b"{"):
            failures.append(f"{method} {path}: {answer.status_code} {answer.text[:200]}")
            return
        if answer.status_code >= 400:
            error = answer.json()
            if not (isinstance(error, dict) and error.get("code") and error.get("message")):
                failures.append(f"{method} {path}: {answer.status_code} without a JSON error")

    one()
    client.close()
    reached = {(method, template) for method, template, _ in COUNTS}
    assert reached == set(routes), sorted(set(routes) - reached)
    for (method, template, status), count in sorted(COUNTS.items()):
        print(f"[fuzz] {method:6} {template:45} {status}xx {count}")
    print(f"[fuzz] routes={len(routes)} requests={sum(COUNTS.values())} failures={len(failures)}")
    assert failures == [], "\n".join(failures[:20])
    assert "Traceback" not in stack.output()
