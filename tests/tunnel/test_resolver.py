"""The public-hostname resolver: cloudflared config first, then alias domains; apex first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.tunnel.config import load, save, save_roles, set_route
from appliance.tunnel.resolver import resolve

NO_TUNNEL = {"hostname": None, "source": None, "reason": "no-tunnel"}

CASES: list[tuple[str, dict[str, str], list[str], dict[str, Any]]] = [
    # (name, config hostnames -> role, alias domains, expected)
    ("no tunnel", {}, [], NO_TUNNEL),
    (
        "config only",
        {"shop.example.com": "public"},
        [],
        {"hostname": "shop.example.com", "isApex": False, "source": "cloudflared"},
    ),
    (
        "alias only",
        {},
        ["example.org"],
        {"hostname": "example.org", "isApex": True, "source": "alias-domains"},
    ),
    (
        "both: the config wins",
        {"shop.example.com": "public"},
        ["example.org"],
        {"hostname": "shop.example.com", "isApex": False, "source": "cloudflared"},
    ),
    (
        "apex beats www and deep",
        {"a.b.example.com": "public", "www.example.com": "public", "example.com": "public"},
        [],
        {"hostname": "example.com", "isApex": True, "source": "cloudflared"},
    ),
    (
        "www beats a subdomain",
        {"shop.example.com": "public", "www.example.com": "public"},
        [],
        {"hostname": "www.example.com", "isApex": True, "source": "cloudflared"},
    ),
    (
        "deep subdomains keep file order",
        {"x.y.example.com": "public", "z.example.com": "public"},
        [],
        {"hostname": "x.y.example.com", "isApex": False, "source": "cloudflared"},
    ),
    (
        "admin host names are never offered",
        {"example.com": "admin"},
        ["www.example.org"],
        {"hostname": "www.example.org", "isApex": True, "source": "alias-domains"},
    ),
    ("only an admin host name: no tunnel", {"example.com": "admin"}, [], NO_TUNNEL),
    (
        "alias apex vs deep",
        {},
        ["a.b.example.org", "www.example.org", "bad host", "example.org"],
        {"hostname": "example.org", "isApex": True, "source": "alias-domains"},
    ),
]


@pytest.mark.parametrize(
    ("hosts", "aliases", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_resolver_precedence(
    tmp_path: Path, hosts: dict[str, str], aliases: list[str], expected: dict[str, Any]
) -> None:
    config, roles, alias = tmp_path / "config.yml", tmp_path / "roles.json", tmp_path / "a.json"
    if hosts:
        doc = load(config)
        doc["tunnel"] = "6ff42ae2-765d-4adf-8112-31c55c1551ef"
        for host in hosts:
            set_route(doc, host, "http://localhost:19200")
        save(config, doc)
        save_roles(roles, hosts)  # type: ignore[arg-type]
    if aliases:
        alias.write_text(json.dumps(aliases))
    assert resolve(config, roles, alias) == expected


def test_an_invalid_config_falls_back_to_alias_domains(tmp_path: Path) -> None:
    config, alias = tmp_path / "config.yml", tmp_path / "a.json"
    config.write_text("ingress:\n  - hostname: example.com\n    service: http://localhost:19200\n")
    alias.write_text('["example.org"]')
    assert resolve(config, tmp_path / "roles.json", alias)["source"] == "alias-domains"
