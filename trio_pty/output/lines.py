"""The text view of the ring: numbered clean lines, indexed cheaply, cleaned lazily.

Appending only counts newlines (C-level `bytes.count`) into cumulative totals at every
multiple of `stretch` in offset space. Everything else happens when lines are read: a bisect
over those totals finds the stretch where a line starts, and the complete lines starting in
that stretch (a "group") are cleaned together: one pass of C-level deletes and one regex
substitution over the region, then a split on `\\n` (cleaning never adds or removes a
newline, so the pieces line up with the numbering). Only lines holding a carriage return,
a backspace or a line erase are replayed in Python. Closed groups are cached as UTF-8 blobs,
which is also what the pattern search scans; the cache follows the ring as it rotates and is
capped in size. The unfinished last line is cleaned afresh whenever it has grown.

Line numbers are absolute: line N is the text after the N-th newline ever written. A line
whose start has rotated out of the ring is gone, even if its tail is still retained.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import OrderedDict

from .ring import ByteRing
from .search import CompiledPattern, first_matching_line

DEFAULT_STRETCH = 8192
_FIRST_SCAN_BYTES = 64 * 1024  # clean text per RE2 call when a scan starts ...
_MAX_SCAN_BYTES = 4 * 1024 * 1024  # ... doubling up to this

# C0 controls deleted outright (as terminals ignore them, even inside sequences): all but
# BEL (it ends an OSC; deleted after stripping), BS, TAB, LF, CR and ESC; and DEL.
_C0 = bytes([*range(0x00, 0x07), 0x0B, 0x0C, *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
_C1 = re.compile("[\x80-\x9f]+")  # C1 controls arrive UTF-8 encoded (C2 80 .. C2 9F)
# After stripping, lines holding one of these are replayed by _overwrite.
_SPECIAL = re.compile("[\r\x08\x1b]")
_TOKENS = re.compile("(\r|\x08|\x1b\\[[02]?K)")


def _escape_pattern(max_escape_length: int) -> re.Pattern[bytes]:
    """Escape sequences to delete, each bounded in length.

    `body` bounds parameters and payloads so that no sequence, terminated or not, swallows
    more than max_escape_length bytes (for limits of at least 5); none crosses a newline.
    The erase sequences ESC[K, ESC[0K and ESC[2K are left for `_overwrite`. The pattern
    starts with a literal ESC, so text without escapes is skipped at memchr speed.
    """
    body = max(max_escape_length - 4, 1)
    return re.compile(
        b"\x1b(?!\\[[02]?K)(?:"
        + b"\\[[\x20-\x3f]{0,%d}[\x40-\x7e]?" % body  # CSI: params, intermediates, final
        + b"|\\][^\x07\x1b\n]{0,%d}(?:\x07|\x1b\\\\)?" % body  # OSC, ends at BEL or ST
        + b"|[PX^_][^\x1b\n]{0,%d}(?:\x1b\\\\)?" % body  # DCS, SOS, PM, APC, end at ST
        + b"|[\x20-\x2f]{1,%d}[\x30-\x7e]?" % body  # nF: charset designations, ESC # 8
        + b"|[\x30-\x7e]"  # two-byte sequences: ESC =, ESC 7, ESC M, ...
        + b")?"  # a lone ESC goes too
    )


def _overwrite(line: str) -> str:
    """Replay one line's carriage returns, backspaces and line erases, like a terminal."""
    if "\x08" not in line and "\x1b" not in line:
        # Carriage returns only (progress bars): each column shows the last part that
        # reached it. Usually the last part is the longest and the answer is C-level.
        parts = line.split("\r")
        text = parts[-1]
        if len(text) < max(map(len, parts)):
            for part in reversed(parts):
                if len(part) > len(text):
                    text += part[len(text) :]
        return text
    # The line is `lead` blank columns, then `cells` ("\x00" marks a blank inside, a
    # character cleaning has already removed). Erasing empties `cells` and moves `lead` to
    # the cursor, so that erase-then-write at a far column costs nothing per column: every
    # operation is paid for by the characters that built what it touches.
    cells: list[str] = []
    lead = 0
    col = 0
    for index, piece in enumerate(_TOKENS.split(line)):
        if index % 2 == 0:
            if not piece:
                continue
            width = len(piece)
            if col >= lead:
                at = col - lead  # never past the end of cells
                cells[at : at + width] = piece
            elif not cells:
                lead = col
                cells = list(piece)
            else:
                gap = ["\x00"] * (lead - col - width)
                cells = [*piece, *gap, *cells[max(0, col + width - lead) :]]
                lead = col
            col += width
        elif piece == "\r":
            col = 0
        elif piece == "\x08":
            # Backspace at the end of the text erases the last character (a shell's
            # "\b \b" and a man page's "_\bX" both come out clean); elsewhere it moves back.
            if col:
                if cells and col == lead + len(cells):
                    cells.pop()
                    _drop_trailing_blanks(cells)
                col -= 1
        elif piece == "\x1b[2K" or col <= lead:
            cells = []  # the whole line is blank; the cursor stays where it was
            lead = col
        else:
            del cells[col - lead :]
            _drop_trailing_blanks(cells)
    if not cells:
        return ""
    return (" " * lead + "".join(cells)).replace("\x00", " ")


def _drop_trailing_blanks(cells: list[str]) -> None:
    """Blanks at the end are not text (so backspace there erases the last character)."""
    while cells and cells[-1] == "\x00":
        cells.pop()


class TextCleaner:
    """Turns raw PTY bytes into clean text, line for line (newlines are never touched)."""

    __slots__ = ("_strip",)

    def __init__(self, max_escape_length: int) -> None:
        self._strip = _escape_pattern(max_escape_length)

    def clean(self, raw: bytes) -> str:
        """Strip controls and escapes, decode (replacing invalid UTF-8), apply overwrites.

        Whole regions at a time, C-level scans first; only lines holding CR, BS or a line
        erase cost Python work.
        """
        raw = raw.translate(None, _C0)
        if b"\x1b" in raw:
            raw = self._strip.sub(b"", raw)
        if b"\x07" in raw:
            raw = raw.replace(b"\x07", b"")
        text = raw.decode("utf-8", "replace")
        if b"\xc2" in raw:
            text = _C1.sub("", text)
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        special = "\r" in text or "\x08" in text
        if "\x1b" in text and not special:
            # With no CR or BS the cursor sits at the end: ESC[K and ESC[0K erase nothing.
            text = text.replace("\x1b[K", "").replace("\x1b[0K", "")
            special = "\x1b" in text
        if not special:
            return text
        out: list[str] = []
        done = 0
        match = _SPECIAL.search(text)
        while match is not None:
            hit = match.start()
            start = text.rfind("\n", 0, hit) + 1
            end = text.find("\n", hit)
            if end < 0:
                end = len(text)
            out.append(text[done:start])
            out.append(_overwrite(text[start:end]))
            done = end
            match = _SPECIAL.search(text, end)
        out.append(text[done:])
        return "".join(out)


def _line_start_in_blob(blob: bytes, index: int) -> int:
    """Byte offset where line `index` of a blob of "\\n"-terminated lines starts."""
    if index <= 32:
        pos = 0
        for _ in range(index):
            pos = blob.find(b"\n", pos) + 1
        return pos
    # Smallest p with count(blob[:p]) >= index; p - 1 is then the index-th newline.
    hi = index
    while hi < len(blob) and blob.count(b"\n", 0, hi) < index:
        hi = min(len(blob), hi * 2)
    lo = hi // 2  # count(blob[:lo]) <= lo < index
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if blob.count(b"\n", 0, mid) >= index:
            hi = mid
        else:
            lo = mid
    return hi


class LineLog:
    """Numbered clean lines over a ByteRing; every write must go through `append`."""

    def __init__(
        self,
        ring: ByteRing,
        *,
        max_line_length: int,
        max_escape_length: int,
        stretch: int = DEFAULT_STRETCH,
    ) -> None:
        if ring.end_offset:
            raise ValueError("the line log must see every byte: give it an empty ring")
        if max_line_length <= 0 or max_escape_length <= 0 or stretch <= 0:
            raise ValueError("max_line_length, max_escape_length and stretch must be positive")
        self._ring = ring
        self._stretch = stretch
        self._max_line_length = max_line_length
        self._cleaner = TextCleaner(max_escape_length)
        # _cum[i] = newlines in [0, (_cum_base + i) * stretch), for every such boundary
        # that is <= end; _next_boundary is the first boundary past the end.
        self._cum = [0]
        self._cum_base = 0
        self._next_boundary = stretch
        self._cum_limit = 2 * (ring.capacity // stretch + 2)
        self._newlines = 0
        self._unfinished_start = 0  # offset just past the last newline
        # group (stretch index) -> (first line, blob of "\n"-terminated UTF-8 lines, count)
        self._cache: OrderedDict[int, tuple[int, bytes, int]] = OrderedDict()
        self._cache_bytes = 0
        self._cache_budget = 2 * ring.capacity + 4 * stretch
        self._purged_below = 0
        self._first_line_memo = (0, 0)  # (start_offset, first_line)
        self._unfinished_memo: tuple[int, int, str] = (-1, -1, "")

    # ------------------------------------------------------------------ appending

    def append(self, data: bytes) -> int:
        """Store `data` in the ring and count its newlines; return its offset.

        Hot path: a ring write, one `bytes.count` (two at a stretch boundary) and, only if
        the chunk holds a newline, one `bytes.rfind`.
        """
        offset = self._ring.write(data)[0]
        end = offset + len(data)
        if end < self._next_boundary:
            found = data.count(b"\n")
            if found:
                self._newlines += found
                self._unfinished_start = offset + data.rfind(b"\n") + 1
        else:
            self._index_across(data, offset, end)
        return offset

    def _index_across(self, data: bytes, offset: int, end: int) -> None:
        """Record the newline totals at each stretch boundary the chunk reaches."""
        stretch = self._stretch
        cum = self._cum
        boundary = self._next_boundary
        newlines = self._newlines
        pos = 0
        while boundary <= end:
            cut = boundary - offset
            newlines += data.count(b"\n", pos, cut)
            cum.append(newlines)
            pos = cut
            boundary += stretch
        if pos < len(data):
            newlines += data.count(b"\n", pos)
        if newlines != self._newlines:
            self._unfinished_start = offset + data.rfind(b"\n") + 1
            self._newlines = newlines
        self._next_boundary = boundary
        if len(cum) > self._cum_limit:
            # Keep totals from the stretch holding start - 1 (see _first_from) onwards.
            keep = (end - self._ring.capacity - 1) // stretch
            del cum[: keep - self._cum_base]
            self._cum_base = keep

    # ------------------------------------------------------------------ counts

    @property
    def total_lines(self) -> int:
        """Complete lines plus the unfinished last line when it holds any byte."""
        return self._newlines + (self._ring.end_offset > self._unfinished_start)

    @property
    def complete_lines(self) -> int:
        """Lines ended by a newline (the unfinished line, if any, has this number)."""
        return self._newlines

    @property
    def first_line(self) -> int:
        """The first line whose start is still retained."""
        start = self._ring.start_offset
        memo_start, memo_line = self._first_line_memo
        if memo_start != start:
            memo_line = self._first_from(start)
            self._first_line_memo = (start, memo_line)
        return memo_line

    def _newlines_before(self, offset: int) -> int:
        """Newlines in [0, offset), for a retained offset (or the end)."""
        stretch = self._stretch
        boundary = (offset // stretch + 1) * stretch
        if boundary < self._next_boundary:
            total = self._cum[boundary // stretch - self._cum_base]
        else:
            boundary = self._ring.end_offset
            total = self._newlines
        if offset >= boundary:
            return total
        return total - self._ring.count(b"\n", offset, boundary)

    def _first_from(self, offset: int) -> int:
        """Number of the first line starting at or after a retained offset."""
        if offset == 0:
            return 0
        before = self._newlines_before(offset)
        return before if self._ring.byte_at(offset - 1) == 10 else before + 1

    def _start_from(self, offset: int) -> int:
        """Offset of the first line start at or after `offset` (that line must exist)."""
        if offset == 0 or self._ring.byte_at(offset - 1) == 10:
            return offset
        return self._ring.find(b"\n", offset) + 1

    def line_of_offset(self, offset: int) -> int:
        """The line holding byte `offset`: first_line before the window; past the end, the
        line the next byte will land in."""
        if offset < self._ring.start_offset:
            return self.first_line
        if offset >= self._ring.end_offset:
            return self._newlines
        return self._newlines_before(offset)

    # ------------------------------------------------------------------ groups

    def _group_of(self, line: int) -> int:
        """The stretch where `line` starts (first_line <= line < complete_lines)."""
        if line == 0:
            return 0
        cum = self._cum
        index = bisect_left(cum, line)  # the line-th newline lies before boundary `index`
        group = self._cum_base + index - 1
        if index < len(cum) and cum[index] == line:
            boundary = (group + 1) * self._stretch
            if self._ring.byte_at(boundary - 1) == 10:
                return group + 1  # the newline is the stretch's last byte
        return group

    def _group(self, group: int) -> tuple[int, bytes, int]:
        """(first line, blob, line count) for the retained complete lines of a stretch."""
        cached = self._cache.get(group)
        if cached is not None:
            return cached
        ring = self._ring
        stretch = self._stretch
        start = ring.start_offset
        complete = self._newlines
        low = max(group * stretch, start)
        first = self._first_from(low)
        high = (group + 1) * stretch
        # Closed: the stretch is fully written and its last line has ended, so its lines
        # can never change again (until they rotate out).
        stop_line = self._first_from(high) if high <= ring.end_offset else complete + 1
        closed = stop_line <= complete
        stop_line = min(stop_line, complete)
        if stop_line <= first:
            return first, b"", 0
        stop = self._start_from(high) if closed else self._unfinished_start
        blob = self._cleaner.clean(ring.read(self._start_from(low), stop)).encode("utf-8")
        entry = (first, blob, stop_line - first)
        if closed and group * stretch >= start:
            self._remember(group, entry)
        return entry

    def _remember(self, group: int, entry: tuple[int, bytes, int]) -> None:
        size = len(entry[1])
        if size > self._cache_budget:
            return
        cache = self._cache
        while cache and self._cache_bytes + size > self._cache_budget:
            self._cache_bytes -= len(cache.popitem(last=False)[1][1])
        cache[group] = entry
        self._cache_bytes += size

    def _purge(self) -> None:
        """Forget groups whose every line start has rotated out."""
        below = self._ring.start_offset // self._stretch
        if below <= self._purged_below:
            return
        cache = self._cache
        if below - self._purged_below > len(cache):
            stale = [group for group in cache if group < below]
        else:
            stale = [group for group in range(self._purged_below, below) if group in cache]
        for group in stale:
            self._cache_bytes -= len(cache.pop(group)[1])
        self._purged_below = below

    def _unfinished(self) -> str:
        """Clean text of the unfinished last line (recomputed whenever it grows)."""
        start = self._unfinished_start
        end = self._ring.end_offset
        memo_start, memo_end, text = self._unfinished_memo
        if (memo_start, memo_end) != (start, end):
            text = self._cleaner.clean(self._ring.read(start, end))
            self._unfinished_memo = (start, end, text)
        return text

    # ------------------------------------------------------------------ reading

    def cut(self, text: str) -> str:
        """Cut an over-long line, saying how much was left out."""
        limit = self._max_line_length
        if len(text) <= limit:
            return text
        return f"{text[:limit]}… [{len(text) - limit} more characters]"

    def lines(self, first: int, stop: int) -> list[str]:
        """Full clean text (not cut) of lines [first, stop), clamped to what is retained."""
        self._purge()
        line = max(first, self.first_line)
        stop = min(stop, self.total_lines)
        complete = self._newlines
        out: list[str] = []
        while line < stop and line < complete:
            low, blob, count = self._group(self._group_of(line))
            take = min(stop, low + count)
            assert low <= line < take, "line index out of step"
            out.extend(blob.decode("utf-8").split("\n")[line - low : take - low])
            line = take
        if line < stop:
            out.append(self._unfinished())
        return out

    def scan(
        self, pattern: CompiledPattern, first: int, want: int, max_bytes: int | None = None
    ) -> tuple[list[tuple[int, str]], int]:
        """Up to `want` matching lines at or after `first`, and the line to resume from.

        The resume line follows the last match, or is the unfinished last line when the
        scan reached it without a match there: it may still grow into a match. With
        `max_bytes` the scan stops once it has searched about that much clean text; it
        then found fewer than `want` lines and resumes before `complete_lines`. (RE2 is
        linear, but a DFA-hostile pattern runs at ~150 ms/MB: callers slice long scans.)
        """
        self._purge()
        line = max(first, self.first_line)
        complete = self._newlines
        found: list[tuple[int, str]] = []
        budget = _FIRST_SCAN_BYTES
        if max_bytes is not None:
            budget = min(budget, max_bytes)
        scanned = 0
        while line < complete and len(found) < want:
            if max_bytes is not None and scanned >= max_bytes:
                break
            # Search several groups per RE2 call, more each round: an early match stays
            # cheap, and a long scan pays RE2's per-call setup (and, for patterns whose DFA
            # blows up, its fallback) a few times instead of once per group.
            low, blob, count = self._group(self._group_of(line))
            skip = _line_start_in_blob(blob, line - low)
            pieces = [memoryview(blob)[skip:]]
            size = len(blob) - skip
            stop = low + count
            while size < budget and stop < complete:
                low, blob, count = self._group(self._group_of(stop))
                pieces.append(memoryview(blob))
                size += len(blob)
                stop = low + count
            region = b"".join(pieces)
            for piece in pieces:
                piece.release()
            scanned += size
            budget = min(2 * budget, _MAX_SCAN_BYTES)
            if max_bytes is not None:
                budget = min(budget, max_bytes)
            pos = counted_pos = 0
            counted_line = line
            while len(found) < want:
                start, end = first_matching_line(pattern, region, pos)
                if start < 0:
                    break
                counted_line += region.count(b"\n", counted_pos, start)
                counted_pos = start
                found.append((counted_line, region[start:end].decode("utf-8")))
                pos = end + 1
            line = found[-1][0] + 1 if len(found) >= want else stop
        if len(found) < want and line == complete and self.total_lines > complete:
            text = self._unfinished()
            if pattern.search(text) is not None:
                found.append((complete, text))
                line = complete + 1
        return found, line

    def last_nonblank_line(self) -> str:
        """The last line with visible text (cut), or "" when there is none."""
        self._purge()
        complete = self._newlines
        first = self.first_line
        if self.total_lines > complete and first <= complete:
            text = self._unfinished()
            if text.strip():
                return self.cut(text)
        line = complete - 1
        while line >= first:
            low, blob, _ = self._group(self._group_of(line))
            texts = blob.decode("utf-8").split("\n")[max(first - low, 0) : line - low + 1]
            for text in reversed(texts):
                if text.strip():
                    return self.cut(text)
            line = low - 1
        return ""
