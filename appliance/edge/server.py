"""Run the edge under Granian on the configured TCP port."""

from __future__ import annotations

import logging
import os

from appliance.core.config import Settings, SettingsError
from appliance.core.ports import check_port_free, loopback
from appliance.core.proc import stop_signals_once
from appliance.core.systemd import Notifier, http_probe, watch_granian
from appliance.edge.app import VERSION_PATH
from appliance.edge.network import Policy

log = logging.getLogger(__name__)

# Open event streams never finish on their own: without a limit a graceful stop waits forever.
KILL_TIMEOUT_S = 5


def serve(settings: Settings) -> None:
    """Serve the edge until SIGTERM/SIGINT.

    Under systemd the main process reports READY once the edge answers
    ``/api/admin/version`` (its own route: no engine or app needed) and feeds the watchdog while
    it keeps answering (see :mod:`appliance.core.systemd`).
    """
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    try:
        Policy.from_settings(settings)  # a bad trusted proxy fails here, not in the worker
    except ValueError as err:
        raise SettingsError(f"{err}. Fix MAXY_TRUSTED_PROXIES.") from err
    check_port_free(settings.host, settings.port, "MAXY_PORT")
    # Our own lines say what the proxy does; the clients' per-request lines would drown them.
    for noisy in ("httpx", "httpcore", "websockets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    log.info(
        "[edge] op=listen address=%s:%s app_socket=%s",
        settings.host,
        settings.port,
        settings.app_socket,
    )
    notifier = Notifier.from_environ(os.environ)
    server = Granian(
        "appliance.edge.app:create_app",
        factory=True,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        workers=1,
        workers_kill_timeout=KILL_TIMEOUT_S,
        log_level=LogLevels.warning,
    )
    probe = http_probe(VERSION_PATH, host=loopback(settings.host), port=settings.port)
    watch_granian(server, notifier, "edge", probe, f"{settings.host}:{settings.port}")
    stop_signals_once(server)  # after watch_granian: its handler is guarded too
    server.serve()
