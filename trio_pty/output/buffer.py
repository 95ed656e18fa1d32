"""OutputBuffer: one session's output as bytes (ring) and as numbered clean lines (log)."""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple

from .. import errors, model
from . import modes
from .lines import DEFAULT_STRETCH, HIDDEN, LineLog
from .record import TimingIndex
from .ring import DEFAULT_BLOCK_SIZE, ByteRing
from .search import CompiledPattern

MAX_SIZE_RECORDS = 256


class SizeRecord(NamedTuple):
    """The window size from output offset `offset` on (`seq` orders records at one offset),
    set at monotonic time `at` (None: not told)."""

    seq: int
    offset: int
    rows: int
    cols: int
    at: float | None = None


class OutputBuffer:
    """The facade the session uses; pure, no I/O, no trio.

    `append` is the reader's hot path (store the bytes, count newlines), and `arrived`
    once per pass (when they came: `timing`); everything textual is computed when lines
    are read, and cached.
    """

    __slots__ = ("_log", "_ring", "_sizes", "_timing", "_title", "_title_scanned")

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
        self._sizes: list[SizeRecord] = []
        self._timing = TimingIndex()
        self._title: str | None = None
        self._title_scanned = 0

    # ------------------------------------------------------------------ terminal state

    def note_size(self, rows: int, cols: int, *, at: float | None = None) -> None:
        """The window is `rows` x `cols` from the next byte on (a screen replay applies
        each size at its offset, the line log wraps lines at that width), set at monotonic
        time `at` (a recording's resize event). Records older than the retained output are
        dropped."""
        self._log.note_width(cols)
        sizes = self._sizes
        end = self.end_offset
        seq = sizes[-1].seq + 1 if sizes else 0
        if sizes and sizes[-1].offset == end:
            sizes.pop()  # nothing was written at the size it replaces
        sizes.append(SizeRecord(seq, end, rows, cols, at))
        start = self.start_offset
        while len(sizes) > 1 and (sizes[1].offset <= start or len(sizes) > MAX_SIZE_RECORDS):
            del sizes[0]

    @property
    def sizes(self) -> list[SizeRecord]:
        """The window sizes in force over the retained output, oldest first (at least one)."""
        if not self._sizes:
            raise ValueError("note_size was never called")
        return list(self._sizes)

    def sizes_within(self, start: int, end: int) -> list[SizeRecord]:
        """The window sizes in force over output bytes [start, end): the one at `start`,
        then those noted before `end` (none when no size was ever noted)."""
        sizes = self._sizes
        if not sizes:
            return []
        first = max(bisect_right([record.offset for record in sizes], start) - 1, 0)
        return [sizes[first], *(record for record in sizes[first + 1 :] if record.offset < end)]

    @property
    def terminal_title(self) -> str | None:
        """The window title the program set last (OSC 0 or 2), or None. Scans only the bytes
        written since the last call (a title that rotated out unseen is not known)."""
        end = self.end_offset
        if self._title_scanned < end:
            start = max(self._title_scanned - modes.LONGEST_TITLE, self.start_offset)
            last = None
            for _, raw in self._ring.finditer(modes.TITLES, start, end, modes.LONGEST_TITLE):
                last = raw
            if last is not None:
                self._title = modes.title_of(last)
            self._title_scanned = end
        return self._title

    # ------------------------------------------------------------------ bytes

    def append(self, data: bytes) -> int:
        """Store a chunk of PTY output; return the offset of its first byte."""
        return self._log.append(data)

    def arrived(self, now: float) -> None:
        """Everything appended so far had arrived by `now` (the reader's clock, once per
        pass); the times of what the ring dropped are forgotten with it."""
        ring = self._ring
        self._timing.arrived(ring.end_offset, now, ring.start_offset)

    @property
    def timing(self) -> TimingIndex:
        """When each stretch of the retained output arrived (read it, do not feed it)."""
        return self._timing

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
        if pattern is None:
            return self.read_compact(offset, limit).page()
        start, missed = self._window(offset, limit)
        log = self._log
        total = log.total_lines
        complete = log.complete_lines
        found, resume = log.scan(pattern, start, limit, max_scan_bytes) if limit else ([], start)
        stopped_early = len(found) < limit and resume < complete
        return model.ReadPage(
            lines=[model.Line(number, log.cut(text)) for number, text in found],
            total_lines=total,
            first_line=log.first_line,
            has_more=bool(limit) and (len(found) == limit or stopped_early) and resume < total,
            next_offset=min(resume, complete) if resume > start else start,
            missed_lines=missed,
        )

    def read_compact(self, offset: int, limit: int) -> model.CompactPage:
        """`read` without a pattern, as a CompactPage: the texts as the line log gives them,
        no `Line` object per line (half the cost of a 500-line page, see
        docs/benchmarks.md)."""
        start, missed = self._window(offset, limit)
        log = self._log
        total = log.total_lines
        # Hidden lines (a full-screen program's) are skipped: read on until the page holds
        # `limit` lines or the output ends. Numbers are listed only once one was skipped.
        texts: list[str] = []
        numbers: list[int] | None = None
        stop = start
        while len(texts) < limit and stop < total:
            end = min(stop + limit - len(texts), total)
            chunk = log.cut_all(log.lines(stop, end))
            if numbers is None and HIDDEN not in chunk:
                texts += chunk
            else:
                if numbers is None:
                    numbers = list(range(start, start + len(texts)))
                shown = [(stop + i, text) for i, text in enumerate(chunk) if text != HIDDEN]
                numbers += [number for number, _ in shown]
                texts += [text for _, text in shown]
            stop = end
        next_offset = min(stop, log.complete_lines) if stop > start else start
        first_shown = next_offset if not texts else numbers[0] if numbers else start
        if numbers is not None and (not numbers or numbers[-1] - numbers[0] == len(numbers) - 1):
            numbers = None  # no gap between the lines shown: their numbers are implied
        return model.CompactPage(
            start=first_shown,
            lines=texts,
            numbers=numbers,
            total_lines=total,
            first_line=log.first_line,
            has_more=stop < total,
            next_offset=next_offset,
            missed_lines=missed,
        )

    def _window(self, offset: int, limit: int) -> tuple[int, int]:
        """(the line a read from `offset` starts at, the lines it missed below first_line)."""
        if offset < 0:
            raise errors.InvalidInput("offset", f"must not be negative, got {offset}")
        if limit < 0:
            raise errors.InvalidInput("limit", f"must not be negative, got {limit}")
        start = max(offset, self._log.first_line)
        return start, start - offset

    def tail(self, count: int) -> model.ReadPage:
        """The last `count` lines (hidden lines skipped); `next_offset` is where a read of
        what comes next starts (the unfinished last line, shown again grown, or the end)."""
        if count < 0:
            raise errors.InvalidInput("tail", f"must not be negative, got {count}")
        log = self._log
        first = log.first_line
        total = log.total_lines
        lines: list[model.Line] = []
        start = total
        while len(lines) < count and start > first:
            low = max(first, start - (count - len(lines)))
            lines[:0] = self._visible(low, log.lines(low, start))
            start = low
        return model.ReadPage(
            lines=lines,
            total_lines=total,
            first_line=first,
            has_more=False,
            next_offset=min(total, log.complete_lines),
        )

    def _visible(self, start: int, texts: list[str]) -> list[model.Line]:
        """Lines numbered from `start`, hidden ones left out, long ones cut."""
        cut = self._log.cut
        return [model.Line(start + i, cut(text)) for i, text in enumerate(texts) if text != HIDDEN]

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
