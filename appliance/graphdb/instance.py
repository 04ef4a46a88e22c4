"""The development Neo4j server: configure, set its password, start, stop, report status.

Layout of an instance home (``MAXY_NEO4J_HOME``, default ``<data_dir>/neo4j``)::

    conf/neo4j.conf      written on every start from the settings
    data/                the store (data/dbms/auth.ini holds the initial password hash)
    logs/console.log     the server's output when started by ``maxy neo4j start``
    run/neo4j.pid        pid of a server started by ``maxy neo4j start``
    run/bolt.port        the port a ``bolt://…:0`` instance got on its first start (kept)
    run/torn-log         set by a restart after Neo4j stopped its database (a full disk): the
                         next start truncates the transaction log's torn tail (see below)

The jars live in the cache (``<cache_dir>/neo4j/<version>/lib``), checked against the
``SHA256SUMS`` file written when they were fetched.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from appliance.core.config import Settings
from appliance.core.fsio import sha256_file, write_atomic, write_secret
from appliance.core.ports import listening_ports, recorded_port
from appliance.core.proc import (
    ToolError,
    escalate,
    pid_alive,
    poll_until,
    run,
    signal_process,
    stop_group,
)
from appliance.graphdb.errors import DistributionMissing, PasswordMismatch, StartFailed
from appliance.graphdb.java import JavaRuntime, find_java, required_java_major

log = logging.getLogger(__name__)

MAIN_CLASS = "org.neo4j.server.Neo4jCommunity"
ADMIN_CLASS = "org.neo4j.cli.AdminTool"
SUMS_FILE = "SHA256SUMS"
# The collector by heap size. Up to 1 GiB (the card's 512m) the serial collector: a heap that
# small is collected in short pauses, and G1's regions, remembered sets and marking bitmaps
# cost the appliance memory it does not have. `just bench-memory` at 100k nodes, 512m heap:
# Neo4j 769 MB idle and 853 MB at an ingest's peak with it, 965 and 1,017 MB with G1.
SERIAL_GC_MAX_HEAP = 1 << 30
# A write the full disk cut short leaves a torn entry at the end of the transaction log, and
# Neo4j then refuses to recover ("Unreadable bytes are encountered after last readable
# position"). That transaction failed (it was never acknowledged), so the one start after such a
# stop may drop it; every other start keeps refusing a damaged log.
TRUNCATE_TORN_LOG = "internal.dbms.tx_log.fail_on_corrupted_log_files=false"


def distribution_dir(settings: Settings) -> Path:
    """Where the jars of the configured Neo4j release are cached."""
    return settings.cache_dir / "neo4j" / settings.neo4j_version


def verify_distribution(dist: Path, *, full: bool = False) -> int:
    """Check the cached jars against SHA256SUMS; return how many there are.

    The quick check (every start) compares names and sizes; ``full`` hashes every jar.
    """
    sums = dist / SUMS_FILE
    if not sums.is_file():
        raise DistributionMissing(
            f"Neo4j is not in {dist} (no {SUMS_FILE}). Fetch it with `just bootstrap` "
            f"(which runs `python build/neo4j.py --version {dist.name}`)."
        )
    count = 0
    for line in sums.read_text().splitlines():
        digest, size, name = line.split(maxsplit=2)
        jar = dist / "lib" / name
        if not jar.is_file() or jar.stat().st_size != int(size):
            raise DistributionMissing(
                f"Neo4j jar {jar} is missing or truncated. Delete {dist} and run `just bootstrap`."
            )
        if full and sha256_file(jar) != digest:
            raise DistributionMissing(
                f"Neo4j jar {jar} fails its checksum. Delete {dist} and run `just bootstrap`."
            )
        count += 1
    return count


def ensure_password(path: Path) -> str:
    """Return the Neo4j password, generating and storing one (mode 0600) on first use."""
    if path.is_file():
        return path.read_text().strip()
    # Hex, never URL-safe base64: a password starting with "-" reads as an option to
    # neo4j-admin's `set-initial-password` (exit 64), one start in 64.
    password = secrets.token_hex(24)
    if not write_secret(path, password + "\n", exclusive=True):
        return path.read_text().strip()  # another process made it first: theirs stands
    log.info("[neo4j] op=password-generated path=%s", path)
    return password


def _collector(heap: str) -> str:
    """The JVM flag choosing the garbage collector for a heap of ``heap`` ("512m", "2g")."""
    size = int(heap[:-1]) * 1024 ** "kmg".index(heap[-1].lower()) * 1024
    return "-XX:+UseSerialGC" if size <= SERIAL_GC_MAX_HEAP else "-XX:+UseG1GC"


def console_log(home: Path) -> Path:
    """Where a Neo4j home's server output goes when Maxy starts it (supervised or background)."""
    return home / "logs" / "console.log"


@dataclass(frozen=True)
class Neo4jInstance:
    """One development Neo4j server, described by the settings."""

    home: Path
    dist: Path
    java: JavaRuntime
    bolt_host: str
    bolt_port: int
    heap: str
    pagecache: str
    password_file: Path
    port_file: Path

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str]) -> Neo4jInstance:
        """Describe the instance the settings configure (finds Java, checks the jars)."""
        dist = distribution_dir(settings)
        verify_distribution(dist)
        java = find_java(required_java_major(settings.neo4j_version), environ)
        address = urlsplit(settings.neo4j_uri)
        return cls(
            home=settings.neo4j_home_path,
            dist=dist,
            java=java,
            bolt_host=address.hostname or "127.0.0.1",
            bolt_port=7687 if address.port is None else address.port,
            heap=settings.neo4j_heap,
            pagecache=settings.neo4j_pagecache,
            password_file=settings.neo4j_password_path,
            port_file=settings.bolt_port_file,
        )

    def port(self) -> int:
        """The Bolt port: the configured one, or what a port-0 instance recorded (0: none yet)."""
        return self.bolt_port or recorded_port(self.port_file)

    def uri(self) -> str:
        """The Bolt URI the server answers on (port 0 until a port-0 instance first started)."""
        return f"bolt://{self.bolt_host}:{self.port()}"

    def learn_port(self, proc: subprocess.Popen[bytes], wait: float) -> None:
        """For a port-0 instance, wait until the server listens and record the port it got."""
        if self.port():
            return
        deadline = time.monotonic() + wait
        while not (ports := listening_ports(proc.pid)):
            if proc.poll() is not None or time.monotonic() > deadline:
                return  # wait_for_bolt says why
            time.sleep(0.2)
        write_atomic(self.port_file, f"{min(ports)}\n".encode())
        log.info("[neo4j] op=port bolt=%s (the kernel's choice, kept)", self.uri())

    @property
    def pid_file(self) -> Path:
        """Pid of a server started in the background."""
        return self.home / "run" / "neo4j.pid"

    @property
    def torn_log_mark(self) -> Path:
        """Present between a restart for a stopped database and the next start."""
        return self.home / "run" / "torn-log"

    def mark_torn_log(self) -> None:
        """Let the next start truncate a torn transaction-log tail (called before a restart
        for a database Neo4j stopped after a write its full disk could not take)."""
        self.torn_log_mark.parent.mkdir(parents=True, exist_ok=True)
        self.torn_log_mark.touch()

    @property
    def console_log(self) -> Path:
        """Output of a server started in the background."""
        return console_log(self.home)

    def _environment(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "JAVA_HOME": str(self.java.home),
            "NEO4J_HOME": str(self.home),
            "NEO4J_CONF": str(self.home / "conf"),
            "LANG": "C.UTF-8",
        }

    def _java(self, *args: str) -> list[str]:
        return [str(self.java.java), "-cp", str(self.dist / "lib" / "*"), *args]

    def _write_config(self) -> None:
        port = self.port()
        lines = [
            "# Written by maxy on every start; edit the MAXY_NEO4J_* settings instead.",
            f"server.memory.heap.initial_size={self.heap}",
            f"server.memory.heap.max_size={self.heap}",
            f"server.memory.pagecache.size={self.pagecache}",
            f"server.default_listen_address={self.bolt_host}",
            f"server.bolt.listen_address={self.bolt_host}:{port}",
            f"server.bolt.advertised_address={self.bolt_host}:{port}",
            "server.http.enabled=false",
            "server.https.enabled=false",
            "dbms.usage_report.enabled=false",
            "dbms.security.auth_enabled=true",
            "db.tx_log.rotation.retention_policy=1 days",
            "server.directories.run=run",
        ]
        if self.torn_log_mark.exists():
            lines.append(TRUNCATE_TORN_LOG)
            self.torn_log_mark.unlink()
            log.warning("[neo4j] op=recover truncate=torn-log-tail (after a full disk)")
        conf = self.home / "conf" / "neo4j.conf"
        conf.write_text("\n".join(lines) + "\n")

    def prepare(self) -> None:
        """Create the home, write the configuration and set the initial password once."""
        for sub in ("conf", "data", "logs", "run", "plugins", "import"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self._write_config()
        auth = self.home / "data" / "dbms" / "auth.ini"
        if auth.exists() and not self.password_file.is_file():
            raise PasswordMismatch(
                f"The Neo4j store in {self.home / 'data'} was initialised with a password that "
                f"is no longer in {self.password_file}. Restore that file, or delete "
                f"{self.home / 'data'} to start with an empty store."
            )
        password = ensure_password(self.password_file)
        if not auth.exists():
            try:
                result = run(
                    self._java(ADMIN_CLASS, "dbms", "set-initial-password", password),
                    env=self._environment(),
                    timeout=120,
                )
            except ToolError as err:
                raise StartFailed(f"Setting the Neo4j password failed: {err}.") from err
            if result.returncode != 0:
                raise StartFailed(
                    f"Setting the Neo4j password failed (exit {result.returncode}): "
                    f"{result.stderr.strip()[-400:]}"
                )
            log.info("[neo4j] op=initial-password home=%s", self.home)

    def command(self) -> list[str]:
        """The command line that runs the server in the foreground."""
        return [
            str(self.java.java),
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            _collector(self.heap),
            "-XX:-OmitStackTraceInFastThrow",
            "-XX:+ExitOnOutOfMemoryError",
            "--enable-native-access=ALL-UNNAMED",
            "-Djdk.nio.maxCachedBufferSize=1024",
            "-Dio.netty.tryReflectionSetAccessible=true",
            "-cp",
            str(self.dist / "lib" / "*"),
            MAIN_CLASS,
            f"--home-dir={self.home}",
            f"--config-dir={self.home / 'conf'}",
            "--console-mode",
        ]

    def spawn(
        self, log_file: Path | None = None, preexec_fn: Callable[[], None] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start the server as a child process in its own process group."""
        self.prepare()
        out = open(log_file, "ab") if log_file else None
        try:
            proc = subprocess.Popen(
                self.command(),
                cwd=self.home,
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=out if out else None,
                stderr=subprocess.STDOUT if out else None,
                start_new_session=True,
                preexec_fn=preexec_fn,
            )
        finally:
            if out:
                out.close()
        log.info("[neo4j] op=spawn pid=%s java=%s bolt=%s", proc.pid, self.java.major, self.uri())
        return proc

    def _pid_record(self) -> tuple[int, str] | None:
        try:
            pid_text, _, owner = self.pid_file.read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            return None
        return (pid, owner) if pid_alive(pid) else None

    def running_pid(self) -> int | None:
        """Pid of a server started for this home (by `maxy neo4j start` or `maxy run`)."""
        record = self._pid_record()
        return record[0] if record else None

    def supervisor_pid(self) -> int | None:
        """Pid of the live `maxy run` supervising this instance, if any."""
        record = self._pid_record()
        if record and record[1].startswith("supervisor:"):
            owner = int(record[1].split(":", 1)[1])
            return owner if pid_alive(owner) else None
        return None

    def record_pid(self, pid: int, owner: str) -> None:
        """Note which process runs the server and who started it (``cli`` or ``supervisor:N``)."""
        self.pid_file.write_text(f"{pid} {owner}\n")

    def start_background(self, wait: float = 180.0) -> int:
        """Start the server detached (``maxy neo4j start``) and wait until Bolt answers."""
        pid = self.running_pid()
        if pid:
            return pid
        proc = self.spawn(self.console_log)
        self.record_pid(proc.pid, "cli")
        wait_for_bolt(self, wait, proc)
        return proc.pid

    def stop(self, wait: float = 60.0) -> bool:
        """Stop the background server; return False if none was running."""
        pid = self.running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        ended = poll_until(lambda: not pid_alive(pid))
        if escalate(signal_process(pid), ended, wait, kill_wait=0) == "SIGKILL":
            log.warning("[neo4j] op=stop warn=sigkill pid=%s", pid)
        self.pid_file.unlink(missing_ok=True)
        log.info("[neo4j] op=stop pid=%s", pid)
        return True


def bolt_ready(uri: str, user: str, password: str, timeout: float = 2.0) -> str | None:
    """Return None when Neo4j answers a query at ``uri``, else the reason it does not."""
    import neo4j
    from neo4j.exceptions import Neo4jError

    try:
        with neo4j.GraphDatabase.driver(
            uri, auth=(user, password), connection_timeout=timeout, max_connection_pool_size=1
        ) as driver:
            # An auto-commit query is tried once; execute_query would retry for 30 s.
            with driver.session() as session:
                session.run("RETURN 1").consume()
    except (OSError, Neo4jError, neo4j.exceptions.DriverError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def wait_for_bolt(
    instance: Neo4jInstance, wait: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until the instance answers Bolt queries, or raise :class:`StartFailed`."""
    if proc is not None:
        instance.learn_port(proc, wait)
    uri = instance.uri()
    password = instance.password_file.read_text().strip()
    deadline = time.monotonic() + wait
    reason: str | None = "not started"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise StartFailed(
                f"Neo4j exited with code {proc.returncode} while starting; "
                f"see {instance.console_log}."
            )
        reason = bolt_ready(uri, "neo4j", password)
        if reason is None:
            log.info("[neo4j] op=ready bolt=%s", uri)
            return
        time.sleep(0.5)
    raise StartFailed(f"Neo4j did not answer at {uri} within {wait:.0f} s ({reason}).")


@contextmanager
def running(instance: Neo4jInstance, wait: float = 180.0) -> Iterator[subprocess.Popen[bytes]]:
    """Run the server for the length of a block (tests, benchmarks), then stop it."""
    proc = instance.spawn(instance.console_log)
    try:
        wait_for_bolt(instance, wait, proc)
        yield proc
    finally:
        stop_group(proc, 60.0)
