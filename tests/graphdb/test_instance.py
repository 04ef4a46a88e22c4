"""The development Neo4j through `maxy neo4j start|status|stop` (a real server)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from appliance.core.config import load_settings
from appliance.graphdb.errors import DistributionMissing, PasswordMismatch
from appliance.graphdb.instance import (
    TRUNCATE_TORN_LOG,
    Neo4jInstance,
    distribution_dir,
    verify_distribution,
)
from tests.support.processes import base_environ, maxy, private_neo4j


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(maxy(*args), env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_start_status_stop(tmp_path: Path) -> None:
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(tmp_path),
        **private_neo4j("256m", "32m"),
    )
    assert run(env, "neo4j", "status").returncode == 3  # not running yet
    started = run(env, "neo4j", "start")
    try:
        assert started.returncode == 0, started.stderr
        assert "neo4j running, pid" in started.stdout
        status = run(env, "neo4j", "status")
        assert status.returncode == 0
        assert "answering" in status.stdout and "not answering" not in status.stdout
        # Starting again is a no-op that reports the same server.
        again = run(env, "neo4j", "start")
        assert again.stdout.split(",")[1] == started.stdout.split(",")[1]
        conf = (tmp_path / "neo4j" / "conf" / "neo4j.conf").read_text()
        assert "server.memory.heap.max_size=256m" in conf
        assert "server.memory.pagecache.size=32m" in conf
        assert "server.http.enabled=false" in conf
    finally:
        stopped = run(env, "neo4j", "stop")
    assert stopped.stdout.strip() == "neo4j stopped"
    assert run(env, "neo4j", "status").returncode == 3
    assert run(env, "neo4j", "stop").stdout.strip() == "neo4j was not running"


def test_a_store_without_its_password_file_is_refused(tmp_path: Path) -> None:
    env = base_environ()
    env["MAXY_DATA_DIR"] = str(tmp_path)
    settings = load_settings(env)
    instance = Neo4jInstance.from_settings(settings, env)
    auth = instance.home / "data" / "dbms" / "auth.ini"
    auth.parent.mkdir(parents=True)
    auth.write_text("neo4j:SHA-256,…\n")
    with pytest.raises(PasswordMismatch, match="Restore that file, or delete"):
        instance.prepare()


def test_only_the_start_after_a_stopped_database_may_truncate_a_torn_log(tmp_path: Path) -> None:
    env = base_environ()
    env["MAXY_DATA_DIR"] = str(tmp_path)
    settings = load_settings(env)
    instance = Neo4jInstance.from_settings(settings, env)
    (instance.home / "data" / "dbms").mkdir(parents=True)
    (instance.home / "data" / "dbms" / "auth.ini").write_text("neo4j:SHA-256,…\n")
    settings.neo4j_password_path.parent.mkdir(parents=True)
    settings.neo4j_password_path.write_text("secret\n")  # an initialised store: no Java needed
    conf = instance.home / "conf" / "neo4j.conf"
    instance.prepare()
    assert TRUNCATE_TORN_LOG not in conf.read_text()  # a damaged log is refused by default
    instance.mark_torn_log()
    instance.prepare()
    assert TRUNCATE_TORN_LOG in conf.read_text()
    assert not instance.torn_log_mark.exists()
    instance.prepare()
    assert TRUNCATE_TORN_LOG not in conf.read_text()  # one start only


def test_missing_or_damaged_jars_say_how_to_fetch_them(tmp_path: Path) -> None:
    with pytest.raises(DistributionMissing, match="just bootstrap"):
        verify_distribution(tmp_path / "2026.08.1")
    cached = distribution_dir(load_settings(base_environ()))
    copy = tmp_path / "copy"
    (copy / "lib").mkdir(parents=True)
    sums = (cached / "SHA256SUMS").read_text().splitlines()
    (copy / "SHA256SUMS").write_text(sums[0] + "\n")
    name = sums[0].split(maxsplit=2)[2]
    size = int(sums[0].split()[1])
    (copy / "lib" / name).write_bytes(b"\0" * size)  # right size, wrong bytes
    assert verify_distribution(copy) == 1  # the quick check only compares sizes
    with pytest.raises(DistributionMissing, match="fails its checksum"):
        verify_distribution(copy, full=True)


@pytest.mark.parametrize(
    ("heap", "collector"),
    [("512m", "-XX:+UseSerialGC"), ("1g", "-XX:+UseSerialGC"), ("2g", "-XX:+UseG1GC")],
)
def test_a_small_heap_is_collected_serially_a_large_one_by_g1(
    tmp_path: Path, heap: str, collector: str
) -> None:
    env = {**base_environ(), "MAXY_DATA_DIR": str(tmp_path), "MAXY_NEO4J_HEAP": heap}
    command = Neo4jInstance.from_settings(load_settings(env), env).command()
    assert f"-Xmx{heap}" in command
    assert collector in command
    assert len([flag for flag in command if flag.startswith("-XX:+Use") and "GC" in flag]) == 1
