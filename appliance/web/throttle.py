"""Rate limits: the login backoff and the sliding window of public messages, one module.

Login throttling: per-client exponential backoff after failed logins, never a permanent ban.

After the n-th failure in a row a client waits ``BASE_S * 2**(n-1)`` seconds (1, 2, 4 … capped
at ``CAP_S``, five minutes) before its next attempt is even checked; attempts during the wait are
answered 429 with ``Retry-After`` and do not count. A client's record is forgotten after
``QUIET_S`` (15 minutes) without a failure, and on a successful login.

Local processes (:attr:`Client.local`) on the LAN are never throttled; their failures are still
logged. An external client is throttled even if it appears to come from loopback: cloudflared
connects to the edge from 127.0.0.1, so "loopback" alone says nothing about who is typing.

The state is in memory only: restarting the app clears it (an attacker gains nothing from that,
restarts are rare and slow). Memory is bounded: at most ``MAX_CLIENTS`` records are kept and the
least recently failed one is dropped to make room.

:class:`WindowLimiter` is the other policy: at most N events per address in a sliding window
(the public chat's messages), memory bounded the same way.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from appliance.web.client import Client

log = logging.getLogger(__name__)

BASE_S = 1.0
CAP_S = 300.0
QUIET_S = 15 * 60.0
MAX_CLIENTS = 4096


@dataclass
class _Record:
    failures: int
    last_failure: float
    locked_until: float


class Throttle:
    """Backoff state of every client that failed to log in recently."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        base_s: float = BASE_S,
        cap_s: float = CAP_S,
        quiet_s: float = QUIET_S,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self._clock = clock
        self._base = base_s
        self._cap = cap_s
        self._quiet = quiet_s
        self._max = max_clients
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    @staticmethod
    def exempt(client: Client) -> bool:
        """Return whether ``client`` is never throttled (a local process on the LAN)."""
        return client.local and client.network == "lan"

    def _current(self, ip: str, now: float) -> _Record | None:
        record = self._records.get(ip)
        if record is not None and now - record.last_failure >= self._quiet:
            del self._records[ip]
            return None
        return record

    def retry_after(self, client: Client) -> int:
        """Return the whole seconds ``client`` must wait before trying again (0: go ahead)."""
        if self.exempt(client):
            return 0
        now = self._clock()
        record = self._current(client.ip, now)
        if record is None or now >= record.locked_until:
            return 0
        return max(1, math.ceil(record.locked_until - now))

    def failed(self, client: Client) -> int:
        """Record a failed login by ``client``, log it, and return its wait in seconds."""
        now = self._clock()
        record = self._current(client.ip, now)
        failures = 1 if record is None else record.failures + 1
        backoff = self._base * 2.0 ** min(failures - 1, 64)
        wait = 0.0 if self.exempt(client) else min(self._cap, backoff)
        self._records[client.ip] = _Record(failures, now, now + wait)
        self._records.move_to_end(client.ip)
        while len(self._records) > self._max:
            self._records.popitem(last=False)
        retry = math.ceil(wait)
        log.warning(
            "[auth] op=login-failed ip=%s network=%s failures=%s retry_after_s=%s",
            client.ip,
            client.network,
            failures,
            retry,
        )
        return retry

    def succeeded(self, client: Client) -> None:
        """Forget ``client``'s failures after a successful login."""
        self._records.pop(client.ip, None)


class WindowLimiter:
    """At most ``limit`` events per address in a sliding window of ``window`` seconds."""

    def __init__(self, limit: int, window: float, max_tracked: int = 10_000) -> None:
        self.limit = limit
        self.window = window
        self.max_tracked = max_tracked
        self._events: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, address: str, now: float | None = None) -> int:
        """0 and count the event when allowed, else the seconds until the next is allowed."""
        moment = time.monotonic() if now is None else now
        events = self._events.setdefault(address, deque())
        self._events.move_to_end(address)
        while events and events[0] <= moment - self.window:
            events.popleft()
        if len(events) >= self.limit:
            return max(1, math.ceil(events[0] + self.window - moment))
        events.append(moment)
        while len(self._events) > self.max_tracked:
            self._events.popitem(last=False)
        return 0
