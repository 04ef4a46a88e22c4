"""The real cloudflared reads the config Maxy writes.

The binary is the one the bootstrap built from the pinned source archive into the cache
(``image/cloudflared.py``); the fixture asks the same code for it, so a cache without it builds
it here rather than skipping.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from appliance.tunnel.config import load, save, set_route
from image.cloudflared import HOST_ARCH, VERSION, cloudflared
from tests.support.processes import base_environ


@pytest.fixture(scope="module")
def real() -> str:
    """The host's cloudflared from the cache (built from the pinned source when absent)."""
    return str(cloudflared(Path(base_environ()["MAXY_CACHE_DIR"]), HOST_ARCH).path)


def test_it_is_the_pinned_release(real: str) -> None:
    done = subprocess.run(
        [real, "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert f"cloudflared version {VERSION}" in done.stdout + done.stderr


def test_cloudflared_validates_our_config_and_matches_its_rules(tmp_path: Path, real: str) -> None:
    config = tmp_path / "config.yml"
    doc = load(config)
    doc["tunnel"] = "6ff42ae2-765d-4adf-8112-31c55c1551ef"
    for host in ("maxy.example.com", "example.com"):
        set_route(doc, host, "http://localhost:19200")
    save(config, doc, real)  # runs `cloudflared tunnel ingress validate` before the rename

    def rule(url: str) -> str:
        done = subprocess.run(
            [real, "tunnel", "--config", str(config), "ingress", "rule", url],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    assert "http://localhost:19200" in rule("https://maxy.example.com/admin")
    assert "http://localhost:19200" in rule("https://example.com/")
    assert "http_status:404" in rule("https://unknown.example.net/")
