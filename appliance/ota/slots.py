"""Stream a payload into a slot partition, hashing as it goes, and read it back.

A payload arrives as the zstd member of the bundle's tar; it is decompressed chunk by chunk and
written at increasing offsets of the partition, never past the size its manifest signs (and so
never past the partition: the caller checked that size against the partition before anything
was written). Only the inactive slot is ever opened for writing here.
"""

from __future__ import annotations

import hashlib
import logging
from typing import IO, cast

import zstandard

from appliance.ota.card import Card, Extent
from appliance.ota.errors import PayloadError, SlotWriteError
from appliance.ota.manifest import Payload
from appliance.ota.progress import Deadline, Progress

log = logging.getLogger(__name__)

CHUNK = 1 << 20


class _Hashing:
    """A reader that hashes what passes through it."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.digest.update(data)
        self.size += len(data)
        return data


def write_payload(
    card: Card,
    extent: Extent,
    stream: IO[bytes],
    payload: Payload,
    *,
    deadline: Deadline,
    progress: Progress,
    phase: str,
    label: str,
) -> None:
    """Decompress ``stream`` into ``extent``; PayloadError if it is not exactly the payload."""
    if payload.size > extent.size:
        raise SlotWriteError(
            f"the {payload.name} image ({payload.size} B) is larger than partition "
            f"{extent.number} ({extent.size} B); refusing to write it."
        )
    compressed = _Hashing(stream)
    digest = hashlib.sha256()
    written = 0
    progress(phase, 0, payload.size, label)
    reader = zstandard.ZstdDecompressor().stream_reader(
        cast(IO[bytes], compressed), read_size=CHUNK, read_across_frames=True, closefd=False
    )
    try:
        while chunk := reader.read(CHUNK):
            if written + len(chunk) > payload.size:
                raise PayloadError(
                    f"{payload.member} decompresses to more than the {payload.size} B its "
                    "manifest signs; stopped before writing past it. Download the bundle again."
                )
            card.pwrite(extent, written, chunk)
            digest.update(chunk)
            written += len(chunk)
            progress(phase, written, payload.size, label)
            deadline.check()
    except zstandard.ZstdError as err:
        raise PayloadError(
            f"{payload.member} is not valid zstd ({err}); download the bundle again."
        ) from err
    while compressed.read(CHUNK):  # hash any trailing bytes of the member too
        pass
    card.sync()
    if compressed.digest.hexdigest() != payload.compressed_sha256:
        raise PayloadError(
            f"{payload.member} changed since it was verified (hash mismatch); the inactive slot "
            "is incomplete and will not be booted. Try again with a stable copy of the bundle."
        )
    if written != payload.size or digest.hexdigest() != payload.sha256:
        raise PayloadError(
            f"{payload.member} decompresses to {written} B with a different hash than its "
            "manifest signs; the bundle was built wrongly. Nothing was switched."
        )
    log.info("[ota] op=slot-written partition=%s bytes=%s", extent.number, written)


def read_back(
    card: Card,
    extent: Extent,
    payload: Payload,
    *,
    deadline: Deadline,
    progress: Progress,
    done: int,
    total: int,
) -> int:
    """Hash what the partition holds now against the payload; return the new ``done``."""
    card.drop_cache(extent)
    digest = hashlib.sha256()
    position = 0
    while position < payload.size:
        size = min(CHUNK, payload.size - position)
        digest.update(card.pread(extent, position, size))
        position += size
        progress("readback", done + position, total, f"checking partition {extent.number}")
        deadline.check()
    if digest.hexdigest() != payload.sha256:
        raise SlotWriteError(
            f"partition {extent.number} ({extent.name}) does not read back as written: the card "
            "may be failing. Nothing was switched; try again, and replace the card if it recurs."
        )
    log.info("[ota] op=readback partition=%s ok=true", extent.number)
    return done + position
