"""What the edge answers while the app is down: 503 + Retry-After, as JSON or a small page.

API calls (a path under ``/api/``, ``Accept: application/json`` or any non-GET) get JSON
``{"code": "app-restarting", "message": …}``; navigations get a branded page that reloads
itself. Open event streams get :data:`SSE_EVENT` before the edge ends them.
"""

from __future__ import annotations

import html

from appliance.web import security
from appliance.web.errors import error_body
from appliance.web.sse import frame

RETRY_AFTER_S = 2
CODE = "app-restarting"
MESSAGE = "Server is restarting — reconnect will happen automatically."
SSE_EVENT = frame("restarting", {"retryMs": RETRY_AFTER_S * 1000})

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{retry}">
<title>Restarting · {brand}</title>
<style>
  :root {{ color-scheme: light dark; }}
  body {{ margin: 0; min-height: 100vh; display: grid; place-items: center;
         font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
         background: #f5f5f7; color: #1d1d1f; }}
  main {{ max-width: 26rem; padding: 2rem; text-align: center; }}
  h1 {{ font-size: 1.4rem; margin: 1rem 0 .5rem; }}
  p {{ margin: 0; color: #555; }}
  .spinner {{ width: 2.5rem; height: 2.5rem; margin: 0 auto; border-radius: 50%;
             border: .25rem solid #d0d0d5; border-top-color: #4f46e5;
             animation: spin 1s linear infinite; }}
  @keyframes spin {{ to {{ transform: rotate(360deg); }} }}
  @media (prefers-color-scheme: dark) {{
    body {{ background: #111114; color: #f2f2f5; }}
    p {{ color: #aaa; }}
  }}
  @media (prefers-reduced-motion: reduce) {{ .spinner {{ animation: none; }} }}
</style>
</head>
<body>
<main role="status" aria-live="polite">
  <div class="spinner" aria-hidden="true"></div>
  <h1>{brand} is restarting</h1>
  <p>{message}</p>
</main>
</body>
</html>
"""


_CSS = _PAGE.split("<style>", 1)[1].split("</style>", 1)[0].replace("{{", "{").replace("}}", "}")
# The page's own <style> is allowed by its hash; nothing else inline.
_PAGE_POLICY = security.STRICT.replace("style-src 'self'", f"style-src {security.style_hash(_CSS)}")
_PAGE_POLICY_BYTES = _PAGE_POLICY.encode()


def wants_json(method: str, path: str, accept: str) -> bool:
    """Whether the caller is an API client rather than a page navigation."""
    return method != "GET" or path.startswith("/api/") or "application/json" in accept.lower()


def json_body() -> bytes:
    """The JSON answer for API calls."""
    return error_body(CODE, MESSAGE)


def page(brand: str) -> bytes:
    """The HTML page for navigations, in the account's brand."""
    return _PAGE.format(
        retry=RETRY_AFTER_S, brand=html.escape(brand), message=html.escape(MESSAGE)
    ).encode()


def answer(
    method: str, path: str, accept: str, brand: str
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Headers and body of the 503 answer (status 503 is the caller's)."""
    if wants_json(method, path, accept):
        content_type, body = b"application/json", json_body()
    else:
        content_type, body = b"text/html; charset=utf-8", page(brand)
    headers = [
        (b"content-security-policy", _PAGE_POLICY_BYTES),
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
        (b"cache-control", b"no-store"),
    ]
    return headers, body
