"""Serve an ASGI factory under Granian on a Unix socket: how the app and the manager run."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from appliance.core.config import Settings
from appliance.core.proc import stop_signals_once
from appliance.core.systemd import Notifier, http_probe, watch_granian

log = logging.getLogger(__name__)

# Open SSE streams (every browser showing the shell) would hold a graceful stop forever; after
# this many seconds the worker is killed and the edge tells browsers "restarting".
KILL_TIMEOUT = 5


def serve_unix(
    settings: Settings, factory: str, sock: Path, area: str, role: str | None = None
) -> None:
    """Serve ``factory`` (``module:function``) on ``sock`` (mode 0600) until SIGTERM/SIGINT.

    Under systemd the main process reports READY once ``GET /healthz`` on the socket gets an
    answer, and feeds the watchdog while it keeps answering (see :mod:`appliance.core.systemd`).
    """
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    settings.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    sock.unlink(missing_ok=True)  # a socket left by a killed process; nobody else binds here
    log.info("[%s] op=listen socket=%s", area, sock)
    notifier = Notifier.from_environ(os.environ)
    server = Granian(
        factory,
        factory=True,
        uds=sock,
        uds_permissions=0o600,
        interface=Interfaces.ASGI,
        workers=1,
        workers_kill_timeout=KILL_TIMEOUT,
        log_level=LogLevels.warning,
    )
    watch_granian(server, notifier, role or area, http_probe("/healthz", uds=sock), str(sock))
    stop_signals_once(server)  # after watch_granian: its handler is guarded too
    server.serve()
