"""Is the trial boot healthy? Maxy checks itself the way a user would notice it broken.

- ``edge``: ``GET http://127.0.0.1:<port>/healthz`` answers 200 (the edge reached the engine,
  Neo4j answers and the schema is applied);
- ``engine``: a real hybrid search over the engine's RPC socket returns results without
  falling back to keyword-only (the embedding model works);
- ``manager``: the PTY session manager answers ``/healthz`` on its Unix socket;
- ``tunnel``: only when the tunnel was connected before the update — it is connected again.

:func:`wait_healthy` polls every :data:`POLL_INTERVAL` seconds until every check passes in the
same round, or the commit window (``MAXY_OTA_COMMIT_WINDOW``) ends.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.ota.errors import HealthCheckFailed
from appliance.ota.progress import Progress
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.tunnel.state import tunnel_health
from appliance.web.manager_client import ManagerClient, ManagerError, ManagerRefused

POLL_INTERVAL = 2.0
CHECK_TIMEOUT = 10.0
SELF_TEST_QUERY = "maxy update health self-test"


@dataclass(frozen=True)
class Check:
    """The outcome of one health check."""

    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        """For state.json and --json output."""
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


async def check_edge(settings: Settings) -> Check:
    """The edge answers /healthz with 200."""
    url = settings.edge_health_url
    try:
        async with httpx.AsyncClient(timeout=CHECK_TIMEOUT) as client:
            response = await client.get(url)
    except httpx.HTTPError as err:
        return Check("edge", False, f"{url}: {type(err).__name__}")
    if response.status_code != 200:
        return Check("edge", False, f"{url} answered {response.status_code}")
    return Check("edge", True, f"{url} answered 200")


async def check_engine(settings: Settings) -> Check:
    """A hybrid search through the engine succeeds with the embedding model."""
    if not settings.account_id:
        return Check("engine", False, "MAXY_ACCOUNT_ID is not set: cannot search as the owner")
    client = RpcClient(settings.engine_socket, timeout=CHECK_TIMEOUT)
    params = {
        "caller": Caller(account_id=settings.account_id).to_wire(),
        "query": SELF_TEST_QUERY,
        "limit": 1,
    }
    try:
        result = await client.call("search", params)
    except RpcError as err:
        return Check("engine", False, f"search failed: {err}")
    if not isinstance(result, dict) or not isinstance(result.get("results"), list):
        return Check("engine", False, "search returned no result list")
    if result.get("keywordOnly"):
        return Check("engine", False, "search fell back to keywords: the embedding model failed")
    return Check("engine", True, f"search answered in {result.get('ms', '?')} ms")


async def check_manager(settings: Settings) -> Check:
    """The session manager answers on its Unix socket."""
    socket = settings.manager_socket
    try:
        answer = await ManagerClient(socket, timeout=CHECK_TIMEOUT).healthz()
    except ManagerRefused as err:
        return Check("manager", False, f"{socket} answered {err.status}")
    except ManagerError as err:
        return Check("manager", False, f"{socket}: {type(err.__cause__ or err).__name__}")
    if not answer.get("ok"):
        return Check("manager", False, f"{socket} answered without ok")
    return Check("manager", True, "answering")


async def check_tunnel(settings: Settings) -> Check:
    """The Cloudflare tunnel is connected again."""
    health = await tunnel_health(settings.cloudflared_config)
    if health.get("connected") is True:
        return Check("tunnel", True, "connected")
    reason = health.get("error") or f"process {health.get('process')}, not connected"
    return Check("tunnel", False, str(reason))


async def run_checks(settings: Settings, *, tunnel: bool) -> list[Check]:
    """Run every check once, concurrently."""
    checks = [check_edge(settings), check_engine(settings), check_manager(settings)]
    if tunnel:
        checks.append(check_tunnel(settings))
    return list(await asyncio.gather(*checks))


def summary(checks: list[Check]) -> str:
    """``edge ok; engine: search failed: …`` — the failing ones with their reason."""
    return "; ".join(c.name + (" ok" if c.ok else f": {c.detail}") for c in checks)


def wait_healthy(
    settings: Settings, *, window: float, tunnel: bool, progress: Progress
) -> list[Check]:
    """Poll the checks until all pass (return them) or ``window`` ends (HealthCheckFailed)."""
    started = time.monotonic()
    total = max(int(window), 1)
    rounds = 0
    while True:
        rounds += 1
        checks = asyncio.run(run_checks(settings, tunnel=tunnel))
        elapsed = time.monotonic() - started
        if all(c.ok for c in checks):
            progress("health", total, total, "healthy: " + summary(checks))
            return checks
        progress("health", min(int(elapsed), total), total, summary(checks))
        if elapsed >= window:
            raise HealthCheckFailed(
                f"still unhealthy after {window:g} s ({rounds} rounds): "
                + "; ".join(f"{c.name}: {c.detail}" for c in checks if not c.ok)
            )
        time.sleep(min(POLL_INTERVAL, max(window - elapsed, 0.05)))
