"""Reading the CLI's JSONL transcripts incrementally: titles, prompts and the end of a turn.

A transcript is one JSON object a line, appended while the session runs. :class:`Transcript`
remembers how far it has read, so each change costs only the new bytes; a line cut in the middle
by a slow flush is kept until its newline arrives.

Titles come from the transcript's own title lines: ``custom-title`` (the operator's) wins over
``ai-title`` (the CLI's), which wins over the older ``summary`` lines. A turn has ended when the
last conversation line is an assistant message whose ``stop_reason`` is terminal.

The context a session holds is the ``usage`` of its last assistant message: what the model read
(``input_tokens`` + ``cache_creation_input_tokens`` + ``cache_read_input_tokens``) and wrote
(``output_tokens``) — all of it is in the next request. The compaction briefing
(:mod:`appliance.sessions.compaction`) is followed here too: each ``session-compact`` tool call's
result counts as captured, or as failed with its error text when ``is_error``.

:func:`said` tells who said what in one line (the owner's prompts and the assistant's text, for
the conversation recorder); :class:`Lines` reads the complete lines appended since last time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TERMINAL_STOP_REASONS = frozenset({"end_turn", "stop_sequence", "max_tokens", "refusal"})
USAGE_FIELDS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)
COMPACT_TOOL = "session-compact"  # the admin plugin's; the CLI names it mcp__admin__session-compact
ERROR_CHARS = 300


def context_tokens(message: dict[str, Any]) -> int | None:
    """The tokens of context an assistant message's ``usage`` shows (None without usage)."""
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return None
    counts = [usage.get(key) for key in USAGE_FIELDS]
    return sum(c for c in counts if isinstance(c, int) and not isinstance(c, bool))


def _is_compact_tool(name: Any) -> bool:
    return isinstance(name, str) and (name == COMPACT_TOOL or name.endswith("__" + COMPACT_TOOL))


# Text the CLI puts in user lines that the owner did not write: slash-command bookkeeping and
# reminders it adds for the model.
_NOT_SAID = ("<command-", "<local-command-", "<system-reminder>", "Caveat: The messages below")


def _texts(content: Any) -> str:
    """The text blocks of a message's content (a plain string is one block)."""
    if isinstance(content, str):
        blocks = [content]
    elif isinstance(content, list):
        blocks = [
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
    else:
        blocks = []
    kept = [b.strip() for b in blocks if b.strip() and not b.lstrip().startswith(_NOT_SAID)]
    return "\n\n".join(kept)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def said(entry: dict[str, Any]) -> tuple[str, str] | None:
    """``(role, text)`` of a line a person or the assistant said, else None.

    A user line counts when a person typed or sent it (not a tool result, a meta line, a
    subagent's line or command bookkeeping); an assistant line when it has text and is not an
    API error or a synthetic message the CLI made up.
    """
    kind = entry.get("type")
    message = entry.get("message")
    if kind not in ("user", "assistant") or not isinstance(message, dict):
        return None
    if entry.get("isSidechain") or entry.get("isMeta") or entry.get("isApiErrorMessage"):
        return None
    if kind == "assistant" and message.get("model") == "<synthetic>":
        return None
    if kind == "user" and not is_prompt(entry):
        return None
    text = _texts(message.get("content"))
    return (kind, text) if text else None


@dataclass
class Lines:
    """The complete lines appended to a file since the last read (a partial one waits)."""

    offset: int = 0
    inode: int | None = None

    def read(self, path: Path) -> list[bytes]:
        """New complete lines; starts over when the file was replaced or truncated."""
        try:
            with path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                if stat.st_ino != self.inode or stat.st_size < self.offset:
                    self.offset, self.inode = 0, stat.st_ino
                handle.seek(self.offset)
                data = handle.read(stat.st_size - self.offset)
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [line for line in data[:end].split(b"\n") if line.strip()]


def is_prompt(entry: dict[str, Any]) -> bool:
    """A user line typed or sent by a person, not a tool result or a meta line."""
    if entry.get("isMeta") or entry.get("isSidechain"):
        return False
    message = entry.get("message")
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    if isinstance(content, list):
        return any(isinstance(b, dict) and b.get("type") != "tool_result" for b in content)
    return False


@dataclass
class Transcript:
    """What has been read of one transcript so far."""

    offset: int = 0
    inode: int | None = None
    lines: int = 0
    prompts: int = 0
    turn_ended: bool = False
    stop_reason: str | None = None
    last_timestamp: str | None = None
    titles: dict[str, str] = field(default_factory=dict)
    context_tokens: int = 0
    compact_ok: int = 0
    compact_failed: int = 0
    compact_error: str | None = None
    _compact_uses: set[str] = field(default_factory=set)
    _partial: bytes = b""

    @property
    def title(self) -> str | None:
        """The best title line seen."""
        for kind in ("custom-title", "ai-title", "summary"):
            if kind in self.titles:
                return self.titles[kind]
        return None

    def reset(self) -> None:
        """Forget everything read (the file was replaced or truncated)."""
        fresh = Transcript()
        self.__dict__.update(fresh.__dict__)

    def feed(self, data: bytes) -> None:
        """Take newly appended bytes; complete lines are applied, a partial one is kept."""
        self.offset += len(data)
        chunk = self._partial + data
        *complete, self._partial = chunk.split(b"\n")
        for raw in complete:
            if not raw.strip():
                continue
            self.lines += 1
            try:
                entry = json.loads(raw)
            except ValueError:
                continue  # a corrupt line is counted, not fatal
            if isinstance(entry, dict):
                self.apply(entry)

    def apply(self, entry: dict[str, Any]) -> None:
        """Update titles, prompt count and turn state from one line."""
        kind = entry.get("type")
        timestamp = entry.get("timestamp")
        if isinstance(timestamp, str):
            self.last_timestamp = timestamp
        if kind == "custom-title" and isinstance(entry.get("customTitle"), str):
            self.titles["custom-title"] = entry["customTitle"]
        elif kind == "ai-title" and isinstance(entry.get("aiTitle"), str):
            self.titles["ai-title"] = entry["aiTitle"]
        elif kind == "summary" and isinstance(entry.get("summary"), str):
            self.titles["summary"] = entry["summary"]
        elif kind == "user" and not entry.get("isSidechain"):
            if is_prompt(entry):
                self.prompts += 1
            self.turn_ended = False
            self._compact_results(entry.get("message"))
        elif kind == "assistant" and not entry.get("isSidechain"):
            message = entry.get("message")
            reason = message.get("stop_reason") if isinstance(message, dict) else None
            self.stop_reason = reason if isinstance(reason, str) else None
            self.turn_ended = self.stop_reason in TERMINAL_STOP_REASONS
            if isinstance(message, dict):
                tokens = context_tokens(message)
                if tokens is not None and message.get("model") != "<synthetic>":
                    self.context_tokens = tokens
                for block in _blocks(message):
                    if block.get("type") == "tool_use" and _is_compact_tool(block.get("name")):
                        self._compact_uses.add(str(block.get("id")))

    def _compact_results(self, message: Any) -> None:
        """Count the results of ``session-compact`` calls in a user line."""
        if not self._compact_uses or not isinstance(message, dict):
            return
        for block in _blocks(message):
            use = block.get("tool_use_id")
            if block.get("type") != "tool_result" or use not in self._compact_uses:
                continue
            self._compact_uses.discard(use)
            if block.get("is_error"):
                self.compact_failed += 1
                content = block.get("content")
                text = content if isinstance(content, str) else _texts(content)
                self.compact_error = (text or "error")[:ERROR_CHARS]
            else:
                self.compact_ok += 1

    def read(self, path: Path) -> bool:
        """Read what was appended to ``path`` since the last call; True if anything changed."""
        try:
            with path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                if stat.st_ino != self.inode or stat.st_size < self.offset:
                    self.reset()
                    self.inode = stat.st_ino
                if stat.st_size == self.offset:
                    return False
                handle.seek(self.offset)
                data = handle.read(stat.st_size - self.offset)
        except FileNotFoundError:
            return False
        before = (self.lines, self.title, self.turn_ended, self.prompts)
        self.feed(data)
        return (self.lines, self.title, self.turn_ended, self.prompts) != before or bool(data)
