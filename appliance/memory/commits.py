"""The graph writes of concurrent ingests, committed together.

Every commit makes Neo4j refresh the Lucene reader of each index it touched (the full-text index
and a vector index per label), which flushes a small segment that Lucene later merges: with one
transaction per document, an import spent about 40 % of Neo4j's CPU there. And every statement
costs Neo4j about 0.6 ms of CPU and the driver 0.4 ms before a row is written. :class:`Commits`
collects the writes of the documents that are ready while a commit is in flight and hands them,
the next round, to ONE call of its ``write`` function in ONE transaction, so the round's rows go
in a handful of ``UNWIND`` statements and the indexes refresh once for all of them.

- Nothing waits for company: a write that finds no commit in flight starts at once; the writes
  that arrive meanwhile go together into the next round.
- A round holds at most :data:`ROUND_ROWS` rows (a write's own estimate), whole writes only (a
  larger write goes alone), so one transaction's size stays bounded on a Pi's heap.
- A round never holds two writes with the same ``key`` (the document): the later one waits for
  the next round, so two ingests of the same attachment still apply in the order they arrived.
- One document's failure never fails another's: when a round of several writes raises (a
  rejected id, Neo4j refusing a statement), nothing of it was committed, and each write runs
  again in a transaction of its own and gets its own outcome.
- A caller that stops waiting (cancelled) before its round begins is left out; once its round
  has begun, its write commits with the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from appliance.memory.bulk import settle
from appliance.memory.graph import Graph, Runs

log = logging.getLogger(__name__)

# Rows (nodes) per round: a few hundred documents of Cranfield's size, and far below what a
# 512 MB heap holds in one transaction's state.
ROUND_ROWS = 2_000

P = TypeVar("P")  # what one caller asks to write
R = TypeVar("R")  # what its write answers

# Writes a round's payloads in the transaction given; answers one result per payload, in order.
WriteMany = Callable[[Runs, Sequence[P]], Awaitable[Sequence[R]]]


@dataclass
class _Waiting(Generic[P, R]):
    payload: P
    rows: int
    key: Hashable
    answer: asyncio.Future[R]


class Commits(Generic[P, R]):
    """Commit the writes of concurrent callers together: one ``write`` call, one transaction a
    round."""

    def __init__(self, graph: Graph, write: WriteMany[P, R], round_rows: int = ROUND_ROWS) -> None:
        self._graph = graph
        self._write = write
        self._round_rows = round_rows
        self._waiting: deque[_Waiting[P, R]] = deque()
        self._rounds: asyncio.Task[None] | None = None
        self.rounds = 0  # transactions committed or tried so far

    async def __call__(self, payload: P, rows: int = 1, key: Hashable | None = None) -> R:
        """Write ``payload`` in a transaction (shared with whatever else is waiting); return its
        result once the transaction committed, or raise what its write raised. Writes with the
        same ``key`` never share a round (None: a key of its own)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[R] = loop.create_future()
        self._waiting.append(_Waiting(payload, rows, key if key is not None else object(), answer))
        if self._rounds is None or self._rounds.done():
            self._rounds = loop.create_task(self._run_rounds())
        return await answer

    def _next_round(self) -> list[_Waiting[P, R]]:
        """The writes of the next round, taken off the queue in arrival order."""
        calls = [self._waiting.popleft()]
        size, keys = calls[0].rows, {calls[0].key}
        while self._waiting:
            head = self._waiting[0]
            if size + head.rows > self._round_rows or head.key in keys:
                break
            calls.append(self._waiting.popleft())
            size += head.rows
            keys.add(head.key)
        return [call for call in calls if not call.answer.done()]

    async def _run_rounds(self) -> None:
        """Run rounds until nobody waits."""
        while self._waiting:
            calls = self._next_round()
            if not calls:
                continue
            self.rounds += 1
            if len(calls) == 1:
                await self._alone(calls[0])
                continue
            try:
                async with self._graph.transaction() as tx:
                    results = await self._write(tx, [call.payload for call in calls])
            except Exception as err:  # nothing was committed: each write again, alone
                log.info(
                    "[graph-write] op=round-split writes=%d reason=%s",
                    len(calls),
                    type(err).__name__,
                )
                for call in calls:
                    self.rounds += 1
                    await self._alone(call)
                continue
            for call, result in zip(calls, results, strict=True):
                settle(call.answer, result)

    async def _alone(self, call: _Waiting[P, R]) -> None:
        try:
            async with self._graph.transaction() as tx:
                (result,) = await self._write(tx, [call.payload])
        except Exception as err:  # handed to its caller, never swallowed
            settle(call.answer, err)
        else:
            settle(call.answer, result)
