"""The Updates page: what runs, what happened to the last update, what a USB stick offers.

The app is unprivileged: it only reads the OTA state and the offers, and — after the owner
confirmed, twice — writes an install request that a root unit carries out
(:mod:`appliance.ota.offers`). Admin only (the auth middleware), and changing anything needs a
session from the home network: the stick is plugged in there.

Routes::

    GET  /admin/updates                  the page
    GET  /api/admin/updates              {"version", "slots", "outcome", "offers" (each with
                                          "installed"), "pending", "running", "lan"}
    POST /api/admin/updates/confirm      {"offer"} → {"offer", "nonce", "expiresIn"}: step one
    POST /api/admin/updates/install      {"offer", "nonce"} → 202 {"requested": true}: step two
    GET  /api/admin/updates/progress     SSE: the latest run's progress.jsonl, line by line

The progress stream replays the current file, then follows it: ``event: progress`` (one line,
``id: <inode>:<offset>``), ``event: reset`` when a new run replaced the file, and a keep-alive
comment every :data:`KEEPALIVE_S` seconds. ``Last-Event-ID`` (or ``?lastEventId=``) resumes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from appliance.app.auth import require_lan, session_of
from appliance.app.context import AppContext
from appliance.app.pages import SECTIONS, brand_of, json_api, render
from appliance.core.logs import kv
from appliance.core.version import build_info
from appliance.ota import offers as ota_offers
from appliance.ota.device import ota_dir
from appliance.ota.offers import Offer, RequestRefused, UpdatePaths
from appliance.ota.state import STATE_FILE
from appliance.ota.versions import InvalidVersion, Version
from appliance.web.bodies import json_object
from appliance.web.errors import ApiError
from appliance.web.sse import EventStream, frame

log = logging.getLogger(__name__)

#: How long step one's nonce stays good for step two.
CONFIRM_TTL_S = 300.0
MAX_BODY_BYTES = 1024
MAX_STATE_BYTES = 256 * 1024
POLL_S = 0.25
KEEPALIVE_S = 15.0
MAX_LINE_BYTES = 16 * 1024
RETRY_MS = 2000


@dataclass(frozen=True)
class Pending:
    """A confirmation handed out by step one, good once for step two."""

    offer: str
    sha256: str
    expires: float


def state_path(ctx: AppContext) -> Path:
    """Where ``maxy ota`` keeps its state (written by root, read defensively here)."""
    return ota_dir(ctx.settings) / STATE_FILE


def read_state(path: Path) -> dict[str, Any] | None:
    """The OTA state file as a dict; None when it is absent or unusable."""
    try:
        data = ota_offers.read_small_json(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return None
    except ValueError as err:
        log.warning("[updates] op=read-state %s", kv(error=str(err)))
        return None
    return data if isinstance(data, dict) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _slot(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict) or not _text(value.get("slot")):
        return None
    return {"slot": str(value["slot"]), "version": _text(value.get("version")) or "?"}


def slots_of(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """The committed slot, the version each slot holds, and the trial under way (if any)."""
    if state is None:
        return None
    held = state.get("slots")
    if not isinstance(held, dict):
        held = {}
    versions = {
        name: _text(info.get("version"))
        for name, info in sorted(held.items())
        if isinstance(info, dict)
    }
    return {
        "committed": _slot(state.get("committed")),
        "versions": versions,
        "trial": _slot(state.get("trial")),
    }


def outcome_of(state: dict[str, Any] | None, brand: str) -> dict[str, str] | None:
    """The last update's outcome (``history[-1]`` of state.json) in a sentence for the owner."""
    history = state.get("history") if state else None
    last = history[-1] if isinstance(history, list) and history else None
    if not isinstance(last, dict):
        return None
    result = _text(last.get("outcome"))
    target = _text(last.get("version")) or "a new version"
    previous = _text(last.get("from")) or "the previous version"
    detail = _text(last.get("message"))
    why = f" ({detail})" if detail else ""
    sentences = {
        "committed": f"{brand} was updated to {target}.",
        "health-check-failed": (
            f"The update to {target} failed its health check{why}; {brand} went back to {previous}."
        ),
        "rolled-back": (
            f"The update to {target} did not finish its trial start (power cut, crash or "
            f"watchdog reset); {brand} went back to {previous}."
        ),
        "apply-failed": f"Installing {target} failed{why}; {brand} kept running {previous}.",
    }
    if result not in sentences:
        return None
    return {"result": result, "message": sentences[result], "at": _text(last.get("at")) or ""}


def installed(offer: Offer, running: str) -> bool:
    """Whether the offered version is not newer than the one running (nothing to install)."""
    if offer.version is None:
        return False
    try:
        return not Version(running) < Version(offer.version)
    except InvalidVersion:
        return offer.version == running


async def _body(request: Request) -> dict[str, Any]:
    return await json_object(request, limit=MAX_BODY_BYTES, what="the request")


LAN_ONLY = "Updates are installed from the home network: open Maxy there to install one."


def _parse_event_id(raw: str | None) -> tuple[int | None, int]:
    if raw and raw.count(":") == 1:
        inode, offset = raw.split(":")
        if inode.isdigit() and offset.isdigit():
            return int(inode), int(offset)
    return None, 0


async def follow_progress(
    path: Path, last_event_id: str | None, poll: float = POLL_S, keepalive: float = KEEPALIVE_S
) -> AsyncGenerator[bytes, None]:
    """The progress file as SSE: what it holds now, then each line appended, until cancelled."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    inode, offset = _parse_event_id(last_event_id)
    pending = b""
    idle_since = time.monotonic()
    while True:
        sent = False
        try:
            with path.open("rb") as handle:
                info = os.fstat(handle.fileno())
                if inode != info.st_ino or info.st_size < offset:
                    if inode is not None:
                        yield frame("reset", {}, f"{info.st_ino}:0")
                    inode, offset, pending = info.st_ino, 0, b""
                handle.seek(offset + len(pending))
                pending += handle.read(1024 * 1024)
        except FileNotFoundError:
            pass
        while b"\n" in pending:
            raw, pending = pending.split(b"\n", 1)
            offset += len(raw) + 1
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and len(raw) <= MAX_LINE_BYTES:
                yield frame("progress", line, f"{inode}:{offset}")
                sent = True
        if len(pending) > MAX_LINE_BYTES:  # a runaway line: skip what is there
            offset += len(pending)
            pending = b""
        now = time.monotonic()
        if sent:
            idle_since = now
        elif now - idle_since >= keepalive:
            yield b": keep-alive\n\n"
            idle_since = now
        await asyncio.sleep(poll)


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The Updates page and its API (registered before the pages' /admin catch-all)."""
    paths = UpdatePaths.from_settings(ctx.settings)
    confirmations: dict[str, Pending] = {}

    def version() -> str:
        return str(build_info()["version"])

    def offer_of(data: dict[str, Any]) -> Offer:
        offer_id = data.get("offer")
        offer = ota_offers.find_offer(paths, offer_id) if isinstance(offer_id, str) else None
        if offer is None:
            raise ApiError(
                404, "no-such-offer", "That update is no longer offered. Reload the page."
            )
        if not offer.verified:
            raise ApiError(
                409,
                "offer-refused",
                f"This update was refused and cannot be installed: {offer.error}",
            )
        if installed(offer, version()):
            raise ApiError(
                409, "already-installed", f"{brand_of(ctx)} {offer.version} is already installed."
            )
        return offer

    def not_busy() -> None:
        if ota_offers.request_pending(paths):
            raise ApiError(
                409, "install-pending", "An install was already requested; it starts shortly."
            )
        if ota_offers.run_active(paths):
            raise ApiError(
                409, "install-running", "An update is being installed. Wait until it finishes."
            )

    async def page(request: Request) -> Response:
        return render(
            ctx,
            request,
            "updates.html",
            "Updates",
            admin=True,
            section="updates",
            sections=SECTIONS,
            version=version(),
        )

    async def status(request: Request) -> dict[str, Any]:
        state = await run_in_threadpool(read_state, state_path(ctx))
        found = await run_in_threadpool(ota_offers.load_offers, paths)
        session = session_of(request)
        return {
            "version": version(),
            "slots": slots_of(state),
            "outcome": outcome_of(state, brand_of(ctx)),
            "offers": [{**o.to_json(), "installed": installed(o, version())} for o in found],
            "pending": ota_offers.request_pending(paths),
            "running": ota_offers.run_active(paths),
            "lan": session is not None and session.network == "lan",
        }

    async def confirm(request: Request) -> dict[str, Any]:
        require_lan(request, LAN_ONLY)
        offer = offer_of(await _body(request))
        not_busy()
        now = time.monotonic()
        for nonce, held in list(confirmations.items()):
            if held.expires < now:
                del confirmations[nonce]
        nonce = ota_offers.new_nonce()
        confirmations[nonce] = Pending(offer.id, offer.sha256, now + CONFIRM_TTL_S)
        log.info("[updates] op=confirm %s", kv(offer=offer.id, version=offer.version))
        return {"offer": offer.to_json(), "nonce": nonce, "expiresIn": int(CONFIRM_TTL_S)}

    async def install(request: Request) -> Response:
        require_lan(request, LAN_ONLY)
        data = await _body(request)
        offer = offer_of(data)
        nonce = data.get("nonce")
        if not isinstance(nonce, str):
            nonce = ""
        held = confirmations.pop(nonce, None)
        if held is None or held.expires < time.monotonic():
            raise ApiError(
                409,
                "confirm-required",
                "Confirm the update first: press Install, then confirm in the dialog.",
            )
        if held.offer != offer.id or held.sha256 != offer.sha256:
            raise ApiError(
                409, "confirm-mismatch", "The confirmation was for another update. Confirm again."
            )
        not_busy()
        try:
            await run_in_threadpool(ota_offers.write_request, paths, offer, nonce)
        except (RequestRefused, OSError) as err:
            log.warning("[updates] op=install %s", kv(offer=offer.id, error=str(err)))
            raise ApiError(
                503, "request-failed", f"The install request could not be written: {err}"
            ) from err
        log.info("[updates] op=install %s", kv(offer=offer.id, version=offer.version))
        response = JSONResponse({"requested": True, "offer": offer.id}, status_code=202)
        response.headers["cache-control"] = "no-store"
        return response

    async def progress(request: Request) -> ASGIApp:
        last = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
        return EventStream(follow_progress(paths.progress, last))

    return [
        Route("/admin/updates", page, methods=["GET"]),
        Route("/api/admin/updates", json_api(status), methods=["GET"]),
        Route("/api/admin/updates/confirm", json_api(confirm), methods=["POST"]),
        Route("/api/admin/updates/install", install, methods=["POST"]),
        Route("/api/admin/updates/progress", progress, methods=["GET"]),
    ]
