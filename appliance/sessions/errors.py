"""Errors of the session manager; each knows the HTTP status and code it is answered with.

::

    SessionError
    ├── SessionNotFound        404 session-not-found
    ├── TranscriptMissing      404 jsonl-missing-on-disk
    ├── SessionAlive           409 session-alive
    ├── SessionNotLive         409 session-not-live
    ├── BadRequest             400 bad-request
    ├── BodyTooLarge           413 too-large
    ├── CapRefused             429 specialist-cap-reached, operator-slots-reserved,
    │                              pty-cap-reached, memory-low
    ├── ClaudeNotFound         503 claude-not-found
    ├── SpawnFailed            502 spawn-failed
    └── SpawnTimeout           504 spawn-timeout
"""

from __future__ import annotations

from typing import Any


class SessionError(Exception):
    """A request to the manager cannot be done; rendered as ``{code, message, …}``."""

    status = 500
    code = "session-error"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.extra = extra

    def to_json(self) -> dict[str, Any]:
        """The JSON body of the error answer."""
        return {"code": self.code, "message": str(self), **self.extra}


class SessionNotFound(SessionError):
    """No row answers to this id (sessionId, bridge id, its suffix or pid)."""

    status = 404
    code = "session-not-found"

    def __init__(self, token: str) -> None:
        super().__init__(f"No session answers to {token!r}. GET /sessions lists them.", id=token)


class TranscriptMissing(SessionError):
    """The row had a transcript but the file is no longer on disk."""

    status = 404
    code = "jsonl-missing-on-disk"


class SessionAlive(SessionError):
    """The operation needs an ended session."""

    status = 409
    code = "session-alive"


class SessionNotLive(SessionError):
    """The operation needs a running session that this manager holds."""

    status = 409
    code = "session-not-live"


class BadRequest(SessionError):
    """The request body or parameters are not usable."""

    status = 400
    code = "bad-request"


class BodyTooLarge(SessionError):
    """The request body is larger than the manager reads."""

    status = 413
    code = "too-large"


class CapRefused(SessionError):
    """A cap refuses the spawn; ``code`` names which."""

    status = 429

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message, **extra)
        self.code = code


class ClaudeNotFound(SessionError):
    """The configured CLI is not installed where the manager looks."""

    status = 503
    code = "claude-not-found"


class SpawnFailed(SessionError):
    """The CLI exited before it wrote its PID file."""

    status = 502
    code = "spawn-failed"


class SpawnTimeout(SessionError):
    """The CLI did not write its PID file in time; it was stopped."""

    status = 504
    code = "spawn-timeout"


class PluginsBroken(SessionError):
    """The account's plugins cannot be read or resolved: no session starts until they are fixed."""

    status = 503
    code = "plugins-refused"
