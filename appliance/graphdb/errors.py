"""Errors of the Neo4j instance management.

Neo4jSetupError
├── JavaNotFound           no Java runtime new enough for this Neo4j release
├── DistributionMissing    the Neo4j jars are not in the cache, or fail their checksums
├── PasswordMismatch       the store was initialised with a password we no longer have
└── StartFailed            the server exited or never accepted Bolt connections
"""

from __future__ import annotations

# Neo4j's answer to every transaction (reads too) once it stopped its database after a write it
# could not append to its transaction log (a full disk): only a restart of the server clears it.
DATABASE_STOPPED = "needs to be restarted"


def database_stopped(reason: str | None) -> bool:
    """True if a Bolt probe's failure (or a query's error message) is that stopped database."""
    return reason is not None and DATABASE_STOPPED in reason


class Neo4jSetupError(Exception):
    """The development Neo4j cannot be prepared, started or stopped."""


class JavaNotFound(Neo4jSetupError):
    """No usable Java runtime."""


class DistributionMissing(Neo4jSetupError):
    """The Neo4j jars are absent or damaged."""


class PasswordMismatch(Neo4jSetupError):
    """The store's password is not the one in the password file."""


class StartFailed(Neo4jSetupError):
    """The server did not come up."""
