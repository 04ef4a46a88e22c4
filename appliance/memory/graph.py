"""The engine's Neo4j connection: one async driver pool, and the one place driver errors become
engine errors."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import neo4j
from neo4j.exceptions import AuthError, DriverError, Neo4jError, ServiceUnavailable

from appliance.memory.errors import GraphAuthFailed, GraphQueryFailed, GraphUnavailable

log = logging.getLogger(__name__)


@asynccontextmanager
async def translate_errors(uri: str) -> AsyncIterator[None]:
    """Turn Neo4j driver exceptions into :mod:`appliance.memory.errors` exceptions."""
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
        raise GraphQueryFailed(f"Neo4j rejected a statement: {err.message} ({err.code})") from err
    except DriverError as err:
        raise GraphUnavailable(f"The Neo4j driver failed talking to {uri}: {err}") from err


def _plain(value: Any) -> Any:
    """Turn driver values into plain ones: temporal values become ISO-8601 strings."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "iso_format"):
        return str(value.iso_format())
    return value


class Transaction:
    """Statements of one explicit transaction (:meth:`Graph.transaction`)."""

    def __init__(self, tx: neo4j.AsyncTransaction, uri: str) -> None:
        self._tx = tx
        self._uri = uri

    async def run(
        self, cypher: str, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Run one statement inside the transaction; return its records as dicts."""
        async with translate_errors(self._uri):
            result = await self._tx.run(cypher, dict(params or {}))
            records = await result.data()
        return [_plain(record) for record in records]


class Graph:
    """An async Neo4j driver pool with translated errors."""

    def __init__(self, uri: str, user: str, password: str, *, timeout: float = 3.0) -> None:
        self.uri = uri
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
        async with translate_errors(self.uri):
            result = await self._driver.execute_query(cypher, dict(params or {}), database_="neo4j")
        return [_plain(record.data()) for record in result.records], result.summary

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """One write transaction: committed when the block ends, rolled back if it raises.

        For work that must land whole or not at all (a project with its tasks and their
        dependencies): an error raised inside the block, ours or the driver's, writes nothing.
        """
        async with translate_errors(self.uri):
            async with self._driver.session(database="neo4j") as session:
                # The driver's own block: commit on success, roll back (close) on any error.
                async with await session.begin_transaction() as tx:
                    yield Transaction(tx, self.uri)

    async def ping(self) -> float:
        """Round-trip a trivial query; return the latency in milliseconds."""
        started = time.monotonic()
        await self.run("RETURN 1 AS ok")
        return (time.monotonic() - started) * 1000

    async def close(self) -> None:
        """Close every pooled connection."""
        await self._driver.close()
