"""The text view of the ring: numbered clean lines, indexed cheaply, cleaned lazily.

Appending only counts newlines (C-level `bytes.count`) into cumulative totals at every
multiple of `stretch` in offset space. Everything else happens when lines are read: a bisect
over those totals finds the stretch where a line starts, and the complete lines starting in
that stretch (a "group") are cleaned together: one pass of C-level deletes and one regex
substitution over the region, then a split on `\\n` (cleaning never adds or removes a
newline, so the pieces line up with the numbering). Only lines holding a carriage return,
a backspace or an in-row edit (cursor left/right/column, erase, delete, insert) are replayed
in Python, by a model of one terminal row with a cursor (`replay_line`). Closed groups are
cached as UTF-8 blobs, which is also what the pattern search scans; the cache follows the
ring as it rotates and is capped in size. The unfinished last line is cleaned afresh
whenever it has grown.

Full-screen programs draw on the alternate screen, whose bytes make no sense as lines: each
span of it is collapsed into one marker line (its first), and the other lines it covers are
hidden (their text is `HIDDEN`; pages and searches skip them). The switches are found at read
time too, by scanning only the bytes written since the last read.

Line numbers are absolute: line N is the text after the N-th newline ever written. A line
whose start has rotated out of the ring is gone, even if its tail is still retained, except
the unfinished last line (a progress line longer than the buffer keeps its latest state).
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections import OrderedDict

from . import modes
from .ring import ByteRing
from .search import CompiledPattern, first_matching_line

DEFAULT_STRETCH = 8192
_LONG_LINE_WINDOW = 65_536  # bytes of a line whose start rotated out that are replayed
_FIRST_SCAN_BYTES = 64 * 1024  # clean text per RE2 call when a scan starts ...
_MAX_SCAN_BYTES = 4 * 1024 * 1024  # ... doubling up to this

# C0 controls deleted outright (as terminals ignore them, even inside sequences): all but
# BEL (it ends an OSC; deleted after stripping), BS, TAB, LF, CR and ESC; and DEL. NUL is
# kept when full-screen spans were collapsed (`LineLog._clean` deleted the real ones first): it
# then marks hidden lines.
_C0 = bytes([*range(0x00, 0x07), 0x0B, 0x0C, *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
_C0_BUT_NUL = _C0[1:]
_C1 = re.compile("[\x80-\x9f]+")  # C1 controls arrive UTF-8 encoded (C2 80 .. C2 9F)
# After stripping, lines holding one of these are replayed by `replay_line`.
_SPECIAL = re.compile("[\r\x08\x1b]")
_EDIT = "KDCGPX@`a"  # CSI finals kept for the replay: erase, move and edit within the row
_TOKENS = re.compile("(\r|\x08|\t|\x1b\\[[0-9]{0,5}[" + _EDIT + "])")
HIDDEN = "\x00"
"""The text of a line that belongs to a full-screen program's alternate screen."""
# Cells of the row model that are not characters; none can occur in text (C0 controls are
# deleted before the replay).
_BLANK = "\x0e"  # never written, or erased (shows as a space; none at the end of a row)
_WIDE_TAIL = ""  # the right half of a wide character
_TAB_FILL = "\x0b"  # the cells a TAB skipped at the end of the text (it shows as one TAB)


def _escape_pattern(max_escape_length: int) -> re.Pattern[bytes]:
    """Escape sequences to delete, each bounded in length.

    `body` bounds parameters and payloads so that no sequence, terminated or not, swallows
    more than max_escape_length bytes (for limits of at least 5); none crosses a newline.
    The sequences that edit within the row (erase, cursor left/right/column, delete and
    insert characters) are left for `replay_line`. The pattern starts with a literal ESC,
    so text without escapes is skipped at memchr speed.
    """
    body = max(max_escape_length - 4, 1)
    return re.compile(
        b"\x1b(?!\\[[0-9]{0,5}[%s])(?:" % _EDIT.encode()
        + b"\\[[\x20-\x3f]{0,%d}[\x40-\x7e]?" % body  # CSI: params, intermediates, final
        + b"|\\][^\x07\x1b\n]{0,%d}(?:\x07|\x1b\\\\)?" % body  # OSC, ends at BEL or ST
        + b"|[PX^_][^\x1b\n]{0,%d}(?:\x1b\\\\)?" % body  # DCS, SOS, PM, APC, end at ST
        + b"|[\x20-\x2f]{1,%d}[\x30-\x7e]?" % body  # nF: charset designations, ESC # 8
        + b"|[\x30-\x7e]"  # two-byte sequences: ESC =, ESC 7, ESC M, ...
        + b")?"  # a lone ESC goes too
    )


def char_width(char: str) -> int:
    """Terminal cells a character takes: 2 for East Asian wide and full-width characters,
    0 for combining marks and format characters (ZWJ, variation selectors), else 1."""
    if char < "\u0300":
        return 1
    if unicodedata.east_asian_width(char) in "WF":
        return 2
    if unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 1


def _narrow(text: str) -> bool:
    """Every character takes exactly one cell (checked per distinct character)."""
    return text.isascii() or all(char_width(char) == 1 for char in set(text))


def replay_line(line: str, max_cells: int) -> str:
    """Replay one line like a terminal row: the cursor moves (CR, BS, TAB, CSI D/C/G),
    printing overwrites at it, CSI K erases (0: to the end, 1: to the start, 2: all), CSI P
    deletes and CSI @ inserts characters, CSI X erases them. The result is what the row
    showed, with no blanks at the end (a shell's "\\b \\b" leaves none), a TAB past the end
    of the text still a TAB. At most `max_cells` cells are kept, which bounds
    the work of every edit."""
    if "\x08" not in line and "\x1b" not in line and "\t" not in line and _narrow(line):
        # Carriage returns only (progress bars): each column shows the last part that
        # reached it. Usually the last part is the longest and the answer is C-level.
        parts = line.split("\r")
        text = parts[-1]
        if len(text) < max(map(len, parts)):
            for part in reversed(parts):
                if len(part) > len(text):
                    text += part[len(text) :]
        return text.rstrip(" ")
    cells: list[str] = []
    col = 0
    for index, piece in enumerate(_TOKENS.split(line)):
        if index % 2 == 0:
            if piece:
                col = _print(cells, col, piece, max_cells)
        elif piece == "\r":
            col = 0
        elif piece == "\x08":
            col = max(col - 1, 0)
        elif piece == "\t":
            stop = min((col // 8 + 1) * 8, max_cells)
            if col >= len(cells) and stop > col:
                cells.extend([_BLANK] * (col - len(cells)))
                cells.append("\t")
                cells.extend([_TAB_FILL] * (stop - col - 1))
            col = stop
        else:
            col = _edit(cells, col, piece[-1], int(piece[2:-1] or 0), max_cells)
    return "".join(cells).replace(_BLANK, " ").replace(_TAB_FILL, "").rstrip(" ")


def _print(cells: list[str], col: int, text: str, max_cells: int) -> int:
    """Write `text` at `col`; return the new cursor column."""
    if col > len(cells):
        cells.extend([_BLANK] * (col - len(cells)))
    if _narrow(text):
        stop = min(col + len(text), max_cells)
        _unsplit(cells, col)
        _unsplit(cells, stop)
        cells[col:stop] = text[: stop - col]
        return stop
    for char in text:
        width = char_width(char)
        if width == 0:
            if col:  # a combining mark joins the character left of the cursor
                at = col - 1 if cells[col - 1] != _WIDE_TAIL or col < 2 else col - 2
                cells[at] += char
            continue
        if col + width > max_cells:
            break
        _unsplit(cells, col)
        _unsplit(cells, col + width)
        if col + width > len(cells):
            cells.extend([_BLANK] * (col + width - len(cells)))
        cells[col] = char
        if width == 2:
            cells[col + 1] = _WIDE_TAIL
        col += width
    return col


def _edit(cells: list[str], col: int, final: str, count: int, max_cells: int) -> int:
    """Apply one in-row CSI sequence; return the new cursor column."""
    many = max(count, 1)
    if final == "K":
        if count == 0:
            _unsplit(cells, col)
            del cells[col:]
        elif count == 1:
            _unsplit(cells, col + 1)
            cells[: col + 1] = [_BLANK] * min(col + 1, len(cells))
        elif count == 2:
            cells.clear()
    elif final == "D":
        col = max(col - many, 0)
    elif final in "Ca":
        col = min(col + many, max_cells)
    elif final in "G`":
        col = min(many - 1, max_cells)
    elif final == "P":
        _unsplit(cells, col)
        _unsplit(cells, col + many)
        _untab(cells, col)
        del cells[col : col + many]
    elif final == "@":
        if col < len(cells):
            _unsplit(cells, col)
            _untab(cells, col)
            cells[col:col] = [_BLANK] * min(many, max_cells)
            del cells[max_cells:]
    elif final == "X":
        _unsplit(cells, col)
        _unsplit(cells, col + many)
        cells[col : col + many] = [_BLANK] * len(cells[col : col + many])
    return col


def _unsplit(cells: list[str], col: int) -> None:
    """Before a change that starts or ends at `col`: a wide character or a TAB that
    straddles the boundary turns into blanks, as a terminal would show it."""
    if not 0 < col < len(cells):
        return
    cell = cells[col]
    if cell == _WIDE_TAIL:
        cells[col - 1] = cells[col] = _BLANK
    elif cell == _TAB_FILL:
        start = col
        while cells[start] == _TAB_FILL:
            start -= 1
        stop = col
        while stop < len(cells) and cells[stop] == _TAB_FILL:
            stop += 1
        cells[start:stop] = [_BLANK] * (stop - start)


def _untab(cells: list[str], col: int) -> None:
    """Before cells from `col` on shift sideways: the TABs among them turn into blanks (a
    TAB shows the width to the next tab stop, which the shift changes)."""
    while "\t" in cells[col:]:
        at = cells.index("\t", col)
        _unsplit(cells, at + 1)  # its fill; a TAB that filled nothing is a plain blank
        if cells[at] == "\t":
            cells[at] = _BLANK
        col = at + 1


class TextCleaner:
    """Turns raw PTY bytes into clean text, line for line (newlines are never touched)."""

    __slots__ = ("_max_cells", "_strip")

    def __init__(self, max_escape_length: int, max_cells: int = 4000) -> None:
        self._strip = _escape_pattern(max_escape_length)
        self._max_cells = max_cells

    def clean(self, raw: bytes, collapsed: bool = False) -> str:
        """Strip controls and escapes, decode (replacing invalid UTF-8), replay the lines
        that edit themselves. With `collapsed`, NUL marks hidden lines (see `_collapse`):
        a line that is only NUL stays so, other NULs go.

        Whole regions at a time, C-level scans first; only lines holding CR, BS or an
        in-row edit cost Python work.
        """
        raw = raw.translate(None, _C0_BUT_NUL if collapsed else _C0)
        if b"\x1b" in raw:
            raw = self._strip.sub(b"", raw)
        if b"\x07" in raw:
            raw = raw.replace(b"\x07", b"")
        text = raw.decode("utf-8", "replace")
        if b"\xc2" in raw:
            text = _C1.sub("", text)
        if "\r" in text:
            # A CR before a newline is part of the line end, not a move; so is one that ends
            # the text (an unfinished line's CRLF half-arrived, or a line cleaned alone): the
            # line reads the same before and after its newline arrives.
            text = text.replace("\r\n", "\n").removesuffix("\r")
        special = "\r" in text or "\x08" in text
        if "\x1b" in text and not special:
            # Erasing to the end with the cursor at the end (nothing moved it) erases nothing.
            erased = text.replace("\x1b[K", "").replace("\x1b[0K", "")
            special = "\x1b" in erased
            if not special:
                text = erased
        if special:
            text = self._replay(text)
        if collapsed and HIDDEN in text:
            text = "\n".join(
                line if line == HIDDEN else line.replace(HIDDEN, "") for line in text.split("\n")
            )
        return text

    def _row(self, line: str) -> str:
        """A line that holds CR, BS or ESC, as its row showed it. Erasing to the end with
        the cursor at the end (nothing moved it) erases nothing: such a line is only
        stripped of those sequences, like a line with none."""
        if "\r" not in line and "\x08" not in line:
            erased = line.replace("\x1b[K", "").replace("\x1b[0K", "")
            if "\x1b" not in erased:
                return erased
        return replay_line(line, self._max_cells)

    def _replay(self, text: str) -> str:
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
            out.append(self._row(text[start:end]))
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
        self._cleaner = TextCleaner(max_escape_length, max_cells=2 * max_line_length)
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
        # Switches to (on) and from the alternate screen, (start, end, on), each a change
        # of state, found lazily by `_scan_switches`; `_alternate` is the state after them.
        self._switches: list[tuple[int, int, bool]] = []
        self._alternate = False
        self._switches_scanned = 0

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
        """The first line whose start is still retained, or the unfinished line when it
        began before the retained output (a progress line longer than the buffer)."""
        start = self._ring.start_offset
        if start > self._unfinished_start:
            return self._newlines
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
        text, final = self._clean(self._start_from(low), stop)
        entry = (first, text.encode("utf-8"), stop_line - first)
        if closed and final and group * stretch >= start:
            self._remember(group, entry)
        return entry

    def _clean(self, low: int, high: int) -> tuple[str, bool]:
        """Clean text of [low, high), full-screen spans collapsed, and whether it is final
        (False while it shows the marker of a full-screen program still running)."""
        raw = self._ring.read(low, high)
        spans = self._spans(low, high)
        if not spans:
            return self._cleaner.clean(raw), True
        parts = []
        pos = low
        final = True
        for enter, leave in spans:
            first, last = max(enter, low), high if leave is None else min(leave, high)
            parts.append(raw[pos - low : first - low].replace(b"\x00", b""))
            hidden = raw[first - low : last - low].count(b"\n")
            if enter >= low:  # the span starts here: its first line says what it was
                parts.append(b"\x1b\\" + self._marker(enter, leave).encode())
                final = final and leave is not None
            else:
                parts.append(HIDDEN.encode())
            parts.append(b"\n\x00" * hidden)
            pos = last
        parts.append(raw[pos - low :].replace(b"\x00", b""))
        return self._cleaner.clean(b"".join(parts), collapsed=True), final

    def _marker(self, enter: int, leave: int | None) -> str:
        if leave is None:
            return f"[full-screen program running since output byte {enter}: see the screen]"
        lines = self._ring.count(b"\n", enter, leave)
        return (
            f"[full-screen program ran here (output bytes {enter}-{leave}, {lines} lines): "
            "its screen is not kept as lines]"
        )

    def _scan_switches(self) -> None:
        """Find the alternate-screen switches in the bytes written since the last scan
        (what rotated out unscanned is not known: the state carries over)."""
        ring = self._ring
        end = ring.end_offset
        scanned = self._switches_scanned
        if scanned >= end:
            return
        low = max(scanned - modes.LONGEST_SWITCH, ring.start_offset)
        for start, raw in ring.finditer(modes.SWITCHES, low, end, modes.LONGEST_SWITCH):
            on = modes.switch_state(raw)
            if start + len(raw) > scanned and on != self._alternate:
                self._switches.append((start, start + len(raw), on))
                self._alternate = on
        self._switches_scanned = end
        switches = self._switches
        while len(switches) > 1 and switches[1][1] <= ring.start_offset:
            del switches[0]

    def _spans(self, low: int, high: int) -> list[tuple[int, int | None]]:
        """(enter, leave) of the alternate-screen spans that overlap [low, high): enter is
        where the switch to it starts (-1: before anything known), leave where the switch
        back ends (None: still on)."""
        switches = self._switches
        if not switches:
            return [(-1, None)] if self._alternate else []
        spans: list[tuple[int, int | None]] = []
        opened = None if switches[0][2] else -1
        for start, stop, on in switches:
            if on:
                opened = start
            elif opened is not None:
                spans.append((opened, stop))
                opened = None
        if opened is not None:
            spans.append((opened, None))
        return [
            (enter, leave)
            for enter, leave in spans
            if enter < high and (leave is None or leave > low)
        ]

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
        """Forget groups whose every line start has rotated out (and catch up with the
        alternate-screen switches: every read starts here)."""
        self._scan_switches()
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
        """Clean text of the unfinished last line (recomputed whenever it grows).

        When its start rotated out (a progress line longer than the buffer), its latest
        state: the last _LONG_LINE_WINDOW bytes from their first CR on (where the cursor is
        known to be at column 0), so what the last rewrites left shows; without a CR there,
        "…" and the end of the line."""
        start = self._unfinished_start
        end = self._ring.end_offset
        memo_start, memo_end, text = self._unfinished_memo
        if (memo_start, memo_end) != (start, end):
            retained = self._ring.start_offset
            if start >= retained:
                text = self._clean(start, end)[0]
            else:
                low = max(retained, end - _LONG_LINE_WINDOW)
                carriage_return = self._ring.find(b"\r", low, end)
                if carriage_return >= 0:
                    text = self._clean(carriage_return, end)[0]
                else:
                    text = "…" + self._clean(low, end)[0].lstrip("\ufffd")
            self._unfinished_memo = (start, end, text)
        return text

    # ------------------------------------------------------------------ reading

    def cut(self, text: str) -> str:
        """Cut an over-long line, saying how much was left out."""
        limit = self._max_line_length
        if len(text) <= limit:
            return text
        return f"{text[:limit]}… [{len(text) - limit} more characters]"

    def cut_all(self, texts: list[str]) -> list[str]:
        """`cut` over a list: the list itself when no line is too long (one C-level pass)."""
        if max(map(len, texts), default=0) <= self._max_line_length:
            return texts
        return [self.cut(text) for text in texts]

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
                if end - start != 1 or region[start] != 0:  # not a hidden line
                    found.append((counted_line, region[start:end].decode("utf-8")))
                pos = end + 1
            line = found[-1][0] + 1 if len(found) >= want else stop
        if len(found) < want and line == complete and self.total_lines > complete:
            text = self._unfinished()
            if text != HIDDEN and pattern.search(text) is not None:
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
            if text.strip() and text != HIDDEN:
                return self.cut(text)
        line = complete - 1
        while line >= first:
            low, blob, _ = self._group(self._group_of(line))
            texts = blob.decode("utf-8").split("\n")[max(first - low, 0) : line - low + 1]
            for text in reversed(texts):
                if text.strip() and text != HIDDEN:
                    return self.cut(text)
            line = low - 1
        return ""
