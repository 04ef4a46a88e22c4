"""The public-hostname resolver: which host name to print in a full public URL.

Candidates come from the cloudflared config first (its public host names, in file order), and
only when it has none from ``alias-domains.json`` (a JSON list of host names). Within a source an
apex wins over a subdomain: ``example.com`` (a single label before the top-level domain) first,
then ``www.example.com`` (an apex once ``www.`` is stripped), then deeper names; ties keep file
order. Without the public-suffix list, ``example.co.uk`` counts as a subdomain of ``co.uk``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from appliance.core.config import Settings
from appliance.tunnel import ConfigError
from appliance.tunnel.config import check_hostname, hostname_roles

log = logging.getLogger(__name__)


def is_apex(hostname: str) -> bool:
    """``example.com`` or ``www.example.com``: one label before the top-level domain."""
    name = hostname.removeprefix("www.")
    return name.count(".") == 1


def _rank(hostname: str) -> int:
    if hostname.count(".") == 1:
        return 0
    return 1 if is_apex(hostname) else 2


def pick(hostnames: Iterable[str]) -> str | None:
    """The best candidate: apex, then www-apex, then any other; first in order on a tie."""
    ordered = list(dict.fromkeys(hostnames))
    return min(ordered, key=_rank) if ordered else None


def alias_domains(path: Path) -> list[str]:
    """Host names listed in alias-domains.json (invalid entries skipped with a warning)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        log.warning("[tunnel] op=alias-domains-read path=%s error=%r", path, str(err))
        return []
    if not isinstance(raw, list):
        log.warning("[tunnel] op=alias-domains-read path=%s error='not a JSON list'", path)
        return []
    out = []
    for entry in raw:
        try:
            out.append(check_hostname(str(entry)))
        except ConfigError:
            log.warning("[tunnel] op=alias-domains-read path=%s skipped=%r", path, entry)
    return out


def resolve(config: Path, roles: Path, aliases: Path) -> dict[str, Any]:
    """``{hostname, isApex, source}``, or ``{hostname: None, source: None, reason: no-tunnel}``."""
    try:
        by_role = hostname_roles(config, roles)
    except ConfigError as err:
        log.warning("[tunnel] op=resolve config=%s error=%r", config, str(err))
        by_role = {}
    for source, names in (
        ("cloudflared", [h for h, role in by_role.items() if role == "public"]),
        ("alias-domains", alias_domains(aliases)),
    ):
        chosen = pick(names)
        if chosen is not None:
            return {"hostname": chosen, "isApex": is_apex(chosen), "source": source}
    return {"hostname": None, "source": None, "reason": "no-tunnel"}


def resolve_public_hostname(settings: Settings) -> dict[str, Any]:
    """The resolver over this device's files."""
    return resolve(
        settings.cloudflared_config, settings.tunnel_roles_path, settings.alias_domains_path
    )
