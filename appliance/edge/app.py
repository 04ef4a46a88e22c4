"""The edge's Starlette application."""

from __future__ import annotations

import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from appliance.config import Settings, load_settings
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.version import build_info

log = logging.getLogger(__name__)

HEALTH_TIMEOUT = 4.0


async def _engine_health(client: RpcClient) -> dict[str, Any]:
    try:
        result: dict[str, Any] = await client.call("health")
    except RpcError as err:
        return {
            "ok": False,
            "engine": {"ok": False, "error": str(err)},
            "neo4j": {"ok": False, "error": "unknown: the engine did not answer"},
            "embedder": {"ok": False, "error": "unknown: the engine did not answer"},
        }
    result["engine"] = {"ok": True}
    return result


def create_app(settings: Settings | None = None) -> Starlette:
    """Build the edge application (Granian calls this as a factory)."""
    settings = settings or load_settings()
    engine = RpcClient(settings.engine_socket, timeout=HEALTH_TIMEOUT)
    info = build_info()

    async def healthz(request: Request) -> JSONResponse:
        health = await _engine_health(engine)
        ok = bool(health.pop("ok", False))
        body = {"status": "healthy" if ok else "unhealthy", "version": info["version"], **health}
        if not ok:
            log.warning(
                "[health] op=check status=unhealthy neo4j=%s engine=%s",
                health.get("neo4j", {}).get("ok"),
                health["engine"]["ok"],
            )
        return JSONResponse(body, status_code=200 if ok else 503)

    async def version(request: Request) -> JSONResponse:
        # "latest" is filled in by the update channel once OTA lands; null means unknown.
        return JSONResponse({"installed": info, "latest": None})

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/api/admin/version", version),
        ]
    )
