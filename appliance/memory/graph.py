"""The engine's Neo4j connection: one async driver pool, and the one place driver errors become
engine errors."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import neo4j
from neo4j.exceptions import (
    AuthError,
    DriverError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
    TransientError,
)

from appliance.core.fsio import DiskFull, low_on_space
from appliance.graphdb.errors import database_stopped
from appliance.memory.errors import GraphAuthFailed, GraphQueryFailed, GraphUnavailable

log = logging.getLogger(__name__)

# How Neo4j reports the store's disk full (a java.io.IOException's message, passed through).
NO_SPACE = "No space left on device"
# Neo4j's answer to the write its store could not take (a full disk, in practice; the message
# does not say): it stops its database then, see appliance.graphdb.errors.DATABASE_STOPPED.
LOG_APPEND_FAILED = "Neo.DatabaseError.Transaction.TransactionLogError"


def stopped_database(err: Neo4jError) -> bool:
    """True if Neo4j failed to append to its transaction log, or has stopped its database since."""
    return err.code == LOG_APPEND_FAILED or database_stopped(err.message)


@asynccontextmanager
async def translate_errors(uri: str, store: Path | None = None) -> AsyncIterator[None]:
    """Turn Neo4j driver exceptions into :mod:`appliance.memory.errors` exceptions.

    ``store`` is the local Neo4j's home, when it runs on this machine: a stopped database with
    its partition (nearly) full is :class:`DiskFull`, as Neo4j's own message never says so.
    """
    try:
        yield
    except AuthError as err:
        raise GraphAuthFailed(
            f"Neo4j at {uri} refused the credentials ({err.message}). Check MAXY_NEO4J_USER and "
            "the password file (MAXY_NEO4J_PASSWORD_FILE)."
        ) from err
    except (ServiceUnavailable, OSError) as err:
        raise GraphUnavailable(
            f"Neo4j is not reachable at {uri} ({err}). Start it with `just run` or "
            "`maxy neo4j start`, or set MAXY_NEO4J_URI."
        ) from err
    except Neo4jError as err:
        full = store is not None and low_on_space(store)
        if NO_SPACE in (err.message or "") or (full and stopped_database(err)):
            log.error("[disk] op=write error=disk-full where=neo4j code=%s", err.code)
            raise DiskFull("the Neo4j store") from err
        if stopped_database(err):
            raise GraphUnavailable(
                f"Neo4j at {uri} stopped its database after a failed write ({err.code}); it "
                "serves again once restarted (its supervisor does that when the disk has room)."
            ) from err
        raise GraphQueryFailed(f"Neo4j rejected a statement: {err.message} ({err.code})") from err
    except DriverError as err:
        raise GraphUnavailable(f"The Neo4j driver failed talking to {uri}: {err}") from err


def rust_packstream() -> bool:
    """Whether the driver encodes and decodes Bolt's packstream in Rust (neo4j-rust-ext), as the
    shipped binary does; without it the driver falls back to pure Python, and a search decodes
    its rows ~7 ms slower on 2 vCPUs (``maxy doctor`` says so)."""
    from neo4j._codec.packstream import v1

    return getattr(v1, "_rust_unpack", None) is not None


def _plain(value: Any) -> Any:
    """Turn driver values into plain ones: temporal values become ISO-8601 strings."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "iso_format"):
        return str(value.iso_format())
    return value


class Runs(Protocol):
    """What runs one statement: the pool (its own transaction) or an open transaction."""

    async def run(
        self, cypher: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], Any]: ...


class Transaction:
    """Statements of one write transaction: they commit together at the end, or none does."""

    def __init__(self, tx: neo4j.AsyncTransaction, uri: str, store: Path | None) -> None:
        self._tx = tx
        self.uri = uri
        self.store = store

    async def run(
        self, cypher: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], Any]:
        """Run one statement inside the transaction; return its records and summary."""
        async with translate_errors(self.uri, self.store):
            result = await self._tx.run(cypher, dict(params or {}))
            records = [record async for record in result]
            summary = await result.consume()
        return [_plain(record.data()) for record in records], summary


class Reading:
    """Statements of one read transaction, each streaming the driver's own values (temporal
    values stay typed: :mod:`appliance.memory.snapshot` keeps them exactly)."""

    def __init__(self, tx: neo4j.AsyncTransaction, uri: str) -> None:
        self._tx = tx
        self.uri = uri

    async def stream(
        self, cypher: str, params: Mapping[str, Any] | None = None
    ) -> AsyncIterator[tuple[Any, ...]]:
        """Yield the records of one statement as tuples, as Neo4j sends them."""
        async with translate_errors(self.uri):
            result = await self._tx.run(cypher, dict(params or {}))
            async for record in result:
                yield tuple(record.values())


class Graph:
    """An async Neo4j driver pool with translated errors (``store``: see translate_errors)."""

    def __init__(
        self, uri: str, user: str, password: str, *, timeout: float = 3.0, store: Path | None = None
    ) -> None:
        self.uri = uri
        self.store = store
        self._driver = neo4j.AsyncGraphDatabase.driver(
            uri,
            auth=(user, password),
            connection_timeout=timeout,
            connection_acquisition_timeout=timeout,
            max_transaction_retry_time=timeout,
            max_connection_pool_size=16,
            notifications_min_severity="OFF",
        )

    async def run(
        self, cypher: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], Any]:
        """Run one statement; return its records as dicts and the result summary."""
        async with translate_errors(self.uri, self.store):
            result = await self._driver.execute_query(cypher, dict(params or {}), database_="neo4j")
        return [_plain(record.data()) for record in result.records], result.summary

    async def read(
        self, cypher: str, params: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], Any]:
        """Run one read-only statement as :meth:`run` does, in a cheaper transaction.

        An auto-commit transaction is one round trip (its RUN and PULL sent together) where
        :meth:`run`'s managed transaction takes more: ~1.5 ms a statement on 2 vCPUs, and a search
        makes three. It reads after every write this graph made (the same bookmarks) and, where
        the URI routes (``neo4j://``), from a reader. What the managed transaction would retry
        (a database still starting, a cluster member gone) goes the managed way, retried as
        :meth:`run` retries it.
        """
        args = dict(params or {})
        async with translate_errors(self.uri, self.store):
            try:
                async with self._session(neo4j.READ_ACCESS) as session:
                    result = await session.run(cypher, args)
                    records = [record async for record in result]
                    summary = await result.consume()
            except (TransientError, ServiceUnavailable, SessionExpired):
                managed = await self._driver.execute_query(
                    cypher, args, database_="neo4j", routing_=neo4j.RoutingControl.READ
                )
                records, summary = managed.records, managed.summary
        return [_plain(record.data()) for record in records], summary

    def _session(self, access: str = neo4j.WRITE_ACCESS) -> neo4j.AsyncSession:
        """A session in the causal chain of :meth:`run`'s statements (the driver's bookmarks):
        with a routing URI, a read on a reader sees every write made before it, whichever way
        it was made."""
        return self._driver.session(
            database="neo4j",
            default_access_mode=access,
            bookmark_manager=self._driver.execute_query_bookmark_manager,
        )

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """One write transaction: committed when the block ends, rolled back if it raises."""
        async with (
            translate_errors(self.uri, self.store),
            self._session() as session,
        ):
            tx = await session.begin_transaction()
            try:
                yield Transaction(tx, self.uri, self.store)
            except BaseException:
                await tx.rollback()
                raise
            await tx.commit()

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Reading]:
        """One read transaction whose statements stream their records (a consistent export)."""
        async with (
            translate_errors(self.uri),
            self._session(neo4j.READ_ACCESS) as s,
        ):
            tx = await s.begin_transaction()
            try:
                yield Reading(tx, self.uri)
            finally:
                await tx.close()

    async def ping(self) -> float:
        """Round-trip a trivial query; return the latency in milliseconds."""
        started = time.monotonic()
        await self.run("RETURN 1 AS ok")
        return (time.monotonic() - started) * 1000

    async def close(self) -> None:
        """Close every pooled connection."""
        await self._driver.close()
