"""TCP ports: check one is free before a server takes it, and find the ones a process got.

A server that is told to bind port 0 gets a free one from the kernel: nothing else can take it
between the choice and the bind. Two ways let a caller learn or fix the port without that race:

* A hold (``tests/support/processes.held_port``) binds a port of the kernel's choice with
  ``SO_REUSEPORT`` and never listens. The kernel hands that port to nobody else while the hold
  is open, and a server that sets ``SO_REUSEPORT`` itself (Granian does) binds it beside the
  hold. Tests hold each port they give a child until the test module ends.
* :func:`listening_ports` reads the ports a process listens on from ``/proc``: a server that
  cannot bind beside a hold (Neo4j) is told port 0 and asked afterwards.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path


class PortInUse(Exception):
    """Another process already listens on the port."""


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def loopback(host: str) -> str:
    """The address to reach a server listening on ``host`` from this machine."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def check_port_free(host: str, port: int, setting: str) -> None:
    """Fail early, naming the setting that moves the port, if a server could not serve on it.

    The port is taken when a program holds it without ``SO_REUSEPORT`` (the bind probe fails) or
    when something already listens on it (a Granian of another Maxy shares ports). A
    hold does neither: it keeps the port for the server that is about to
    start.
    """
    if port == 0:
        return  # the kernel picks a free one
    taken = f"Port {port} is already in use on {host}. Stop the other program "
    taken += f"(`ss -ltnp 'sport = :{port}'` shows it) or set {setting}."
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise PortInUse(taken) from err
            raise
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        if probe.connect_ex((loopback(host), port)) == 0:
            raise PortInUse(taken)


def recorded_port(path: Path) -> int:
    """The port a server wrote to ``path`` when it got one for port 0; 0 when none is recorded."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fds = Path(f"/proc/{pid}/fd")
    for fd in os.listdir(fds):
        try:
            target = os.readlink(fds / fd)
        except OSError:
            continue  # closed since the listing
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (IPv4 and IPv6), read from ``/proc``."""
    try:
        inodes = _socket_inodes(pid)
    except (FileNotFoundError, ProcessLookupError):
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # state LISTEN, one of its sockets
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
