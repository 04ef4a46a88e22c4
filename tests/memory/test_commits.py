"""Concurrent graph writes through the real Neo4j: committed together, answered apart."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from appliance.memory.commits import ROUND_ROWS, Commits
from appliance.memory.errors import GraphQueryFailed, WriteRejected
from appliance.memory.graph import Runs
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Note:
    """A Note of the memory's account to create (then fail with ``fail``, if given)."""

    name: str
    fail: BaseException | None = None
    broken: bool = False  # a statement Neo4j refuses


def committer(memory: Memory, round_rows: int = ROUND_ROWS) -> Commits[Note, str]:
    """Commits whose write creates a round's Notes in one statement."""
    account = memory.caller.account_id

    async def write(tx: Runs, notes: Sequence[Note]) -> list[str]:
        await tx.run(
            "UNWIND $names AS name CREATE (:Note {id: $account + '-' + name, accountId: $account, "
            "name: name})",
            {"account": account, "names": [note.name for note in notes]},
        )
        if any(note.broken for note in notes):
            await tx.run("RETURN 1 / 0")
        for note in notes:
            if note.fail is not None:
                raise note.fail
        return [note.name for note in notes]

    return Commits(memory.graph, write, round_rows)


async def names(memory: Memory) -> list[str]:
    rows, _ = await memory.graph.run(
        "MATCH (n:Note) WHERE n.accountId = $a RETURN n.name AS name ORDER BY name",
        {"a": memory.caller.account_id},
    )
    return [row["name"] for row in rows]


async def test_writes_that_wait_together_commit_in_one_transaction(memory: Memory) -> None:
    commits = committer(memory)
    done = await asyncio.gather(*(commits(Note(f"n{i}")) for i in range(8)))
    assert done == [f"n{i}" for i in range(8)]
    assert await names(memory) == [f"n{i}" for i in range(8)]
    # All eight were waiting when the first round began: one transaction.
    assert commits.rounds == 1


async def test_a_write_that_finds_no_commit_in_flight_starts_and_later_ones_share_a_round(
    memory: Memory,
) -> None:
    commits = committer(memory)
    first = asyncio.ensure_future(commits(Note("first")))
    await asyncio.sleep(0)  # the first round has begun with the first write alone
    later = await asyncio.gather(*(commits(Note(f"later{i}")) for i in range(5)))
    assert await first == "first" and later == [f"later{i}" for i in range(5)]
    assert commits.rounds == 2 and len(await names(memory)) == 6


async def test_one_failing_write_fails_alone_and_leaves_nothing(memory: Memory) -> None:
    commits = committer(memory)
    refusal = WriteRejected("That id belongs to another account.")
    outcomes = await asyncio.gather(
        commits(Note("a")),
        commits(Note("bad", fail=refusal)),
        commits(Note("c")),
        return_exceptions=True,
    )
    assert outcomes[0] == "a" and outcomes[2] == "c" and outcomes[1] is refusal
    # The failing write's node was rolled back with it; the others committed on their own.
    assert await names(memory) == ["a", "c"]
    assert commits.rounds == 1 + 3


async def test_a_statement_neo4j_refuses_fails_only_its_write(memory: Memory) -> None:
    commits = committer(memory)
    outcomes = await asyncio.gather(
        commits(Note("a")), commits(Note("b", broken=True)), return_exceptions=True
    )
    assert outcomes[0] == "a" and isinstance(outcomes[1], GraphQueryFailed)
    assert await names(memory) == ["a"]


async def test_a_round_holds_at_most_its_rows_and_a_larger_write_goes_alone(
    memory: Memory,
) -> None:
    commits = committer(memory, round_rows=3)
    sizes = [1, 1, 1, 1, 5, 1]
    await asyncio.gather(*(commits(Note(f"n{i}"), rows) for i, rows in enumerate(sizes)))
    # [1, 1, 1], [1], [5] (over the bound: alone), [1]: whole writes only, in arrival order.
    assert commits.rounds == 4 and len(await names(memory)) == 6


async def test_writes_of_the_same_key_never_share_a_round(memory: Memory) -> None:
    commits = committer(memory)
    keys = ["doc-a", "doc-b", "doc-a", "doc-c", "doc-a"]
    await asyncio.gather(*(commits(Note(f"n{i}"), 1, key) for i, key in enumerate(keys)))
    # [a, b], [a, c], [a]: a round ends where its key repeats, so one document's writes apply
    # one after the other in the order they arrived.
    assert commits.rounds == 3 and len(await names(memory)) == 5
