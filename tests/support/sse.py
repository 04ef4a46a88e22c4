"""Server-Sent Events as a client reads them: the one parser the tests use.

As in the SSE spec, a block without ``data`` dispatches nothing; ``data`` lines join with
newlines and are decoded as JSON (every stream Maxy sends carries JSON).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Event:
    """One SSE event (or a comment, with event ``comment``), and when it was read."""

    event: str
    id: str | None
    data: Any
    at: float = field(default_factory=time.monotonic)


class Parser:
    """Feed it lines one by one; :meth:`line` returns the event a line completes, if any."""

    def __init__(self, comments: bool = False) -> None:
        self.comments = comments  # report ": keep-alive" lines as events named "comment"
        self._fields: dict[str, str] = {}
        self._data: list[str] = []

    def line(self, line: str) -> Event | None:
        """Take one line (without its newline)."""
        if line == "":
            done = None
            if self._data:
                payload = json.loads("\n".join(self._data))
                done = Event(self._fields.get("event", "message"), self._fields.get("id"), payload)
            self._fields, self._data = {}, []
            return done
        if line.startswith(":"):
            return Event("comment", None, line[1:].strip()) if self.comments else None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        else:
            self._fields[name] = value
        return None


def events(lines: Iterable[str]) -> Iterator[Event]:
    """The events of a stream of lines (``response.iter_lines()``), as they complete."""
    parser = Parser()
    for line in lines:
        event = parser.line(line)
        if event is not None:
            yield event


def parse(text: str) -> list[Event]:
    """The events of a finished SSE body."""
    return list(events(text.split("\n")))


async def sse_events(response: httpx.Response) -> AsyncIterator[Event]:
    """The events of a streamed ``text/event-stream`` response, as they arrive."""
    parser = Parser()
    async for line in response.aiter_lines():
        event = parser.line(line)
        if event is not None:
            yield event
