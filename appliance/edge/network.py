"""Who is asking: classify a request by its peer address, forwarded headers and Host.

Pure functions, no I/O. The rules:

- Network. A request arriving through the local tunnel connector is ``external``: a loopback peer
  carrying cloudflared's headers (``Cf-Connecting-Ip`` / ``Cf-Ray``), or any request whose Host
  is one of the tunnel host names (``admin_hostnames``, ``public_hostnames``). Otherwise the
  client address decides: private (RFC 1918, fc00::/7), link-local and loopback are ``lan``,
  anything else is ``external``.
- Client address. Forwarded headers (``Cf-Connecting-Ip``, ``X-Real-IP``, ``X-Forwarded-For``)
  are believed only from peers in ``trusted_proxies``; a loopback peer is believed for the
  ``Cf-Connecting-Ip`` of the tunnel connector. Everyone else is the peer address itself.
- Host role. ``public_hostnames`` -> public (even if also an admin name), ``admin_hostnames`` ->
  admin, any other host on the LAN -> admin; an external request for any other host has no role
  (the edge answers 404).
- Own names. On the LAN the device answers only to its own names: an IP address, ``localhost``,
  ``maxy.local``, its host name (bare and ``.local``), ``lan_hostnames`` and the tunnel's names.
  Any other Host is ``misdirected`` (the edge answers 421 before anything else): a page on the
  owner's network that rebinds its own DNS name to the device cannot drive the PIN setup or the
  API, since the browser sends that page's name as Host.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import socket
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from appliance.core.config import Settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Network = Literal["lan", "external"]
HostRole = Literal["admin", "public"]

LAN_NETWORKS: tuple[Net, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "fc00::/7",
        "169.254.0.0/16",
        "fe80::/10",
        "127.0.0.0/8",
        "::1/128",
    )
)
TUNNEL_HEADERS = ("cf-connecting-ip", "cf-ray")
_OWN_NAME = socket.gethostname().lower().rstrip(".")
#: The names every device answers to on the LAN, whatever the settings say.
OWN_HOSTNAMES = frozenset({"localhost", "maxy.local", _OWN_NAME, f"{_OWN_NAME}.local"})


@dataclass(frozen=True)
class Policy:
    """What the edge trusts: proxies, and the tunnel's host names (all lower-case)."""

    trusted_proxies: tuple[Net, ...] = ()
    admin_hostnames: frozenset[str] = frozenset()
    public_hostnames: frozenset[str] = frozenset()
    lan_hostnames: frozenset[str] = OWN_HOSTNAMES

    @classmethod
    def build(
        cls,
        trusted_proxies: Iterable[str] = (),
        admin_hostnames: Iterable[str] = (),
        public_hostnames: Iterable[str] = (),
        lan_hostnames: Iterable[str] = (),
    ) -> Policy:
        """Parse proxy addresses or CIDR networks; raise ValueError naming a bad entry."""
        nets: list[Net] = []
        for entry in trusted_proxies:
            try:
                nets.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError as err:
                raise ValueError(
                    f"{entry!r} in MAXY_TRUSTED_PROXIES is not an address or network "
                    "(such as 192.168.1.2 or 10.0.0.0/8)"
                ) from err
        return cls(
            trusted_proxies=tuple(nets),
            admin_hostnames=frozenset(h.lower() for h in admin_hostnames),
            public_hostnames=frozenset(h.lower() for h in public_hostnames),
            lan_hostnames=OWN_HOSTNAMES | {h.lower().rstrip(".") for h in lan_hostnames},
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        """The policy the settings describe."""
        return cls.build(
            settings.trusted_proxies,
            settings.admin_hostnames,
            settings.public_hostnames,
            settings.lan_hostnames,
        )

    def with_hostnames(self, admin: Iterable[str], public: Iterable[str]) -> Policy:
        """This policy plus more admin and public host names (the tunnel's config adds them)."""
        return dataclasses.replace(
            self,
            admin_hostnames=self.admin_hostnames | {h.lower() for h in admin},
            public_hostnames=self.public_hostnames | {h.lower() for h in public},
        )

    def own_name(self, host: str) -> bool:
        """Whether ``host`` (from :func:`host_name`) names this device on the LAN."""
        return (
            not host  # HTTP/1.0 without Host: no browser sends that, so no page can rebind it
            or parse_address(host) is not None
            or host.endswith(".localhost")
            or host in self.lan_hostnames
            or host in self.admin_hostnames
            or host in self.public_hostnames
        )

    def trusts(self, address: Address | None) -> bool:
        """Whether forwarded headers from this peer are believed."""
        return address is not None and any(address in net for net in self.trusted_proxies)


@dataclass(frozen=True)
class Classification:
    """The edge's verdict on one request; ``host_role`` None means: answer 404 (421 when
    ``misdirected``: a LAN request for a name that is not the device's)."""

    network: Network
    client_ip: str
    host_role: HostRole | None
    host: str
    tunnel: bool
    forwarded_trusted: bool
    misdirected: bool = False


@functools.lru_cache(maxsize=4096)  # the same few peers ask again and again
def parse_address(text: str | None) -> Address | None:
    """Parse an address (IPv4-mapped IPv6 becomes IPv4, zone ids dropped); None if not one."""
    if not text:
        return None
    text = text.strip().strip("[]").split("%", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@functools.lru_cache(maxsize=4096)
def is_lan(address: Address | None) -> bool:
    """Private, link-local or loopback."""
    return address is not None and any(
        address.version == net.version and address in net for net in LAN_NETWORKS
    )


def host_name(host_header: str | None) -> str:
    """The Host header without its port, lower-case (``[::1]:80`` -> ``::1``)."""
    host = (host_header or "").strip().lower()
    if "," in host or " " in host:
        return host  # several Host headers (joined) or garbage: names nothing, matches nothing
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _forwarded_client(headers: Mapping[str, str], policy: Policy) -> tuple[bool, Address | None]:
    """Whether a trusted proxy reports a client, and its address (None if unreadable)."""
    chain = [part for part in headers.get("x-forwarded-for", "").split(",") if part.strip()]
    if chain:
        # Walk from the nearest hop outwards, skipping our own proxies: the first stranger is
        # the client (anything further left could have been written by that stranger).
        for part in reversed(chain):
            address = parse_address(part)
            if address is None or not policy.trusts(address):
                return True, address
        return True, parse_address(chain[0])
    for name in ("x-real-ip", "cf-connecting-ip"):
        if name in headers:
            return True, parse_address(headers[name])
    return False, None


def classify(peer: str | None, headers: Mapping[str, str], policy: Policy) -> Classification:
    """Classify one request; ``headers`` maps lower-case names to values."""
    host = host_name(headers.get("host"))
    peer_address = parse_address(peer)
    tunnel_host = host in policy.admin_hostnames or host in policy.public_hostnames
    from_connector = (
        peer_address is not None
        and peer_address.is_loopback
        and any(name in headers for name in TUNNEL_HEADERS)
    )
    forwarded_trusted = peer_address is not None and policy.trusts(peer_address)
    client: Address | None = peer_address
    if forwarded_trusted:
        reported, address = _forwarded_client(headers, policy)
        if reported:
            client = address
    elif from_connector and "cf-connecting-ip" in headers:
        client = parse_address(headers["cf-connecting-ip"])

    # cloudflared connects from loopback: a tunnel host name seen there is the tunnel even
    # without its headers. The same host name from a LAN peer (split DNS, a hosts file) is LAN.
    via_loopback = peer_address is not None and peer_address.is_loopback
    tunnel = from_connector or (tunnel_host and via_loopback)
    network: Network = "lan" if not tunnel and is_lan(client) else "external"
    misdirected = network == "lan" and not policy.own_name(host)
    role: HostRole | None
    if misdirected:
        role = None
    elif host in policy.public_hostnames:
        role = "public"
    elif host in policy.admin_hostnames or network == "lan":
        role = "admin"
    else:
        role = None
    return Classification(
        network=network,
        client_ip=str(client) if client is not None else "unknown",
        host_role=role,
        host=host,
        tunnel=tunnel,
        forwarded_trusted=forwarded_trusted or from_connector,
        misdirected=misdirected,
    )


def same_origin(origin: str, host_header: str) -> bool:
    """Whether a WebSocket's Origin names the host it was sent to (scheme aside)."""
    parts = urllib.parse.urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    return parts.netloc.lower() == host_header.strip().lower()
