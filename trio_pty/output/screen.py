"""What the terminal shows: a lazy screen over the ring, a native VT emulator fed on demand.

The reader never touches this module: a session nobody looks at costs nothing. The first
snapshot of a session replays its retained output into an emulator (asciinema's avt, through
the `pyavt` binding: about 10 ms per MB of colourful output, see docs/output.md), starting as
late as the output allows:

- at a full reset (RIS), at "cursor home, erase the screen", or at the line start after
  which enough complete lines scrolled everything older away (`scroll_start`) unless it lies
  inside a control string or sequence (an unterminated OSC takes every line after it):
  from there on the screen no longer depends on what came before (exactly, given the modes
  in force there);
- else at "cursor home" where the output since then is known to have rewritten every cell:
  checked by replaying it over a screen filled with a marker character, and accepting only
  if no marker is left (`top` redraws every row of each frame this way);
- else at the oldest retained byte.

The terminal modes in force at the start (alternate screen, scroll region, origin, auto-wrap,
insert, character sets, cursor visibility) are found by `modes.scan` and put into the fresh
emulator first (a start whose later output restores a cursor saved before it, or after which
tab stops matter that were set before it, is not taken); the window size is the one recorded
for that offset, and later resizes are applied at the offsets where they happened.

Later snapshots feed only the bytes since. Emulators live in a small LRU (`ScreenCache`),
dropped when idle; one that fell behind the ring (its next byte rotated out) is rebuilt.
"""

from __future__ import annotations

import codecs
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

import attrs
import avt

from .. import model
from . import modes
from .buffer import OutputBuffer, SizeRecord

_MARK: Final = "\U0010fffd"  # fills the screen for the rewrite check; never shown
_MAX_CHECKED_TAIL: Final = 65_536  # output after a "cursor home" worth checking for a rewrite
_CHECKED_HOMES: Final = 2  # how many of the last "cursor home"s are checked
_CARRY: Final = modes.LONGEST_SWITCH  # bytes kept to see a switch split across feeds


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


class _SavedCursors:
    """Where the output saves and restores the cursor (`modes.saved_cursors`)."""

    def __init__(self, data: bytes) -> None:
        self._saves, self._restores = modes.saved_cursors(data)

    def restores_older(self, start: int) -> bool:
        """True when data[start:] restores a cursor position saved before `start`."""
        index = bisect_left(self._restores, start)
        if index == len(self._restores):
            return False
        saved = bisect_left(self._saves, self._restores[index]) - 1
        return saved < 0 or self._saves[saved] < start


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
    def replay(cls, output: OutputBuffer) -> LiveScreen:
        """An emulator for the retained output, started as late as it may be (module doc)."""
        data, base = output.snapshot_with_offset()
        sizes = output.sizes
        rows = sizes[-1].rows
        resized_at = max(base, sizes[-1].offset) - base  # no resize after this position
        events = list(modes.scan(data))
        switches = list(modes.alternate_switches(data))
        last_switch = max((start for start, _, _ in switches), default=-1)
        last_exit = max((start for start, _, on in switches if not on), default=-1)
        candidates = [
            (event.start, "clear" if event.on else "home")
            for event in events
            if event.kind == "home"
        ]
        candidates += [(event.start, "reset") for event in events if event.kind == "reset"]
        scroll = scroll_start(data, rows)
        if scroll >= resized_at and modes.ground_at(data, scroll):  # (not inside a string)
            candidates.append((scroll, "scroll"))
        candidates.sort()
        saved = _SavedCursors(data)
        # Fold the events up to each candidate: the modes in force where it would start.
        state = modes.Modes()
        folded = 0
        best = (0, modes.Modes())
        homes: list[tuple[int, modes.Modes]] = []
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
            elif start > last_switch and len(data) - start <= _MAX_CHECKED_TAIL:
                homes.append((start, attrs.evolve(state)))
        for start, at in reversed(homes[-_CHECKED_HOMES:]):
            if start > best[0]:
                live = cls._start(output, data, base, events, start, at, fill=True)
                if live is not None:
                    return live
        start, at = best
        live = cls._start(output, data, base, events, start, at, fill=False)
        assert live is not None
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
        if modes.cursor_hidden(data, start):
            lead += "\x1b[?25l"
        if lead:
            live._vt.feed_str(lead)
        live._feed(data[start:], sizes)
        if fill and any(_MARK in line.text for line in live._vt.view()):
            return None
        return live

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
                vt.feed_str(decoder.decode(data[pos:cut]))
                pos = cut
            vt.resize(record.cols, record.rows)
            self._seq = record.seq
        if pos < len(data):
            vt.feed_str(decoder.decode(data[pos:]))
        self._track_alternate(data)
        self.fed = offset + len(data)

    def _track_alternate(self, data: bytes) -> None:
        """Follow switches to and from the alternate screen (the emulator does not say)."""
        if not data:
            return
        window = self._carry + data
        for _, end, on in modes.alternate_switches(window):
            if end > len(self._carry):  # not already seen in the last feed
                self._alternate = on
        self._carry = window[-_CARRY:]

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
        self.expire(now)
        live = self._live.pop(key, None)
        if live is None or not live.catch_up(output):
            live = LiveScreen.replay(output)
        live.last_used = now
        self._live[key] = live
        while len(self._live) > self._capacity:
            self._live.popitem(last=False)
        return live.image(key, output.terminal_title)

    def expire(self, now: float) -> None:
        """Drop the emulators nobody looked at for `idle_seconds`."""
        while self._live:
            key, live = next(iter(self._live.items()))
            if now - live.last_used < self._idle:
                break
            del self._live[key]

    def discard(self, key: str) -> None:
        self._live.pop(key, None)
