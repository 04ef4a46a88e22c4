"""The graph writes of concurrent ingests, committed together.

Every commit makes Neo4j refresh the Lucene reader of each index it touched (the full-text index
and a vector index per label), which flushes a small segment that Lucene later merges: with one
transaction per document, an import spent about 40 % of Neo4j's CPU there. :class:`Commits`
runs the writes of the documents that are ready while a commit is in flight in ONE transaction,
the next round, so the indexes refresh once for all of them.

- Nothing waits for company: a write that finds no commit in flight starts at once; the writes
  that arrive meanwhile go together into the next round.
- A round holds at most :data:`ROUND_ROWS` rows (a write's own estimate), whole writes only (a
  larger write goes alone), so one transaction's size stays bounded on a Pi's heap.
- One document's failure never fails another's: when a round of several writes raises (a
  rejected id, Neo4j refusing a statement), nothing of it was committed, and each write runs
  again in a transaction of its own and gets its own outcome.
- The writes of one round run one after the other in the order they arrived, so two ingests of
  the same attachment still apply in order.
- A caller that stops waiting (cancelled) before its round begins is left out; once its round
  has begun, its write commits with the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from appliance.memory.bulk import settle
from appliance.memory.graph import Graph, Runs

log = logging.getLogger(__name__)

# Rows (nodes) per round: a few hundred documents of Cranfield's size, and far below what a
# 512 MB heap holds in one transaction's state.
ROUND_ROWS = 2_000

Write = Callable[[Runs], Awaitable[Any]]


class Commits:
    """Commit the writes of concurrent callers together, one transaction a round."""

    def __init__(self, graph: Graph, round_rows: int = ROUND_ROWS) -> None:
        self._graph = graph
        self._round_rows = round_rows
        self._waiting: deque[tuple[Write, int, asyncio.Future[Any]]] = deque()
        self._rounds: asyncio.Task[None] | None = None
        self.rounds = 0  # transactions committed or tried so far

    async def __call__(self, write: Write, rows: int = 1) -> Any:
        """Run ``write`` in a transaction (shared with whatever else is waiting); return what it
        returned once the transaction committed, or raise what it raised."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._waiting.append((write, rows, answer))
        if self._rounds is None or self._rounds.done():
            self._rounds = loop.create_task(self._run_rounds())
        return await answer

    async def _run_rounds(self) -> None:
        """Run rounds until nobody waits."""
        while self._waiting:
            calls = [self._waiting.popleft()]
            size = calls[0][1]
            while self._waiting and size + self._waiting[0][1] <= self._round_rows:
                calls.append(self._waiting.popleft())
                size += calls[-1][1]
            calls = [call for call in calls if not call[2].done()]
            if not calls:
                continue
            self.rounds += 1
            if len(calls) == 1:
                await self._alone(calls[0][0], calls[0][2])
                continue
            try:
                results = []
                async with self._graph.transaction() as tx:
                    for write, _, _ in calls:
                        results.append(await write(tx))
            except Exception as err:  # nothing was committed: each write again, alone
                log.info(
                    "[graph-write] op=round-split writes=%d reason=%s",
                    len(calls),
                    type(err).__name__,
                )
                for write, _, answer in calls:
                    self.rounds += 1
                    await self._alone(write, answer)
                continue
            for (_, _, answer), result in zip(calls, results, strict=True):
                settle(answer, result)

    async def _alone(self, write: Write, answer: asyncio.Future[Any]) -> None:
        try:
            async with self._graph.transaction() as tx:
                result = await write(tx)
        except Exception as err:  # handed to its caller, never swallowed
            settle(answer, err)
        else:
            settle(answer, result)
