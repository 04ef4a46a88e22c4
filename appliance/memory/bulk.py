"""Bulk embeds of concurrent callers, embedded together.

An import sends many small documents, and each document's ingest asks for only a few vectors: one
call at a time, every micro-batch of :meth:`Embedder.embed_many` would hold two or three short
texts and the matrix products would see a handful of rows. :class:`BulkEmbeds` collects the texts
of every caller that is waiting while the model is busy, and embeds them in one
``embed_many`` call on the bulk thread, where they are packed by length as usual.

- Nothing waits for company: a call that finds the model idle starts at once with what is
  there; the calls that arrive meanwhile go together into the next round.
- A round holds at most :data:`ROUND_TEXTS` texts, whole calls only (a larger call goes alone).
- One caller's bad text never fails another caller: when a round of several calls raises, each
  call is embedded again on its own and gets its own answer (vectors or its own error).
- Vectors equal those of one ``embed_many`` call per caller (the packing is by length, and each
  text is its own sequence).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TypeVar

from appliance.memory.embedder import Vector

log = logging.getLogger(__name__)

# Texts per round: enough for several full micro-batches, small enough that a round (about a
# second on two cores) never holds back the progress of the ingests that wait for it.
ROUND_TEXTS = 256

EmbedMany = Callable[[Sequence[str | bytes]], list[Vector]]


class BulkEmbeds:
    """Embed the texts of concurrent callers together, one round at a time, on ``executor``."""

    def __init__(
        self, embed_many: EmbedMany, executor: Executor, round_texts: int = ROUND_TEXTS
    ) -> None:
        self._embed_many = embed_many
        self._executor = executor
        self._round_texts = round_texts
        self._waiting: deque[tuple[list[str | bytes], asyncio.Future[list[Vector]]]] = deque()
        self._rounds: asyncio.Task[None] | None = None
        self.rounds = 0  # rounds run so far

    async def __call__(self, texts: Sequence[str | bytes]) -> list[Vector]:
        """The vectors of ``texts``, in order (embedded with whatever else is waiting)."""
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Vector]] = loop.create_future()
        self._waiting.append((list(texts), answer))
        if self._rounds is None or self._rounds.done():
            self._rounds = loop.create_task(self._run_rounds())
        return await answer

    async def _run_rounds(self) -> None:
        """Run rounds until nobody waits."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            calls = [self._waiting.popleft()]
            size = len(calls[0][0])
            while self._waiting and size + len(self._waiting[0][0]) <= self._round_texts:
                calls.append(self._waiting.popleft())
                size += len(calls[-1][0])
            calls = [(texts, answer) for texts, answer in calls if not answer.done()]
            if not calls:
                continue
            self.rounds += 1
            joined = [text for texts, _ in calls for text in texts]
            try:
                vectors = await loop.run_in_executor(self._executor, self._embed_many, joined)
            except Exception as err:  # handed to its callers, never swallowed
                if len(calls) == 1:
                    settle(calls[0][1], err)
                    continue
                log.info(
                    "[embed] op=round-split calls=%d reason=%s", len(calls), type(err).__name__
                )
                for texts, answer in calls:  # each caller gets its own vectors or its own error
                    try:
                        own = await loop.run_in_executor(self._executor, self._embed_many, texts)
                    except Exception as alone:  # handed to its caller
                        settle(answer, alone)
                    else:
                        settle(answer, own)
                continue
            start = 0
            for texts, answer in calls:
                settle(answer, vectors[start : start + len(texts)])
                start += len(texts)


T = TypeVar("T")


def settle(answer: asyncio.Future[T], outcome: T | BaseException) -> None:
    """Settle a waiting caller's future unless it gave up waiting (cancelled); also used by
    :mod:`appliance.memory.commits`."""
    if answer.done():
        return
    if isinstance(outcome, BaseException):
        answer.set_exception(outcome)
    else:
        answer.set_result(outcome)
