"""OutputBuffer: one session's output as bytes (ring) and as numbered clean lines (log)."""

from __future__ import annotations

from .. import errors, model
from .lines import DEFAULT_STRETCH, LineLog
from .ring import DEFAULT_BLOCK_SIZE, ByteRing
from .search import CompiledPattern


class OutputBuffer:
    """The facade the session uses; pure, no I/O, no trio.

    `append` is the reader's hot path (store the bytes, count newlines); everything textual
    is computed when lines are read, and cached.
    """

    __slots__ = ("_log", "_ring")

    def __init__(
        self,
        capacity: int,
        *,
        max_line_length: int,
        max_escape_length: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
        stretch: int = DEFAULT_STRETCH,
    ) -> None:
        self._ring = ByteRing(capacity, block_size=block_size)
        self._log = LineLog(
            self._ring,
            max_line_length=max_line_length,
            max_escape_length=max_escape_length,
            stretch=stretch,
        )

    # ------------------------------------------------------------------ bytes

    def append(self, data: bytes) -> int:
        """Store a chunk of PTY output; return the offset of its first byte."""
        return self._log.append(data)

    @property
    def capacity(self) -> int:
        return self._ring.capacity

    @property
    def start_offset(self) -> int:
        """Offset of the oldest retained byte."""
        return self._ring.start_offset

    @property
    def end_offset(self) -> int:
        """Total bytes ever appended."""
        return self._ring.end_offset

    def bytes_since(self, offset: int, max_bytes: int | None = None) -> tuple[bytes, int, bool]:
        """(data, next_offset, gap); see ByteRing.bytes_since."""
        return self._ring.bytes_since(offset, max_bytes)

    def snapshot_with_offset(self) -> tuple[bytes, int]:
        """(all retained bytes, offset of the first one)."""
        return self._ring.snapshot_with_offset()

    def recent(self, n: int) -> bytes:
        """The last `n` retained bytes."""
        return self._ring.recent(n)

    # ------------------------------------------------------------------ lines

    @property
    def first_line(self) -> int:
        """The oldest line still readable (its start is retained)."""
        return self._log.first_line

    @property
    def total_lines(self) -> int:
        """Complete lines plus the unfinished last line when it is not empty."""
        return self._log.total_lines

    def line_of_offset(self, offset: int) -> int:
        """The line holding byte `offset` (first_line before the window; past the end, the
        line the next byte will land in)."""
        return self._log.line_of_offset(offset)

    def last_nonblank_line(self) -> str:
        """Clean text of the last line that is not blank, or ""."""
        return self._log.last_nonblank_line()

    @property
    def complete_lines(self) -> int:
        """Lines ended by a newline (the unfinished last line is not one of them)."""
        return self._log.complete_lines

    def read(
        self,
        offset: int,
        limit: int,
        pattern: CompiledPattern | None = None,
        *,
        max_scan_bytes: int | None = None,
    ) -> model.ReadPage:
        """A page of up to `limit` lines from absolute line `offset` (or of matching lines).

        Below first_line the page starts at first_line and `missed_lines` says how many
        lines were skipped. `next_offset` never passes the unfinished last line: a page that
        shows it partially shows it again, grown, on the next read from there.
        """
        if offset < 0:
            raise errors.InvalidInput("offset", f"must not be negative, got {offset}")
        if limit < 0:
            raise errors.InvalidInput("limit", f"must not be negative, got {limit}")
        log = self._log
        first = log.first_line
        start = max(offset, first)
        missed = start - offset
        total = log.total_lines
        complete = log.complete_lines
        lines: list[model.Line]
        if pattern is None:
            stop = min(start + limit, total) if start < total else start
            texts = log.lines(start, stop)
            lines = [model.Line(start + i, log.cut(text)) for i, text in enumerate(texts)]
            has_more = stop < total
            next_offset = min(stop, complete) if stop > start else start
        else:
            found, resume = (
                log.scan(pattern, start, limit, max_scan_bytes) if limit else ([], start)
            )
            lines = [model.Line(number, log.cut(text)) for number, text in found]
            stopped_early = len(found) < limit and resume < complete
            has_more = bool(limit) and (len(found) == limit or stopped_early) and resume < total
            next_offset = min(resume, complete) if resume > start else start
        return model.ReadPage(
            lines=lines,
            total_lines=total,
            first_line=first,
            has_more=has_more,
            next_offset=next_offset,
            missed_lines=missed,
        )

    def search_from(
        self, pattern: CompiledPattern, start_line: int, *, max_scan_bytes: int | None = None
    ) -> tuple[model.Line | None, int]:
        """The first line at or after `start_line` that matches, and where to resume.

        Complete lines are checked once; the unfinished last line is checked every time (it
        may grow into a match), so resuming never rescans and never misses a match that
        spans two appends. A match on the unfinished line is reported once (resume passes it).
        With `max_scan_bytes`, no match and a resume line below `complete_lines` mean the
        scan stopped early: call again from there.
        """
        found, resume = self._log.scan(pattern, start_line, 1, max_scan_bytes)
        if not found:
            return None, resume
        number, text = found[0]
        return model.Line(number, self._log.cut(text)), resume
