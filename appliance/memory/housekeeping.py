"""The engine's one periodic loop: the purge, the graph-health audit, and the engine's own jobs
(the nightly backup's check, every minute: ``Engine.backup_if_due``).

Each job runs at its own interval inside the one loop (never a second scheduler), first once
the schema has settled, and a failed job is logged and tried again at its next turn:

- **purge**, every :data:`PURGE_INTERVAL` seconds: hard-delete what was soft-deleted more than
  ``MAXY_PURGE_GRACE_DAYS`` ago, then the kept texts and uploaded files no document names.
- **audit**, every ``MAXY_GRAPH_AUDIT_INTERVAL`` seconds: count the account's nodes of each
  embeddable label (one with an ONLINE vector index) that have no embedding, and every node of
  the store that has no ``accountId``. One line per label found,
  ``[embed-audit] null-embedding label=… count=…`` (``maxy reindex`` fills them in; the engine
  audits again as soon as a reindex ends) and ``[account-audit] null-account label=… count=…``
  (a write that bypassed the engine: no read path will ever show it), then
  ``[graph-audit] op=done …``. The latest result is :attr:`Housekeeping.audit`, which the engine's
  ``health`` answers and so ``/healthz`` and the admin health route show.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from appliance.core.clock import utc_now
from appliance.core.fsio import DiskFull
from appliance.memory import lifecycle, uploads
from appliance.memory.errors import GraphError
from appliance.memory.graph import Graph
from appliance.memory.reindex import indexed_labels

log = logging.getLogger(__name__)

PURGE_INTERVAL = 3600.0
Job = Callable[[], Awaitable[object]]


async def null_embeddings(graph: Graph, account_id: str) -> dict[str, int]:
    """The account's live nodes without an embedding, by embeddable label (none: absent)."""
    labels = await indexed_labels(graph)
    if not labels:
        return {}
    branches = [
        f"MATCH (n:`{label}`) WHERE n.accountId = $account AND n.deletedAt IS NULL "
        f"AND n.embedding IS NULL RETURN '{label}' AS label, count(n) AS count"
        for label in labels
    ]
    rows, _ = await graph.run(
        "CYPHER 25 CALL () { " + " UNION ALL ".join(branches) + " } RETURN label, count",
        {"account": account_id},
    )
    return {row["label"]: int(row["count"]) for row in rows if row["count"]}


async def null_accounts(graph: Graph) -> dict[str, int]:
    """Nodes of the whole store without an ``accountId``, by their first label."""
    rows, _ = await graph.run(
        "MATCH (n) WHERE n.accountId IS NULL "
        "RETURN coalesce(head(labels(n)), '(none)') AS label, count(n) AS count"
    )
    return {row["label"]: int(row["count"]) for row in rows}


class Housekeeping:
    """The purge and the audit of one engine's account, and the audit's latest result."""

    def __init__(
        self,
        graph: Graph,
        account_id: str,
        accounts_dir: Path,
        grace_days: int,
        audit_interval: float,
    ) -> None:
        self.graph = graph
        self.account_id = account_id
        self.accounts_dir = accounts_dir
        self.grace_days = grace_days
        self.audit_interval = audit_interval
        self.audit: dict[str, Any] | None = None  # None until the first audit has run
        self._audit_lock = asyncio.Lock()

    async def purge(self) -> None:
        """Hard-delete past the grace period, then the files no document names any more."""
        await lifecycle.purge(self.graph, self.grace_days, account_id=self.account_id)
        await lifecycle.forget_texts(
            self.graph, self.account_id, self.accounts_dir / self.account_id
        )
        await uploads.sweep(self.graph, self.accounts_dir, self.account_id)

    async def run_audit(self) -> dict[str, Any]:
        """Audit the graph now, log what it found and keep it as :attr:`audit`."""
        async with self._audit_lock:
            started = time.monotonic()
            embeddings = await null_embeddings(self.graph, self.account_id)
            accounts = await null_accounts(self.graph)
            for label, count in sorted(embeddings.items()):
                log.warning("[embed-audit] null-embedding label=%s count=%d", label, count)
            for label, count in sorted(accounts.items()):
                log.warning("[account-audit] null-account label=%s count=%d", label, count)
            ms = round((time.monotonic() - started) * 1000)
            self.audit = {
                "at": utc_now().isoformat(),
                "ms": ms,
                "nullEmbedding": embeddings,
                "nullAccount": accounts,
            }
            log.info(
                "[graph-audit] op=done null_embedding=%d null_account=%d ms=%d",
                sum(embeddings.values()),
                sum(accounts.values()),
                ms,
            )
            return self.audit

    async def run(self, ready: asyncio.Event, extra: Sequence[tuple[str, float, Job]] = ()) -> None:
        """Run every job at its interval, forever, once ``ready`` (the schema settled) is set;
        ``extra`` are the engine's own jobs (the nightly backup's check): name, interval, job."""
        jobs: list[tuple[str, float, Job]] = [
            ("purge", PURGE_INTERVAL, self.purge),
            ("audit", self.audit_interval, self.run_audit),
            *extra,
        ]
        due = dict.fromkeys((name for name, _, _ in jobs), 0.0)
        await ready.wait()
        while True:
            for name, interval, job in jobs:
                if time.monotonic() < due[name]:
                    continue
                try:
                    await job()
                except (GraphError, DiskFull) as err:
                    log.warning("[%s] op=run warn=failed error=%s", name, err)
                due[name] = time.monotonic() + interval
            await asyncio.sleep(max(0.0, min(due.values()) - time.monotonic()))
