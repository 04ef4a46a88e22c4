"""What the edge needs of the tunnel at run time: host-name roles (reloaded) and health.

:class:`HostnameRoles` re-reads config.yml and roles.json when either file changes (one
``stat`` each per call); a file that became invalid keeps the last good roles and logs one
warning per change. :func:`tunnel_health` says whether a tunnel is configured, whether a
cloudflared process runs, and — when config.yml names a ``metrics`` address — whether it is
connected (cloudflared's ``/ready`` answers ``readyConnections``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import httpx

from appliance.tunnel import ConfigError
from appliance.tunnel.config import Role, describe, hostname_roles, load

log = logging.getLogger(__name__)

READY_TIMEOUT = 1.0
Signature = tuple[tuple[int, int] | None, ...]


def _signature(*paths: Path) -> Signature:
    out: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            out.append(None)
        else:
            out.append((info.st_mtime_ns, info.st_size))
    return tuple(out)


class HostnameRoles:
    """Tunnel host names and their roles, re-read whenever config.yml or roles.json changes."""

    def __init__(self, config: Path, roles: Path) -> None:
        self.config = config
        self.roles = roles
        self._seen: Signature | None = None
        self._current: dict[str, Role] = {}

    def current(self) -> dict[str, Role]:
        """The roles as of the files on disk now."""
        signature = _signature(self.config, self.roles)
        if signature != self._seen:
            self._seen = signature
            try:
                self._current = (
                    hostname_roles(self.config, self.roles) if signature[0] is not None else {}
                )
            except ConfigError as err:
                log.warning("[tunnel] op=roles-reload kept=previous error=%r", str(err))
            else:
                log.info(
                    "[tunnel] op=roles-reload admin=%s public=%s",
                    ",".join(h for h, r in self._current.items() if r == "admin") or "-",
                    ",".join(h for h, r in self._current.items() if r == "public") or "-",
                )
        return self._current

    def hostnames(self, role: Role) -> tuple[str, ...]:
        """The host names that have ``role``."""
        return tuple(h for h, r in self.current().items() if r == role)


def cloudflared_running(proc: Path = Path("/proc")) -> bool:
    """Whether a ``cloudflared … tunnel …`` process runs on this machine."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return False
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            argv = (proc / entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if argv and os.path.basename(argv[0]) == b"cloudflared" and b"tunnel" in argv[1:]:
            return True
    return False


async def _ready(metrics: str) -> dict[str, Any]:
    url = f"http://{metrics}/ready"
    try:
        async with httpx.AsyncClient(timeout=READY_TIMEOUT) as client:
            response = await client.get(url)
        body = response.json()
    except (httpx.HTTPError, ValueError) as err:
        return {"connected": False, "error": f"{url}: {err.__class__.__name__}"}
    connections = int(body.get("readyConnections", 0)) if isinstance(body, dict) else 0
    return {
        "connected": response.status_code == 200 and connections > 0,
        "connections": connections,
    }


async def tunnel_health(config: Path) -> dict[str, Any]:
    """``{configured, tunnelId, hostnames, process, connected}`` for /healthz (no secrets)."""
    try:
        facts = describe(load(config))
    except ConfigError as err:
        return {"configured": False, "error": str(err), "process": _process(), "connected": None}
    configured = bool(facts["tunnel"] and facts["hostnames"])
    health: dict[str, Any] = {
        "configured": configured,
        "tunnelId": facts["tunnel"],
        "hostnames": len(facts["hostnames"]),
        "process": _process(),
        "connected": None,  # unknown without a metrics address
    }
    if isinstance(facts["metrics"], str) and facts["metrics"]:
        health.update(await _ready(facts["metrics"]))
    elif health["process"] == "absent":
        health["connected"] = False
    return health


def _process() -> str:
    return "running" if cloudflared_running() else "absent"
