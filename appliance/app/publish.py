"""``maxy sites publish``: copy a folder into the account's ``/sites`` tree and say where it is.

The folder lands at ``<data_dir>/accounts/<id>/sites/<name>/`` (replacing an earlier publish of
the same name atomically: copied beside it, then swapped in), and the command prints the LAN
address and — when the public-hostname resolver finds a tunnel or alias host name — the full
public address. Symlinks are not followed: the published tree holds only regular files and
folders, so nothing outside it can ever be served through it.
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
from pathlib import Path
from typing import Any

from appliance.core.config import Settings
from appliance.tunnel.resolver import resolve_public_hostname

log = logging.getLogger(__name__)

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
LAN_HOST = "maxy.local"


class PublishError(Exception):
    """A folder cannot be published."""


def publish(settings: Settings, source: Path, name: str) -> dict[str, Any]:
    """Copy ``source`` to the sites tree as ``name``; return where it can be opened."""
    if not NAME.match(name):
        raise PublishError(
            f"{name!r} cannot name a site: use lower-case letters, digits, '.', '_' or '-' "
            "(at most 63, starting with a letter or digit)."
        )
    if not source.is_dir():
        raise PublishError(f"{source} is not a folder. Publish a folder holding an index.html.")
    root = settings.accounts_dir / settings.require_account_id() / "sites"
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".{name}.publishing"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging, symlinks=True, ignore=_skip_links)
    target = root / name
    retired = root / f".{name}.old"
    shutil.rmtree(retired, ignore_errors=True)
    if target.exists():
        target.rename(retired)
    staging.rename(target)
    shutil.rmtree(retired, ignore_errors=True)
    files = sum(1 for p in target.rglob("*") if p.is_file())
    path = f"/sites/{name}/"
    urls = {"lan": f"http://{LAN_HOST}:{settings.port}{path}", "public": None}
    public = resolve_public_hostname(settings)
    if public["hostname"]:
        urls["public"] = f"https://{public['hostname']}{path}"
    log.info(
        "[sites] op=publish name=%s files=%d public=%s", name, files, public["hostname"] or "none"
    )
    return {
        "name": name,
        "files": files,
        "hasIndex": (target / "index.html").is_file(),
        "urls": urls,
        "publicHostname": public,
    }


def _skip_links(folder: str, names: list[str]) -> list[str]:
    """Leave symlinks out of the copy (they could point anywhere)."""
    return [n for n in names if Path(folder, n).is_symlink()]


def cmd_publish(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy sites publish FOLDER [--name NAME]``."""
    source = Path(args.folder)
    done = publish(settings, source, args.name or source.resolve().name.lower())
    print(f"published {done['files']} files as {done['name']}")
    print(f"  on the LAN: {done['urls']['lan']}")
    if done["urls"]["public"]:
        print(f"  public:     {done['urls']['public']}")
    else:
        print("  public:     none yet (no tunnel host name: see `maxy tunnel route`)")
    if not done["hasIndex"]:
        print("  note: the folder has no index.html, so its address answers 404")
    return 0


def add_parsers(sub: Any) -> None:
    """Register ``sites publish`` on the ``maxy`` parser."""
    sites = sub.add_parser("sites", help="the static /sites tree")
    sites_sub = sites.add_subparsers(dest="sites_command", required=True)
    publish_cmd = sites_sub.add_parser("publish", help="publish a folder under /sites")
    publish_cmd.add_argument("folder")
    publish_cmd.add_argument("--name", help="the site's name in the URL (default: folder name)")
    publish_cmd.set_defaults(func=cmd_publish)
