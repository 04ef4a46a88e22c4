"""The Neo4j dump before a slot is written: real Neo4j, real neo4j-admin, and a real restore."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from neo4j import GraphDatabase

from appliance.core.config import load_settings
from appliance.graphdb.instance import ADMIN_CLASS, Neo4jInstance, running
from tests.ota.cards import Signer, SlotImages, make_bundle, make_device, ota, progress_lines, trust
from tests.support.processes import maxy, private_neo4j

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def neo4j_env(data: Path) -> dict[str, str]:
    return {
        "MAXY_DATA_DIR": str(data),
        **private_neo4j("256m", "32m"),
    }


def memories(uri: str, password: str) -> list[str]:
    with GraphDatabase.driver(uri, auth=("neo4j", password)) as driver:
        records, _, _ = driver.execute_query("MATCH (m:Memory) RETURN m.text AS text")
    return [r["text"] for r in records]


def test_apply_dumps_the_graph_before_writing_and_the_dump_restores(
    tmp_path: Path, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    device = make_device(
        tmp_path / "device",
        releases["0.1.0"],
        MAXY_OTA_BACKUP="on",
        **neo4j_env(tmp_path / "device" / "data"),
    )
    trust(device, release_key)
    bundle = make_bundle(tmp_path / "bundles", releases["1.0.0"], release_key)
    settings = load_settings(device.env)
    instance = Neo4jInstance.from_settings(settings, device.env)
    started = subprocess.run(
        maxy("neo4j", "start"),
        env=device.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    try:
        password = settings.neo4j_password_path.read_text().strip()
        with GraphDatabase.driver(settings.neo4j_address(), auth=("neo4j", password)) as driver:
            driver.execute_query("CREATE (:Memory {text: $text})", text="written before 1.0.0")
        before = instance.running_pid()

        done = ota(device, "apply", str(bundle), "--progress", "json", "--yes")

        assert done.returncode == 0, done.stderr
        lines = progress_lines(done.stdout)
        phases = [line["phase"] for line in lines]
        assert phases.index("backup") < phases.index("write-boot")
        messages = " | ".join(str(line["message"]) for line in lines if line["phase"] == "backup")
        assert "Neo4j runs (cli)" in messages and "Neo4j restarted" in messages
        dump = device.data / "ota" / "backup" / "neo4j.dump"
        assert dump.read_bytes()[:4] == b"DZV1"  # neo4j-admin's dump format
        assert '"before": "1.0.0"' in (dump.parent / "neo4j.dump.json").read_text()
        after = instance.running_pid()
        assert after is not None and after != before, "Neo4j was stopped for the dump, then started"
        assert memories(settings.neo4j_address(), password) == ["written before 1.0.0"]
    finally:
        subprocess.run(
            maxy("neo4j", "stop"), env=device.env, capture_output=True, timeout=120, check=False
        )

    # What a rollback needs: the dump loads into a store of its own and holds the graph.
    restore_env = {**device.env, **neo4j_env(tmp_path / "restore")}
    fresh = Neo4jInstance.from_settings(load_settings(restore_env), restore_env)
    fresh.prepare()
    loaded = subprocess.run(
        [
            str(fresh.java.java),
            "-cp",
            str(fresh.dist / "lib" / "*"),
            ADMIN_CLASS,
            "database",
            "load",
            "neo4j",
            f"--from-path={dump.parent}",
            "--overwrite-destination=true",
        ],
        env={
            "PATH": os.environ["PATH"],
            "JAVA_HOME": str(fresh.java.home),
            "NEO4J_HOME": str(fresh.home),
            "NEO4J_CONF": str(fresh.home / "conf"),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    with running(fresh):
        uri = fresh.uri()
        assert memories(uri, fresh.password_file.read_text().strip()) == ["written before 1.0.0"]


def test_a_graph_under_maxy_run_is_not_stopped_behind_its_back(
    tmp_path: Path, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    device = make_device(
        tmp_path / "device",
        releases["0.1.0"],
        MAXY_OTA_BACKUP="on",
        **neo4j_env(tmp_path / "device" / "data"),
    )
    trust(device, release_key)
    bundle = make_bundle(tmp_path / "bundles", releases["1.0.0"], release_key)
    instance = Neo4jInstance.from_settings(load_settings(device.env), device.env)
    (instance.home / "data" / "databases" / "neo4j").mkdir(parents=True)
    (instance.home / "run").mkdir(parents=True)
    # A live process stands in for the server `maxy run` (this test process) supervises.
    instance.record_pid(os.getpid(), f"supervisor:{os.getpid()}")
    card = device.card.read_bytes()

    done = ota(device, "apply", str(bundle), "--progress", "json", "--yes")

    assert done.returncode == 1 and "Stop `maxy run` first" in done.stderr
    assert device.card.read_bytes() == card and not device.armed()
