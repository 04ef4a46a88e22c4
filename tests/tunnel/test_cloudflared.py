"""The real cloudflared reads the config Maxy writes (skipped, saying why, when it is absent)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from appliance.tunnel.config import load, save, set_route

REAL = shutil.which("cloudflared")
pytestmark = pytest.mark.skipif(
    REAL is None,
    reason="cloudflared is not installed: the Go module proxy refuses "
    "github.com/cloudflare/cloudflared (403, 'not available'), Debian has no package, and the "
    "npm/PyPI wrappers download the binary at install time, which cannot be fetched here",
)


def test_cloudflared_validates_our_config_and_matches_its_rules(tmp_path: Path) -> None:
    assert REAL is not None
    config = tmp_path / "config.yml"
    doc = load(config)
    doc["tunnel"] = "6ff42ae2-765d-4adf-8112-31c55c1551ef"
    for host in ("maxy.example.com", "example.com"):
        set_route(doc, host, "http://localhost:19200")
    save(config, doc, REAL)  # runs `cloudflared tunnel ingress validate` before the rename

    def rule(url: str) -> str:
        done = subprocess.run(
            [REAL, "tunnel", "--config", str(config), "ingress", "rule", url],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    assert "http://localhost:19200" in rule("https://maxy.example.com/admin")
    assert "http://localhost:19200" in rule("https://example.com/")
    assert "http_status:404" in rule("https://unknown.example.net/")
