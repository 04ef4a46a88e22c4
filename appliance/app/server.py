"""Run the app under Granian on its Unix socket."""

from __future__ import annotations

import logging

from appliance.config import Settings

log = logging.getLogger(__name__)


def serve(settings: Settings) -> None:
    """Serve the app until SIGTERM/SIGINT."""
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    settings.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    sock = settings.app_socket
    sock.unlink(missing_ok=True)  # a socket left by a killed app; nobody else binds here
    log.info("[app] op=listen socket=%s", sock)
    Granian(
        "appliance.app.main:create_app",
        factory=True,
        uds=sock,
        uds_permissions=0o600,
        interface=Interfaces.ASGI,
        workers=1,
        # Open SSE streams would hold a stop forever; the edge tells browsers "restarting".
        workers_kill_timeout=5,
        log_level=LogLevels.warning,
    ).serve()
