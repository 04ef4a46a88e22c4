"""config.yml: round trip keeps the owner's text, invalid documents are refused untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from appliance.tunnel import ConfigError
from appliance.tunnel.config import (
    dumps,
    hostname_roles,
    load,
    load_roles,
    parse,
    remove_route,
    rules,
    save,
    save_roles,
    set_route,
)

OWNED = """\
# Maxy's tunnel. Owner's note: do not touch the metrics port.
tunnel: 6ff42ae2-765d-4adf-8112-31c55c1551ef
credentials-file: /data/cloudflared/6ff42ae2-765d-4adf-8112-31c55c1551ef.json
metrics: localhost:20241   # scraped by the owner's Prometheus
loglevel: info
warp-routing:
  enabled: false
ingress:
  - hostname: maxy.example.com   # the admin host name
    service: http://localhost:19200
    originRequest:
      connectTimeout: 10s
  # the catch-all must stay last
  - service: http_status:404
"""


def test_round_trip_keeps_comments_and_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    path.write_text(OWNED)
    assert dumps(load(path)) == OWNED  # untouched document: byte for byte

    doc = load(path)
    set_route(doc, "example.com", "http://localhost:19200")
    save(path, doc)
    text = path.read_text()
    for kept in (
        "# Maxy's tunnel. Owner's note: do not touch the metrics port.",
        "# scraped by the owner's Prometheus",
        "# the admin host name",
        "# the catch-all must stay last",
        "warp-routing:\n  enabled: false",
        "connectTimeout: 10s",
        "loglevel: info",
    ):
        assert kept in text
    assert [r.hostname for r in rules(load(path))] == ["maxy.example.com", "example.com", None]
    assert os.stat(path).st_mode & 0o777 == 0o600

    assert remove_route(doc, "maxy.example.com")
    save(path, doc)
    assert [r.hostname for r in rules(load(path))] == ["example.com", None]
    assert "# Maxy's tunnel." in path.read_text()


def test_route_on_an_empty_config_adds_the_catch_all(tmp_path: Path) -> None:
    doc = load(tmp_path / "missing.yml")
    set_route(doc, "example.com", "http://localhost:19200")
    set_route(doc, "example.com", "http://localhost:19300")  # updates, never duplicates
    assert [(r.hostname, r.service) for r in rules(doc)] == [
        ("example.com", "http://localhost:19300"),
        (None, "http_status:404"),
    ]


BAD = [
    ("ingress:\n  - hostname: a.example.com\n    service: http://localhost:19200\n", "catch-all"),
    ("tunnel: x\n", "no ingress rules"),
    (
        "ingress:\n  - service: http_status:404\n  - hostname: a.example.com\n"
        "    service: http://localhost:19200\n",
        "catch-all",
    ),
    (
        "ingress:\n  - hostname: a.example.com\n    service: localhost:19200\n"
        "  - service: http_status:404\n",
        "bad service URL 'localhost:19200'",
    ),
    (
        "ingress:\n  - hostname: a.example.com\n    service: http://localhost:99999\n"
        "  - service: http_status:404\n",
        "bad service URL",
    ),
    (
        "ingress:\n  - hostname: a.example.com\n    service: http://localhost:19200/admin\n"
        "  - service: http_status:404\n",
        "path",
    ),
    (
        "ingress:\n  - hostname: a.example.com\n    service: http://localhost:19200\n"
        "  - hostname: A.example.com\n    service: http://localhost:19200\n"
        "  - service: http_status:404\n",
        "duplicate hostname 'a.example.com'",
    ),
    (
        "ingress:\n  - hostname: '*.example.com'\n    service: http://localhost:19200\n"
        "  - service: http_status:404\n",
        "invalid hostname",
    ),
    (
        "ingress:\n  - hostname: a.example.com\n    service: http_status:999\n"
        "  - service: http_status:404\n",
        "status code",
    ),
    ("ingress: [\n", "not valid YAML"),
]


@pytest.mark.parametrize(("text", "problem"), BAD, ids=[problem for _, problem in BAD])
def test_invalid_configs_are_refused_and_the_running_one_is_untouched(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "config.yml"
    path.write_text(OWNED)
    with pytest.raises(ConfigError) as refused:
        save(path, parse(text))
    assert problem in str(refused.value)
    assert path.read_text() == OWNED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yml"]  # no temp file left


def test_a_refused_route_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    path.write_text(OWNED)
    doc = load(path)
    set_route(doc, "bad_host.example.com", "http://localhost:19200")
    with pytest.raises(ConfigError, match="invalid hostname"):
        save(path, doc)
    assert path.read_text() == OWNED


def test_roles_default_to_public_and_are_refused_when_unknown(tmp_path: Path) -> None:
    config, roles = tmp_path / "config.yml", tmp_path / "roles.json"
    doc = load(config)
    for host in ("maxy.example.com", "example.com"):
        set_route(doc, host, "http://localhost:19200")
    save(config, doc)
    assert hostname_roles(config, roles) == {"maxy.example.com": "public", "example.com": "public"}
    save_roles(roles, {"maxy.example.com": "admin", "stale.example.com": "admin"})
    assert hostname_roles(config, roles) == {"maxy.example.com": "admin", "example.com": "public"}
    roles.write_text(json.dumps({"example.com": "owner"}))
    with pytest.raises(ConfigError, match="admin"):
        load_roles(roles)
