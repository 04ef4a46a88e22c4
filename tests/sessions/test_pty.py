"""The terminal ring buffer: sequence numbers are byte offsets; what fell out means a resync."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from appliance.sessions.pty import RingBuffer

chunks = st.lists(st.binary(min_size=0, max_size=40), max_size=30)


@given(chunks, st.integers(min_value=1, max_value=100), st.integers(min_value=-5, max_value=1300))
def test_since_is_the_stream_suffix_or_a_resync(
    parts: list[bytes], capacity: int, seq: int
) -> None:
    ring = RingBuffer(capacity)
    stream = b""
    for part in parts:
        ring.append(part)
        stream += part
    assert ring.end == len(stream)
    assert ring.end - ring.start >= min(capacity, len(stream))  # at least the capacity is kept
    start, data = ring.since(seq)
    if ring.start <= seq <= ring.end:
        assert start == seq
    else:
        assert start == ring.start  # too old (or from the future): replay all that is kept
    assert data == stream[start:]
