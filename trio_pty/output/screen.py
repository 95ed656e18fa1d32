"""What the terminal shows: a lazy screen over the ring, a native VT emulator fed on demand.

The reader never touches this module: a session nobody looks at costs nothing. The first
snapshot of a session replays its retained output into an emulator (asciinema's avt, through
the `pyavt` binding: about 10 ms per MB of colourful output, see docs/output.md), starting as
late as the output allows (output that never rotated and is at most `_REPLAYED_WHOLE` long is
replayed whole: looking for a later start would cost more than it saves):

- at a full reset (RIS), at "cursor home, erase the screen", or at the line start after
  which enough complete lines scrolled everything older away (`scroll_start`) unless it lies
  inside a control string or sequence (an unterminated OSC takes every line after it):
  from there on the screen no longer depends on what came before (exactly, given the modes
  in force there);
- else at a cursor placement in the last 64 KiB where the output since then is known to have
  rewritten every cell: checked by replaying it over a screen filled with a marker
  character, and accepting only if no marker is left (`top` and vim redraw a few rows per
  frame, so placements further back are tried, doubling the distance: `_probed`);
- else at the oldest retained byte (once older output rotated out, at the first ESC, CAN or
  SUB or line start after it, `modes.resync`: never within a sequence the rotation cut).

The terminal modes in force at the start (alternate screen, scroll region, origin, auto-wrap,
insert, character sets, cursor visibility) are found by `modes.scan` and put into the fresh
emulator first (a start whose later output restores a cursor saved before it, or after which
tab stops matter that were set before it, is not taken); the window size is the one recorded
for that offset, and later resizes are applied at the offsets where they happened.

A line rewritten in place many times (a progress line) is fed collapsed to what it leaves
(`collapse_overwrites`). Later snapshots feed only the bytes since. Emulators live in a small
LRU (`ScreenCache`), dropped when idle; one that fell behind the ring (its next byte rotated
out) is rebuilt.
"""

from __future__ import annotations

import codecs
import functools
import re
import unicodedata
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import attrs
import avt
import re2

from .. import model
from . import draw as drawing
from . import modes
from .buffer import OutputBuffer, SizeRecord

_MARK: Final = "\U0010fffd"  # fills the screen for the rewrite check; never shown
_MAX_CHECKED_TAIL: Final = 65_536  # output after a "cursor home" worth checking for a rewrite
_CARRY: Final = modes.LONGEST_SWITCH  # bytes kept to see a switch split across feeds
# Output that never rotated is replayed from its first byte unless a clear, reset or scroll
# start lets it start later: placements are probed only when it is longer than this. The
# probes replay at most about twice the checked tail, which costs more than replaying a
# short output whole (a session of 2 KB of vim paid 19x a plain replay; issue 32).
_PROBED_ABOVE: Final = 8 * _MAX_CHECKED_TAIL
# Output that never rotated and is no longer than this is replayed whole, as it is: finding a
# later start costs more than the replay it would save.
_REPLAYED_WHOLE: Final = 65_536
_COLLAPSED_ABOVE: Final = 262_144  # a shorter replay is fed as it is: collapsing costs more
_RUNNING_MARK: Final = "[full-screen program running since"  # lines.py's, for a program on
_SEQUENCE_TAIL: Final = 4096  # bytes looked back for a sequence the output ends inside
# In the dump of a session on the alternate screen (made `seven_bit`), the primary screen's
# cursor is the placement just before the switch (which saves that cursor).
_PRIMARY_CURSOR = re.compile(r"\x1b\[([0-9]+);[0-9]+H(?:\x1b\[[0-9;]*m)*\x1b\[\?1049h")


def scroll_start(data: bytes, rows: int) -> int:
    """A line start in `data` after which the screen depends on nothing before, or -1.

    That holds where the cursor is at column 0 (just after CR LF) and at least 2 x rows - 1
    line feeds follow with nothing that leaves the row otherwise (`modes.stays_in_rows`):
    every row on the screen then has scrolled away, whatever row the cursor was on (from
    the top row, rows - 1 line feeds only reach the bottom).
    """
    line_feed = len(data)
    for _ in range(2 * rows - 1):
        line_feed = data.rfind(b"\n", 0, line_feed)
        if line_feed < 0:
            return -1
    for _ in range(4):  # a few tries to find a CR LF
        line_feed = data.rfind(b"\n", 0, line_feed)
        if line_feed <= 0:
            return -1
        if data[line_feed - 1] == 0x0D:
            start = line_feed + 1
            return start if modes.stays_in_rows(data[start:]) else -1
    return -1


def _last_insert_on(events: list[modes.Event]) -> int:
    """Where insert mode (IRM) is last set on, or -1."""
    for event in reversed(events):
        if event.kind == "ansi" and event.on and 4 in event.params:
            return event.start
    return -1


class _SavedCursors:
    """Where the output saves and restores the cursor (ESC 7 and 8, CSI s and u)."""

    def __init__(self, events: list[modes.Event]) -> None:
        # A full or soft reset puts the saved cursor back to the home position, as a fresh
        # emulator has it: a restore after it restores nothing older.
        self._saves = [
            event.start for event in events if event.kind == "save" or event.kind in modes.RESETS
        ]
        self._restores = [event.start for event in events if event.kind == "restore"]

    def restores_older(self, start: int) -> bool:
        """True when data[start:] restores a cursor position saved before `start`."""
        index = bisect_left(self._restores, start)
        if index == len(self._restores):
            return False
        saved = bisect_left(self._saves, self._restores[index]) - 1
        return saved < 0 or self._saves[saved] < start


# A run of lines rewritten in place: CR, printable ASCII, CR, ... (a progress line). At least
# three rewrites, so that ordinary CR LF output never matches.
_OVERWRITES = re.compile(rb"\r[\x20-\x7e]*(?:\r[\x20-\x7e]*){3,}")


def collapse_overwrites(run: bytes, cols: int) -> bytes | None:
    """Bytes that leave a row as a run of `_OVERWRITES` leaves it, and the cursor where it
    leaves it: the cells each column last received, then the last rewrite again (which
    leaves the cursor and a pending wrap as they were). None when a rewrite is wider than
    the row (it would wrap onto the next one). Insert mode must be off: it shifts cells."""
    rewrites = run.split(b"\r")[1:]
    widest = max(map(len, rewrites))
    if widest > cols:
        return None
    row = bytearray(widest)
    covered = 0
    for rewrite in reversed(rewrites):  # the last rewrite to reach a column wins it
        if len(rewrite) > covered:
            row[covered : len(rewrite)] = rewrite[covered:]
            covered = len(rewrite)
            if covered == widest:
                break
    return b"\r" + bytes(row) + b"\r" + rewrites[-1]


# Where Unicode puts combining marks (Mn, Me): the BMP and plane 1, and the variation
# selectors supplement (plane 14). Planes 2-13 hold none.
_MARK_PLANES = (range(0x300, 0x20000), range(0xE0100, 0xE01F0))


@functools.cache
def _combining_marks() -> str:
    """An RE2 class of the combining marks (Unicode Mn, Me), built on first use (5 ms)."""
    ranges: list[list[int]] = []
    for plane in _MARK_PLANES:
        for code in plane:
            if unicodedata.category(chr(code)) in ("Mn", "Me"):
                if ranges and ranges[-1][1] == code - 1:
                    ranges[-1][1] = code
                else:
                    ranges.append([code, code])
    return "[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in ranges) + "]"


@functools.cache
def _marks_in_utf8() -> Any:
    """Combining marks, searched for in the raw UTF-8 bytes (RE2: about 2 ms per MB of
    non-ASCII output, where Python's re takes 400)."""
    return re2.compile((_combining_marks() + "+").encode())


@functools.cache
def _marked_clusters() -> Any:
    """A character followed by combining marks, or an escape sequence (matched whole, so
    that its final byte is never taken for a base character)."""
    return re2.compile("\x1b\\[[0-?]*[ -/]*[@-~]|\x1b[^\\[]|(.?)(" + _combining_marks() + "+)")


def _is_mark(char: str) -> bool:
    return unicodedata.category(char) in ("Mn", "Me")


def emulator_text(text: str, raw: bytes | None = None) -> str:
    """`text` (decoded from `raw`, when given) as fed to avt, around two of its bugs (pyavt
    0.1.2; docs/output.md): DEL, which terminals ignore, is deleted (avt shows it as a
    character); a character and the combining marks after it are composed (NFC: `e` +
    U+0301 is `é`), and marks that do not compose are deleted (avt gives each mark a cell
    of its own, so everything after it on the row, and a mark after the last column,
    landed one cell on). ASCII costs two C-level checks."""
    if "\x7f" in text:
        text = text.replace("\x7f", "")
    if text.isascii():
        return text
    if raw is None:
        raw = text.encode()
    if _marks_in_utf8().search(raw) is None:
        return text
    pieces = []
    done = 0
    for match in _marked_clusters().finditer(text):
        marks = match.group(2)
        if marks is None:
            continue  # an escape sequence, as it is
        start, end = match.span()
        composed = unicodedata.normalize("NFC", match.group(1) + marks)
        pieces.append(text[done:start])
        pieces.append("".join(ch for ch in composed if not _is_mark(ch)))
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def _probed(positions: list[int]) -> list[int]:
    """The positions worth checking for a rewrite of every cell: the last, the second last,
    the fourth last and so on, doubling, and the oldest; so the replays that fail cost at
    most about as much as the one that succeeds."""
    picked = []
    back = 1
    while back < len(positions):
        picked.append(positions[-back])
        back *= 2
    return [*positions[:1], *reversed(picked)]


def _size_at(sizes: Sequence[SizeRecord], offset: int) -> SizeRecord:
    """The size recorded last at or before `offset` (the oldest one when none is)."""
    found = sizes[0]
    for record in sizes:
        if record.offset > offset:
            break
        found = record
    return found


class LiveScreen:
    """One session's emulator, fed up to `fed` (an absolute output offset)."""

    __slots__ = ("_alternate", "_carry", "_decoder", "_seq", "_vt", "fed", "last_used", "started")

    def __init__(self, size: SizeRecord, offset: int) -> None:
        self._vt = avt.Vt(size.cols, size.rows, scrollback_limit=0)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._seq = size.seq
        self._alternate = False
        self._carry = b""
        self.started = offset  # where the replay started
        self.fed = offset
        self.last_used = 0.0

    @classmethod
    def replay(
        cls,
        output: OutputBuffer,
        *,
        whole_up_to: int = _REPLAYED_WHOLE,
        probed_above: int = _PROBED_ABOVE,
    ) -> LiveScreen:
        """An emulator for the retained output, started as late as it may be (module doc).
        Output that never rotated is replayed whole up to `whole_up_to` bytes, and probed
        for a late cursor placement only past `probed_above` (tests lower both to 0, to
        check the late start on short output). Its length and complexity (16) are the
        candidate starting points it weighs in turn (module doc)."""
        data, base = output.snapshot_with_offset()
        sizes = output.sizes
        if not base and len(data) <= whole_up_to:
            whole = cls(_size_at(sizes, 0), 0)  # the output as it is, from its first byte
            whole._feed(data, sizes)
            return whole
        rows = sizes[-1].rows
        resized_at = max(base, sizes[-1].offset) - base  # no resize after this position
        events = list(modes.scan(data))
        switches = [event for event in events if modes.is_switch(event)]
        last_switch = max((event.start for event in switches), default=-1)
        last_exit = max((event.start for event in switches if not event.on), default=-1)
        candidates = [
            (event.start, event.kind) for event in events if event.kind in ("clear", "reset")
        ]
        scroll = scroll_start(data, rows)
        if scroll >= resized_at and modes.ground_at(data, scroll):  # (not inside a string)
            candidates.append((scroll, "scroll"))
        tail = max(last_switch + 1, len(data) - _MAX_CHECKED_TAIL)
        if base or len(data) > probed_above:
            candidates += [(start, "position") for start in _probed(modes.positions(data, tail))]
        candidates.sort()
        saved = _SavedCursors(events)
        visibility = modes.CursorVisibility(data, events)
        # Fold the events up to each candidate: the modes in force where it would start.
        state = modes.Modes()
        folded = 0
        # The oldest retained byte, or, once older ones rotated out, where a parser is
        # surely in its ground state (never inside a sequence cut by the rotation).
        best = (modes.resync(data) if base else 0, modes.Modes())
        positioned: list[tuple[int, modes.Modes]] = []
        for start, kind in candidates:
            while folded < len(events) and events[folded].start < start:
                state.apply(events[folded])
                folded += 1
            if kind == "reset":
                best = (start, modes.Modes())
            elif state.tabs_changed or (state.alternate and last_exit > start):
                continue  # tab stops, or the primary screen restored at that exit, unknown
            elif saved.restores_older(start):
                continue
            elif kind == "scroll":
                if state.full_region(rows):  # rows outside a region would keep older text
                    best = (start, attrs.evolve(state))
            elif kind == "clear" and not state.origin:
                best = (start, attrs.evolve(state))
            elif kind == "position":
                positioned.append((start, attrs.evolve(state)))
        for start, at in reversed(positioned):  # the latest first: the least to replay
            if start > best[0]:
                hidden = visibility.hidden_at(start)
                live = cls._start(output, data, base, events, start, at, hidden, fill=True)
                if live is not None:
                    return live
        start, at = best
        hidden = visibility.hidden_at(start)
        live = cls._start(output, data, base, events, start, at, hidden, fill=False)
        assert live is not None
        return live

    @classmethod
    def from_oldest(cls, output: OutputBuffer) -> LiveScreen:
        """An emulator fed every retained byte as it is: what `replay` must equal (checks)."""
        data, base = output.snapshot_with_offset()
        live = cls(_size_at(output.sizes, base), base)
        live._feed(data, output.sizes)
        return live

    @classmethod
    def _start(
        cls,
        output: OutputBuffer,
        data: bytes,
        base: int,
        events: list[modes.Event],
        start: int,
        at: modes.Modes,
        hidden: bool,
        *,
        fill: bool,
    ) -> LiveScreen | None:
        """Replay data[start:] after putting the emulator into the modes `at`; with `fill`,
        over a screen of marker characters, returning None if any is left."""
        sizes = output.sizes
        size = _size_at(sizes, base + start)
        live = cls(size, base + start)
        live._alternate = at.alternate
        lead = "\x1b[?1049h" if at.alternate else ""
        if fill:
            lead += "".join(f"\x1b[{row + 1};1H" + _MARK * size.cols for row in range(size.rows))
        lead += at.preamble(size.rows) + modes.charsets(data, events, start)
        if hidden:
            lead += "\x1b[?25l"
        if lead:
            live._vt.feed_str(lead)
        inserting = at.insert or _last_insert_on(events) >= start
        if inserting or len(data) - start <= _COLLAPSED_ABOVE:
            live._feed(data[start:], sizes)
        else:
            live._feed_collapsing(data, start, sizes)
        if fill and any(_MARK in line.text for line in live._vt.view()):
            return None
        return live

    def _feed_collapsing(self, data: bytes, start: int, sizes: Sequence[SizeRecord]) -> None:
        """Feed data[start:], each run of rewrites of a line collapsed (a 1 MB progress line
        costs the emulator 10 ms, finding and collapsing it 5 ms) unless the window was
        resized in it or it starts inside a sequence or control string."""
        base = self.fed - start
        pos = start
        for run in _OVERWRITES.finditer(data, start):
            run_start, run_end = run.span()
            if any(base + run_start < record.offset < base + run_end for record in sizes):
                continue
            if not modes.ground_at(data, run_start):  # its text would end a sequence
                continue
            cols = _size_at(sizes, base + run_start).cols
            collapsed = collapse_overwrites(run.group(), cols)
            if collapsed is None:
                continue
            self._feed(data[pos:run_start], sizes)
            self._vt.feed_str(self._decoder.decode(collapsed))
            self.fed = base + run_end
            pos = run_end
        self._feed(data[pos:], sizes)

    def catch_up(self, output: OutputBuffer) -> bool:
        """Feed the bytes written since; False when some of them already rotated out."""
        if not output.start_offset <= self.fed <= output.end_offset:
            return False
        data, _, _ = output.bytes_since(self.fed)
        self._feed(data, output.sizes)
        return True

    def _feed(self, data: bytes, sizes: Sequence[SizeRecord]) -> None:
        """Feed `data` (starting at offset `fed`), applying the resizes recorded within it."""
        vt = self._vt
        decoder = self._decoder
        offset = self.fed
        pos = 0
        for record in sizes:
            if record.seq <= self._seq:
                continue
            cut = min(len(data), max(pos, record.offset - offset))
            if cut > pos:
                piece = data[pos:cut]
                vt.feed_str(emulator_text(decoder.decode(piece), piece))
                pos = cut
            vt.resize(record.cols, record.rows)
            self._seq = record.seq
        if pos < len(data):
            piece = data[pos:]
            vt.feed_str(emulator_text(decoder.decode(piece), piece))
        self._track_alternate(data)
        self.fed = offset + len(data)

    def _track_alternate(self, data: bytes) -> None:
        """Follow switches to and from the alternate screen (the emulator does not say)."""
        if not data:
            return
        window = self._carry + data
        if not modes.may_switch(window):
            self._carry = window[-_CARRY:]
            return
        for _, end, on in modes.alternate_switches(window):
            if end > len(self._carry):  # not already seen in the last feed
                self._alternate = on
        self._carry = window[-_CARRY:]

    def draw(self, output: OutputBuffer) -> drawing.Drawn:
        """The state this emulator holds drawn for a person's terminal (`output.draw`),
        with the offset live output continues from: `fed`, moved back to the start of a
        character or a sequence the output ends inside (the emulator waits for its rest; so
        the terminal gets it live, whole, rather than the dump's part of it)."""
        vt = self._vt
        cols, rows = vt.size
        screen = drawing.seven_bit(vt.dump())
        texts = output.read_compact(output.first_line, output.total_lines).lines
        if self._alternate and texts and texts[-1].startswith(_RUNNING_MARK):
            texts = texts[:-1]  # the line log's mark of the program the screen shows
        if self._alternate:  # its cursor's row is the one below the command that started it
            found = _PRIMARY_CURSOR.search(screen)
            rows_above = int(found.group(1)) - 1 if found else 0
        else:  # its cursor's row holds the unfinished last line, when there is one
            unfinished = output.total_lines > output.complete_lines
            rows_above = vt.cursor.row + (1 if unfinished else 0)
        history = drawing.history_lines(texts, rows_above, cols)
        data, base = output.snapshot_with_offset()
        end = self.fed - base
        offset = self.fed - len(self._decoder.getstate()[0])
        pending = drawing.pending_sequence(screen)
        if pending >= 0:  # the dump ends with the sequence the emulator is inside
            escape = data.rfind(b"\x1b", max(0, end - _SEQUENCE_TAIL), end)
            if escape >= 0 and modes.ground_at(data, escape):
                offset, screen = min(offset, base + escape), screen[:pending]
        text = drawing.draw(
            history,
            screen,
            rows,
            drawing.input_modes(data[:end]),
            output.terminal_title,
        )
        return drawing.Drawn(data=text.encode(), offset=offset, rows=rows, cols=cols)

    def image(self, session_id: str, title: str | None) -> model.Screen:
        vt = self._vt
        cols, rows = vt.size
        cursor = vt.cursor
        return model.Screen(
            id=session_id,
            rows=rows,
            cols=cols,
            lines=[line.text.rstrip(" ") for line in vt.view()],
            cursor=(cursor.row, min(cursor.col, cols - 1)),
            cursor_visible=cursor.visible,
            title=title,
            alternate=self._alternate,
            offset=self.fed,
        )


class ScreenCache:
    """Live emulators by session id: at most `capacity`, least recently used first out, and
    none kept after `idle_seconds` without a snapshot (each holds rows x cols cells)."""

    def __init__(self, capacity: int, idle_seconds: float) -> None:
        self._capacity = capacity
        self._idle = idle_seconds
        self._live: OrderedDict[str, LiveScreen] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: str) -> bool:
        return key in self._live

    def snapshot(self, key: str, output: OutputBuffer, now: float) -> model.Screen:
        """The screen of `output` now, through the live emulator kept under `key`."""
        return self._caught_up(key, output, now).image(key, output.terminal_title)

    def draw(self, key: str, output: OutputBuffer, now: float) -> drawing.Drawn:
        """The state of `output` now drawn for a person's terminal (`LiveScreen.draw`)."""
        return self._caught_up(key, output, now).draw(output)

    def _caught_up(self, key: str, output: OutputBuffer, now: float) -> LiveScreen:
        """The live emulator kept under `key`, caught up with `output`."""
        self.expire(now)
        live = self._live.pop(key, None)
        if live is None or not live.catch_up(output):
            live = LiveScreen.replay(output)
        live.last_used = now
        self._live[key] = live
        while len(self._live) > self._capacity:
            self._live.popitem(last=False)
        return live

    def expire(self, now: float) -> None:
        """Drop the emulators nobody looked at for `idle_seconds`."""
        while self._live:
            key, live = next(iter(self._live.items()))
            if now - live.last_used < self._idle:
                break
            del self._live[key]

    def discard(self, key: str) -> None:
        self._live.pop(key, None)
