"""Reading a `claude` terminal back as text: the sign-in URL, the token (whole, never a prefix,
however the output is cut into reads) and the cause of a failed start.

The raw samples are what the real CLI 2.1.328 and the double print in a PTY."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.sessions import screen
from appliance.sessions.login import TokenCatcher

TOKEN = "sk-ant-oat01-" + "Ab3_x-" * 15 + "AA"
URL = "https://claude.com/cai/oauth/authorize?code=true&client_id=9d1c&state=v_FVdu"


def wrapped(token: str, width: int) -> str:
    """The token as the CLI prints it: indented, coloured, wrapped at the terminal's width."""
    rows = [token[i : i + width] for i in range(0, len(token), width)]
    return "".join(f"\x1b[2G\x1b[33m{row}\x1b[39m\r\r\n" for row in rows)


def cli_output(width: int) -> str:
    return (
        "\x1b[2G\x1b[1mThis\x1b[7Gwill\x1b[12Gguide\x1b[22m\r\r\n"
        f"\x1b]8;id=a1;{URL}\x07\x1b[38;5;246m{URL[:40]}\x1b[39m\x1b]8;;\x07\r\r\n"
        f"\x1b]8;id=a1;{URL}\x07\x1b[38;5;246m{URL[40:]}\x1b[39m\x1b]8;;\x07\r\r\n"
        "\x1b[2GPaste\x1b[8Gcode\x1b[13Ghere\r\r\n"
        "\x1b[32m✓ Long-lived authentication token created successfully!\x1b[39m\r\r\n\r\r\n"
        "\x1b[2GYour\x1b[7GOAuth\x1b[13Gtoken (valid for 1 year):\r\r\n\r\r\n"
        + wrapped(TOKEN, width)
        + "\r\r\n\x1b[2GStore\x1b[8Gthis\x1b[13Gtoken securely.\r\r\n"
    )


def test_plain_lines_turn_cursor_jumps_into_spaces() -> None:
    assert screen.plain_lines("\x1b[2GPaste\x1b[8Gcode\x1b[13Ghere\r\r\nnext") == [
        "Paste code here",
        "next",
    ]


@pytest.mark.parametrize("width", [20, 60, 78, 200])
def test_the_whole_token_is_read_however_the_terminal_wraps_it(width: int) -> None:
    assert screen.oauth_token(cli_output(width)) == TOKEN


def test_the_url_comes_whole_from_the_hyperlink_not_the_wrapped_text() -> None:
    assert screen.oauth_url(cli_output(80)) == URL


def test_the_oauth_error_line_is_picked_out() -> None:
    raw = (
        "\x1b[38;5;211m✘\x1b[4GOAuth error: Couldn't get an answer from the sign-in service "
        "(ENOTFOUND). \x1b[39m\r\r\n\x1b[4G\x1b[38;5;211mCheck\x1b[10Gyour\x1b[15Ginternet"
        "\x1b[24Gconnection,\x1b[36Gthen\x1b[41Gtry\x1b[45Gagain.\x1b[39m\r\r\n\r\r\n"
        "\x1b[2GPress Enter to retry"
    )
    assert screen.oauth_error(raw) == (
        "OAuth error: Couldn't get an answer from the sign-in service (ENOTFOUND). Check your "
        "internet connection, then try again."
    )


@settings(max_examples=150, deadline=None)
@given(
    width=st.integers(min_value=12, max_value=160),
    cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=12),
)
def test_reads_cut_anywhere_never_yield_part_of_the_token(width: int, cuts: list[int]) -> None:
    data = cli_output(width).encode()
    found: list[str] = []
    catcher = TokenCatcher(lambda: None, found.append)
    start = 0
    for cut in sorted(set(cuts)):
        if cut < len(data):
            catcher.offer(start, data[start:cut])
            start = cut
    catcher.offer(start, data[start:])
    catcher.ended(0)
    assert found == [TOKEN]


def test_a_multibyte_character_split_between_reads_is_kept() -> None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    data = "✓ ok".encode()
    assert decoder.decode(data[:1]) + decoder.decode(data[1:]) == "✓ ok"
    catcher = TokenCatcher(lambda: None, lambda token: None)
    catcher.offer(0, data[:1])
    catcher.offer(1, data[1:])
    assert catcher.text == "✓ ok"


@pytest.mark.parametrize(
    ("output", "cause", "hint"),
    [
        (
            "\x1b[31m--dangerously-skip-permissions cannot be used with root/sudo privileges for "
            "security reasons\x1b[0m\r\n",
            "refuses full access (bypassPermissions) when it runs as root",
            "MAXY_CLAUDE_PERMISSION_MODE",
        ),
        ("  ⎿  Not logged in · Please run /login\r\n", "not connected", "Connect Claude"),
        ("Error: OAuth token has expired\r\n", "expired or was revoked", "connect it again"),
        ("\x1b[1mfatal:\x1b[0m the double was told to crash\r\n", "it said: fatal: the double", ""),
        ("", "printed nothing", "MAXY_CLAUDE_BIN"),
    ],
)
def test_a_failed_start_is_explained(output: str, cause: str, hint: str) -> None:
    said, todo = screen.explain_exit(output)
    assert cause in said and hint in todo
