"""Ports: the free-port check, holds a SO_REUSEPORT server binds beside, and /proc lookups."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from appliance.core.ports import (
    PortInUse,
    check_port_free,
    listening_ports,
    recorded_port,
)
from tests.support.processes import held_port


def reuseport_listener(port: int) -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    return server


def test_a_held_port_is_free_for_a_reuseport_server_and_for_nobody_else() -> None:
    port = held_port()  # held until the module ends
    check_port_free("127.0.0.1", port, "MAXY_PORT")  # the hold keeps it for the server
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("127.0.0.1", port))  # a program without SO_REUSEPORT cannot take it
    with reuseport_listener(port) as server:  # Granian's way of binding
        assert port in listening_ports(os.getpid())
        with pytest.raises(PortInUse, match=f"Port {port} is already in use.*MAXY_PORT"):
            check_port_free("127.0.0.1", port, "MAXY_PORT")  # a second Maxy would share it
        server.close()


def test_a_port_bound_without_reuseport_is_taken() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        port = other.getsockname()[1]
        with pytest.raises(PortInUse, match="ss -ltnp"):
            check_port_free("127.0.0.1", port, "MAXY_NEO4J_URI")


def test_port_zero_is_always_free_and_a_bound_port_is_read_back(tmp_path: Path) -> None:
    check_port_free("127.0.0.1", 0, "MAXY_PORT")
    assert listening_ports(os.getpid()) == set()
    assert listening_ports(2**22 + 1) == set()  # no such process
    record = tmp_path / "bolt.port"
    assert recorded_port(record) == 0
    record.write_text("41234\n")
    assert recorded_port(record) == 41234
    record.write_text("garbage")
    assert recorded_port(record) == 0
