"""Request and response types of the compaction briefing (``briefing.write``).

Declared here to keep :mod:`appliance.rpc.engine` short; it names the method in its one table, and
the engine, the admin plugin's ``session-compact`` tool and the docs read it through it.
"""

from __future__ import annotations

from pydantic import Field

from appliance.rpc.calls import Called
from appliance.rpc.contract import Response

FIELD_CHARS = 4000  # advertised; the engine refuses a longer field


class BriefingWriteRequest(Called):
    """A session's compaction briefing, for the next admin session to start from."""

    asked: str = Field(
        min_length=1, max_length=FIELD_CHARS, description="What the owner asked in this session."
    )
    done: str = Field(
        min_length=1, max_length=FIELD_CHARS, description="What was done, with its results."
    )
    decisions: str = Field(
        default="", max_length=FIELD_CHARS, description="Decisions made, and why."
    )
    in_progress: str = Field(
        default="",
        max_length=FIELD_CHARS,
        description="Work still in progress or promised: where it stands, what is next.",
    )
    about_owner: str = Field(
        default="",
        max_length=FIELD_CHARS,
        description="What the owner shared about themselves (preferences, people, plans).",
    )


class BriefingWriteResponse(Response):
    """The briefing's id, its session, and the conversation it was linked to (if recorded)."""

    id: str
    session_id: str
    conversation_id: str | None
    created_at: str
