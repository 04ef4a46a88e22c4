"""Classification of requests: network, client address and host role (pure functions)."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.core.config import load_settings
from appliance.edge.network import (
    Policy,
    classify,
    host_name,
    is_lan,
    parse_address,
    same_origin,
)

ADMIN, PUBLIC = "admin.example.com", "chat.example.com"
POLICY = Policy.build(
    trusted_proxies=["192.168.1.2", "10.9.0.0/16"],
    admin_hostnames=[ADMIN],
    public_hostnames=[PUBLIC],
)

# peer, headers, expected (network, client ip, host role)
CASES = [
    # Direct peers on the LAN: private, link-local and loopback ranges, any host -> admin.
    ("192.168.1.20", {"host": "maxy.local:19200"}, ("lan", "192.168.1.20", "admin")),
    ("10.1.2.3", {"host": "10.0.0.5"}, ("lan", "10.1.2.3", "admin")),
    ("172.16.0.9", {"host": "maxy.local"}, ("lan", "172.16.0.9", "admin")),
    ("172.31.255.1", {"host": "maxy.local"}, ("lan", "172.31.255.1", "admin")),
    ("169.254.7.7", {"host": "maxy.local"}, ("lan", "169.254.7.7", "admin")),
    ("fe80::1", {"host": "[fe80::1]:19200"}, ("lan", "fe80::1", "admin")),
    ("fd12:3456::7", {"host": "maxy.local"}, ("lan", "fd12:3456::7", "admin")),
    ("127.0.0.1", {"host": "localhost:19200"}, ("lan", "127.0.0.1", "admin")),
    ("::1", {"host": "localhost"}, ("lan", "::1", "admin")),
    ("::ffff:192.168.1.20", {"host": "maxy.local"}, ("lan", "192.168.1.20", "admin")),
    # Just outside the private ranges: external, and an unknown host has no role.
    ("172.32.0.1", {"host": "maxy.local"}, ("external", "172.32.0.1", None)),
    ("100.64.0.1", {"host": "maxy.local"}, ("external", "100.64.0.1", None)),
    ("8.8.8.8", {"host": "maxy.local"}, ("external", "8.8.8.8", None)),
    ("2001:db8::1", {"host": "maxy.local"}, ("external", "2001:db8::1", None)),
    # A public peer reaching a tunnel host name directly.
    ("8.8.8.8", {"host": PUBLIC}, ("external", "8.8.8.8", "public")),
    ("8.8.8.8", {"host": ADMIN.upper() + ":443"}, ("external", "8.8.8.8", "admin")),
    # The tunnel connector: loopback with cloudflared's headers is external.
    (
        "127.0.0.1",
        {"host": ADMIN, "cf-connecting-ip": "203.0.113.9", "cf-ray": "8a1b-LHR"},
        ("external", "203.0.113.9", "admin"),
    ),
    (
        "127.0.0.1",
        {"host": PUBLIC, "cf-connecting-ip": "2001:db8::9"},
        ("external", "2001:db8::9", "public"),
    ),
    ("127.0.0.1", {"host": "maxy.local", "cf-ray": "8a1b-LHR"}, ("external", "127.0.0.1", None)),
    # A LAN-looking client address from the tunnel is still external.
    (
        "127.0.0.1",
        {"host": ADMIN, "cf-connecting-ip": "192.168.1.50"},
        ("external", "192.168.1.50", "admin"),
    ),
    # A tunnel host name is external from loopback (the connector) even without its headers,
    # but the same host name from a LAN peer (split DNS, a hosts file) is LAN.
    ("127.0.0.1", {"host": PUBLIC}, ("external", "127.0.0.1", "public")),
    ("192.168.1.20", {"host": ADMIN}, ("lan", "192.168.1.20", "admin")),
    ("192.168.1.20", {"host": PUBLIC}, ("lan", "192.168.1.20", "public")),
    # Forwarded headers from strangers are ignored.
    (
        "8.8.8.8",
        {"host": "maxy.local", "x-forwarded-for": "192.168.1.5", "x-real-ip": "10.0.0.1"},
        ("external", "8.8.8.8", None),
    ),
    (
        "192.168.1.20",
        {"host": "maxy.local", "cf-connecting-ip": "8.8.8.8"},
        ("lan", "192.168.1.20", "admin"),
    ),
    (
        "8.8.8.8",
        {"host": PUBLIC, "cf-connecting-ip": "192.168.1.5"},
        ("external", "8.8.8.8", "public"),
    ),
    # Trusted proxies: their X-Forwarded-For (nearest stranger), X-Real-IP or Cf-Connecting-Ip.
    (
        "192.168.1.2",
        {"host": "maxy.local", "x-forwarded-for": "8.8.4.4"},
        ("external", "8.8.4.4", None),
    ),
    (
        "192.168.1.2",
        {"host": "maxy.local", "x-forwarded-for": "192.168.1.77"},
        ("lan", "192.168.1.77", "admin"),
    ),
    (
        "10.9.3.4",
        {"host": PUBLIC, "x-forwarded-for": "192.168.1.66, 203.0.113.7, 10.9.0.1"},
        ("external", "203.0.113.7", "public"),
    ),
    ("192.168.1.2", {"host": "maxy.local", "x-real-ip": "1.1.1.1"}, ("external", "1.1.1.1", None)),
    (
        "192.168.1.2",
        {"host": PUBLIC, "cf-connecting-ip": "1.0.0.1"},
        ("external", "1.0.0.1", "public"),
    ),
    ("192.168.1.2", {"host": "maxy.local"}, ("lan", "192.168.1.2", "admin")),
    # An unreadable forwarded address is nobody we know: external.
    (
        "192.168.1.2",
        {"host": "maxy.local", "x-forwarded-for": "garbage"},
        ("external", "unknown", None),
    ),
    # No peer address at all (should not happen): external.
    (None, {"host": "maxy.local"}, ("external", "unknown", None)),
    ("not-an-ip", {"host": PUBLIC}, ("external", "unknown", "public")),
]


@pytest.mark.parametrize(("peer", "headers", "expected"), CASES)
def test_classify(peer: str | None, headers: dict[str, str], expected: tuple[object, ...]) -> None:
    who = classify(peer, headers, POLICY)
    assert (who.network, who.client_ip, who.host_role) == expected


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("maxy.local:19200", "maxy.local"),
        ("Admin.Example.COM", "admin.example.com"),
        ("admin.example.com.", "admin.example.com"),
        ("[::1]:19200", "::1"),
        ("[fe80::1]", "fe80::1"),
        ("10.0.0.5:80", "10.0.0.5"),
        ("", ""),
        (None, ""),
    ],
)
def test_host_name_drops_the_port_and_case(header: str | None, name: str) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://maxy.local:19200", "maxy.local:19200", True),
        ("https://Admin.Example.com", "admin.example.com", True),
        ("http://maxy.local:19200", "maxy.local:8080", False),
        ("http://evil.example", "maxy.local:19200", False),
        ("http://maxy.local.evil.example", "maxy.local", False),
        ("null", "maxy.local", False),
        ("file://", "maxy.local", False),
    ],
)
def test_same_origin(origin: str, host: str, same: bool) -> None:
    assert same_origin(origin, host) is same


def test_parse_address_unwraps_mapped_ipv4_and_zones() -> None:
    assert parse_address("::ffff:10.0.0.1") == ipaddress.ip_address("10.0.0.1")
    assert parse_address("fe80::1%eth0") == ipaddress.ip_address("fe80::1")
    assert parse_address("[::1]") == ipaddress.ip_address("::1")
    assert parse_address("maxy.local") is None


def test_a_bad_trusted_proxy_is_named() -> None:
    with pytest.raises(ValueError, match=re.escape("'10.0.0.0/33' in MAXY_TRUSTED_PROXIES")):
        Policy.build(trusted_proxies=["10.0.0.0/33"])


def test_policy_from_settings() -> None:
    settings = load_settings(
        {
            "MAXY_TRUSTED_PROXIES": "10.0.0.1, fd00::/8",
            "MAXY_ADMIN_HOSTNAMES": "Admin.Example.com",
            "MAXY_PUBLIC_HOSTNAMES": "chat.example.com,www.example.com",
        },
        config_file=None,
    )
    policy = Policy.from_settings(settings)
    assert policy.trusts(ipaddress.ip_address("10.0.0.1"))
    assert policy.trusts(ipaddress.ip_address("fd00::5"))
    assert not policy.trusts(ipaddress.ip_address("10.0.0.2"))
    assert policy.admin_hostnames == {"admin.example.com"}
    assert policy.public_hostnames == {"chat.example.com", "www.example.com"}


public_ipv4 = st.ip_addresses(v=4).filter(lambda a: not is_lan(a) and not a.is_unspecified)
header_names = st.sampled_from(
    ["x-forwarded-for", "x-real-ip", "cf-connecting-ip", "cf-ray", "host", "forwarded"]
)
header_values = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(["127.0.0.1", "192.168.1.1", "localhost", ADMIN, PUBLIC, "maxy.local"]),
    st.text(max_size=20),
)


@given(peer=public_ipv4, headers=st.dictionaries(header_names, header_values, max_size=6))
def test_an_untrusted_public_peer_is_never_lan_whatever_it_sends(
    peer: ipaddress.IPv4Address, headers: dict[str, str]
) -> None:
    who = classify(str(peer), headers, POLICY)
    assert who.network == "external"
    assert who.client_ip == str(peer)
    if who.host_role == "admin":
        assert host_name(headers.get("host")) == ADMIN


@pytest.mark.parametrize(
    ("host", "misdirected"),
    [
        ("maxy.local", False),
        ("MAXY.LOCAL.:19200", False),
        ("localhost", False),
        ("app.localhost", False),
        ("192.168.1.9:19200", False),
        ("[fe80::1]", False),
        ("", False),
        (ADMIN, False),
        (PUBLIC, False),
        ("home.lan", False),  # in lan_hostnames
        ("rebound.attacker.example", True),
        ("maxy.local.attacker.example", True),
        ("192.168.1.9, evil.example", True),  # two Host headers
    ],
)
def test_the_lan_answers_only_to_the_devices_own_names(host: str, misdirected: bool) -> None:
    policy = Policy.build(
        admin_hostnames=[ADMIN], public_hostnames=[PUBLIC], lan_hostnames=["Home.LAN"]
    )
    who = classify("192.168.1.20", {"host": host}, policy)
    assert who.misdirected is misdirected
    assert (who.host_role is None) is misdirected


def test_an_external_request_is_never_misdirected_only_unknown() -> None:
    who = classify("8.8.8.8", {"host": "rebound.attacker.example"}, POLICY)
    assert not who.misdirected and who.host_role is None
