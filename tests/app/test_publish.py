"""`maxy sites publish`: the copy, the swap, and the URLs the resolver gives."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.processes import Env, maxy


def publish(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        maxy("sites", "publish", *args), env=env.vars, capture_output=True, text=True, timeout=60
    )


def test_publish_copies_the_folder_and_prints_the_lan_url(maxy_env: Env, tmp_path: Path) -> None:
    site = tmp_path / "Garden-Plan"
    (site / "img").mkdir(parents=True)
    (site / "index.html").write_text("<h1>Garden</h1>")
    (site / "img" / "bed.png").write_bytes(b"\x89PNG")
    outside = tmp_path / "secret.txt"
    outside.write_text("never published")
    (site / "leak.txt").symlink_to(outside)
    done = publish(maxy_env, str(site))
    assert done.returncode == 0, done.stderr
    port = maxy_env.settings.port
    assert f"on the LAN: http://maxy.local:{port}/sites/garden-plan/" in done.stdout
    assert "public:     none yet" in done.stdout
    root = maxy_env.settings.accounts_dir / maxy_env.account_id / "sites" / "garden-plan"
    assert (root / "index.html").read_text() == "<h1>Garden</h1>"
    assert (root / "img" / "bed.png").is_file() and not (root / "leak.txt").exists()
    # Publishing again replaces the tree: files gone from the source are gone from the site.
    (site / "img" / "bed.png").unlink()
    assert publish(maxy_env, str(site)).returncode == 0
    assert not (root / "img" / "bed.png").exists()
    assert sorted(p.name for p in root.parent.iterdir()) == ["garden-plan"]


def test_the_public_url_comes_from_the_resolver(maxy_env: Env, tmp_path: Path) -> None:
    settings = maxy_env.settings
    settings.alias_domains_path.parent.mkdir(parents=True, exist_ok=True)
    settings.alias_domains_path.write_text(json.dumps(["www.example.org", "example.org"]))
    site = tmp_path / "menu"
    site.mkdir()
    (site / "index.html").write_text("<p>menu</p>")
    done = publish(maxy_env, str(site), "--name", "menu")
    assert done.returncode == 0, done.stderr
    assert "public:     https://example.org/sites/menu/" in done.stdout  # the apex wins


def test_bad_names_and_missing_folders_are_one_clear_line(maxy_env: Env, tmp_path: Path) -> None:
    bad = publish(maxy_env, str(tmp_path), "--name", "../etc")
    assert bad.returncode == 1
    assert bad.stderr.startswith("[sites] FATAL PublishError: '../etc' cannot name")
    missing = publish(maxy_env, str(tmp_path / "nope"))
    assert missing.returncode == 1 and "is not a folder" in missing.stderr
