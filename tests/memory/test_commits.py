"""Concurrent graph writes through the real Neo4j: committed together, answered apart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from appliance.memory.commits import Commits
from appliance.memory.errors import GraphQueryFailed, WriteRejected
from appliance.memory.graph import Runs
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio


def note(memory: Memory, name: str, fail: BaseException | None = None) -> Any:
    """A write that creates one Note of ``memory``'s account (then raises ``fail``, if given)."""

    async def write(tx: Runs) -> str:
        await tx.run(
            "CREATE (:Note {id: $id, accountId: $account, name: $name})",
            {
                "id": f"{memory.caller.account_id}-{name}",
                "account": memory.caller.account_id,
                "name": name,
            },
        )
        if fail is not None:
            raise fail
        return name

    return write


async def names(memory: Memory) -> list[str]:
    rows, _ = await memory.graph.run(
        "MATCH (n:Note) WHERE n.accountId = $a RETURN n.name AS name ORDER BY name",
        {"a": memory.caller.account_id},
    )
    return [row["name"] for row in rows]


async def test_writes_that_wait_together_commit_in_one_transaction(memory: Memory) -> None:
    commits = Commits(memory.graph)
    done = await asyncio.gather(*(commits(note(memory, f"n{i}")) for i in range(8)))
    assert done == [f"n{i}" for i in range(8)]
    assert await names(memory) == [f"n{i}" for i in range(8)]
    # All eight were waiting when the first round began: one transaction.
    assert commits.rounds == 1


async def test_a_write_that_finds_no_commit_in_flight_starts_and_later_ones_share_a_round(
    memory: Memory,
) -> None:
    commits = Commits(memory.graph)
    first = asyncio.ensure_future(commits(note(memory, "first")))
    await asyncio.sleep(0)  # the first round has begun with the first write alone
    later = await asyncio.gather(*(commits(note(memory, f"later{i}")) for i in range(5)))
    assert await first == "first" and later == [f"later{i}" for i in range(5)]
    assert commits.rounds == 2 and len(await names(memory)) == 6


async def test_one_failing_write_fails_alone_and_leaves_nothing(memory: Memory) -> None:
    commits = Commits(memory.graph)
    refusal = WriteRejected("That id belongs to another account.")
    outcomes = await asyncio.gather(
        commits(note(memory, "a")),
        commits(note(memory, "bad", fail=refusal)),
        commits(note(memory, "c")),
        return_exceptions=True,
    )
    assert outcomes[0] == "a" and outcomes[2] == "c" and outcomes[1] is refusal
    # The failing write's node was rolled back with it; the others committed on their own.
    assert await names(memory) == ["a", "c"]
    assert commits.rounds == 1 + 3


async def test_a_statement_neo4j_refuses_fails_only_its_write(memory: Memory) -> None:
    commits = Commits(memory.graph)

    async def broken(tx: Runs) -> None:
        await tx.run("RETURN 1 / 0")

    outcomes = await asyncio.gather(
        commits(note(memory, "a")), commits(broken), return_exceptions=True
    )
    assert outcomes[0] == "a" and isinstance(outcomes[1], GraphQueryFailed)
    assert await names(memory) == ["a"]


async def test_a_round_holds_at_most_its_rows_and_a_larger_write_goes_alone(
    memory: Memory,
) -> None:
    commits = Commits(memory.graph, round_rows=3)
    sizes = [1, 1, 1, 1, 5, 1]
    await asyncio.gather(*(commits(note(memory, f"n{i}"), rows) for i, rows in enumerate(sizes)))
    # [1, 1, 1], [1], [5] (over the bound: alone), [1]: whole writes only, in arrival order.
    assert commits.rounds == 4 and len(await names(memory)) == 6
