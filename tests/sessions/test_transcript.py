"""Reading transcripts incrementally: titles, prompts, the end of a turn, partial lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.sessions.transcript import Lines, Transcript, said


def line(**entry: Any) -> bytes:
    return (json.dumps(entry) + "\n").encode()


def user(text: str) -> bytes:
    return line(type="user", message={"role": "user", "content": text}, timestamp="t1")


def assistant(reason: str | None) -> bytes:
    return line(
        type="assistant",
        message={"role": "assistant", "content": [{"type": "text"}], "stop_reason": reason},
        timestamp="t2",
    )


TOOL_RESULT = line(type="user", message={"content": [{"type": "tool_result"}]})
TURN = b"".join(
    [
        line(type="permission-mode", permissionMode="bypassPermissions"),
        user("hello"),
        assistant("tool_use"),
        TOOL_RESULT,
        assistant(None),
        assistant("end_turn"),
        line(type="system", subtype="turn_duration"),
        line(type="ai-title", aiTitle="From the CLI"),
    ]
)


@pytest.mark.parametrize(
    ("reason", "ended"),
    [
        ("end_turn", True),
        ("stop_sequence", True),
        ("max_tokens", True),
        ("refusal", True),
        ("tool_use", False),
        ("pause_turn", False),
        (None, False),
    ],
)
def test_a_turn_ends_on_a_terminal_stop_reason(reason: str | None, ended: bool) -> None:
    transcript = Transcript()
    transcript.feed(user("go") + assistant(reason))
    assert transcript.turn_ended is ended and transcript.stop_reason == reason


def test_a_new_prompt_or_tool_result_reopens_the_turn() -> None:
    transcript = Transcript()
    transcript.feed(user("one") + assistant("end_turn"))
    transcript.feed(user("two"))
    assert not transcript.turn_ended and transcript.prompts == 2
    transcript.feed(assistant("tool_use") + TOOL_RESULT)
    assert not transcript.turn_ended and transcript.prompts == 2  # a tool result is no prompt


def test_titles_prefer_the_operator_then_the_cli_then_summaries() -> None:
    transcript = Transcript()
    transcript.feed(line(type="summary", summary="Old style"))
    assert transcript.title == "Old style"
    transcript.feed(line(type="ai-title", aiTitle="Generated"))
    assert transcript.title == "Generated"
    transcript.feed(line(type="custom-title", customTitle="Named by the owner"))
    transcript.feed(line(type="ai-title", aiTitle="Generated later"))
    assert transcript.title == "Named by the owner"


def test_a_corrupt_line_is_counted_and_skipped() -> None:
    transcript = Transcript()
    transcript.feed(b"{not json\n" + user("fine"))
    assert transcript.lines == 2 and transcript.prompts == 1


@given(st.lists(st.integers(min_value=1, max_value=len(TURN)), max_size=12))
def test_any_split_of_the_bytes_reads_the_same(cuts: list[int]) -> None:
    whole = Transcript()
    whole.feed(TURN)
    pieces = Transcript()
    last = 0
    for cut in sorted(set(cuts)):
        pieces.feed(TURN[last:cut])
        last = cut
    pieces.feed(TURN[last:])
    assert (pieces.lines, pieces.prompts, pieces.turn_ended, pieces.title) == (
        whole.lines,
        whole.prompts,
        whole.turn_ended,
        whole.title,
    )
    assert (whole.lines, whole.prompts, whole.turn_ended, whole.title) == (
        8,
        1,
        True,
        "From the CLI",
    )


def test_read_follows_appends_and_starts_over_on_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    transcript = Transcript()
    assert transcript.read(path) is False  # not there yet
    path.write_bytes(user("one"))
    assert transcript.read(path) is True and transcript.prompts == 1
    assert transcript.read(path) is False
    with path.open("ab") as handle:
        handle.write(user("two")[:10])
    transcript.read(path)
    assert transcript.lines == 1  # half a line waits for its newline
    with path.open("ab") as handle:
        handle.write(user("two")[10:])
    transcript.read(path)
    assert transcript.prompts == 2
    path.unlink()
    path.write_bytes(user("fresh"))  # replaced: a new inode is read from the start
    transcript.read(path)
    assert transcript.prompts == 1 and transcript.lines == 1


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"type": "user", "message": {"role": "user", "content": "Hi"}}, ("user", "Hi")),
        (
            {
                "type": "user",
                "message": {"content": [{"type": "text", "text": "Look"}, {"type": "image"}]},
            },
            ("user", "Look"),
        ),
        ({"type": "user", "message": {"content": [{"type": "tool_result", "content": "x"}]}}, None),
        ({"type": "user", "isMeta": True, "message": {"content": "Caveat"}}, None),
        ({"type": "user", "isSidechain": True, "message": {"content": "sub"}}, None),
        ({"type": "user", "message": {"content": "<command-name>/clear</command-name>"}}, None),
        (
            {
                "type": "user",
                "message": {
                    "content": [
                        {"type": "text", "text": "<system-reminder>be nice</system-reminder>"},
                        {"type": "text", "text": "Plant bulbs"},
                    ]
                },
            },
            ("user", "Plant bulbs"),
        ),
        (
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {"type": "text", "text": "Done."},
                        {"type": "tool_use", "name": "Read"},
                    ]
                },
            },
            ("assistant", "Done."),
        ),
        ({"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "R"}]}}, None),
        (
            {
                "type": "assistant",
                "isApiErrorMessage": True,
                "message": {"content": "Not logged in"},
            },
            None,
        ),
        (
            {"type": "assistant", "message": {"model": "<synthetic>", "content": "No response"}},
            None,
        ),
        ({"type": "summary", "summary": "A title"}, None),
    ],
)
def test_said_keeps_what_a_person_or_the_assistant_said(
    entry: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    assert said(entry) == expected


def test_lines_reads_complete_lines_once_and_starts_over_on_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = Lines()
    path.write_bytes(b'{"a": 1}\n{"b": 2')
    assert lines.read(path) == [b'{"a": 1}']
    with path.open("ab") as handle:
        handle.write(b"}\n")
    assert lines.read(path) == [b'{"b": 2}']
    assert lines.read(path) == []
    path.unlink()
    path.write_bytes(b'{"c": 3}\n')
    assert lines.read(path) == [b'{"c": 3}']


def test_the_context_is_the_last_assistant_usage_and_session_compact_results_are_counted() -> None:
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 200,
        "cache_read_input_tokens": 150_000,
        "output_tokens": 40,
    }

    def use(use_id: str, name: str) -> bytes:
        content = [{"type": "tool_use", "id": use_id, "name": name, "input": {}}]
        return line(type="assistant", message={"content": content, "usage": usage})

    def result(use_id: str, error: bool) -> bytes:
        block = {"type": "tool_result", "tool_use_id": use_id, "content": "Refused: no briefing"}
        return line(type="user", message={"content": [{**block, "is_error": error}]})

    transcript = Transcript()
    transcript.feed(
        b"".join(
            [
                use("a", "mcp__admin__session-compact"),
                use("b", "mcp__memory__memory-search"),
                result("b", True),  # another tool's error is not the briefing's
                result("a", False),
                use("c", "mcp__admin__session-compact"),
                result("c", True),
                line(  # a sidechain and the CLI's synthetic messages do not count
                    type="assistant",
                    isSidechain=True,
                    message={"content": [], "usage": {"input_tokens": 5}},
                ),
                line(
                    type="assistant",
                    message={"model": "<synthetic>", "content": [], "usage": {"input_tokens": 0}},
                ),
            ]
        )
    )
    assert transcript.context_tokens == 150_250
    assert (transcript.compact_ok, transcript.compact_failed) == (1, 1)
    assert transcript.compact_error == "Refused: no briefing"
