"""ByteRing against a plain `bytes` model of the whole stream."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.output.ring import ByteRing

writes = st.lists(
    st.one_of(
        st.binary(max_size=8),
        st.integers(min_value=0, max_value=120).map(lambda n: bytes([n % 251]) * n),
    ),
    max_size=40,
)


def check_against_model(ring: ByteRing, stream: bytes) -> None:
    capacity = ring.capacity
    end = len(stream)
    start = max(0, end - capacity)
    retained = stream[start:]
    assert ring.end_offset == end
    assert ring.start_offset == start
    assert ring.size == len(retained)
    assert ring.snapshot_with_offset() == (retained, start)
    # Memory: at most one block beyond the capacity, whatever the history.
    assert ring.allocated <= capacity + ring._block_size
    for n in range(-1, capacity + 3):
        assert ring.recent(n) == (retained[-n:] if n > 0 else b"")
    for offset in range(max(0, start - 3), end + 4):
        gap = not start <= offset <= end
        first = start if gap else offset
        for max_bytes in (None, 0, 1, 3, capacity + 5):
            data, next_offset, got_gap = ring.bytes_since(offset, max_bytes)
            expected = stream[first:end] if max_bytes is None else stream[first:end][:max_bytes]
            assert (data, next_offset, got_gap) == (expected, first + len(expected), gap)
    for a in range(start, end + 1):
        for b in range(a, min(end, a + 9) + 1):
            assert ring.read(a, b) == stream[a:b]
            assert ring.count(b"\n", a, b) == stream.count(b"\n", a, b)
            found = stream.find(b"\n", a, b)
            assert ring.find(b"\n", a, b) == found
    if start:
        assert ring.byte_at(start - 1) == stream[start - 1]


@given(
    capacity=st.integers(min_value=1, max_value=40),
    block_size=st.integers(min_value=1, max_value=17),
    chunks=writes,
)
def test_ring_matches_bytes_model(capacity: int, block_size: int, chunks: list[bytes]) -> None:
    ring = ByteRing(capacity, block_size=block_size)
    stream = b""
    for chunk in chunks:
        chunk = chunk.replace(b"\x00", b"\n")
        old_start = max(0, len(stream) - capacity)
        offset, dropped = ring.write(chunk)
        assert offset == len(stream)
        stream += chunk
        assert dropped == max(0, len(stream) - capacity) - old_start
        check_against_model(ring, stream)


def test_empty_ring_holds_nothing() -> None:
    ring = ByteRing(1_000_000)
    assert ring.allocated == 0
    assert ring.bytes_since(0) == (b"", 0, False)
    assert ring.bytes_since(5) == (b"", 0, True)
    assert ring.snapshot_with_offset() == (b"", 0)
    assert ring.recent(10) == b""
    assert ring.write(b"") == (0, 0)


def test_tiny_writes_share_a_block() -> None:
    ring = ByteRing(100_000, block_size=4096)
    for _ in range(10_000):
        ring.write(b"x")
    assert len(ring._blocks) == 3
    assert ring.snapshot_with_offset() == (b"x" * 10_000, 0)


def test_write_longer_than_capacity_keeps_its_tail() -> None:
    ring = ByteRing(10, block_size=4)
    ring.write(b"abc")
    assert ring.write(b"0123456789ABCDEF") == (3, 9)
    assert ring.snapshot_with_offset() == (b"6789ABCDEF", 9)
    assert ring.byte_at(8) == ord("5")
    assert ring.bytes_since(2) == (b"6789ABCDEF", 19, True)
    assert ring.bytes_since(25) == (b"6789ABCDEF", 19, True)
    assert ring.bytes_since(15, 2) == (b"CD", 17, False)


def test_memory_stays_bounded_under_steady_writes() -> None:
    ring = ByteRing(1000, block_size=256)
    for i in range(5000):
        ring.write(bytes([i % 256]) * (i % 300))
        assert ring.allocated <= 1000 + 256


def test_reads_outside_the_window_are_refused() -> None:
    ring = ByteRing(4, block_size=2)
    ring.write(b"abcdef")
    with pytest.raises(ValueError):
        ring.read(1, 3)
    with pytest.raises(ValueError):
        ring.read(3, 7)
    with pytest.raises(ValueError):
        ring.byte_at(0)
    with pytest.raises(ValueError):
        ring.bytes_since(2, -1)
    with pytest.raises(ValueError):
        ByteRing(0)


@given(
    pieces=st.lists(
        st.sampled_from([b"ab", b"\x1b]2;t\x07", b"\x1b[?1049h", b"x" * 7]), max_size=40
    ),
    capacity=st.integers(min_value=1, max_value=120),
    block=st.integers(min_value=1, max_value=16),
    skip=st.integers(min_value=0, max_value=50),
)
def test_finditer_in_place_finds_what_a_search_of_a_copy_finds(
    pieces: list[bytes], capacity: int, block: int, skip: int
) -> None:
    pattern = re.compile(rb"\x1b\]2;[a-z]*\x07|\x1b\[\?1049h")
    ring = ByteRing(capacity, block_size=block)
    for piece in pieces:
        ring.write(piece)
    start = min(ring.start_offset + skip, ring.end_offset)
    data = ring.read(start, ring.end_offset)
    expected = [(start + m.start(), m.group()) for m in pattern.finditer(data)]
    assert list(ring.finditer(pattern, start, ring.end_offset, 16)) == expected
