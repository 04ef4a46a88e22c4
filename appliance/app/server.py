"""Run the app under Granian on its Unix socket."""

from __future__ import annotations

from appliance.core.config import Settings
from appliance.web.unix_server import serve_unix


def serve(settings: Settings) -> None:
    """Serve the app until SIGTERM/SIGINT."""
    serve_unix(settings, "appliance.app.main:create_app", settings.app_socket, "app")
