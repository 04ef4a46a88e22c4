"""``maxy run``: the development supervisor — Neo4j, engine, manager, channels, app and edge in one
terminal.

Each role is a child process; a child that exits is restarted with backoff (1 s doubling to
30 s, reset once it has stayed up for a minute). SIGINT/SIGTERM stop the children in reverse
order. On the device systemd does this job, one unit per role.

A role's output goes to the terminal as it comes and to ``<data_dir>/logs/<role>.log``, each line
there stamped with the time it was written (what the journal is on the device, for the admin
plugin's ``logs-read``). A file over :data:`LOG_CAP` bytes is moved to ``<role>.log.1`` when its
role starts. Neo4j's output goes to its console log, as ``maxy neo4j start`` keeps it.

Neo4j answering that it stopped its database (after a write its full disk could not take: it
does not recover by itself) is stopped once the store's partition has room again, and so
restarted like any child that exited (what ``maxy neo4j run`` does under systemd).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

from appliance.core.config import Settings, SettingsError
from appliance.core.fsio import is_no_space, low_on_space
from appliance.core.ports import check_port_free
from appliance.core.proc import die_with_parent, stop_group
from appliance.core.resources import self_command
from appliance.graphdb.errors import Neo4jSetupError, database_stopped
from appliance.graphdb.instance import Neo4jInstance, bolt_ready, wait_for_bolt
from appliance.memory.errors import ModelMissing

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.2
STOP_TIMEOUT = 30.0
MAX_BACKOFF = 30.0
STABLE_AFTER = 60.0
LOG_CAP = 8 * 1024 * 1024  # bytes of a role's log before it is rotated (once, to .1)
CHECK_EVERY = 5.0  # seconds between Bolt checks of a Neo4j this supervisor runs


@dataclass
class Child:
    """A supervised role."""

    name: str
    start: Callable[[], subprocess.Popen[bytes]]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: float = 1.0
    restart_at: float | None = None
    restarts: int = field(default=0)

    def launch(self) -> None:
        """Start (or restart) the process."""
        self.proc = self.start()
        self.started_at = time.monotonic()
        self.restart_at = None
        log.info("[supervisor] op=start child=%s pid=%s", self.name, self.proc.pid)

    def check(self, now: float) -> None:
        """Notice an exit and schedule or perform the restart."""
        if self.proc is not None and self.restart_at is None:
            code = self.proc.poll()
            if code is None:
                return
            if now - self.started_at > STABLE_AFTER:
                self.backoff = 1.0
            log.warning(
                "[supervisor] op=exited child=%s pid=%s code=%s restart_in_s=%.0f",
                self.name,
                self.proc.pid,
                code,
                self.backoff,
            )
            self.restart_at = now + self.backoff
            self.backoff = min(self.backoff * 2, MAX_BACKOFF)
        if self.restart_at is not None and now >= self.restart_at:
            self.restarts += 1
            self.launch()

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after the timeout."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        stop_group(proc, STOP_TIMEOUT)
        log.info("[supervisor] op=stop child=%s code=%s", self.name, proc.returncode)


def _tee(source: IO[bytes], path: Path) -> None:
    """Copy a child's output to our stderr as it comes, and to ``path`` with a time stamp.

    A full disk loses lines of the file (the terminal still gets them), never the copying: a
    child whose output is no longer read would block on its next log line."""
    dropped = 0
    with path.open("ab", buffering=0) as file:
        for line in iter(source.readline, b""):
            sys.stderr.buffer.write(line)
            sys.stderr.flush()
            stamp = datetime.now().astimezone().isoformat(timespec="milliseconds")
            try:
                if dropped:
                    file.write(f"{stamp} [supervisor] dropped={dropped} (disk full)\n".encode())
                    dropped = 0
                file.write(stamp.encode() + b" " + line)
            except OSError as err:
                if not is_no_space(err):
                    raise
                dropped += 1
    source.close()


def open_role_log(log_dir: Path, name: str) -> Path:
    """``<log_dir>/<name>.log``, moved to ``.1`` first when it has grown past :data:`LOG_CAP`."""
    log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = log_dir / f"{name}.log"
    try:
        if path.stat().st_size > LOG_CAP:
            os.replace(path, path.with_name(f"{name}.log.1"))
    except FileNotFoundError:
        pass
    return path


def start_role(name: str, environ: Mapping[str, str], log_dir: Path) -> subprocess.Popen[bytes]:
    """Start ``maxy <name>`` with its output teed to the terminal and its log file."""
    path = open_role_log(log_dir, name)
    proc = subprocess.Popen(
        [*self_command(), name],
        env=dict(environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    assert proc.stdout is not None
    threading.Thread(target=_tee, args=(proc.stdout, path), name=f"tee-{name}", daemon=True).start()
    return proc


def _role(
    name: str, environ: Mapping[str, str], log_dir: Path
) -> Callable[[], subprocess.Popen[bytes]]:
    def start() -> subprocess.Popen[bytes]:
        return start_role(name, environ, log_dir)

    return start


def _neo4j(instance: Neo4jInstance) -> Callable[[], subprocess.Popen[bytes]]:
    def start() -> subprocess.Popen[bytes]:
        proc = instance.spawn(instance.console_log, preexec_fn=die_with_parent)
        instance.record_pid(proc.pid, f"supervisor:{os.getpid()}")
        return proc

    return start


def _restart_stopped_database(
    instance: Neo4jInstance, child: Child, stopped: threading.Event
) -> None:
    """Every :data:`CHECK_EVERY` s: stop a Neo4j that stopped its database once its disk has room
    again, so that the supervising loop restarts it."""
    password = instance.password_file.read_text().strip()
    while not stopped.wait(CHECK_EVERY):
        proc = child.proc
        if proc is None or proc.poll() is not None:
            continue
        reason = bolt_ready(instance.uri(), "neo4j", password)
        if database_stopped(reason) and not low_on_space(instance.home):
            log.error(
                "[supervisor] op=restart child=neo4j reason=database-stopped pid=%s", proc.pid
            )
            instance.mark_torn_log()
            stop_group(proc, STOP_TIMEOUT)


def preflight(settings: Settings) -> None:
    """Refuse to start, with one line saying what to fix, what a role would die of later."""
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=settings.data_dir):
            pass
    except OSError as err:
        raise SettingsError(
            f"The data directory {settings.data_dir} is not writable ({err.strerror}). Give "
            "the user running maxy write access to it, or set MAXY_DATA_DIR."
        ) from err
    if not settings.embed_model_path.is_file():
        # The engine would exit at once and be restarted forever.
        raise ModelMissing(
            f"The embedding model {settings.embed_model_path} does not exist. Build the "
            "development model with `just model`, or set MAXY_EMBED_MODEL to a GGUF file."
        )
    check_port_free(settings.host, settings.port, "MAXY_PORT")


def run(settings: Settings, environ: Mapping[str, str]) -> int:
    """Start every role and keep them running until interrupted."""
    preflight(settings)
    settings.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    instance = Neo4jInstance.from_settings(settings, environ)
    children: list[Child] = []

    stopping = False
    supervising = False
    stopped = threading.Event()  # set once the children are being stopped

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if not supervising:
            # Still starting up (waiting for Neo4j): unwind now; the finally block cleans up.
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    try:
        other = instance.supervisor_pid()
        if other and other != os.getpid():
            raise Neo4jSetupError(
                f"Another `maxy run` (pid {other}) already runs Neo4j from {instance.home}. "
                "Stop it first, or give this one its own MAXY_DATA_DIR."
            )
        adopted = instance.running_pid()
        if adopted:
            log.info("[supervisor] op=adopt child=neo4j pid=%s (from `maxy neo4j start`)", adopted)
        else:
            check_port_free(instance.bolt_host, instance.port(), "MAXY_NEO4J_URI")
            neo4j = Child("neo4j", _neo4j(instance))
            neo4j.launch()
            children.append(neo4j)
            wait_for_bolt(instance, 180.0, neo4j.proc)
            watcher = (instance, neo4j, stopped)
            threading.Thread(target=_restart_stopped_database, args=watcher, daemon=True).start()
        for role in ("engine", "manager", "channels", "app", "edge"):
            child = Child(role, _role(role, environ, settings.log_dir))
            child.launch()
            children.append(child)
        log.info("[supervisor] op=ready url=http://%s:%s/", settings.host, settings.port)
        supervising = True
        while not stopping:
            now = time.monotonic()
            for child in children:
                child.check(now)
            time.sleep(POLL_INTERVAL)
    except KeyboardInterrupt:
        log.info("[supervisor] op=interrupted")
    finally:
        stopped.set()
        for child in reversed(children):
            child.stop()
        if children and children[0].name == "neo4j":
            instance.pid_file.unlink(missing_ok=True)
    return 0
