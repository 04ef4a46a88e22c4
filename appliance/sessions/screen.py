"""What a ``claude`` process said on its terminal, read back as plain text.

The CLI draws with escape sequences (colours, cursor moves; spaces are often cursor jumps such as
``ESC [ 12 G``) and prints links as OSC 8 hyperlinks. :func:`plain_lines` turns raw output into
the lines a person would read; the readers below pick out what the manager acts on:

- :func:`oauth_url`: the sign-in URL of ``claude setup-token`` (from its OSC 8 link, which holds
  the whole URL even when the visible text is wrapped);
- :func:`oauth_token`: the long-lived token it prints once the code is accepted, joined back
  together when the terminal wrapped it;
- :func:`oauth_error`: its "OAuth error: …" line when the code was refused;
- :func:`explain_exit`: why a session's process exited before it was ready, and what to do.
"""

from __future__ import annotations

import re

_OSC8 = re.compile(r"\x1b\]8;[^;\x07\x1b]*;([^\x07\x1b]*)(?:\x07|\x1b\\)")
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_COLUMN = re.compile(r"\x1b\[[0-9]*[GC]")  # cursor to a column, or forward: a gap in the text
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_ESCAPE = re.compile(r"\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]")
_URL = re.compile(r"https://\S+/oauth/authorize\?\S+")
_TOKEN_START = re.compile(r"sk-ant-[A-Za-z0-9_-]*")  # a narrow terminal may wrap even this
_TOKEN = re.compile(r"sk-ant-oat[0-9]{2}-[A-Za-z0-9_-]+")
_TOKEN_PART = re.compile(r"[A-Za-z0-9_-]+")
_SPACES = re.compile(r"[ \t]+")
_NEWLINE = re.compile(r"\r+\n")  # a terminal's newline arrives as \r\n, or \r\r\n
TOKEN_MIN_CHARS = 40


def plain_lines(raw: str) -> list[str]:
    """The text lines of raw terminal output: escapes removed, cursor jumps as one space."""
    text = _OSC.sub("", raw)
    text = _COLUMN.sub(" ", text)
    text = _CSI.sub("", text)
    text = _ESCAPE.sub("", text)
    lines = _NEWLINE.sub("\n", text).replace("\r", "\n").split("\n")
    return [_SPACES.sub(" ", line).strip() for line in lines]


def oauth_url(raw: str) -> str | None:
    """The sign-in URL ``claude setup-token`` shows, or None before it has."""
    for match in _OSC8.finditer(raw):
        if "/oauth/authorize" in match.group(1):
            return match.group(1)
    for line in plain_lines(raw):
        found = _URL.search(line)
        if found:
            return found.group(0)
    return None


def oauth_token(raw: str, finished: bool = False) -> str | None:
    """The OAuth token printed in ``raw``, once it is whole; None until then.

    The token may be wrapped over several lines: each following line made only of token
    characters continues it, and a blank line or any other text ends it. Until such a line (or
    the end of the process, ``finished``) has been seen the token may still be arriving.
    """
    if finished:
        lines = plain_lines(raw)
    else:  # the last line has no newline yet (a \r may be half of one): it may still grow
        lines = plain_lines(raw.rstrip("\r"))[:-1]
    for index, line in enumerate(lines):
        start = _TOKEN_START.search(line)
        if start is None:
            continue
        token = start.group(0)
        ended = start.end() < len(line)  # text after it on the same line
        for following in lines[index + 1 :] if not ended else ():
            if following and _TOKEN_PART.fullmatch(following):
                token += following
                continue
            ended = True
            break
        if (ended or finished) and len(token) >= TOKEN_MIN_CHARS and _TOKEN.fullmatch(token):
            return token
        return None
    return None


def oauth_error(raw: str) -> str | None:
    """The last "OAuth error: …" line of ``claude setup-token``, or None."""
    found = None
    lines = plain_lines(raw)
    for index, line in enumerate(lines):
        at = line.find("OAuth error:")
        if at < 0:
            continue
        parts = [line[at:]]
        for following in lines[index + 1 :]:  # a long error wraps; a blank line ends it
            if not following or following.startswith("Press"):
                break
            parts.append(following)
        found = " ".join(parts).strip()
    return found


# (what the output says, the cause in plain words, what the owner can do)
_CAUSES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"cannot be used with root/sudo privileges", re.IGNORECASE),
        "the Claude CLI refuses full access (bypassPermissions) when it runs as root.",
        "Run Maxy as an ordinary user (on the device it runs as the maxy user), or pick another "
        "mode in the Mode menu, or set MAXY_CLAUDE_PERMISSION_MODE to acceptEdits.",
    ),
    (
        re.compile(r"not logged in|please run /login|invalid api key|no api key", re.IGNORECASE),
        "Claude is not connected on this device.",
        "Connect Claude in Settings (Connect Claude), then start the session again.",
    ),
    (
        re.compile(r"oauth token (?:has )?(?:expired|been revoked)|token.*revoked", re.IGNORECASE),
        "the Claude connection has expired or was revoked.",
        "Disconnect Claude in Settings and connect it again.",
    ),
)


def explain_exit(output: str) -> tuple[str, str]:
    """Why a session exited before it was ready, and what to do, from its last output."""
    lines = [line for line in plain_lines(output) if line]
    text = "\n".join(lines)
    for pattern, cause, hint in _CAUSES:
        if pattern.search(text):
            return cause, hint
    if lines:
        last = lines[-1] if len(lines[-1]) <= 300 else lines[-1][:299] + "…"
        return (
            f"it said: {last}",
            "Open the output below for the rest; fix what it names and start the session again.",
        )
    return (
        "it printed nothing.",
        "Check that MAXY_CLAUDE_BIN is the Claude Code CLI (`claude --version`) and look at the "
        "session manager's log.",
    )
