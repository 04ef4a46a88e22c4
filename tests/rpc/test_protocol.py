"""Frames: a 4-byte big-endian length, then a msgpack map."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.rpc.protocol import (
    MAX_FRAME,
    ProtocolError,
    decode_body,
    encode_frame,
    read_frame,
)

TEXT = st.text(st.characters(codec="utf-8"), max_size=20)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | TEXT
    | st.binary(max_size=64)
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
MESSAGES = st.dictionaries(TEXT | st.integers(min_value=-(2**63), max_value=2**64 - 1), VALUES)
NON_MAPS = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4), max_leaves=10)


def header(length: int) -> bytes:
    return struct.pack(">I", length)


def read_all(data: bytes, chunk: int | None = None) -> list[dict[str, Any] | None]:
    """Feed ``data`` (then EOF) to a StreamReader and read frames until None."""

    async def scenario() -> list[dict[str, Any] | None]:
        reader = asyncio.StreamReader()
        step = chunk or max(len(data), 1)
        for start in range(0, len(data), step):
            reader.feed_data(data[start : start + step])
        reader.feed_eof()
        frames: list[dict[str, Any] | None] = []
        while (frame := await read_frame(reader)) is not None:
            frames.append(frame)
        frames.append(None)
        return frames

    return asyncio.run(scenario())


def read_one(data: bytes, eof: bool = True) -> dict[str, Any] | None:
    """Read a single frame from ``data``; without EOF the stream stays open."""

    async def scenario() -> dict[str, Any] | None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        if eof:
            reader.feed_eof()
        # A reader that waited for bytes that never come would hang: bound it.
        return await asyncio.wait_for(read_frame(reader), timeout=5)

    return asyncio.run(scenario())


@settings(deadline=None)
@given(message=MESSAGES)
def test_frame_round_trip(message: dict[Any, Any]) -> None:
    assert read_all(encode_frame(message)) == [message, None]


@settings(deadline=None)
@given(messages=st.lists(MESSAGES, max_size=5), chunk=st.integers(min_value=1, max_value=64))
def test_a_stream_of_frames_reads_back_in_order_however_it_arrives(
    messages: list[dict[Any, Any]], chunk: int
) -> None:
    stream = b"".join(encode_frame(m) for m in messages)
    assert read_all(stream, chunk) == [*messages, None]


def test_frame_header_is_big_endian_length_of_the_msgpack_body() -> None:
    message = {"id": 7, "method": "embed", "params": {"text": "hi"}}
    frame = encode_frame(message)
    body = msgpack.packb(message, use_bin_type=True)
    assert frame == header(len(body)) + body


def test_bytes_stay_bytes_and_text_stays_text() -> None:
    vector = struct.pack("<3f", 0.5, -1.25, 3.0)
    frame = read_one(encode_frame({"vector": vector, "text": "é"}))
    assert frame == {"vector": vector, "text": "é"}
    assert frame is not None
    assert isinstance(frame["vector"], bytes)
    assert isinstance(frame["text"], str)


def test_clean_eof_between_frames_returns_none() -> None:
    assert read_one(b"") is None


def test_oversized_header_is_refused_without_reading_the_body() -> None:
    # No body follows and the stream stays open: reading the body would wait for ever.
    with pytest.raises(ProtocolError, match="exceeds"):
        read_one(header(MAX_FRAME + 1), eof=False)


def test_largest_header_is_refused() -> None:
    with pytest.raises(ProtocolError):
        read_one(header(2**32 - 1), eof=False)


def test_frame_of_exactly_max_frame_is_allowed_and_one_more_byte_is_not() -> None:
    big = 1 << 17  # large enough for msgpack's bin32 form, as the payload below
    overhead = len(msgpack.packb({"v": b"\0" * big}, use_bin_type=True)) - big
    payload = b"\0" * (MAX_FRAME - overhead)
    frame = encode_frame({"v": payload})
    assert len(frame) == 4 + MAX_FRAME
    assert read_one(frame) == {"v": payload}
    with pytest.raises(ProtocolError, match="exceeds"):
        encode_frame({"v": payload + b"\0"})


@pytest.mark.parametrize(
    "data",
    [
        header(10) + b"\x81\xa1a",  # body cut short
        header(10),  # no body at all
        b"\x00\x00",  # header cut short
        encode_frame({"a": 1})[:-1],
        encode_frame({"a": 1}) + b"\x00",  # a second frame whose header is cut short
    ],
    ids=["short-body", "no-body", "short-header", "last-byte-missing", "trailing-byte"],
)
def test_truncated_frame_raises_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        read_all(data)


@pytest.mark.parametrize(
    "body",
    [
        msgpack.packb([1, 2, 3]),
        msgpack.packb("text"),
        msgpack.packb(None),
        msgpack.packb(42),
        msgpack.packb(b"raw", use_bin_type=True),
    ],
    ids=["list", "str", "nil", "int", "bin"],
)
def test_non_map_body_raises_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="not a map"):
        read_one(header(len(body)) + body)


@given(value=NON_MAPS)
def test_any_non_map_body_is_refused(value: Any) -> None:
    with pytest.raises(ProtocolError):
        decode_body(msgpack.packb(value, use_bin_type=True))


@pytest.mark.parametrize(
    "body",
    [
        b"",  # empty
        b"\xc1",  # the one byte msgpack never uses
        b"\x92\x01",  # array of two with one element
        b"\x81\xa1a\x01\x02",  # a map, then extra data
    ],
    ids=["empty", "reserved-byte", "incomplete", "extra-data"],
)
def test_invalid_msgpack_raises_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        decode_body(body)


@pytest.mark.parametrize(
    "body", [b"\x81\x91\x01\x02", b"\x81\x80\x02"], ids=["list-key", "map-key"]
)
def test_map_with_unhashable_key_raises_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_body(body)
