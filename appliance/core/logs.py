"""Logging set-up for every role: one line per event, to stderr (journald on the device).

Operational events read ``[area] op=verb key=value …`` so that ``journalctl | grep '\\[neo4j\\]'``
answers a question. Only entry points call :func:`configure`; library code just uses
``logging.getLogger(__name__)``.
"""

from __future__ import annotations

import logging
import sys


def configure(level: str = "INFO", role: str = "maxy") -> None:
    """Send log records to stderr as single lines tagged with the role."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s {role} %(levelname)s %(message)s", "%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The Neo4j driver logs every retry at INFO; our own lines say what matters.
    logging.getLogger("neo4j").setLevel(logging.WARNING)
    # httpx (and the Anthropic SDK's copy, httpx2) logs each request's URL at INFO and
    # python-telegram-bot its base URL at DEBUG: a Telegram URL holds the bot's token, which no
    # log may show.
    for name in ("httpx", "httpx2", "httpcore", "telegram"):
        logging.getLogger(name).setLevel(logging.WARNING)


def kv(**fields: object) -> str:
    """Format key=value pairs for an event line, quoting values with spaces."""
    parts = []
    for key, value in fields.items():
        text = str(value)
        if not text or any(c.isspace() for c in text) or '"' in text:
            text = '"' + text.replace('"', "'") + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)
