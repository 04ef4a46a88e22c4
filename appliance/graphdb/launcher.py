"""``maxy neo4j run``: Neo4j in the foreground, for its systemd unit (``Type=notify``).

The launcher prepares the instance (configuration, initial password), starts the Java server as
its child with the server's output on its own (the journal, on the device), and tells systemd
READY once Bolt answers a query. After that it checks Bolt every watchdog interval and pings the
watchdog only after an answered query, so a server that stops answering gets restarted. A server
that answers that it stopped its database (after a write its full disk could not take) is
stopped once the store's partition has room again, so that systemd restarts it (Neo4j does not
recover by itself); until then the watchdog is fed, as a restart on a full disk would fail. On
SIGTERM/SIGINT it says STOPPING and stops the server (SIGKILL after the grace period).

Exit status: 0 after a requested stop; the server's own code (at least 1) when it died by
itself, so that ``Restart=on-failure`` brings it back.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from types import FrameType

from appliance.core.fsio import low_on_space
from appliance.core.ports import check_port_free
from appliance.core.proc import die_with_parent, on_first_stop_signal, stop_group
from appliance.core.systemd import Notifier
from appliance.graphdb.errors import Neo4jSetupError, StartFailed, database_stopped
from appliance.graphdb.instance import Neo4jInstance, bolt_ready

log = logging.getLogger(__name__)

START_WAIT = 180.0
STOP_WAIT = 60.0
POLL = 0.5  # how often the launcher notices a stop request or a dead server
BOLT_TIMEOUT_MAX = 5.0
CHECK_EVERY = 5.0  # seconds between Bolt checks without a watchdog


def run(
    instance: Neo4jInstance,
    notifier: Notifier,
    *,
    user: str = "neo4j",
    start_wait: float = START_WAIT,
    stop_wait: float = STOP_WAIT,
) -> int:
    """Run the server until a signal asks to stop; return the exit status (see module doc)."""
    other = instance.running_pid()
    if other:
        raise Neo4jSetupError(
            f"Neo4j already runs from {instance.home} (pid {other}). Stop it first with "
            "`maxy neo4j stop` (or stop `maxy run`)."
        )
    check_port_free(instance.bolt_host, instance.port(), "MAXY_NEO4J_URI")
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()
        notifier.stopping("neo4j")

    # On a thread, not in the handler: the main thread lives in ``stop.wait``, and a SIGTERM
    # that came while it held the Event's lock left the launcher waiting on itself for ever.
    on_first_stop_signal(request_stop)

    notifier.status(f"starting Neo4j (Bolt on {instance.uri()})")
    # Java ends with the launcher, however the launcher ends (under systemd the unit's cgroup is
    # killed too; by hand, `maxy neo4j run` killed would otherwise leave Neo4j holding the store).
    proc = instance.spawn(None, preexec_fn=die_with_parent)
    instance.record_pid(proc.pid, f"launcher:{os.getpid()}")
    try:
        instance.learn_port(proc, start_wait)
        uri = instance.uri()
        password = instance.password_file.read_text().strip()
        deadline = time.monotonic() + start_wait
        reason = bolt_ready(uri, user, password)
        while reason is not None:
            if proc.poll() is not None:
                raise StartFailed(
                    f"Neo4j exited with code {proc.returncode} while starting; its output is "
                    "above (journalctl -u the unit on the device)."
                )
            if time.monotonic() > deadline:
                raise StartFailed(
                    f"Neo4j did not answer at {uri} within {start_wait:.0f} s ({reason})."
                )
            if stop.wait(POLL):
                return 0
            reason = bolt_ready(uri, user, password)
        log.info("[neo4j] op=ready bolt=%s pid=%s", uri, proc.pid)
        notifier.ready("neo4j", f"Bolt answering on {uri}")
        return _watch(
            proc.poll,
            notifier,
            stop,
            lambda t: bolt_ready(uri, user, password, t),
            lambda: not low_on_space(instance.home),
            instance.mark_torn_log,
        )
    finally:
        stop_group(proc, stop_wait)
        instance.pid_file.unlink(missing_ok=True)
        log.info("[neo4j] op=stop pid=%s code=%s", proc.pid, proc.returncode)


def _watch(
    poll: Callable[[], int | None],
    notifier: Notifier,
    stop: threading.Event,
    check: Callable[[float], str | None],
    room: Callable[[], bool],
    before_restart: Callable[[], None],
) -> int:
    """Until a stop request: notice the server dying, ping the watchdog after answered queries,
    and end (status 1: restart me) once a stopped database has room to start again."""
    interval = notifier.watchdog_interval
    period = interval or CHECK_EVERY
    timeout = min(BOLT_TIMEOUT_MAX, period / 2)
    next_check = time.monotonic() + period
    if interval is not None:
        notifier.ping()
    waiting = False
    while not stop.wait(min(POLL, period)):
        code = poll()
        if code is not None:
            log.error("[neo4j] op=exited code=%s", code)
            return code or 1
        if time.monotonic() < next_check:
            continue
        next_check = time.monotonic() + period
        reason = check(timeout)
        if database_stopped(reason):
            if room():
                log.error("[neo4j] op=restart reason=database-stopped (the disk has room again)")
                before_restart()
                return 1
            if not waiting:
                log.error("[neo4j] op=wait reason=database-stopped disk=full (restart once freed)")
            waiting = True
        if reason is None or database_stopped(reason):
            if interval is not None:
                notifier.ping()
        elif not stop.is_set():
            log.warning("[neo4j] op=watchdog skip=no-answer reason=%r", reason)
    return 0
