"""Run the edge under Granian on the configured TCP port."""

from __future__ import annotations

import logging

from appliance.config import Settings
from appliance.ports import check_port_free

log = logging.getLogger(__name__)


def serve(settings: Settings) -> None:
    """Serve the edge until SIGTERM/SIGINT."""
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    check_port_free(settings.host, settings.port, "MAXY_PORT")
    log.info("[edge] op=listen address=%s:%s", settings.host, settings.port)
    Granian(
        "appliance.edge.app:create_app",
        factory=True,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        workers=1,
        log_level=LogLevels.warning,
    ).serve()
