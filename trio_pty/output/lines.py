"""The text view of the ring: numbered clean lines, indexed cheaply, cleaned lazily.

Appending only counts newlines (C-level `bytes.count`) into cumulative totals at every
multiple of `stretch` in offset space. Everything else happens when lines are read: a bisect
over those totals finds the stretch where a line starts, and the complete lines starting in
that stretch (a "group") are cleaned together: one pass of C-level deletes and one regex
substitution over the region, then a split on `\\n` (cleaning never adds or removes a
newline, so the pieces line up with the numbering). Only lines holding a carriage return,
a backspace or an in-row edit (cursor left/right/column, erase, delete, insert) are replayed
in Python, by a model of the terminal rows the line takes at the window's width in force
(`replay_line`; the widths come from `note_width`). Closed groups are
cached as UTF-8 blobs, which is also what the pattern search scans; the cache follows the
ring as it rotates and is capped in size. The groups that may still change (the oldest and
the newest, mostly) and the unfinished last line are cleaned afresh only when output arrived
since.

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
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Sequence

import re2

from . import modes
from .ring import ByteRing
from .search import CompiledPattern, first_matching_line

DEFAULT_STRETCH = 8192
MAX_WIDTHS = 256  # window widths remembered (a resize each; the oldest go first)
_LONG_LINE_WINDOW = 65_536  # bytes of a line whose start rotated out that are replayed
_CONTINUED_BYTES = 8192  # how far a readline edit across rows is looked for (`_clean`)
_RAW_UP = re2.compile(rb"\x1b\[[0-9]{0,5}A")  # (RE2: 0.7 ms per MB of colours, re 10)
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
# CSI finals kept for the replay: erase, move and edit within the row, up and down its rows.
_EDIT = "KDCGPX@`aAB"
# A width mark, `ESC [ <cols> SOH`: the window is that wide from here on. The cleaner puts
# it into the text after deleting the output's controls, so output can never forge one.
_WIDTH_FINAL = "\x01"
_WIDTH_MARK = re.compile("\x1b\\[[0-9]{1,5}\x01")
_TOKENS = re.compile("(\r|\x08|\t|\x1b\\[[0-9]{0,5}[" + _EDIT + _WIDTH_FINAL + "])")
# An in-row edit as the replay takes it (kept by the escape pattern, unlike all others).
_KEPT_SEQUENCE = re.compile("\x1b\\[[0-9]{0,5}[" + _EDIT + "]")
_UP = re.compile("\x1b\\[[0-9]{0,5}A")  # a line that may leave the cursor above its last row
_UNBOUNDED = 1 << 62  # the width of a window of unknown size: its rows never wrap
HIDDEN = "\x00"
"""The text of a line that belongs to a full-screen program's alternate screen."""
# Cells of the row model that are not characters; none can occur in text (C0 controls are
# deleted before the replay).
_BLANK = "\x0e"  # never written, or erased (shows as a space; none at the end of a row)
_WIDE_TAIL = ""  # the right half of a wide character
_TAB_FILL = "\x0b"  # the cells a TAB skipped at the end of the text (it shows as one TAB)
# A row's last cell, never written, skipped by a wide character that did not fit there and
# wrapped to the next row. Not text (nobody wrote a blank) while that character follows.
_WRAP_FILL = "\x0f"


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


def replay_line(line: str, max_cells: int, width: int | None = None) -> str:
    """Replay one line like a terminal: the cursor moves (CR, BS, TAB, CSI D/C/G, and
    CSI A/B between the rows of a wrapped line), printing overwrites at it, CSI K erases
    (0: to the end, 1: to the start, 2: all of the row), CSI P deletes and CSI @ inserts
    characters, CSI X erases them. With a `width`, the line wraps into rows of that many
    cells as the terminal's autowrap does (`_Row`), and a width mark (`_WIDTH_MARK`)
    changes it from there on; without one, it is one row that never wraps. The result is
    what the rows showed, joined, with no blanks at the end (a shell's "\\b \\b" leaves
    none), a TAB past the end of the text still a TAB. At most `max_cells` cells are kept,
    which bounds the work of every edit."""
    wrap = _UNBOUNDED if width is None else max(width, 2)
    if "\x08" not in line and "\x1b" not in line and "\t" not in line and _narrow(line):
        # Carriage returns only (progress bars): each column shows the last part that
        # reached it, as long as no part reached the margin. Usually the last part is the
        # longest and the answer is C-level.
        parts = line.split("\r")
        longest = max(map(len, parts))
        if longest <= wrap:
            text = parts[-1]
            if len(text) < longest:
                for part in reversed(parts):
                    if len(part) > len(text):
                        text += part[len(text) :]
            return text.rstrip(" ")
    row = _Row(max_cells, wrap)
    row.feed(line)
    return row.text()


class _Row:
    """One line as a terminal shows it: `cells` holds its rows of `width` cells one after
    the other (the last row partly filled), `col` is where the next character goes.

    The terminal's autowrap: a character that fills a row's last cell leaves the cursor on
    that cell with a wrap pending (`pending`; `col` is then already the next row's start,
    where the next character lands); CR returns to the start of the cursor's row, which is
    that filled row while the wrap is pending (bash's readline relies on this: it prints
    `" \\r"` at the margin to make the terminal wrap). Moves stay in the cursor's row, as
    xterm's do: BS and CSI D stop at its first cell (no reverse wrap), CSI C and TAB at its
    last, CSI G counts from its start; only CSI A and B change rows, within the rows the
    line already has (moves to other lines are not the line's business). Erasing, deleting
    and inserting act on the cursor's row only. Where terminals differ, at a pending wrap,
    this follows the project's emulator (avt) and xterm.js: CSI K and CSI X erase nothing
    and keep the wrap pending, a TAB clears it. A width change (a resize) keeps the line
    and the cursor where they are in it, as terminals that reflow do.
    """

    __slots__ = ("cells", "col", "max_cells", "pending", "width")

    def __init__(self, max_cells: int, width: int) -> None:
        self.cells: list[str] = []
        self.col = 0
        self.pending = False
        self.max_cells = max_cells
        self.width = width

    def feed(self, line: str) -> None:
        """Replay `line` (text, CR, BS, TAB, in-row edits, width marks) at the cursor."""
        for index, piece in enumerate(_TOKENS.split(line)):
            if index % 2 == 0:
                if piece:
                    self.print(piece)
            elif piece == "\r":
                self.carriage_return()
            elif piece == "\x08":
                self.move("D", 1)
            elif piece == "\t":
                self.tab()
            elif piece[-1] == _WIDTH_FINAL:
                self.resize(int(piece[2:-1]))
            else:
                self.edit(piece[-1], int(piece[2:-1] or 0))

    def is_open(self) -> bool:
        """Whether the cursor is on a row above the line's last: a line feed (readline
        moving down, `_rl_move_vert`) then lands on a row of the same line."""
        return self._cursor()[0] // self.width < (len(self.cells) - 1) // self.width

    def line_feed(self) -> None:
        """CR LF within the line: the start of the row below the cursor's."""
        self.col = min(self._cursor()[1] + self.width, self.max_cells)
        self.pending = False

    def _cursor(self) -> tuple[int, int]:
        """(the cell the cursor is on, the start of its row)."""
        cursor = self.col - 1 if self.pending else self.col
        return cursor, cursor - cursor % self.width

    def text(self) -> str:
        cells = self.cells
        if _WRAP_FILL in cells:
            width = self.width
            for at, cell in enumerate(cells):
                if cell == _WRAP_FILL:
                    at_margin = (at + 1) % width == 0
                    wrapped = at_margin and cells[at + 2 : at + 3] == [_WIDE_TAIL]
                    cells[at] = "" if wrapped else _BLANK
        return "".join(cells).replace(_BLANK, " ").replace(_TAB_FILL, "").rstrip(" ")

    def print(self, text: str) -> None:
        cells, col, width, max_cells = self.cells, self.col, self.width, self.max_cells
        if col > len(cells):
            cells.extend([_BLANK] * (col - len(cells)))
        if _narrow(text):
            stop = min(col + len(text), max_cells)
            _unsplit(cells, col)
            _unsplit(cells, stop)
            cells[col:stop] = text[: stop - col]
            if stop > col:
                self.pending = stop % width == 0
            self.col = stop
            return
        for char in text:
            size = char_width(char)
            if size == 0:
                if col:  # a combining mark joins the character last written
                    at = col - 1 if cells[col - 1] != _WIDE_TAIL or col < 2 else col - 2
                    cells[at] += char
                continue
            if size == 2 and col % width == width - 1:
                # No room left in the row: it wraps, and the row's last cell stays as it
                # was (xterm's way; avt blanks a narrow character there).
                if col + 3 > max_cells:
                    break
                if col == len(cells):
                    cells.append(_WRAP_FILL)
                col += 1
            if col + size > max_cells:
                break
            _unsplit(cells, col)
            _unsplit(cells, col + size)
            if col + size > len(cells):
                cells.extend([_BLANK] * (col + size - len(cells)))
            cells[col] = char
            if size == 2:
                cells[col + 1] = _WIDE_TAIL
            col += size
            self.pending = col % width == 0
        self.col = col

    def carriage_return(self) -> None:
        self.col = self._cursor()[1]
        self.pending = False

    def move(self, final: str, count: int) -> None:
        """A cursor move by `count` (at least 1): D left, C/a right, G/` to a column of
        the row, A up and B down a row of the line."""
        cursor, start = self._cursor()
        width = self.width
        if final == "D":
            cursor = max(cursor - count, start)
        elif final in "Ca":
            cursor = min(cursor + count, start + width - 1)
        elif final in "G`":
            cursor = start + min(count - 1, width - 1)
        elif final == "A":
            cursor -= min(count, cursor // width) * width
        else:
            last = max(cursor, len(self.cells) - 1) // width
            cursor += min(count, last - cursor // width) * width
        self.col = min(cursor, self.max_cells)
        self.pending = False

    def tab(self) -> None:
        cells = self.cells
        cursor, start = self._cursor()
        stop = start + min((cursor - start) // 8 * 8 + 8, self.width - 1)
        stop = min(stop, self.max_cells)
        if cursor >= len(cells) and stop > cursor:
            cells.extend([_BLANK] * (cursor - len(cells)))
            cells.append("\t")
            cells.extend([_TAB_FILL] * (stop - cursor - 1))
        self.col = max(stop, cursor)
        self.pending = False

    def resize(self, width: int) -> None:
        self.width = max(width, 2)
        self.pending = self.pending and self.col % self.width == 0

    def edit(self, final: str, count: int) -> None:
        """Apply one in-row CSI sequence."""
        many = max(count, 1)
        if final not in "KPX@":
            self.move(final, many)
            return
        cells = self.cells
        cursor, start = self._cursor()
        end = start + self.width  # the row's end
        if final == "K":
            if count == 0:
                if self.pending:
                    return
                _unsplit(cells, cursor)
                if len(cells) <= end:
                    del cells[cursor:]
                else:
                    cells[cursor:end] = [_BLANK] * (end - cursor)
            elif count == 1:
                _unsplit(cells, cursor + 1)
                upto = min(cursor + 1, len(cells))
                cells[start:upto] = [_BLANK] * max(upto - start, 0)
            elif count == 2:
                if len(cells) <= end:
                    del cells[start:]
                else:
                    cells[start:end] = [_BLANK] * self.width
            return
        if final == "X":
            if not self.pending:
                stop = min(cursor + many, end)
                _unsplit(cells, cursor)
                _unsplit(cells, stop)
                cells[cursor:stop] = [_BLANK] * len(cells[cursor:stop])
            return
        self.col = cursor
        self.pending = False
        many = min(many, end - cursor)
        if final == "P":
            _unsplit(cells, cursor)
            _unsplit(cells, cursor + many)
            _untab(cells, cursor, end)
            del cells[cursor : cursor + many]
            if len(cells) > end - many:  # later rows stay where they are
                cells[end - many : end - many] = [_BLANK] * many
        elif cursor < len(cells):  # "@"
            _unsplit(cells, cursor)
            _unsplit(cells, end - many)  # what is pushed past the margin goes
            _untab(cells, cursor, end)
            cells[cursor:cursor] = [_BLANK] * many
            if len(cells) > end:
                del cells[end : end + many]
            del cells[self.max_cells :]


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


def _untab(cells: list[str], col: int, stop: int) -> None:
    """Before cells [col, stop) shift sideways: the TABs among them turn into blanks (a
    TAB shows the width to the next tab stop, which the shift changes)."""
    while "\t" in cells[col:stop]:
        at = cells.index("\t", col, stop)
        _unsplit(cells, at + 1)  # its fill; a TAB that filled nothing is a plain blank
        if cells[at] == "\t":
            cells[at] = _BLANK
        col = at + 1


def _after_deletions(cut: int, spans: Sequence[tuple[int, int]]) -> int:
    """Where position `cut` is once the (sorted, disjoint) spans are deleted; a cut within
    one goes to its start."""
    deleted = 0
    for start, end in spans:
        if end > cut:
            return min(cut, start) - deleted
        deleted += end - start
    return cut - deleted


def _find_all(data: bytes, needle: bytes) -> list[int]:
    found = []
    at = data.find(needle)
    while at >= 0:
        found.append(at)
        at = data.find(needle, at + 1)
    return found


def _character_start(data: bytes, cut: int) -> int:
    """`cut`, or the start of the UTF-8 character it falls in."""
    lead = cut
    while lead > max(cut - 3, 0) and lead < len(data) and 0x80 <= data[lead] < 0xC0:
        lead -= 1
    return lead if lead < cut and data[lead] >= 0xC0 else cut


class TextCleaner:
    """Turns raw PTY bytes into clean text, line for line (newlines are never touched)."""

    __slots__ = ("_max_cells", "_strip")

    def __init__(self, max_escape_length: int, max_cells: int = 4000) -> None:
        self._strip = _escape_pattern(max_escape_length)
        self._max_cells = max_cells

    def clean(
        self,
        raw: bytes,
        collapsed: bool = False,
        *,
        width: int | None = None,
        resizes: Sequence[tuple[int, int]] = (),
        continued: bool = False,
    ) -> str:
        """Strip controls and escapes, decode (replacing invalid UTF-8), replay the lines
        that edit themselves. With `collapsed`, NUL marks hidden lines (see `_collapse`):
        a line that is only NUL stays so, other NULs go. `width` is the window's width at
        the first byte (None: unknown, rows never wrap), `resizes` the (position in `raw`,
        width) where it changed, in order. With `continued`, a line feed that leaves the
        cursor on a row of the same line (readline moving down after moving up, see
        `_Row.is_open`) continues that line: the line numbers it passes read `HIDDEN`.

        Whole regions at a time, C-level scans first; only lines holding CR, BS or an
        in-row edit cost Python work.
        """
        if resizes:
            text = self._decode_marked(raw, collapsed, resizes)
        else:
            text = self._decode(raw.translate(None, _C0_BUT_NUL if collapsed else _C0))
        if "\r" in text:
            # A CR before a newline is part of the line end, not a move; so is one that ends
            # the text (an unfinished line's CRLF half-arrived, or a line cleaned alone): the
            # line reads the same before and after its newline arrives.
            text = text.replace("\r\n", "\n").removesuffix("\r")
        special = "\r" in text or "\x08" in text
        if "\x1b" in text and not special:
            # Erasing to the end with the cursor at the end (nothing moved it) erases nothing.
            erased = text.replace("\x1b[K", "").replace("\x1b[0K", "")
            if resizes:
                erased = _WIDTH_MARK.sub("", erased)
            special = "\x1b" in erased
            if not special:
                text = erased
        if special:
            text = self._replay(text, width, marked=bool(resizes), continued=continued)
        if collapsed and HIDDEN in text:
            text = "\n".join(
                line if line == HIDDEN else line.replace(HIDDEN, "") for line in text.split("\n")
            )
        return text

    def _decode(self, raw: bytes) -> str:
        """Text of `raw` (its C0 controls deleted): escapes and BEL deleted, decoded, C1
        controls deleted."""
        if b"\x1b" in raw:
            raw = self._strip.sub(b"", raw)
        if b"\x07" in raw:
            raw = raw.replace(b"\x07", b"")
        text = raw.decode("utf-8", "replace")
        if b"\xc2" in raw:
            text = _C1.sub("", text)
        return text

    def _decode_marked(
        self, raw: bytes, collapsed: bool, resizes: Sequence[tuple[int, int]]
    ) -> str:
        """`_decode`, with a width mark where each resize happened. A resize lands between
        two reads, which can cut an escape sequence, a UTF-8 character or a CR LF: each
        position is followed through every deletion, and a mark that would split
        something goes before it, so the text reads as if the mark were not there. (Rare:
        only regions that hold a resize pay for this.)"""
        table = _C0_BUT_NUL if collapsed else _C0
        kept = raw.translate(None, table)
        cuts = []
        done = kept_done = 0
        for position, _ in resizes:
            kept_done += len(raw[done:position].translate(None, table))
            done = position
            cuts.append(kept_done)
        # Through the escape sequences' deletion: a cut within one goes to its start.
        spans = [match.span() for match in self._strip.finditer(kept)]
        stripped = self._strip.sub(b"", kept)
        cuts = [_after_deletions(cut, spans) for cut in cuts]
        # Through BEL's deletion.
        bells = [(at, at + 1) for at in _find_all(stripped, b"\x07")]
        data = stripped.replace(b"\x07", b"")
        cuts = [_after_deletions(cut, bells) for cut in cuts]
        # Not within a UTF-8 character; then through decoding and C1 deletion.
        cuts = [_character_start(data, cut) for cut in cuts]
        text = data.decode("utf-8", "replace")
        cuts = [len(data[:cut].decode("utf-8", "replace")) for cut in cuts]
        if b"\xc2" in data:
            spans = [match.span() for match in _C1.finditer(text)]
            text = _C1.sub("", text)
            cuts = [_after_deletions(cut, spans) for cut in cuts]
        pieces = []
        last = 0
        for cut, (_, width) in zip(cuts, resizes, strict=True):
            if 0 < cut < len(text) and text[cut - 1 : cut + 1] == "\r\n":
                cut -= 1  # a CR before a newline is part of the line end
            escape = text.rfind("\x1b", max(cut - 8, 0), cut)
            if escape >= 0:
                match = _KEPT_SEQUENCE.match(text, escape)
                if match is not None and match.end() > cut:
                    cut = escape
            cut = max(cut, last)
            if cut < len(text):  # a mark at the end would change nothing
                pieces.append(text[last:cut])
                pieces.append(f"\x1b[{width}\x01")
                last = cut
        pieces.append(text[last:])
        return "".join(pieces)

    def _row(self, line: str, width: int | None, marked: bool) -> str:
        """A line that holds CR, BS or ESC, as its rows showed it. Erasing to the end with
        the cursor at the end (nothing moved it) erases nothing: such a line is only
        stripped of those sequences, like a line with none."""
        if "\r" not in line and "\x08" not in line:
            erased = line.replace("\x1b[K", "").replace("\x1b[0K", "")
            if marked:
                erased = _WIDTH_MARK.sub("", erased)
            if "\x1b" not in erased:
                return erased
        return replay_line(line, self._max_cells, width)

    def _replay(self, text: str, width: int | None, *, marked: bool, continued: bool) -> str:
        out: list[str] = []
        done = 0
        match = _SPECIAL.search(text)
        while match is not None:
            hit = match.start()
            start = text.rfind("\n", 0, hit) + 1
            end = text.find("\n", hit)
            if end < 0:
                end = len(text)
            between = text[done:start]
            if marked:
                width = _last_width(between, width)
                between = _WIDTH_MARK.sub("", between)
            out.append(between)
            line = text[start:end]
            if continued and width is not None and _UP.search(line):
                end, width = self._continue(text, start, end, width, marked, out)
            else:
                out.append(self._row(line, width, marked))
                if marked:
                    width = _last_width(line, width)
            done = end
            match = _SPECIAL.search(text, end)
        rest = text[done:]
        out.append(_WIDTH_MARK.sub("", rest) if marked else rest)
        return "".join(out)

    def _continue(
        self, text: str, start: int, end: int, width: int, marked: bool, out: list[str]
    ) -> tuple[int, int | None]:
        """Replay the line at text[start:end], which moves the cursor up a row, and the
        lines after it that it continues (the cursor was on a row above its last when
        their line feed came; a line touched by a full-screen span, which holds NUL, is
        never one). Appends their text to `out`, and returns where the last of them ends
        and the width there."""
        row = _Row(self._max_cells, max(width, 2))
        line = text[start:end]
        row.feed(line)
        current: int | None = _last_width(line, width) if marked else width
        hidden = 0
        while row.is_open() and end < len(text):
            stop = text.find("\n", end + 1)
            if stop < 0:
                stop = len(text)
            line = text[end + 1 : stop]
            if HIDDEN in line:
                break
            row.line_feed()
            row.feed(line)
            if marked:
                current = _last_width(line, current)
            hidden += 1
            end = stop
        out.append(row.text() + ("\n" + HIDDEN) * hidden)
        return end, current


def _last_width(text: str, width: int | None) -> int | None:
    """The width after the last width mark in `text` (`width` when it has none)."""
    at = text.rfind("\x01")
    if at < 0:
        return width
    return int(text[text.rfind("[", 0, at) + 1 : at])


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
        # Groups that may still change (see `_group`; at most three, each at most four
        # stretches of text), kept while the retained output stays the same: start and
        # end offsets of the ring when they were built.
        self._provisional: dict[int, tuple[int, bytes, int]] = {}
        self._provisional_at = (-1, -1)
        # Switches to (on) and from the alternate screen, (start, end, on), each a change
        # of state, found lazily by `_scan_switches`; `_alternate` is the state after them.
        self._switches: list[tuple[int, int, bool]] = []
        self._alternate = False
        self._switches_scanned = 0
        # (offset, cols): the window's width from that output offset on, oldest first;
        # before the first, the width of the last one dropped (None: none was set).
        self._widths: list[tuple[int, int]] = []
        self._width_before: int | None = None

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

    def note_width(self, cols: int) -> None:
        """The window is `cols` wide from the next byte on: a line that reaches its margin
        wraps there, and a CR on a wrapped line returns to the start of the cursor's row.
        Widths older than the retained output are dropped (at most MAX_WIDTHS kept)."""
        widths = self._widths
        end = self._ring.end_offset
        if widths and widths[-1][0] == end:
            widths.pop()  # nothing was written at the width it replaces
        widths.append((end, cols))
        start = self._ring.start_offset
        while len(widths) > 1 and (widths[1][0] <= start or len(widths) > MAX_WIDTHS):
            self._width_before = widths.pop(0)[1]

    def _width_at(self, offset: int) -> int | None:
        """The width in force at `offset` (None: no width was set yet)."""
        index = bisect_right(self._widths, (offset, _UNBOUNDED)) - 1
        return self._widths[index][1] if index >= 0 else self._width_before

    def _resizes(self, low: int, high: int) -> list[tuple[int, int]]:
        """(offset, width) of the width changes within (low, high)."""
        widths = self._widths
        first = bisect_right(widths, (low, _UNBOUNDED))
        return [(offset, cols) for offset, cols in widths[first:] if offset < high]

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
        # A group that may still change (the oldest, partly rotated out; the newest, not
        # yet closed; one showing a running full-screen program's marker) is rebuilt only
        # when output arrived since: repeated reads of a quiet session clean nothing.
        retained = (start, ring.end_offset)
        if self._provisional_at != retained:
            self._provisional.clear()
            self._provisional_at = retained
        cached = self._provisional.get(group)
        if cached is not None:
            return cached
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
        elif len(entry[1]) <= 4 * stretch:  # (one holding a very long line is not kept)
            self._provisional[group] = entry
        return entry

    def _clean(self, low: int, high: int, *, continued: bool = True) -> tuple[str, bool]:
        """Clean text of [low, high), full-screen spans collapsed, and whether it is final
        (False while it shows the marker of a full-screen program still running, or a line
        that later output may continue).

        `low` is a line start. Readline edits a command that spans rows by moving up (CSI A)
        and back down with line feeds, so one logical line can take several line numbers
        (`TextCleaner.clean`'s `continued`): the lines from the first up-move in the
        `_CONTINUED_BYTES` before `low` are replayed with the region (its first lines may
        continue one of them) and, when the region moves up, the lines in the
        `_CONTINUED_BYTES` after it (they may continue one of its lines); only the region's
        own lines are kept. Output without an up-move pays one search of those bytes."""
        if not continued:
            return self._clean_range(low, high, continued=False)
        ring = self._ring
        back = max(ring.start_offset, low - _CONTINUED_BYTES)
        if back == 0 or (back > ring.start_offset and ring.byte_at(back - 1) == 10):
            begin = back  # a line start
        else:  # (`low` is a line start: a newline ends [back, low) unless it is empty)
            begin = ring.find(b"\n", back, low) + 1 if back < low else low
        raw = ring.read(begin, high)
        up = _RAW_UP.search(raw)
        if up is None:
            return self._clean_range(low, high, continued=True, raw=raw[low - begin :])
        lead = low
        if up.start() < low - begin:
            found = raw.rfind(b"\n", 0, up.start())
            lead = begin + found + 1 if found >= 0 else begin
        open_ended = False  # whether output still to come may continue a line
        limit = high + _CONTINUED_BYTES
        if limit >= ring.end_offset:
            tail = ring.end_offset
            open_ended = True
        else:
            tail = high + ring.read(high, limit).rfind(b"\n") + 1
        if lead == low and tail == high:
            text, final = self._clean_range(low, high, continued=True)
            return text, final and not open_ended
        text, final = self._clean_range(lead, tail, continued=True)
        skipped = ring.count(b"\n", lead, low)
        own = ring.count(b"\n", low, high)
        pieces = text.split("\n")[skipped : skipped + own + 1]
        if tail > high:
            pieces[-1] = ""  # the start of the first line after the region
        return "\n".join(pieces), final and not open_ended

    def _clean_range(
        self, low: int, high: int, *, continued: bool, raw: bytes | None = None
    ) -> tuple[str, bool]:
        """Clean text of [low, high) as it stands (see `_clean`); `raw`: its bytes, if read."""
        if raw is None:
            raw = self._ring.read(low, high)
        spans = self._spans(low, high)
        width = self._width_at(low)
        resizes = self._resizes(low, high)
        if not spans:
            moved = [(offset - low, cols) for offset, cols in resizes]
            text = self._cleaner.clean(raw, width=width, resizes=moved, continued=continued)
            return text, True
        parts = []
        size = 0  # of the parts so far
        at = 0  # the next resize
        moved = []  # the resizes, as positions in the parts
        pos = low
        final = True

        def add(part: bytes) -> None:
            nonlocal size
            parts.append(part)
            size += len(part)

        for enter, leave in spans:
            first, last = max(enter, low), high if leave is None else min(leave, high)
            while at < len(resizes) and resizes[at][0] < first:
                offset, cols = resizes[at]
                moved.append(
                    (size + len(raw[pos - low : offset - low].replace(b"\x00", b"")), cols)
                )
                at += 1
            add(raw[pos - low : first - low].replace(b"\x00", b""))
            hidden = raw[first - low : last - low].count(b"\n")
            if enter >= low:  # the span starts here: its first line says what it was
                # (its NUL, dropped at the end, stops a readline continuation: `_continue`)
                add(b"\x1b\\" + self._marker(enter, leave).encode() + b"\x00")
                final = final and leave is not None
            else:
                add(HIDDEN.encode())
            add(b"\n\x00" * hidden)
            while at < len(resizes) and resizes[at][0] < last:  # within the span: after it
                moved.append((size, resizes[at][1]))
                at += 1
            pos = last
        for offset, cols in resizes[at:]:
            moved.append((size + len(raw[pos - low : offset - low].replace(b"\x00", b"")), cols))
        parts.append(raw[pos - low :].replace(b"\x00", b""))
        text = self._cleaner.clean(
            b"".join(parts), collapsed=True, width=width, resizes=moved, continued=continued
        )
        return text, final

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
        known to be at a row start), so what the last rewrites left shows; without a CR there,
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
                    text = self._clean(carriage_return, end, continued=False)[0]
                else:
                    text = "…" + self._clean(low, end, continued=False)[0].lstrip("\ufffd")
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
            group = self._group_of(line)
            low, blob, count = self._group(group)
            head = memoryview(blob)[_line_start_in_blob(blob, line - low) :]
            pieces: list[bytes | memoryview] = [head]
            size = len(head)
            stop = low + count
            cache = self._cache
            while size < budget and stop < complete:
                # Line `stop` starts in the next stretch or, past a line longer than a
                # stretch, in a later one (those in between hold no line start: no text).
                # Stretch by stretch, mostly straight from the cache: a scan of the whole
                # buffer walks ~120 of them per MB.
                group += 1
                low, blob, count = cache.get(group) or self._group(group)
                pieces.append(blob)
                size += len(blob)
                stop = low + count
            region = b"".join(pieces)
            head.release()
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
