"""Backups that restore: real Neo4j, the real model, two accounts' documents, memories and files.

backup → wipe every node and the account folders → restore → the same graph (counts per label
and type, the content hash, embeddings) and the same files; a damaged archive is refused before
anything changes; searches are answered while the export's read transaction is open; a full disk
leaves no half archive.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from appliance.core.accounts import create_account
from appliance.core.config import Settings, load_settings
from appliance.core.documents import keep_text
from appliance.core.identity import Caller
from appliance.memory import backup, snapshot
from appliance.memory.errors import BackupError, BackupRefused
from appliance.memory.ingest import Ingester, IngestRequest
from appliance.memory.search import SearchRequest
from appliance.memory.write import Edge, WriteRequest
from tests.memory.conftest import Memory
from tests.support.disks import fill, small_disk  # noqa: F401 (the fixture)
from tests.support.processes import base_environ

pytestmark = pytest.mark.anyio

DOCS = {
    "Sourdough": "# Sourdough\n\nFeed the starter at night.\n\n## Baking\n\nBake at 250 degrees "
    "with steam for twenty minutes, then lower the heat.",
    "Bicycle": "# Bicycle\n\nThe chain needs oil every month.\n\n## Brakes\n\nReplace the pads "
    "when the groove is gone.",
}


@dataclass
class Device:
    settings: Settings
    accounts: list[str]


def _files(settings: Settings) -> dict[str, bytes]:
    root = settings.accounts_dir
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
async def device(memory: Memory, tmp_path: Path) -> AsyncIterator[Device]:
    """Two accounts with documents (kept texts), memories, an edge, agent templates, plugins."""
    env = base_environ()
    env.update(MAXY_DATA_DIR=str(tmp_path / "data"), MAXY_BACKUP_KEEP="2")
    settings = load_settings(env)
    accounts = []
    for n, (title, text) in enumerate(DOCS.items()):
        account = create_account(settings.accounts_dir, f"Owner {n}")
        accounts.append(account.id)
        home = settings.accounts_dir / account.id
        (home / "agents" / "helper").mkdir(parents=True, exist_ok=True)
        (home / "agents" / "helper" / "IDENTITY.md").write_text(f"I help owner {n}.\n")
        (home / "plugins" / "mine").mkdir(parents=True)
        (home / "plugins" / "mine" / "PLUGIN.md").write_text("---\nname: mine\n---\nMine.\n")
        caller = Caller(account_id=account.id)
        ingester = Ingester(
            memory.graph,
            memory.embed_texts,
            memory.writer.model_name,
            keep=partial(keep_text, home),
        )
        await ingester.ingest(caller, IngestRequest(title, text, f"file:/{title}.md"))
        person = await memory.writer.write(
            caller, WriteRequest("Person", {"name": f"Ada {n}", "notes": "likes bread"})
        )
        await memory.writer.write(
            caller,
            WriteRequest(
                "Preference",
                {"name": f"tea {n}", "strength": 0.5 + n},
                edges=[Edge("ABOUT", person["id"], "Person")],
            ),
        )
    yield Device(settings, accounts)
    await memory.graph.run("MATCH (n) WHERE n.accountId IN $a DETACH DELETE n", {"a": accounts})


async def _wipe(memory: Memory, settings: Settings) -> None:
    await memory.graph.run("MATCH (n) DETACH DELETE n")
    shutil.rmtree(settings.accounts_dir)


async def test_backup_wipe_restore_gives_back_every_node_edge_embedding_and_file(
    memory: Memory, device: Device
) -> None:
    before = await snapshot.export_graph(memory.graph)
    files = _files(device.settings)
    vectors, _ = await memory.graph.run(
        "MATCH (c:Chunk) WHERE c.accountId IN $a RETURN c.id AS id, c.embedding AS v",
        {"a": device.accounts},
    )
    assert vectors and all(len(row["v"]) == 384 for row in vectors)

    made = await backup.create(memory.graph, device.settings)
    assert made["nodes"] == before.nodes and made["contentHash"] == before.content_hash
    assert set(device.accounts) <= set(made["accounts"])
    await _wipe(memory, device.settings)
    assert (await snapshot.export_graph(memory.graph)).nodes == 0

    done = await backup.restore(
        memory.graph, device.settings, device.settings.backups_path / made["name"]
    )

    after = await snapshot.export_graph(memory.graph)
    assert (after.nodes, after.relationships) == (before.nodes, before.relationships)
    assert after.labels == before.labels and after.types == before.types
    assert after.content_hash == before.content_hash == done["contentHash"]
    again, _ = await memory.graph.run(
        "MATCH (c:Chunk) WHERE c.accountId IN $a RETURN c.id AS id, c.embedding AS v",
        {"a": device.accounts},
    )
    assert {r["id"]: r["v"] for r in again} == {r["id"]: r["v"] for r in vectors}
    assert _files(device.settings) == files  # documents kept, agent templates, plugins
    # The restored graph is searchable again (vector and full-text indexes answer).
    found = await memory.searcher.search(
        Caller(account_id=device.accounts[0]), SearchRequest("how hot to bake the bread", ["Chunk"])
    )
    chunks = [hit for hit in found.results if "Chunk" in hit.labels]
    assert any("250 degrees" in str(hit.props.get("content")) for hit in chunks)
    assert any(hit.vector is not None for hit in chunks)


def _flip(path: Path, member: str) -> None:
    with tarfile.open(path) as tar:
        offset = tar.getmember(member).offset_data
    data = bytearray(path.read_bytes())
    data[offset + 10] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path, member: str) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _version(path: Path, member: str) -> None:
    """Re-pack with format version 2 and a manifest hash that matches it."""
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, data in members:
            if info.name == backup.MANIFEST:
                manifest = json.loads(data)
                manifest["version"] = 2
                data = json.dumps(manifest).encode()
            if info.name == backup.MANIFEST_HASH:
                import hashlib

                data = hashlib.sha256(json.dumps(manifest).encode()).hexdigest().encode()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(out.getvalue())


async def test_a_damaged_archive_is_refused_before_anything_changes(
    memory: Memory, device: Device
) -> None:
    made = await backup.create(memory.graph, device.settings)
    good = device.settings.backups_path / made["name"]
    # Change the device after the backup: a refused restore must leave these changes alone.
    await memory.writer.write(
        Caller(account_id=device.accounts[0]), WriteRequest("Person", {"name": "Grace"})
    )
    (device.settings.accounts_dir / device.accounts[0] / "new.txt").write_text("kept")
    state = (await snapshot.export_graph(memory.graph)).content_hash
    files = _files(device.settings)
    cases = [
        (_truncate, snapshot.NODES, "truncated"),
        (_flip, snapshot.NODES, "corrupt"),
        (_flip, backup.MANIFEST, "manifest is corrupt"),
        (_version, backup.MANIFEST, "format version 2"),
    ]
    for damage, member, says in cases:
        bad = good.with_name(f"bad-{damage.__name__}.tar")
        shutil.copy(good, bad)
        damage(bad, member)
        with pytest.raises(BackupRefused) as refused:
            await backup.restore(memory.graph, device.settings, bad)
        assert says in str(refused.value), (damage.__name__, member, str(refused.value))
        assert (await snapshot.export_graph(memory.graph)).content_hash == state
        assert _files(device.settings) == files
        assert not list(device.settings.data_dir.glob(".maxy-restore-*"))


async def test_searches_are_answered_while_the_export_reads(memory: Memory, device: Device) -> None:
    answered: list[int] = []

    async def search_meanwhile(stage: str, done: int, total: int) -> None:
        if stage == "nodes":  # the export's read transaction is open
            found = await asyncio.wait_for(
                memory.searcher.search(
                    Caller(account_id=device.accounts[1]), SearchRequest("bicycle brakes")
                ),
                timeout=30,
            )
            answered.append(len(found.results))

    await backup.create(memory.graph, device.settings, progress=search_meanwhile)
    assert answered and answered[0] > 0


async def test_retention_keeps_the_newest(memory: Memory, device: Device) -> None:
    names = [(await backup.create(memory.graph, device.settings))["name"] for _ in range(3)]
    kept = [p.name for p in backup.archives(device.settings.backups_path)]
    assert kept == sorted(names, reverse=True)[:2]  # MAXY_BACKUP_KEEP=2
    listed = backup.listing(device.settings.backups_path)
    assert [e["name"] for e in listed] == kept and listed[0]["nodes"] > 0


async def test_a_full_disk_says_so_and_leaves_no_half_archive(
    memory: Memory,
    device: Device,
    small_disk: Path,  # noqa: F811
) -> None:
    filler = fill(small_disk)
    settings = device.settings.replace(backup_dir=small_disk)
    with pytest.raises(BackupError) as full:
        await backup.create(memory.graph, settings)
    assert "disk is full" in str(full.value)
    assert os.listdir(small_disk) == [filler.name]


UTC_ZONE, PARIS = ZoneInfo("UTC"), ZoneInfo("Europe/Paris")


@pytest.mark.parametrize(
    ("at", "zone", "now", "since", "due"),
    [
        ("03:00", UTC_ZONE, "2026-12-03T02:59:00+00:00", "2026-12-02T03:00:05+00:00", False),
        ("03:00", UTC_ZONE, "2026-12-03T03:00:00+00:00", "2026-12-02T03:00:05+00:00", True),
        ("03:00", UTC_ZONE, "2026-12-03T15:00:00+00:00", "2026-12-03T03:00:05+00:00", False),
        # the engine started after today's slot: the next night's
        ("03:00", UTC_ZONE, "2026-12-03T15:00:00+00:00", "2026-12-03T10:00:00+00:00", False),
        ("03:00", UTC_ZONE, "2026-12-05T15:00:00+00:00", "2026-12-03T03:00:05+00:00", True),
        ("off", UTC_ZONE, "2026-12-05T15:00:00+00:00", "2026-01-01T00:00:00+00:00", False),
        # 03:00 in Paris is 02:00 UTC in winter
        ("03:00", PARIS, "2026-12-03T02:30:00+00:00", "2026-12-02T02:00:05+00:00", True),
    ],
)
def test_the_nightly_backup_is_due_once_its_time_has_passed(
    at: str, zone: ZoneInfo, now: str, since: str, due: bool
) -> None:
    moment, last = datetime.fromisoformat(now), datetime.fromisoformat(since)
    assert backup.due(at, zone, moment, last) is due
