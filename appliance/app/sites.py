"""``/sites/*``: the account's static publish tree, ``accounts_dir/<account id>/sites/``.

The URL mirrors the disk. A directory is answered 301 to its trailing-slash form (query kept),
then with its ``index.html`` or 404: there are no listings. Sites are served on every host role.

The path is judged from the raw request target (``raw_path``), segment by segment, before any
file is touched. Forbidden (403): anything outside ``/sites/``; backslashes, NUL and control
characters, raw or percent-encoded; encoded slashes; a ``%`` left after decoding once (double
encoding); bytes that are not strict UTF-8 (overlong forms such as ``%c0%ae``); empty segments;
segments starting with a dot (``.``, ``..``, hidden files), also after Unicode NFKC folding
(fullwidth full stop U+FF0E, one-dot leader U+2024); colons (drive letters). The survivors are
joined under the resolved root and resolved again (symlinks): a result outside the root is 403.
The file is then opened by walking the resolved path from the root with ``O_NOFOLLOW`` on every
component, so a symlink swapped in after the check is refused rather than followed.

Every response carries the security headers of :mod:`appliance.web.security` (``nosniff``
among them) with its ``SITES`` policy, which forbids scripts, because sites share an origin
with the admin UI.
"""

from __future__ import annotations

import logging
import os
import stat
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

import anyio.to_thread
from starlette.datastructures import URLPath
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound, request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from appliance.app.context import AppContext
from appliance.core.logs import kv
from appliance.web.errors import error_response

log = logging.getLogger(__name__)

PREFIX = b"/sites/"
MAX_TARGET_BYTES = 2048
CHUNK_BYTES = 64 * 1024
#: Scripts never run in published pages: the sites share an origin with the admin UI.
HTML_CACHE = "no-cache"
ASSET_CACHE = "public, max-age=3600"

#: The only types served; anything else is application/octet-stream (with nosniff).
MIME_TYPES: Mapping[str, str] = {
    "html": "text/html; charset=utf-8",
    "htm": "text/html; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "mjs": "text/javascript; charset=utf-8",
    "json": "application/json",
    "svg": "image/svg+xml",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "ico": "image/x-icon",
    "txt": "text/plain; charset=utf-8",
    "woff": "font/woff",
    "woff2": "font/woff2",
    "ttf": "font/ttf",
    "otf": "font/otf",
}
DEFAULT_TYPE = "application/octet-stream"
_FORBIDDEN_CHARS = frozenset("/\\\x00:") | frozenset(chr(c) for c in range(0x20)) | {"\x7f"}


@dataclass(frozen=True)
class Forbid:
    """The path tries to leave the tree or is not a plain path."""

    reason: str


@dataclass(frozen=True)
class Missing:
    """Nothing to serve there."""


@dataclass(frozen=True)
class Redirect:
    """A directory asked without its trailing slash."""


@dataclass(frozen=True)
class Found:
    """A regular file inside the tree, by its resolved path."""

    path: Path


Located = Forbid | Missing | Redirect | Found


def split_target(raw_path: bytes) -> list[str] | Forbid:
    """Return the decoded segments of a raw ``/sites/…`` target ("" last: trailing slash)."""
    if len(raw_path) > MAX_TARGET_BYTES:
        return Forbid("too-long")
    if not raw_path.startswith(PREFIX):
        return Forbid("prefix")
    segments = raw_path[len(PREFIX) :].split(b"/")
    names: list[str] = []
    for index, segment in enumerate(segments):
        if not segment:
            if index == len(segments) - 1:
                names.append("")  # trailing slash: a directory is asked for
                continue
            return Forbid("empty-segment")
        if any(byte < 0x21 or byte in b"\\\x7f" for byte in segment):
            return Forbid("raw-character")
        decoded = unquote_to_bytes(segment)
        if b"%" in decoded:
            return Forbid("double-encoding")
        try:
            name = decoded.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            return Forbid("not-utf8")
        problem = name_problem(name)
        if problem is not None:
            return problem
        names.append(name)
    return names


def name_problem(name: str) -> Forbid | None:
    """Why one decoded path segment may not be used (None: it may): a forbidden character or
    a leading dot, also after Unicode NFKC folding."""
    folded = unicodedata.normalize("NFKC", name)
    if any(char in _FORBIDDEN_CHARS for char in name + folded):
        return Forbid("character")
    if name.startswith(".") or folded.startswith("."):
        return Forbid("dot-segment")
    return None


def locate_file(root: Path, relative: str) -> Located:
    """Decide what a plain relative path (``a/b.pdf``, already decoded) names under ``root``:
    the same segment rules and symlink check as a ``/sites`` target; only a regular file is
    Found."""
    names = relative.split("/")
    if not relative or any(not name for name in names):
        return Forbid("empty-segment")
    for name in names:
        problem = name_problem(name)
        if problem is not None:
            return problem
    real_root = Path(os.path.realpath(root))
    if not real_root.is_dir():
        return Missing()
    real = Path(os.path.realpath(real_root.joinpath(*names)))
    if not _inside(real, real_root) or real == real_root:
        return Forbid("symlink-escape")
    return Found(real) if real.is_file() else Missing()


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def locate(root: Path, raw_path: bytes) -> Located:
    """Decide what a raw target names in the tree at ``root`` (no file is opened)."""
    names = split_target(raw_path)
    if isinstance(names, Forbid):
        return names
    real_root = Path(os.path.realpath(root))
    if not real_root.is_dir():
        return Missing()
    trailing = names[-1] == ""
    real = Path(os.path.realpath(real_root.joinpath(*[n for n in names if n])))
    if not _inside(real, real_root):
        return Forbid("symlink-escape")
    if real.is_dir():
        if not trailing:
            return Redirect()
        real = Path(os.path.realpath(real / "index.html"))
        if not _inside(real, real_root):
            return Forbid("symlink-escape")
    elif trailing:
        return Missing()
    return Found(real) if real.is_file() else Missing()


def open_inside(root: Path, path: Path) -> int:
    """Open ``path`` (resolved, inside ``root``) walking from the root without following links."""
    real_root = Path(os.path.realpath(root))
    parts = path.relative_to(real_root).parts
    dir_fd = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            next_fd = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
            )
            os.close(dir_fd)
            dir_fd = next_fd
        # O_NONBLOCK: a FIFO put there must not hang the open; regular files ignore it.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(parts[-1], flags, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(path)
    return fd


class OpenFileResponse(Response):
    """Stream an already opened file descriptor, closing it when done."""

    def __init__(self, fd: int, headers: Mapping[str, str], *, send_body: bool) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.send_body = send_body
        self.status_code = 200
        self.background = None
        self.body = b""
        self.init_headers({**headers, "content-length": str(self.size)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            remaining = self.size if self.send_body else 0
            while remaining > 0:
                chunk = await anyio.to_thread.run_sync(
                    os.read, self.fd, min(CHUNK_BYTES, remaining)
                )
                if not chunk:
                    break
                remaining -= len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            os.close(self.fd)


def _type_headers(name: str) -> dict[str, str]:
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    headers = {"content-type": MIME_TYPES.get(extension, DEFAULT_TYPE)}
    headers["cache-control"] = HTML_CACHE if extension in ("html", "htm") else ASSET_CACHE
    return headers


def routes(ctx: AppContext) -> list[BaseRoute]:
    """``/sites`` and everything under it, on every host role."""
    root = ctx.settings.accounts_dir / ctx.account.id / "sites"

    def finish(response: Response, op: str, raw: bytes, reason: str = "") -> Response:
        level = logging.WARNING if op == "forbid" else logging.INFO
        fields = kv(path=raw[:300].decode("latin-1"), status=response.status_code)
        log.log(level, "[sites] op=%s %s%s", op, fields, f" reason={reason}" if reason else "")
        return response

    def forbid(raw: bytes, reason: str) -> Response:
        response = error_response(403, "forbidden", "That path is not allowed.")
        return finish(response, "forbid", raw, reason)

    def missing(raw: bytes) -> Response:
        return finish(error_response(404, "not-found", "There is no such file."), "missing", raw)

    async def sites(request: Request) -> Response:
        scope = request.scope
        raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        query: bytes = scope["query_string"]
        if raw == PREFIX.rstrip(b"/"):
            return finish(_redirect(raw + b"/", query), "redirect", raw)
        if request.method not in ("GET", "HEAD"):
            refused = error_response(405, "method-not-allowed", "Sites are read-only.")
            refused.headers["allow"] = "GET, HEAD"
            return finish(refused, "forbid", raw, "method")
        located = await anyio.to_thread.run_sync(locate, root, raw)
        if isinstance(located, Forbid):
            return forbid(raw, located.reason)
        if isinstance(located, Redirect):
            return finish(_redirect(raw + b"/", query), "redirect", raw)
        if isinstance(located, Missing):
            return missing(raw)
        try:
            fd = await anyio.to_thread.run_sync(open_inside, root, located.path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return missing(raw)
        except OSError:  # ELOOP: a symlink swapped in after the check; EACCES
            return forbid(raw, "open-refused")
        served = OpenFileResponse(
            fd, _type_headers(located.path.name), send_body=request.method == "GET"
        )
        return finish(served, "serve", raw)

    return [SitesRoute(request_response(sites))]


class SitesRoute(BaseRoute):
    """Route every HTTP request under ``/sites`` to the handler, whatever its method or bytes.

    Starlette's path patterns do not match a newline (``%0a``) and answer 405 on their own,
    without our headers; this route takes the whole prefix so every answer is ours.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """Match ``/sites`` and anything below it, judged on the decoded and the raw path."""
        if scope["type"] != "http":
            return Match.NONE, {}
        path: str = scope["path"]
        raw: bytes = scope.get("raw_path") or b""
        if path == "/sites" or path.startswith("/sites/") or raw.startswith(PREFIX):
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        """Sites have no named routes."""
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request."""
        await self.app(scope, receive, send)


def _redirect(target: bytes, query: bytes) -> RedirectResponse:
    location = target.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
    response = RedirectResponse(location, status_code=301)
    response.headers["cache-control"] = "no-cache"
    return response
