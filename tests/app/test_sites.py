"""/sites/* served by a real `maxy app`: MIME, headers, redirects, and a traversal corpus."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.app import sites
from appliance.web import security
from tests.app.running_app import RunningApp, edge_headers, start_app
from tests.app.traversal import (
    PASSWD_MARKER,
    SECRET_MARKER,
    build_traversal_tree,
    traversal_paths,
)
from tests.support.processes import Env
from tests.support.stacks import raw_request

HTML_CSP = security.SITES

ASSETS: dict[str, tuple[bytes, str]] = {
    "page.html": (b"<!doctype html><p>page</p>", "text/html; charset=utf-8"),
    "style.css": (b"h1 { color: teal; }", "text/css; charset=utf-8"),
    "app.js": (b"console.log('never runs');", "text/javascript; charset=utf-8"),
    "data.json": (b'{"a": 1}', "application/json"),
    "logo.svg": (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml"),
    "pic.png": (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "image/png"),
    "pic.jpg": (b"\xff\xd8\xff\xe0JFIF", "image/jpeg"),
    "PIC.JPEG": (b"\xff\xd8\xff\xe0JFIF", "image/jpeg"),
    "anim.gif": (b"GIF89a", "image/gif"),
    "pic.webp": (b"RIFF\x00\x00\x00\x00WEBP", "image/webp"),
    "favicon.ico": (b"\x00\x00\x01\x00", "image/x-icon"),
    "notes.txt": (b"plain words\n", "text/plain; charset=utf-8"),
    "font.woff": (b"wOFF", "font/woff"),
    "font.woff2": (b"wOF2", "font/woff2"),
    "font.ttf": (b"\x00\x01\x00\x00", "font/ttf"),
    "font.otf": (b"OTTO", "font/otf"),
    # Not in the table: served as bytes, never sniffed into HTML.
    "mystery.xyz": (b"<html><script>alert(1)</script>", "application/octet-stream"),
    "README": (b"<html>no extension", "application/octet-stream"),
}


@pytest.fixture
def sites_app(maxy_env: Env, start_maxy: Any) -> Iterator[tuple[RunningApp, Path]]:
    settings = maxy_env.settings
    root = build_traversal_tree(settings.data_dir, maxy_env.account_id)
    for name, (content, _) in ASSETS.items():
        (root / name).write_bytes(content)
    (root / "big.txt").write_bytes(b"0123456789abcdef" * 40_000)  # 640 kB: streamed in chunks
    (root / "caf\u00e9 menu.html").write_text("<p>menu</p>")
    yield start_app(start_maxy, maxy_env), root


def test_files_are_served_with_their_type_and_cache_policy(
    sites_app: tuple[RunningApp, Path],
) -> None:
    app, _ = sites_app
    with app.client() as client:
        for name, (content, mime) in ASSETS.items():
            response = client.get(f"/sites/{name}")
            assert response.status_code == 200, name
            assert response.content == content, name
            assert response.headers["content-type"] == mime, name
            assert response.headers["x-content-type-options"] == "nosniff", name
            if name.endswith(".html"):
                assert response.headers["cache-control"] == "no-cache"
                assert response.headers["content-security-policy"] == HTML_CSP
            else:
                assert response.headers["cache-control"] == "public, max-age=3600", name
        svg = client.get("/sites/logo.svg")
        assert svg.headers["content-security-policy"] == HTML_CSP  # an SVG is a document too
        assert client.get("/sites/style.css").headers["content-security-policy"] == HTML_CSP


def test_a_large_file_arrives_whole(sites_app: tuple[RunningApp, Path]) -> None:
    app, root = sites_app
    with app.client() as client:
        response = client.get("/sites/big.txt")
    assert response.status_code == 200
    assert response.content == (root / "big.txt").read_bytes()
    assert response.headers["content-length"] == str(640_000)


def test_head_sends_headers_without_a_body(sites_app: tuple[RunningApp, Path]) -> None:
    app, _ = sites_app
    status, headers, body = raw_request(app.socket, b"/sites/notes.txt", method=b"HEAD")
    assert status == 200 and body == b""
    assert headers["content-length"] == str(len(b"plain words\n"))
    assert headers["content-type"] == "text/plain; charset=utf-8"


def test_percent_encoded_names_are_served(sites_app: tuple[RunningApp, Path]) -> None:
    app, _ = sites_app
    status, headers, body = raw_request(app.socket, b"/sites/caf%C3%A9%20menu.html")
    assert status == 200 and body == b"<p>menu</p>"
    assert headers["content-security-policy"] == HTML_CSP


def test_a_directory_redirects_to_its_slash_form_keeping_the_query(
    sites_app: tuple[RunningApp, Path],
) -> None:
    app, _ = sites_app
    with app.client() as client:
        response = client.get("/sites/sub?lang=en&x=%2F")
        assert response.status_code == 301
        assert response.headers["location"] == "/sites/sub/?lang=en&x=%2F"
        assert response.headers["x-content-type-options"] == "nosniff"
        top = client.get("/sites?a=1")
        assert top.status_code == 301 and top.headers["location"] == "/sites/?a=1"
        page = client.get("/sites/sub/")
        assert page.status_code == 200 and b"Sub page" in page.content
        assert page.headers["content-security-policy"] == HTML_CSP
        assert client.get("/sites/").content.startswith(b"<!doctype html><h1>Published home")


def test_a_directory_without_index_is_404_never_a_listing(
    sites_app: tuple[RunningApp, Path],
) -> None:
    app, _ = sites_app
    with app.client() as client:
        for path in ("/sites/sub/deeper/", "/sites/empty-dir/"):
            response = client.get(path)
            assert response.status_code == 404
            assert response.json()["code"] == "not-found"
            assert b"note.txt" not in response.content
            assert response.headers["x-content-type-options"] == "nosniff"
        assert client.get("/sites/style.css/").status_code == 404  # a file is not a folder
        assert client.get("/sites/nothing-here.html").status_code == 404


def test_sites_are_read_only(sites_app: tuple[RunningApp, Path]) -> None:
    app, _ = sites_app
    with app.client() as client:
        response = client.post("/sites/page.html", content=b"x")
    assert response.status_code == 405
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("role", ["public", "admin"])
@pytest.mark.parametrize("network", ["lan", "external"])
def test_sites_are_served_on_every_host_role(
    sites_app: tuple[RunningApp, Path], role: str, network: str
) -> None:
    app, _ = sites_app
    with app.client(**edge_headers(network=network, ip="198.51.100.4", role=role)) as client:
        response = client.get("/sites/page.html")
    assert response.status_code == 200 and response.content == ASSETS["page.html"][0]


def test_a_missing_tree_is_404(maxy_env: Env, start_maxy: Any) -> None:
    app = start_app(start_maxy, maxy_env)
    status, headers, _ = raw_request(app.socket, b"/sites/index.html")
    assert status == 404 and headers["x-content-type-options"] == "nosniff"


def test_the_traversal_corpus_never_leaks(sites_app: tuple[RunningApp, Path]) -> None:
    app, root = sites_app
    paths = traversal_paths()
    assert len(paths) >= 200
    statuses: dict[int, int] = {}
    for role in ("admin", "public"):
        headers = edge_headers(network="external", ip="203.0.113.66", role=role)
        for path in paths:
            status, answer, body = raw_request(app.socket, path.encode("utf-8"), headers)
            statuses[status] = statuses.get(status, 0) + 1
            assert status in (301, 403, 404), (path, status, body[:200])
            assert SECRET_MARKER.encode() not in body, path
            assert PASSWD_MARKER.encode() not in body, path
            assert answer.get("x-content-type-options") == "nosniff", path
            if status == 301:
                location = answer["location"]
                assert location.startswith("/sites/") and not location.startswith("//"), path
                assert ".." not in location and "%2e" not in location.lower(), path
    assert statuses[403] > 500  # most are refused outright, before any file is looked at
    # The server saw every target unnormalised: each is logged as received.
    output = app.output()
    for path in paths:
        received = path.split("?")[0].encode("utf-8").decode("latin-1")
        assert f"path={received} status=" in output, path
    assert root.is_dir()


def test_a_folder_replaced_by_a_link_to_the_outside_is_refused(
    sites_app: tuple[RunningApp, Path],
) -> None:
    app, root = sites_app
    outside = app.settings.data_dir / "outside"
    with app.client() as client:
        assert client.get("/sites/sub/deeper/note.txt").status_code == 200
        shutil.rmtree(root / "sub" / "deeper")
        os.symlink(outside, root / "sub" / "deeper")
        response = client.get("/sites/sub/deeper/secret.txt")
    assert response.status_code == 403
    assert SECRET_MARKER.encode() not in response.content


def test_a_link_swapped_in_between_check_and_open_is_not_followed(tmp_path: Path) -> None:
    # The race the server cannot be timed into in a test: locate() approves a path, then a
    # folder on it becomes a link to the outside before the file is opened.
    root = build_traversal_tree(tmp_path / "data", "acct")
    located = sites.locate(root, b"/sites/sub/deeper/note.txt")
    assert isinstance(located, sites.Found)
    fd = sites.open_inside(root, located.path)
    os.close(fd)
    outside = tmp_path / "data" / "outside"
    (outside / "note.txt").write_text(SECRET_MARKER)
    shutil.rmtree(root / "sub" / "deeper")
    os.symlink(outside, root / "sub" / "deeper")
    with pytest.raises(OSError) as caught:
        sites.open_inside(root, located.path)
    assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)
    link = root / "sub" / "deeper-file.txt"
    os.symlink(outside / "note.txt", link)
    with pytest.raises(OSError) as caught:
        sites.open_inside(root, Path(os.path.realpath(root)) / "sub" / "deeper-file.txt")
    assert caught.value.errno == errno.ELOOP


def test_the_traversal_corpus_never_leaks_through_the_edge(
    maxy_env: Env, tmp_path: Path, neo4j_server: Any
) -> None:
    """The same corpus, byte for byte, at the edge's TCP port as a browser would send it.

    The edge forwards the path with plain ``.``/``..`` segments removed (RFC 3986, as browsers
    and nginx do), so a few targets such as ``/sites/./index.html`` reach a file INSIDE the
    tree and are served: a 200 must carry exactly the bytes of a regular file under the root.
    """
    from tests.support.processes import wait_until
    from tests.support.stacks import running_stack

    root = build_traversal_tree(maxy_env.settings.data_dir, maxy_env.account_id)
    inside = {
        f.read_bytes()
        for f in root.rglob("*")
        if f.is_file() and not f.is_symlink() and f.resolve().is_relative_to(root.resolve())
    }
    port = maxy_env.settings.port

    def serves() -> bool:
        try:
            return raw_request(("127.0.0.1", port), b"/sites/")[0] in (200, 404)
        except OSError:
            return False

    with running_stack(maxy_env, tmp_path / "logs", "app", "edge") as stack:
        wait_until(serves, 60, f"the edge on :{port}\n{stack.output()}")
        statuses: dict[int, int] = {}
        for path in traversal_paths():
            status, _, body = raw_request(("127.0.0.1", port), path.encode("utf-8"))
            statuses[status] = statuses.get(status, 0) + 1
            assert SECRET_MARKER.encode() not in body, path
            assert PASSWD_MARKER.encode() not in body, path
            forwarded = httpx.URL("http://edge" + path).raw_path.split(b"?")[0]
            if not forwarded.startswith(b"/sites/"):
                continue  # dot segments led elsewhere (/, /bot, …): the app's own pages
            # 400: the edge's HTTP parser refused the request line before any routing.
            assert status in (200, 301, 400, 403, 404), (path, status, body[:200])
            if status == 200:
                assert body in inside, (path, body[:200])
    assert statuses.get(403, 0) > 200, statuses
