"""Check that a TCP port is free before a server tries to take it."""

from __future__ import annotations

import errno
import socket


class PortInUse(Exception):
    """Another process already listens on the port."""


def check_port_free(host: str, port: int, setting: str) -> None:
    """Fail early, naming the setting that moves the port, if it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"Port {port} is already in use on {host}. Stop the other program "
                    f"(`ss -ltnp 'sport = :{port}'` shows it) or set {setting}."
                ) from err
            raise
