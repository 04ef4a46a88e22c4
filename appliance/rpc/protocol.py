"""Frame encoding shared by the RPC server and client."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import msgpack

MAX_FRAME = 64 * 1024 * 1024
_HEADER = struct.Struct(">I")


class RpcError(Exception):
    """Base of RPC failures."""


class ProtocolError(RpcError):
    """The peer sent something that is not a valid frame."""


class RpcUnavailable(RpcError):
    """The server cannot be reached or did not answer in time."""


class BadParams(ValueError):
    """The params of a call are malformed: the one error a server answers ``bad-request``.

    Raised by a method's request type when params do not fit it, and by a handler that finds a
    parameter it cannot honour; any other exception in a handler is a bug (``internal``).
    """

    code = "bad-request"


class RemoteError(RpcError):
    """The server answered with an error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def encode_frame(message: dict[str, Any]) -> bytes:
    """Serialise one message as a length-prefixed msgpack frame."""
    body: bytes = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    return _HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse a frame body; it must be a msgpack map."""
    try:
        message = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.exceptions.ExtraData) as err:
        raise ProtocolError(f"frame is not valid msgpack ({err})") from err
    if not isinstance(message, dict):
        raise ProtocolError(f"frame holds a {type(message).__name__}, not a map")
    return message


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """Read one frame; None when the peer closed the connection cleanly between frames."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as err:
        if err.partial:
            raise ProtocolError("connection closed inside a frame header") from err
        return None
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError as err:
        got = len(err.partial)
        raise ProtocolError(f"connection closed after {got} of {length} bytes") from err
    return decode_body(body)
