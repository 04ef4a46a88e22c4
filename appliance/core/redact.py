"""The one redactor: secrets out of what is stored or shown.

Values under keys named like a password, secret, token, API key or authorization, and text that
looks like a key — a bearer token, an ``sk-…`` key, a long hex string, a long base64-looking
string with mixed case and digits, the value of a ``password=…`` or ``"token": "…"`` in text —
become ``[redacted]``. The audit trail (:mod:`appliance.memory.audit`) stores tool calls through
it; the admin plugin's ``logs-read`` (:mod:`appliance.mcp.logs`) shows log lines through it.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"

_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|private[_-]?key|access[_-]?key"
    r"|authori[sz]ation|credential|cookie",
    re.IGNORECASE,
)
_SECRET_TEXT = re.compile(
    r"\bBearer\s+[A-Za-z0-9._~+/=-]{8,}|\bsk-[A-Za-z0-9_-]{8,}|\b[0-9A-Fa-f]{32,}\b",
    re.IGNORECASE,
)
# ``password=…``, ``token: …``, ``"apiKey": "…"`` in text: the value goes, the name stays.
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<key>[A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key"
    r"|private[_-]?key|access[_-]?key|credential|authori[sz]ation)[A-Za-z0-9_.-]*)"
    r"(?P<sep>[\"']?\s*[=:]\s*)"
    r"(?P<value>(?!\[redacted\])(?:\"[^\"]*\"|'[^']*'|[^\s,;&\"'}\]]+))",
    re.IGNORECASE,
)
# Candidates for an encoded key; :func:`_looks_random` decides (paths and words are not keys).
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/_-]{32,}={0,2}")
_SEPARATORS = re.compile(r"[/_-]")


def _looks_random(token: str) -> bool:
    # Mixed case with digits, in long unbroken pieces: a path's or a slug's pieces are short words.
    return (
        sum(c.isdigit() for c in token) >= 2
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and max(len(piece) for piece in _SEPARATORS.split(token)) >= 16
    )


def _assignment(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group('key')}{match.group('sep')}{quote}{REDACTED}{quote}"


def redact_text(text: str) -> str:
    """``text`` with key-looking words and the values of secret-named assignments redacted."""
    text = _SECRET_TEXT.sub(REDACTED, text)
    text = _SECRET_ASSIGNMENT.sub(_assignment, text)
    return _LONG_TOKEN.sub(lambda m: REDACTED if _looks_random(m.group()) else m.group(), text)


def redact(value: Any) -> Any:
    """``value`` with secret-named keys and key-looking text replaced by ``[redacted]``."""
    if isinstance(value, dict):
        return {
            key: REDACTED if _SECRET_KEY.search(str(key)) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
