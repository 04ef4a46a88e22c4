"""A full data partition: `maxy engine` and `maxy app` with their data directory on a tmpfs of
fixed size (mounted for the test; it needs root, as the CI VM has), filled to the last byte.

Ingests and uploads fail with the one ``disk-full`` error (an RPC error code, a 507 JSON answer),
never a traceback or ``internal``; every file already stored reads back byte for byte and the
kept document's text through the engine; once space is freed, both work again. Neo4j stays on
the session's own disk, so a memory write (graph only) still succeeds while the partition is full
(test_neo4j_disk_full puts Neo4j's store on the full partition too).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from appliance.core.fsio import sha256_file
from appliance.memory import uploads
from appliance.rpc.protocol import RemoteError
from tests.support.disks import fill, small_disk  # noqa: F401 (the fixture)
from tests.support.processes import Neo4jServer
from tests.support.sse import parse
from tests.support.stacks import Stack, make_env, running_stack

NOTE = "# Boiler\n\nThe boiler was serviced in March; the engineer is Sam Price.\n"


def stored(data: Path) -> dict[str, str]:
    """Every file under ``data`` and its sha256."""
    return {str(p.relative_to(data)): sha256_file(p) for p in data.rglob("*") if p.is_file()}


def upload(admin: httpx.Client, name: str, text: str) -> httpx.Response:
    return admin.post("/api/admin/uploads", params={"name": name}, content=text.encode())


def uploaded(admin: httpx.Client, answer: httpx.Response) -> str:
    """The last event of an accepted upload's stream."""
    assert answer.status_code == 202, answer.text
    return parse(admin.get(answer.json()["events"]).text)[-1].event


def assert_disk_full(code: str, message: str) -> None:
    assert code == "disk-full"
    assert "disk is full" in message and "Free space" in message, message


@pytest.mark.timeout(300)
def test_a_full_partition_refuses_clearly_keeps_what_is_stored_and_recovers(
    neo4j_server: Neo4jServer,
    small_disk: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    data = small_disk / "data"
    env = make_env(neo4j_server, data)
    with running_stack(env, tmp_path / "logs", "engine", "app") as stack:
        admin = admin_client(stack)
        before = stack.rpc("ingest", {"title": "Boiler", "text": NOTE, "attachmentId": "t:boiler"})
        assert uploaded(admin, upload(admin, "radiators.md", "# Radiators\n\nBleed them.\n")) == (
            "done"
        )
        kept = stored(data)
        filler = fill(small_disk)

        with pytest.raises(RemoteError) as refused:
            stack.rpc(
                "ingest", {"title": "Loft", "text": "# Loft\n\nInsulated.", "attachmentId": "t:l"}
            )
        assert_disk_full(refused.value.code, str(refused.value))
        answer = upload(admin, "loft.md", "# Loft\n\nInsulated in 2024.\n" * 2000)
        assert answer.status_code == 507, answer.text
        assert_disk_full(answer.json()["code"], answer.json()["message"])
        incoming = uploads.incoming_dir(env.settings.accounts_dir, env.account_id)
        assert list(incoming.iterdir()) == []  # nothing half-received is left
        note = stack.rpc("write", {"label": "Note", "properties": {"name": "Meter read 4512"}})
        assert note["created"] is True  # the graph is elsewhere: its writes go on

        assert stored(data) == kept  # the filler sits beside the data directory
        version = stack.rpc("document.version", {"id": before["documentId"], "number": 1})
        assert version["text"] == NOTE
        assert "Traceback" not in stack.output() and "error=internal" not in stack.output()

        filler.unlink()
        again = stack.rpc(
            "ingest", {"title": "Loft", "text": "# Loft\n\nInsulated.", "attachmentId": "t:l"}
        )
        assert again["version"] == 1
        assert uploaded(admin, upload(admin, "loft.md", "# Loft\n\nInsulated in 2024.\n")) == "done"
        admin.close()


def admin_client(stack: Stack) -> httpx.Client:
    """A logged-in LAN admin client that sends its CSRF token."""
    client = stack.client(stack.admin_cookies())
    client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
    return client
