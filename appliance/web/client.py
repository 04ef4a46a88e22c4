"""Who is asking: the contract between the edge and the app.

The edge classifies every request (see :mod:`appliance.edge.network`), removes any ``X-Maxy-*``
header the client sent (except ``X-Maxy-CSRF``, the browser's CSRF token), and adds:

    X-Maxy-Network    lan | external
    X-Maxy-Client-IP  the client's address as the edge believes it
    X-Maxy-Host-Role  admin | public    (public hostnames never reach admin routes)

The app trusts these headers because its Unix socket (mode 0700 runtime directory) is reachable
only by the edge and local processes of the ``maxy`` user. A request on the socket WITHOUT them
came from such a local process (a CLI, a test): it is LAN, admin host role, never throttled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from starlette.requests import HTTPConnection

NETWORK_HEADER = "x-maxy-network"
CLIENT_IP_HEADER = "x-maxy-client-ip"
HOST_ROLE_HEADER = "x-maxy-host-role"
EDGE_HEADERS = (NETWORK_HEADER, CLIENT_IP_HEADER, HOST_ROLE_HEADER)

Network = Literal["lan", "external"]
HostRole = Literal["admin", "public"]


@dataclass(frozen=True)
class Client:
    """The classified client of one request or WebSocket."""

    network: Network
    ip: str
    host_role: HostRole
    via: Literal["edge", "socket"]

    @property
    def local(self) -> bool:
        """A local process (the Unix socket, or loopback on the LAN path): never throttled.

        The tunnel connector also connects from loopback; its requests are external, never local.
        """
        return self.via == "socket" or (self.network == "lan" and self.ip in {"127.0.0.1", "::1"})


def client_of(conn: HTTPConnection) -> Client:
    """Read the edge's classification from a request (or WebSocket) the app received."""
    network = conn.headers.get(NETWORK_HEADER)
    if network is None:
        return Client(network="lan", ip="unix", host_role="admin", via="socket")
    role = conn.headers.get(HOST_ROLE_HEADER, "public")
    return Client(
        network="external" if network != "lan" else "lan",
        ip=conn.headers.get(CLIENT_IP_HEADER, "unknown"),
        host_role="admin" if role == "admin" else "public",
        via="edge",
    )
