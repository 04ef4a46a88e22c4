"""Dump the Neo4j database to /data before a slot is written, so a rollback is data-safe.

A new release may migrate the store to a format the old Neo4j cannot read; if its trial boot
fails, the old slot comes back with a store it cannot open. ``neo4j-admin database dump``
(``org.neo4j.cli.AdminTool`` from the same jars ``maxy neo4j`` runs) writes a portable dump that
``neo4j-admin database load`` restores on either version. The dump needs the database stopped,
so :class:`Neo4jBackup` stops the server the way it was started, dumps, and starts it again:

- ``maxy neo4j start`` (pid file owner ``cli``): stopped and restarted in the background;
- ``maxy neo4j run`` under systemd (owner ``launcher:N``): ``systemctl stop``/``start`` of the
  unit ``MAXY_OTA_NEO4J_UNIT`` (stopping the server itself would make systemd restart it);
- ``maxy run`` (owner ``supervisor:N``): refused — the supervisor would restart it mid-dump;
- not running: dumped as it is.

The dump goes to ``<data_dir>/ota/backup/neo4j.dump`` (replaced atomically, with
``neo4j.dump.json`` saying when and before which update). With no store yet there is nothing to
dump. ``MAXY_OTA_BACKUP=off`` skips the step.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from appliance.core.config import Settings
from appliance.core.proc import ToolError, ToolMissing, ToolTimeout, run
from appliance.graphdb.errors import Neo4jSetupError
from appliance.graphdb.instance import ADMIN_CLASS, Neo4jInstance
from appliance.ota.errors import BackupError
from appliance.ota.progress import Deadline, Progress
from appliance.ota.state import now

log = logging.getLogger(__name__)

DATABASE = "neo4j"
STEPS = 4  # look, stop, dump, start


def backup_dir(settings: Settings) -> Path:
    """Where the dump is kept."""
    return settings.data_dir / "ota" / "backup"


class Neo4jBackup:
    """Stop Neo4j if it runs, dump the graph to the data partition, start it again."""

    def __init__(self, settings: Settings, environ: Mapping[str, str]) -> None:
        self.settings = settings
        self.environ = environ

    def _instance(self) -> Neo4jInstance:
        try:
            return Neo4jInstance.from_settings(self.settings, self.environ)
        except Neo4jSetupError as err:
            raise BackupError(
                f"cannot dump the graph before updating: {err} (or set MAXY_OTA_BACKUP=off to "
                "update without a dump)"
            ) from err

    def _owner(self, instance: Neo4jInstance) -> str | None:
        """Who runs the server: ``cli``, ``supervisor:N``, ``launcher:N``; None if nobody."""
        if instance.running_pid() is None:
            return None
        try:
            return instance.pid_file.read_text().split(maxsplit=1)[1].strip()
        except (OSError, IndexError):
            return "cli"

    def _systemctl(self, verb: str, deadline: Deadline) -> None:
        command = ["systemctl", verb, self.settings.ota_neo4j_unit]
        try:
            done = run(command, timeout=deadline.remaining)
        except ToolError as err:
            raise BackupError(f"`{shlex.join(command)}` failed ({err}).") from err
        if done.returncode != 0:
            raise BackupError(
                f"`{shlex.join(command)}` failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-300:]}. Check MAXY_OTA_NEO4J_UNIT."
            )

    def _dump(self, instance: Neo4jInstance, target_dir: Path, deadline: Deadline) -> Path:
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "JAVA_HOME": str(instance.java.home),
            "NEO4J_HOME": str(instance.home),
            "NEO4J_CONF": str(instance.home / "conf"),
            "LANG": "C.UTF-8",
        }
        command = [
            str(instance.java.java),
            "-cp",
            str(instance.dist / "lib" / "*"),
            ADMIN_CLASS,
            "database",
            "dump",
            DATABASE,
            f"--to-path={target_dir}",
            "--overwrite-destination=true",
        ]
        try:
            done = run(
                command, env=environment, cwd=instance.home, timeout=max(deadline.remaining, 1.0)
            )
        except ToolTimeout as err:
            raise BackupError(
                f"the Neo4j dump did not finish within {deadline.seconds:g} s; raise "
                "MAXY_OTA_BACKUP_TIMEOUT or free space on /data."
            ) from err
        except ToolMissing as err:
            raise BackupError(f"cannot run neo4j-admin ({err}).") from err
        dump = target_dir / f"{DATABASE}.dump"
        if done.returncode != 0 or not dump.is_file():
            lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
            errors = [line for line in lines if "ERROR" in line or "Exception" in line]
            raise BackupError(
                f"neo4j-admin database dump failed (exit {done.returncode}): "
                f"{(errors or lines or ['no output'])[-1][:300]}. Nothing was written to a slot."
            )
        return dump

    def run(self, deadline: Deadline, progress: Progress, *, before: str) -> Path | None:
        """Dump the graph; return the dump's path (None: no store to dump)."""
        instance = self._instance()
        store = instance.home / "data" / "databases" / DATABASE
        if not store.is_dir():
            progress("backup", STEPS, STEPS, f"no graph store at {store}: nothing to dump")
            log.info("[ota] op=backup skipped=no-store home=%s", instance.home)
            return None
        owner = self._owner(instance)
        if owner and owner.startswith("supervisor:"):
            raise BackupError(
                f"Neo4j runs under `maxy run` (pid {owner.split(':', 1)[1]}), which would restart "
                "it during the dump. Stop `maxy run` first, or set MAXY_OTA_BACKUP=off."
            )
        target = backup_dir(self.settings)
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        progress("backup", 1, STEPS, f"Neo4j runs ({owner})" if owner else "Neo4j is stopped")
        stopped = False
        try:
            if owner and owner.startswith("launcher:"):
                self._systemctl("stop", deadline)
                stopped = True
            elif owner:
                instance.stop(wait=max(deadline.remaining, 1.0))
                stopped = True
            progress("backup", 2, STEPS, "dumping the graph")
            with tempfile.TemporaryDirectory(prefix=".dump-", dir=target) as scratch:
                dump = self._dump(instance, Path(scratch), deadline)
                final = target / dump.name
                os.replace(dump, final)
            size = final.stat().st_size
            (target / f"{final.name}.json").write_text(
                json.dumps({"at": now(), "before": before, "database": DATABASE, "size": size})
                + "\n"
            )
            log.info("[ota] op=backup dump=%s bytes=%s", final, size)
            progress("backup", 3, STEPS, f"dumped {size} bytes to {final}")
        finally:
            if stopped:
                self._restart(instance, owner or "", deadline)
        progress("backup", STEPS, STEPS, "graph dumped" + (", Neo4j restarted" if stopped else ""))
        return final

    def _restart(self, instance: Neo4jInstance, owner: str, deadline: Deadline) -> None:
        """Start Neo4j again the way it ran before."""
        try:
            if owner.startswith("launcher:"):
                self._systemctl("start", deadline)
            else:
                pid = instance.start_background(wait=max(deadline.remaining, 60.0))
                log.info("[ota] op=backup-restart pid=%s", pid)
        except (Neo4jSetupError, BackupError) as err:
            raise BackupError(
                f"Neo4j did not start again after the dump ({err}); start it with `maxy neo4j "
                "start` (or its unit). Nothing was written to a slot."
            ) from err


def remove_stale(settings: Settings) -> None:
    """Remove leftovers of a dump that was interrupted."""
    for leftover in backup_dir(settings).glob(".dump-*"):
        shutil.rmtree(leftover, ignore_errors=True)
