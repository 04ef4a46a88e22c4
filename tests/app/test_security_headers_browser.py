"""Security headers on every page, and no page breaks under its Content-Security-Policy.

Through the real edge, app and engine: each page's answer carries nosniff, Referrer-Policy,
X-Frame-Options and a CSP whose scripts are 'self' only; headless Chromium loads each page and
reports every `securitypolicyviolation` (none may happen); /sites/* runs sandboxed; the edge's
own answers (its 421, 401 and the restarting page) carry the headers too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from appliance.web import security
from tests.app.running_app import chromium
from tests.support.processes import Neo4jServer
from tests.support.stacks import PIN, Stack, add_agent, make_env, running_stack

pytestmark = pytest.mark.timeout(300)

# Collect violations from the first script on: the page's own code runs after this.
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + e.sourceFile);
});
"""
ADMIN_PAGES = [
    "/",
    "/admin/data",
    "/admin/graph",
    "/admin/settings",
    "/admin/updates",
    "/admin/backups",
    "/admin/sessions",
    "/admin/people",
    "/admin/agents",
    "/admin/projects",
    "/admin/tasks",
    "/admin/artefacts",
    "/admin/plugins",
]
PUBLIC_PAGES = ["/maxy", "/bot", "/login"]


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("headers")
    env = make_env(neo4j_server, root / "data")
    add_agent(env, "maxy", {"displayName": "Max the Helper"})
    sites = env.settings.accounts_dir / env.account_id / "sites"
    sites.mkdir(parents=True, exist_ok=True)
    (sites / "index.html").write_text("<!doctype html><script>document.title='mine'</script>")
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        yield running


def base(stack: Stack) -> str:
    return f"http://127.0.0.1:{stack.env.settings.port}"


def assert_secure(response: httpx.Response, policy: str) -> None:
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    assert response.headers["x-frame-options"] == "DENY"
    csp = response.headers["content-security-policy"]
    assert csp == policy
    if policy != security.SITES:
        assert "script-src 'self';" in csp and "frame-ancestors 'none'" in csp


def violations(page: Any) -> list[str]:
    found: list[str] = page.evaluate("window.__csp")
    return found


def test_every_page_carries_the_headers_and_loads_without_a_violation(stack: Stack) -> None:
    url = base(stack)
    with chromium() as browser:
        context = browser.new_context()
        context.add_init_script(RECORD_VIOLATIONS)
        page = context.new_page()
        first = page.goto(url + "/onboarding")
        assert_secure_headers(first.all_headers(), security.ADMIN)
        page.fill("#pin", PIN)
        page.fill("#confirm", PIN)
        page.click("form[data-maxy-auth=setup] button[type=submit]")
        page.locator("[data-maxy-step=claude]").wait_for(state="visible")
        assert violations(page) == []
        seen: dict[str, list[str]] = {}
        for path, policy in [(p, security.ADMIN) for p in ADMIN_PAGES] + [
            (p, security.STRICT) for p in PUBLIC_PAGES
        ]:
            answer = page.goto(url + path)
            assert answer is not None and answer.status < 400, (path, answer and answer.status)
            assert_secure_headers(answer.all_headers(), policy)
            page.wait_for_load_state("networkidle")
            seen[path] = violations(page)
        context.close()
    assert seen == {path: [] for path in ADMIN_PAGES + PUBLIC_PAGES}


def assert_secure_headers(headers: dict[str, str], policy: str) -> None:
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["content-security-policy"] == policy


def test_the_owners_sites_run_sandboxed(stack: Stack) -> None:
    response = httpx.get(base(stack) + "/sites/index.html")
    assert response.status_code == 200
    assert_secure(response, security.SITES)


def test_json_answers_and_the_edges_own_answers_carry_the_headers(stack: Stack) -> None:
    url = base(stack)
    assert_secure(httpx.get(url + "/api/admin/session"), security.ADMIN)  # 401 from the app
    assert_secure(httpx.get(url + "/api/admin/version"), security.STRICT)  # 401 from the edge
    misdirected = httpx.get(url + "/", headers={"Host": "rebound.example"})
    assert misdirected.status_code == 421
    assert_secure(misdirected, security.STRICT)
