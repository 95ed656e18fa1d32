"""A byte ring with monotonic absolute offsets.

Offsets count every byte ever written, so a reader can say "everything since offset N" and
learn whether it missed something (a gap) without the ring ever renumbering. Bytes live in
bytearray blocks aligned on multiples of the block size in offset space: an append is one
`bytearray +=` (a memcpy), a tiny append creates no object, an idle ring holds almost nothing,
and memory stays below capacity + one block.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

DEFAULT_BLOCK_SIZE = 65536


class ByteRing:
    """The last `capacity` bytes of a stream, addressed by absolute offset.

    One byte more than `capacity` is kept physically (the byte just before `start_offset`,
    see `byte_at`): the line log needs it to tell whether the oldest retained byte starts a
    line.
    """

    __slots__ = ("_block_size", "_blocks", "_capacity", "_end", "_first_block", "_tail")

    def __init__(self, capacity: int, *, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity!r}")
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size!r}")
        self._capacity = capacity
        self._block_size = block_size
        self._end = 0
        # Block i of the list holds offsets [(first_block + i) * B, ... + len(block)); every
        # block but the last (the tail) is full.
        self._first_block = 0
        self._tail = bytearray()
        # A list, not a deque: a deque's first block alone is ~600 bytes, a third of an idle
        # session's output buffer, and there are never more than capacity/block + 2 blocks.
        self._blocks: list[bytearray] = [self._tail]

    # ------------------------------------------------------------------ properties

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def start_offset(self) -> int:
        """Offset of the oldest retained byte."""
        return max(0, self._end - self._capacity)

    @property
    def end_offset(self) -> int:
        """Total bytes ever written (the offset the next byte will get)."""
        return self._end

    @property
    def size(self) -> int:
        """Bytes currently retained."""
        return min(self._end, self._capacity)

    @property
    def allocated(self) -> int:
        """Bytes held in blocks (for memory checks): at most capacity + block size."""
        return sum(len(block) for block in self._blocks)

    # ------------------------------------------------------------------ writing

    def write(self, data: bytes) -> tuple[int, int]:
        """Append `data`; return (offset where it starts, bytes dropped from the front).

        This is the reader's hot path: one length check and one `+=` in the common case.
        """
        n = len(data)
        offset = self._end
        if n == 0:
            return offset, 0
        tail = self._tail
        if len(tail) + n <= self._block_size:
            tail += data
        else:
            self._spill(data, offset)
        end = offset + n
        self._end = end
        new_start = end - self._capacity
        if new_start <= 0:
            return offset, 0
        if (self._first_block + 1) * self._block_size < new_start:
            self._trim(new_start)
        old_start = offset - self._capacity
        return offset, new_start - old_start if old_start > 0 else new_start

    def _spill(self, data: bytes, offset: int) -> None:
        """Write across block boundaries (and reset when one write outgrows the ring)."""
        size = self._block_size
        n = len(data)
        pos = 0
        tail = self._tail
        keep = self._capacity + 1  # the retained bytes plus the look-behind byte
        if n > keep:
            # Only the tail of `data` survives: start over, padding the first block so that
            # blocks stay aligned (the padding is below start_offset, never read).
            pos = n - keep
            first = offset + pos
            self._blocks.clear()
            self._first_block = first // size
            tail = bytearray(first % size)
            self._blocks.append(tail)
        with memoryview(data) as view:
            while pos < n:
                room = size - len(tail)
                if room == 0:
                    tail = bytearray()
                    self._blocks.append(tail)
                    room = size
                take = min(room, n - pos)
                tail += view[pos : pos + take]
                pos += take
        self._tail = tail

    def _trim(self, start: int) -> None:
        """Free blocks that hold nothing at or after start - 1 (the look-behind byte)."""
        size = self._block_size
        while (self._first_block + 1) * size < start:
            del self._blocks[0]
            self._first_block += 1

    # ------------------------------------------------------------------ reading

    def _spans(self, start: int, stop: int) -> Iterator[tuple[bytearray, int, int]]:
        """(block, lo, hi) pieces covering [start, stop); the caller checked the range."""
        size = self._block_size
        index = start // size - self._first_block
        lo = start % size
        while start < stop:
            block = self._blocks[index]
            hi = min(size, lo + (stop - start))
            yield block, lo, hi
            start += hi - lo
            lo = 0
            index += 1

    def _check(self, start: int, stop: int) -> None:
        if not self.start_offset <= start <= stop <= self._end:
            raise ValueError(
                f"range [{start}, {stop}) is outside the retained window "
                f"[{self.start_offset}, {self._end})"
            )

    def read(self, start: int, stop: int) -> bytes:
        """The bytes of absolute range [start, stop), which must be retained."""
        self._check(start, stop)
        if start == stop:
            return b""
        pieces = [memoryview(block)[lo:hi] for block, lo, hi in self._spans(start, stop)]
        data = pieces[0].tobytes() if len(pieces) == 1 else b"".join(pieces)
        for piece in pieces:
            piece.release()
        return data

    def count(self, byte: bytes, start: int, stop: int) -> int:
        """How many times the single byte `byte` occurs in [start, stop), without copying."""
        self._check(start, stop)
        return sum(block.count(byte, lo, hi) for block, lo, hi in self._spans(start, stop))

    def find(self, byte: bytes, start: int, stop: int | None = None) -> int:
        """Offset of the first single byte `byte` in [start, stop), or -1."""
        stop = self._end if stop is None else stop
        self._check(start, stop)
        for block, lo, hi in self._spans(start, stop):
            found = block.find(byte, lo, hi)
            if found >= 0:
                return start + (found - lo)
            start += hi - lo
        return -1

    def finditer(
        self, pattern: Any, start: int, stop: int, longest: int
    ) -> Iterator[tuple[int, bytes]]:
        """(offset, bytes) of each match of a compiled pattern (RE2 or re) in [start, stop),
        in order, without copying the range: each block is searched in place, and the few
        bytes around each block boundary for a match across it (matches are at most
        `longest` bytes; none may overlap another)."""
        self._check(start, stop)
        pos = previous = start
        for block, lo, hi in list(self._spans(start, stop)):
            if pos > start:  # a boundary: what starts in the previous piece and crosses it
                low = max(start, pos - longest)
                around = self.read(low, min(stop, pos + longest))
                for match in pattern.finditer(around):
                    if previous <= low + match.start() < pos < low + match.end():
                        yield low + match.start(), bytes(match.group())
            for match in pattern.finditer(block, lo, hi):
                yield pos + match.start() - lo, bytes(match.group())
            previous, pos = pos, pos + hi - lo

    def byte_at(self, offset: int) -> int:
        """The byte at `offset`; the byte just before start_offset is still available."""
        if not max(0, self.start_offset - 1) <= offset < self._end:
            raise ValueError(f"offset {offset} is not retained")
        size = self._block_size
        return self._blocks[offset // size - self._first_block][offset % size]

    def bytes_since(self, offset: int, max_bytes: int | None = None) -> tuple[bytes, int, bool]:
        """(data, next_offset, gap): the bytes from `offset` on, at most `max_bytes`.

        gap is True when `offset` already rotated out or lies in the future; the data then
        starts at start_offset so the caller resynchronises on what is still there.
        """
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes!r}")
        start = self.start_offset
        gap = not start <= offset <= self._end
        if gap:
            offset = start
        stop = self._end if max_bytes is None else min(self._end, offset + max_bytes)
        return self.read(offset, stop), stop, gap

    def snapshot_with_offset(self) -> tuple[bytes, int]:
        """(all retained bytes, offset of the first of them)."""
        start = self.start_offset
        return self.read(start, self._end), start

    def recent(self, n: int) -> bytes:
        """The last `n` retained bytes (fewer if fewer are retained)."""
        if n <= 0:
            return b""
        return self.read(max(self.start_offset, self._end - n), self._end)
