"""The ``web`` plugin's tools: read a page (``url-get``) or render it in Chromium.

Both turn the page's HTML into Markdown (:func:`appliance.memory.convert.to_markdown`, the one an
uploaded HTML file goes through too), keep a verbatim copy as an account reference file,
``<data_dir>/accounts/<account>/references/<slug>.md``, and return the text cut to
:data:`RETURN_CAP` characters, saying how long it was. Only http and https addresses are read.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from appliance.core import proc
from appliance.core.fsio import write_atomic
from appliance.mcp.tool import Tool, ToolContext, ToolError
from appliance.memory.convert import html_title, to_markdown

FETCH_TIMEOUT = 20.0
RENDER_TIMEOUT = 45.0
MAX_BYTES = 5 * 1024 * 1024
MAX_REDIRECTS = 5
RETURN_CAP = 40_000
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_SLUG_PART = re.compile(r"[^a-z0-9]+")


def checked_url(arguments: dict[str, Any]) -> str:
    """The call's ``url``, refused unless it is an http(s) address with a host."""
    url = arguments.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ToolError("url-get needs a url")
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(f"only http and https addresses can be read, not {url!r}")
    return url


def slug(url: str) -> str:
    """A file name for ``url``: host and path in [a-z0-9-], cut short, plus a hash of the URL."""
    parts = urlsplit(url)
    words = _SLUG_PART.sub("-", f"{parts.hostname or ''} {parts.path}".lower()).strip("-")
    digest = hashlib.sha256(url.encode()).hexdigest()[:10]
    return f"{words[:80].rstrip('-') or 'page'}-{digest}"


def _keep(context: ToolContext, url: str, html: str, how: str) -> dict[str, Any]:
    """Store the Markdown copy of the page and build the tool's answer."""
    text = to_markdown(html)
    if not text:
        hint = " (try browser-render: the page may need JavaScript)" if how == "url-get" else ""
        raise ToolError(f"{url} has no readable text{hint}")
    title = html_title(html)
    folder = context.settings.accounts_dir / context.caller.account_id / "references"
    path = folder / f"{slug(url)}.md"
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(path, f"<!-- source: {url} ({how}) -->\n# {title or url}\n\n{text}\n")
    shown = text[:RETURN_CAP]
    note = f"{len(text)} characters" + (
        f", the first {RETURN_CAP} shown" if len(text) > RETURN_CAP else ""
    )
    return {
        "url": url,
        "title": title,
        "reference": path.name,
        "length": len(text),
        "note": note,
        "text": shown,
    }


async def _fetch(url: str) -> str:
    """The HTML at ``url``, or a clear refusal (unreachable, HTTP error, not HTML, too big)."""
    try:
        async with (
            httpx.AsyncClient(
                follow_redirects=True, max_redirects=MAX_REDIRECTS, timeout=FETCH_TIMEOUT
            ) as client,
            client.stream("GET", url, headers={"Accept": "text/html"}) as response,
        ):
            if response.status_code >= 400:
                raise ToolError(f"{url} answered HTTP {response.status_code}")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind not in _HTML_TYPES:
                raise ToolError(f"{url} is not a web page ({kind or 'no content type'})")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_BYTES:
                    raise ToolError(f"{url} is larger than {MAX_BYTES // (1024 * 1024)} MB")
            return body.decode(response.encoding or "utf-8", errors="replace")
    except httpx.TooManyRedirects:
        raise ToolError(f"{url} redirects more than {MAX_REDIRECTS} times") from None
    except httpx.TimeoutException:
        raise ToolError(f"{url} did not answer within {FETCH_TIMEOUT:.0f} s") from None
    except httpx.HTTPError as error:
        raise ToolError(f"{url} is unreachable: {error}") from None


async def url_get(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Fetch a server-rendered page, keep its Markdown copy, return the text."""
    url = checked_url(arguments)
    return _keep(context, url, await _fetch(url), "url-get")


def chromium_program(setting: str) -> str:
    """The Chromium to run: ``MAXY_CHROMIUM_BIN`` as a path or a name on PATH."""
    found = (
        shutil.which(setting)
        if "/" not in setting
        else (setting if Path(setting).is_file() else None)
    )
    if not found:
        raise ToolError(f"Chromium is not installed here ({setting!r}); set MAXY_CHROMIUM_BIN")
    return found


async def browser_render(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Render a page in headless Chromium (scripts run), keep its Markdown copy, return the text."""
    url = checked_url(arguments)
    program = chromium_program(context.settings.chromium_bin)
    args = [
        program,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--virtual-time-budget=5000",
        "--dump-dom",
        url,
    ]
    try:
        done = await asyncio.to_thread(proc.run, args, timeout=RENDER_TIMEOUT)
    except proc.ToolTimeout:
        raise ToolError(f"Chromium did not finish {url} within {RENDER_TIMEOUT:.0f} s") from None
    except proc.ToolMissing:
        raise ToolError(f"Chromium could not start ({program}); set MAXY_CHROMIUM_BIN") from None
    html = done.stdout_bytes.decode("utf-8", errors="replace")
    if done.returncode != 0 or not html.strip():
        raise ToolError(f"Chromium could not render {url} (exit {done.returncode})")
    if len(html.encode()) > MAX_BYTES:
        raise ToolError(f"{url} is larger than {MAX_BYTES // (1024 * 1024)} MB")
    return _keep(context, url, html, "browser-render")


_URL_SCHEMA = {
    "type": "object",
    "properties": {"url": {"type": "string", "description": "An http or https address."}},
    "required": ["url"],
    "additionalProperties": False,
}

TOOLS: tuple[Tool, ...] = (
    Tool(
        name="url-get",
        plugin="web",
        handler=url_get,
        input_schema=_URL_SCHEMA,
        description=(
            "Read a web page (server-rendered HTML): returns its text as Markdown (long pages cut, "
            "the length said) and keeps a copy among the owner's reference files."
        ),
    ),
    Tool(
        name="browser-render",
        plugin="web",
        handler=browser_render,
        input_schema=_URL_SCHEMA,
        description=(
            "Read a web page that needs JavaScript, through the device's headless Chromium; "
            "slower than url-get, use it when url-get finds no text. Keeps a copy too."
        ),
    ),
)
