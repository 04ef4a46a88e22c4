"""Reports against the real Neo4j and model."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from appliance.core.identity import Caller
from appliance.memory.errors import ModelLoadFailed, WriteRejected
from appliance.memory.reports import list_reports, read_latest_reports, write_report
from tests.memory.conftest import Memory
from tests.support.processes import dev_model

pytestmark = pytest.mark.anyio

MODEL = dev_model().stem  # the model the embedder fixture loads


async def same_minute_ahead() -> None:
    """Wait out the end of a minute so the next few writes share one UTC minute."""
    second = datetime.now(UTC).second
    if second >= 50:
        await anyio.sleep(61 - second)


async def write(
    memory: Memory, title: str, body: str, caller: Caller | None = None, **kwargs: Any
) -> dict[str, Any]:
    return await write_report(
        memory.graph, caller or memory.caller, memory.writer.embed, MODEL, title, body, **kwargs
    )


async def reports(memory: Memory, account: str | None = None) -> list[dict[str, Any]]:
    rows, _ = await memory.graph.run(
        "MATCH (r:Report {accountId: $a}) RETURN properties(r) AS p ORDER BY r.createdAt",
        {"a": account or memory.caller.account_id},
    )
    return [row["p"] for row in rows]


async def test_a_report_is_stamped_scoped_and_embedded(memory: Memory) -> None:
    done = await write(
        memory,
        "Weekly spend",
        "Groceries 120, fuel 60.",
        keywords=["money"],
        source_workflow="weekly-budget",
    )
    assert done["created"] and done["embedded"] and done["warnings"] == []
    [props] = await reports(memory)
    assert props["id"] == done["id"]
    assert props["accountId"] == memory.caller.account_id
    assert props["scope"] == "admin"  # the admin agent's reports stay private by default
    assert props["keywords"] == ["money"] and props["sourceWorkflow"] == "weekly-budget"
    assert props["minuteKey"].startswith("Weekly spend@") and props["minuteKey"].endswith("Z")
    assert len(props["embedding"]) == 384 and props["embeddingModel"] == MODEL
    assert memory.embeds == ["Weekly spend\nGroceries 120, fuel 60."]


async def test_a_second_write_in_the_same_minute_updates_the_report(memory: Memory) -> None:
    await same_minute_ahead()
    first = await write(memory, "Morning brief", "Rain later today.")
    second = await write(memory, "Morning brief", "Rain later today; take a coat.")
    assert second == {**first, "created": False}
    [props] = await reports(memory)
    assert props["body"] == "Rain later today; take a coat."
    assert len(memory.embeds) == 2  # the body changed, so the vector did too

    # The same body again is not embedded again.
    await write(memory, "Morning brief", "Rain later today; take a coat.")
    assert len(memory.embeds) == 2

    other = await write(memory, "Evening brief", "Clear skies tonight.")
    assert other["created"] and other["id"] != first["id"]
    assert len(await reports(memory)) == 2


async def test_body_length_is_capped_and_empty_reports_are_refused(memory: Memory) -> None:
    with pytest.raises(WriteRejected, match="10,001 characters; the limit is 10,000"):
        await write(memory, "Too long", "x" * 10_001)
    with pytest.raises(WriteRejected, match="non-empty title"):
        await write(memory, "  ", "body")
    with pytest.raises(WriteRejected, match="non-empty body"):
        await write(memory, "Title", "\n ")
    with pytest.raises(WriteRejected, match="keywords must be a list of strings"):
        await write(memory, "Title", "body", keywords="money")
    assert await reports(memory) == []
    assert (await write(memory, "Exactly at the cap", "y" * 10_000))["created"]


async def test_a_failed_embed_never_aborts_the_write(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(text: str) -> list[float]:
        raise ModelLoadFailed("model made to fail")

    with caplog.at_level(logging.WARNING):
        done = await write_report(memory.graph, memory.caller, broken, MODEL, "Kept", "Anyway.")
    assert done["created"] and not done["embedded"] and done["warnings"] == ["embed-failed"]
    assert "[graph-write] warn reason=embed-failed" in caplog.text
    [props] = await reports(memory)
    assert props["body"] == "Anyway." and "embedding" not in props


async def test_list_is_paginated_newest_first_and_has_no_body(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(5):
        await write(
            memory,
            f"Report {i}",
            f"Body number {i}." + "z" * i,
            source_workflow="even" if i % 2 == 0 else "odd",
        )
    with caplog.at_level(logging.INFO):
        first = await list_reports(memory.graph, memory.caller, page_size=2)
    assert "[reports] op=list" in caplog.text
    assert first["total"] == 5 and first["page"] == 1 and first["pageSize"] == 2
    assert [item["title"] for item in first["items"]] == ["Report 4", "Report 3"]
    item = first["items"][0]
    assert set(item) == {"id", "title", "createdAt", "sourceWorkflow", "keywords", "bodyLength"}
    assert item["bodyLength"] == len("Body number 4.") + 4

    pages = [first] + [
        await list_reports(memory.graph, memory.caller, page=p, page_size=2) for p in (2, 3, 4)
    ]
    titles = [i["title"] for page in pages for i in page["items"]]
    assert titles == [f"Report {i}" for i in (4, 3, 2, 1, 0)]
    assert pages[3]["items"] == [] and pages[3]["total"] == 5

    even = await list_reports(memory.graph, memory.caller, source_workflow="even")
    assert [i["title"] for i in even["items"]] == ["Report 4", "Report 2", "Report 0"]
    assert even["total"] == 3
    with pytest.raises(ValueError, match="page_size"):
        await list_reports(memory.graph, memory.caller, page_size=0)


async def test_read_latest_returns_full_bodies_filtered_by_keyword(memory: Memory) -> None:
    long_body = "The boiler was serviced. " * 300  # 7,500 characters, returned whole
    await write(memory, "Boiler service", long_body, keywords=["House"])
    await write(memory, "Garden", "Mowed the lawn; INVOICES from the gardener are due.")
    await write(memory, "Car", "Tyres changed to winter ones.")

    latest = await read_latest_reports(memory.graph, memory.caller)
    assert [r["title"] for r in latest["reports"]] == ["Car"]
    assert latest["reports"][0]["body"] == "Tyres changed to winter ones."

    by_body = await read_latest_reports(memory.graph, memory.caller, keyword="invoice", limit=5)
    assert [r["title"] for r in by_body["reports"]] == ["Garden"]
    by_keyword = await read_latest_reports(memory.graph, memory.caller, keyword="house", limit=5)
    assert [r["title"] for r in by_keyword["reports"]] == ["Boiler service"]
    assert by_keyword["reports"][0]["body"] == long_body
    by_title = await read_latest_reports(memory.graph, memory.caller, keyword="CAR", limit=5)
    assert [r["title"] for r in by_title["reports"]] == ["Car"]

    both = await read_latest_reports(memory.graph, memory.caller, limit=2)
    assert [r["title"] for r in both["reports"]] == ["Car", "Garden"]
    keyword_list = await list_reports(memory.graph, memory.caller, keyword="tyres")
    assert [i["title"] for i in keyword_list["items"]] == ["Car"]


async def test_guards_hide_reports_from_narrower_callers_and_other_accounts(
    memory: Memory,
) -> None:
    public = memory.other(scopes=("public",))
    stranger = Caller(account_id=memory.caller.account_id + "-other")
    await same_minute_ahead()
    await write(memory, "Salary review", "Private numbers.")
    shared = await write(memory, "Opening hours", "Mon-Fri 9-5.", scope="public")
    own = await write(memory, "Visitor notes", "Asked about parking.", caller=public)
    deleted = await write(memory, "Old notice", "Closed for holidays.", scope="public")
    await memory.graph.run(
        "MATCH (r:Report {id: $id}) SET r.deletedAt = datetime()", {"id": deleted["id"]}
    )
    # Another account writing the same title the same minute gets its own report.
    await write(memory, "Salary review", "Their numbers.", caller=stranger)

    public_latest = await read_latest_reports(memory.graph, public, limit=10)
    assert {r["id"] for r in public_latest["reports"]} == {shared["id"], own["id"]}
    public_list = await list_reports(memory.graph, public)
    assert {i["id"] for i in public_list["items"]} == {shared["id"], own["id"]}
    assert public_list["total"] == 2
    assert (await read_latest_reports(memory.graph, public, keyword="salary"))["reports"] == []

    admin_latest = await read_latest_reports(memory.graph, memory.caller, limit=10)
    assert {r["title"] for r in admin_latest["reports"]} == {
        "Salary review",
        "Opening hours",
        "Visitor notes",
    }
    assert all(r["body"] != "Their numbers." for r in admin_latest["reports"])
    stranger_list = await list_reports(memory.graph, stranger)
    assert [i["title"] for i in stranger_list["items"]] == ["Salary review"]

    # A narrower caller can neither see nor overwrite the admin report of this minute.
    with pytest.raises(WriteRejected, match="may not update it"):
        await write(memory, "Salary review", "Overwritten?", caller=public)
    with pytest.raises(WriteRejected, match="may not write at scope"):
        await write(memory, "Sneaky", "x", caller=public, scope="admin")
    [salary] = [r for r in await reports(memory) if r["title"] == "Salary review"]
    assert salary["body"] == "Private numbers."
