"""The web plugin's tools against a real HTTP server on loopback, and the real headless Chromium."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from appliance.core.config import load_settings
from appliance.core.identity import Caller
from appliance.mcp import web
from appliance.mcp.tools import ToolContext, ToolError

CHROMIUM = Path("/usr/bin/chromium")
PAGES: dict[str, tuple[int, str, bytes]] = {
    "/article": (
        200,
        "text/html; charset=utf-8",
        b"<html><head><title>Plums</title><script>var x=1;</script></head><body>"
        b"<h1>Growing plums</h1><p>Prune in <b>late winter</b>.</p></body></html>",
    ),
    "/app": (
        200,
        "text/html",
        b"<html><head><title>App</title></head><body><div id=root></div><script>"
        b"document.getElementById('root').innerHTML='<p>Rendered by script</p>';"
        b"</script></body></html>",
    ),
    "/binary": (200, "application/octet-stream", b"\x00\x01\x02" * 100),
    "/huge": (200, "text/html", b"<p>" + b"a" * (web.MAX_BYTES + 10) + b"</p>"),
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, kind, body = PAGES.get(self.path, (404, "text/html", b"<p>not found</p>"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    settings = load_settings({"MAXY_DATA_DIR": str(tmp_path), "MAXY_CHROMIUM_BIN": str(CHROMIUM)})
    caller = Caller(account_id="acct1", session_id="s1")
    return ToolContext(settings=settings, caller=caller, engine=None)  # type: ignore[arg-type]


def call(name: str, context: ToolContext, url: str) -> dict[str, Any]:
    tool = next(tool for tool in web.TOOLS if tool.name == name)
    handler = tool.handler
    assert handler is not None

    async def once() -> dict[str, Any]:
        result: dict[str, Any] = await handler(context, {"url": url})
        return result

    return asyncio.run(once())


def test_url_get_returns_markdown_and_keeps_a_reference(site: str, context: ToolContext) -> None:
    result = call("url-get", context, f"{site}/article")
    assert result["title"] == "Plums"
    assert "# Growing plums" in result["text"] and "**late winter**" in result["text"]
    assert "var x" not in result["text"]
    kept = context.settings.accounts_dir / "acct1" / "references" / result["reference"]
    assert "# Growing plums" in kept.read_text()
    assert result["length"] == len(result["text"])


def test_url_get_sees_no_script_content(site: str, context: ToolContext) -> None:
    with pytest.raises(ToolError, match="browser-render"):
        call("url-get", context, f"{site}/app")


@pytest.mark.parametrize(
    ("path", "message"),
    [("/missing", "HTTP 404"), ("/binary", "not a web page"), ("/huge", "larger than")],
)
def test_url_get_refusals(site: str, context: ToolContext, path: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        call("url-get", context, f"{site}{path}")


def test_url_get_refuses_other_schemes_and_unreachable(context: ToolContext) -> None:
    with pytest.raises(ToolError, match="only http and https"):
        call("url-get", context, "file:///etc/passwd")
    with pytest.raises(ToolError, match="unreachable"):
        call("url-get", context, "http://127.0.0.1:9/")


def test_slug_is_a_plain_file_name() -> None:
    name = web.slug("http://example.com/../../etc/passwd?x=1")
    assert "/" not in name and ".." not in name and name.startswith("example-com-etc-passwd-")


@pytest.mark.slow  # starts Chromium
def test_browser_render_runs_the_script(site: str, context: ToolContext) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    result = call("browser-render", context, f"{site}/app")
    assert "Rendered by script" in result["text"]
    assert (context.settings.accounts_dir / "acct1" / "references" / result["reference"]).is_file()


def test_browser_render_names_the_setting_when_chromium_is_missing() -> None:
    with pytest.raises(ToolError, match="MAXY_CHROMIUM_BIN"):
        web.chromium_program("/nonexistent/chromium")
    with pytest.raises(ToolError, match="MAXY_CHROMIUM_BIN"):
        web.chromium_program("no-such-chromium-program")


def test_the_web_plugin_lists_exactly_these_tools() -> None:
    manifest = Path(web.__file__).resolve().parents[1] / "plugins" / "core" / "web" / "PLUGIN.md"
    listed = {
        line.split("name: ")[1].split(",")[0]
        for line in manifest.read_text().splitlines()
        if line.startswith("  - {name: ")
    }
    assert listed == {tool.name for tool in web.TOOLS}
    assert all(tool.plugin == "web" for tool in web.TOOLS)
