"""Neo4j's own store on the full partition: `maxy run` (Neo4j and every role) with its whole
data directory — Neo4j's store and transaction logs with it — on a tmpfs of fixed size, as on
the device, where Neo4j lives on the data partition.

What Neo4j does (2026.08): the first transaction it cannot append to its log fails with
``TransactionLogError`` (its message does not say "no space"), and then it stops its database:
every transaction, reads included, answers "needs to be restarted" until the server restarts,
even once space is freed. So: with the partition full, a memory write and an ingest fail with
the one ``disk-full`` error (never ``internal``, never a hang or a traceback) and /healthz says
Neo4j is down with that code; once the filler is removed, the supervisor restarts Neo4j (and
logs it), /healthz answers 200 again, every write acknowledged before reads back equal, and
writes go on. (Ingests that succeed, before and after, are test_disk_full's: each one embeds,
which on shared vCPUs costs more than this test's budget.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.rpc.protocol import RemoteError
from tests.support.disks import fill, small_disk  # noqa: F401 (the fixture)
from tests.support.processes import get_health, wait_until
from tests.support.stacks import Stack, supervised_stack

NOTES = 5


def health(stack: Stack) -> httpx.Response:
    answer = get_health(stack.env.settings.port)
    assert answer is not None, "the edge answers /healthz throughout"
    return answer


def refused(stack: Stack, method: str, params: dict[str, Any]) -> RemoteError:
    """The error ``method`` is answered with (it must fail)."""
    with pytest.raises(RemoteError) as caught:
        stack.rpc(method, params)
    return caught.value


def assert_disk_full(err: RemoteError) -> None:
    assert err.code == "disk-full", f"{err.code}: {err}"
    assert "disk is full" in str(err) and "Free space" in str(err), str(err)


def node(stack: Stack, node_id: str) -> dict[str, Any]:
    found: dict[str, Any] = stack.rpc("graph.node", {"id": node_id})["node"]
    return found


@pytest.mark.timeout(420)
def test_neo4j_on_a_full_partition_refuses_clearly_keeps_every_write_and_restarts(
    small_disk: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    with supervised_stack(tmp_path, data=small_disk / "data") as stack:
        # Numbers only: nothing to embed, so the model (on shared vCPUs) does not set the pace.
        acked = {
            stack.rpc("write", {"label": "Note", "properties": {"reading": 4500 + n}})["id"]: n
            for n in range(NOTES)
        }
        kept = {node_id: node(stack, node_id) for node_id in acked}
        assert health(stack).json()["disk"]["ok"] is True
        filler = fill(small_disk)
        assert health(stack).json()["disk"]["ok"] is False

        # The log's last page may still take a small write or two: each one is acknowledged, and
        # kept like the others; the first the disk cannot take is refused.
        for n in range(NOTES, NOTES + 100):
            note = {"label": "Note", "properties": {"reading": 4500 + n}}
            try:
                node_id = stack.rpc("write", note)["id"]
            except RemoteError as err:
                assert_disk_full(err)
                break
            acked[node_id], kept[node_id] = n, node(stack, node_id)
        else:
            pytest.fail("Neo4j took 100 writes on a full disk")
        ingest = {"title": "Loft", "text": "# Loft\n\nInsulated.\n", "attachmentId": "t:l"}
        assert_disk_full(refused(stack, "ingest", ingest))
        assert_disk_full(refused(stack, "write", note))  # Neo4j stopped its database: still
        down = health(stack)
        assert down.status_code == 503, down.text
        assert down.json()["neo4j"]["code"] == "disk-full", down.text

        filler.unlink()
        wait_until(lambda: health(stack).status_code == 200, 240, "Neo4j back after the disk freed")
        log = stack.processes["run"].output()
        assert "op=restart child=neo4j reason=database-stopped" in log
        assert "Traceback" not in log and "error=internal" not in log

        assert {node_id: node(stack, node_id) for node_id in acked} == kept
        print(f"\n[neo4j-disk-full] acked={len(acked)} after_fill={len(acked) - NOTES} lost=0")
        assert stack.rpc("write", note)["created"] is True
