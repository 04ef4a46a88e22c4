"""Login throttling, injected clock: backoff, quiet expiry, local exemption, bounded memory."""

from __future__ import annotations

import logging

import pytest

from appliance.web.client import Client
from appliance.web.throttle import Throttle, WindowLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def remote(ip: str = "203.0.113.7", network: str = "external") -> Client:
    return Client(network=network, ip=ip, host_role="admin", via="edge")  # type: ignore[arg-type]


def test_backoff_doubles_from_one_second_up_to_five_minutes() -> None:
    clock = Clock()
    throttle = Throttle(clock=clock)
    client = remote()
    assert throttle.retry_after(client) == 0
    waits = []
    for _ in range(12):
        wait = throttle.failed(client)
        waits.append(wait)
        assert throttle.retry_after(client) == wait
        clock.now += wait  # the client waits exactly as told, then fails again
        assert throttle.retry_after(client) == 0
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]


def test_waiting_counts_down() -> None:
    clock = Clock()
    throttle = Throttle(clock=clock)
    client = remote()
    for _ in range(4):
        throttle.failed(client)
    assert throttle.retry_after(client) == 8
    clock.now += 5.5
    assert throttle.retry_after(client) == 3  # rounded up: never tell a client too early
    clock.now += 2.5
    assert throttle.retry_after(client) == 0


def test_state_expires_after_fifteen_quiet_minutes() -> None:
    clock = Clock()
    throttle = Throttle(clock=clock)
    client = remote()
    for _ in range(6):
        throttle.failed(client)
    clock.now += 15 * 60 - 1
    assert throttle.failed(client) == 64  # still remembered: the seventh failure
    clock.now += 15 * 60
    assert throttle.retry_after(client) == 0
    assert throttle.failed(client) == 1  # forgotten: starts again, no permanent ban
    assert len(throttle) == 1


def test_success_forgets_the_client() -> None:
    clock = Clock()
    throttle = Throttle(clock=clock)
    client = remote()
    for _ in range(3):
        throttle.failed(client)
    throttle.succeeded(client)
    assert throttle.retry_after(client) == 0
    assert throttle.failed(client) == 1


def test_clients_are_throttled_separately() -> None:
    throttle = Throttle(clock=Clock())
    throttle.failed(remote("198.51.100.1"))
    throttle.failed(remote("198.51.100.1"))
    assert throttle.retry_after(remote("198.51.100.1")) == 2
    assert throttle.retry_after(remote("198.51.100.2")) == 0


@pytest.mark.parametrize(
    "client",
    [
        Client(network="lan", ip="unix", host_role="admin", via="socket"),
        Client(network="lan", ip="127.0.0.1", host_role="admin", via="edge"),
        Client(network="lan", ip="::1", host_role="admin", via="edge"),
    ],
)
def test_local_clients_are_never_throttled(client: Client) -> None:
    throttle = Throttle(clock=Clock())
    for _ in range(50):
        assert throttle.failed(client) == 0
        assert throttle.retry_after(client) == 0


def test_external_traffic_from_loopback_is_still_throttled() -> None:
    # cloudflared reaches the edge from 127.0.0.1: loopback on the external path is a stranger.
    throttle = Throttle(clock=Clock())
    tunnel = Client(network="external", ip="127.0.0.1", host_role="admin", via="edge")
    assert throttle.failed(tunnel) == 1
    assert throttle.retry_after(tunnel) == 1


def test_memory_is_bounded_by_dropping_the_oldest() -> None:
    clock = Clock()
    throttle = Throttle(clock=clock, max_clients=100)
    first = remote("10.0.0.1", "lan")
    throttle.failed(first)
    throttle.failed(first)
    for n in range(2, 1002):
        clock.now += 0.001
        throttle.failed(remote(f"10.0.{n // 256}.{n % 256}", "lan"))
    assert len(throttle) == 100
    assert throttle.retry_after(first) == 0  # evicted: the oldest record went first
    newest = remote(f"10.0.{1001 // 256}.{1001 % 256}", "lan")
    assert throttle.retry_after(newest) == 1


def test_every_failure_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    throttle = Throttle(clock=Clock())
    with caplog.at_level(logging.WARNING, logger="appliance.web.throttle"):
        throttle.failed(remote("192.0.2.9", "external"))
        throttle.failed(remote("192.0.2.9", "external"))
        throttle.failed(Client(network="lan", ip="unix", host_role="admin", via="socket"))
    assert [r.getMessage() for r in caplog.records] == [
        "[auth] op=login-failed ip=192.0.2.9 network=external failures=1 retry_after_s=1",
        "[auth] op=login-failed ip=192.0.2.9 network=external failures=2 retry_after_s=2",
        "[auth] op=login-failed ip=unix network=lan failures=1 retry_after_s=0",
    ]


def test_the_message_window_allows_the_limit_then_says_how_long_to_wait() -> None:
    limiter = WindowLimiter(limit=2, window=10.0, max_tracked=2)
    assert limiter.retry_after("a", now=0.0) == 0 and limiter.retry_after("a", now=1.0) == 0
    assert limiter.retry_after("a", now=2.0) == 8  # the first event leaves the window at 10 s
    assert limiter.retry_after("a", now=10.5) == 0
    limiter.retry_after("b", now=11.0)
    limiter.retry_after("c", now=11.0)  # memory is bounded: "a", least recent, is forgotten
    assert limiter.retry_after("a", now=11.5) == 0 and limiter.retry_after("a", now=11.6) == 0
