"""Terminal state found by scanning raw output: modes, the alternate screen, the title.

A screen replay that starts in the middle of the output (see `screen.py`) needs the state the
terminal was in at that point; the emulator cannot say, since it has not seen the bytes before.
Most of what shapes a screen's text is set by a few rare sequences (the alternate screen, the
scroll region, origin, auto-wrap, insert and newline modes, tab stops, character sets), so one
RE2 pass over the bytes finds them, with the clears, resets and cursor saves a replay's start
depends on (about 0.2 ms per MB of log output, 1-2 ms per MB of `top` or vim), and a fold
turns them into the state at any offset; the cursor's visibility, toggled far more often, is
found with rfind. The window title (OSC 0 and 2) comes from the same kind of scan.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, NamedTuple

import attrs
import re2

MAX_TITLE_BYTES = 512  # RE2 bounds a repetition at 1000
ALTERNATE_MODES = frozenset({47, 1047, 1049})
_MAX_PARAMS = 32  # bytes of parameters a mode sequence may carry here


def _compile(pattern: bytes) -> Any:
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


# Only the modes that matter, so that output full of other mode changes (vim hides and shows
# the cursor around every redraw, shells toggle bracketed paste at every prompt) costs no
# Python work per sequence. Every alternative starts with ESC, which lets RE2 skip to the
# next ESC at memchr speed (SO, the one state change without ESC, is found with rfind); each
# is told apart by its bytes in `_event`.
_SOME = rb"(?:[0-9;]{0,%d};)?(?:%s)(?:;[0-9;]{0,%d})?[hl]"
_PRIVATE = _SOME % (_MAX_PARAMS, b"6|7|47|1047|1049", _MAX_PARAMS)
_ANSI = _SOME % (_MAX_PARAMS, b"4|20", _MAX_PARAMS)
_EVENTS = _compile(
    rb"\x1b(?:\[\?"
    + _PRIVATE  # origin, auto-wrap, the alternate screen
    + rb"|\["
    + _ANSI  # insert and newline modes
    + rb"|\[[0-9]{0,5}(?:;[0-9]{0,5})?r"  # DECSTBM: the scroll region
    + rb"|\[[03]?g|H"  # tab stops cleared or set
    + rb"|c"  # RIS: full reset
    + rb"|\[!p"  # DECSTR: soft reset (insert, origin, region, charsets, cursor, saved)
    + rb"|[()]0"  # G0 or G1 designated as DEC line drawing
    + rb"|\[(?:1?(?:;1?)?)?[Hf]\x1b\[[02]?J"  # cursor home, erase the screen: a clear
    + rb"|[78]|\[[su])"  # the cursor saved or restored
)
# Where a replay may start (see `screen.py`) besides a clear: the cursor placed anywhere,
# searched for in the output's tail only (with Python's re: RE2's per-match cost is the
# larger one there). An ESC starts a sequence in every parser state, so these always act.
_POSITIONS = re.compile(rb"\x1b\[[0-9]{0,5}(?:;[0-9]{0,5})?[Hf]")
_SWITCHES = _compile(
    rb"\x1b\[\?" + _SOME % (_MAX_PARAMS, b"47|1047|1049", _MAX_PARAMS) + rb"|\x1bc"
)
_TITLES = _compile(rb"\x1b\][02];([^\x07\x1b\n]{0,%d})(?:\x07|\x1b\\)" % MAX_TITLE_BYTES)
LONGEST_TITLE = 4 + MAX_TITLE_BYTES + 2


class Event(NamedTuple):
    """One state-changing sequence at [start, end) of the scanned bytes."""

    start: int
    end: int
    kind: str  # private, ansi, region, tabs, reset, soft_reset, designate, clear, save, restore
    on: bool = False  # modes: set (h) or reset (l)
    params: tuple[int, ...] = ()  # modes: their numbers; region: top, bottom; designate: G


def _numbers(raw: bytes) -> tuple[int, ...]:
    return tuple(int(part) if part else 0 for part in raw.split(b";"))


def _event(data: bytes, start: int, end: int) -> Event:
    raw = data[start:end]
    last = raw[-1:]
    if raw == b"\x1bc":
        return Event(start, end, "reset")
    if raw == b"\x1b[!p":
        return Event(start, end, "soft_reset")
    if raw in (b"\x1b7", b"\x1b[s"):
        return Event(start, end, "save")
    if raw in (b"\x1b8", b"\x1b[u"):
        return Event(start, end, "restore")
    if last == b"J":
        return Event(start, end, "clear")
    if raw == b"\x1bH" or last == b"g":
        return Event(start, end, "tabs")
    if raw[1:2] in (b"(", b")"):
        return Event(start, end, "designate", params=(raw[1] - 0x28,))
    if last == b"r":
        return Event(start, end, "region", params=_numbers(raw[2:-1]))
    if raw.startswith(b"\x1b[?"):
        return Event(start, end, "private", on=last == b"h", params=_numbers(raw[3:-1]))
    return Event(start, end, "ansi", on=last == b"h", params=_numbers(raw[2:-1]))


def scan(data: bytes, pos: int = 0) -> Iterator[Event]:
    """Every state-changing sequence in data[pos:], in order."""
    for match in _EVENTS.finditer(data, pos):
        yield _event(data, *match.span())


def positions(data: bytes, pos: int) -> list[int]:
    """Where data[pos:] puts the cursor at an absolute position (CUP or HVP)."""
    return [pos + match.start() for match in _POSITIONS.finditer(data[pos:])]


SWITCHES = _SWITCHES
"""Switches to and from the alternate screen (and full resets): see `switch_state`."""
LONGEST_SWITCH = 4 + 2 * _MAX_PARAMS + 5


def switch_state(raw: bytes) -> bool:
    """Whether a match of SWITCHES turns the alternate screen on (a full reset leaves it)."""
    return raw[1] != 0x63 and raw[-1] == 0x68


def may_switch(data: bytes) -> bool:
    """False when `data` surely holds no match of SWITCHES: three C-level searches, cheaper
    than one call of the RE2 binding on a short feed (a small session's first snapshot)."""
    return b"\x1bc" in data or (b"\x1b[?" in data and (b"47" in data or b"1049" in data))


def alternate_switches(data: bytes, pos: int = 0) -> Iterator[tuple[int, int, bool]]:
    """(start, end, on) of every switch to (on) or from the alternate screen in data[pos:];
    a full reset (RIS) leaves it."""
    for match in _SWITCHES.finditer(data, pos):
        start, end = match.span()
        yield start, end, switch_state(data[start:end])


def is_switch(event: Event) -> bool:
    """Whether `event` switches to or from the alternate screen (a full reset leaves it)."""
    if event.kind == "reset":
        return True
    return event.kind == "private" and not ALTERNATE_MODES.isdisjoint(event.params)


TITLES = _TITLES
"""Window titles (OSC 0 and 2): see `title_of`."""


def title_of(raw: bytes) -> str:
    """The title a match of TITLES sets."""
    body = raw[4:-1] if raw.endswith(b"\x07") else raw[4:-2]
    return bytes(body).decode("utf-8", "replace")


@attrs.define
class Modes:
    """The modes that shape a screen's text, as a fold over `Event`s."""

    alternate: bool = False
    region: tuple[int, int] = (0, 0)  # top, bottom as sent (0: the edge)
    origin: bool = False
    autowrap: bool = True
    insert: bool = False
    newline: bool = False
    tabs_changed: bool = False

    def apply(self, event: Event) -> None:
        kind = event.kind
        if kind == "private":
            for mode in event.params:
                if mode in ALTERNATE_MODES:
                    self.alternate = event.on
                elif mode == 6:
                    self.origin = event.on
                elif mode == 7:
                    self.autowrap = event.on
        elif kind == "ansi":
            if 4 in event.params:
                self.insert = event.on
            if 20 in event.params:
                self.newline = event.on
        elif kind == "region":
            top = event.params[0]
            bottom = event.params[1] if len(event.params) > 1 else 0
            self.region = (top, bottom)
        elif kind == "tabs":
            self.tabs_changed = True
        elif kind == "reset":
            for field in attrs.fields(Modes):
                setattr(self, field.name, field.default)
        elif kind == "soft_reset":  # (as avt does it: auto-wrap, newline mode, tabs stay)
            self.insert = self.origin = False
            self.region = (0, 0)

    def full_region(self, rows: int) -> bool:
        top, bottom = self.region
        return top <= 1 and (bottom == 0 or bottom >= rows)

    def preamble(self, rows: int) -> str:
        """Sequences that put a fresh emulator into these modes (the alternate screen and
        the tab stops excepted: the caller handles the one, and cannot restore the other)."""
        parts = []
        if not self.full_region(rows):
            top, bottom = self.region
            parts.append(f"\x1b[{top};{bottom}r")
        if self.origin:
            parts.append("\x1b[?6h")
        if not self.autowrap:
            parts.append("\x1b[?7l")
        if self.insert:
            parts.append("\x1b[4h")
        if self.newline:
            parts.append("\x1b[20h")
        return "".join(parts)


_STRINGS = frozenset(b"]PX^_")  # after ESC: OSC, DCS, SOS, PM, APC
_C1_STRINGS = frozenset({0x90, 0x98, 0x9D, 0x9E, 0x9F})  # the same as C1 code points
_C1_CSI = 0x9B


def ground_at(data: bytes, pos: int) -> bool:
    """Whether a VT parser that read data[:pos] is in its ground state there: not inside an
    escape or control sequence, nor a control string (OSC, DCS, SOS, PM, APC), which takes
    everything up to its terminator, line feeds included, as its own.

    Only ESC, CAN, SUB and the C1 controls (as UTF-8, the emulator reads text) change the
    parser's state from any state, so the last of them before `pos` decides."""
    at, introducer = _last_transition(data, pos)
    if at < 0 or introducer in (0x18, 0x1A):
        return True
    if introducer == 0x1B:
        body = data[at + 1 : pos]
        if not body:
            return False
        kind, body = body[0], body[1:]
        if kind in _STRINGS:
            return kind == 0x5D and 0x07 in body  # only an OSC ends at BEL
        if kind == 0x5B:
            return _CSI_END.search(body) is not None
        return kind >= 0x30 or _ESC_END.search(body) is not None
    body = data[at + 2 : pos]
    if introducer == 0x9D:
        return 0x07 in body
    if introducer in _C1_STRINGS:
        return False
    if introducer == _C1_CSI:
        return _CSI_END.search(body) is not None
    return True  # any other C1 control is done at once


def resync(data: bytes) -> int:
    """Where a parser that starts reading `data` in an unknown state (the bytes before it
    rotated out: maybe within an escape sequence or a control string) is surely in step.

    At the first ESC, CAN or SUB (each starts afresh from any state) when no line feed
    comes before it (what precedes it on that row is the tail of a row drawn further
    left, or of a sequence: htop's `(B...`); else just after the first line feed when
    the line before it starts like the tail of a CSI or OSC (`38;5;123m`, `title BEL`);
    else 0 (a line of text whose start rotated out is shown as what is left of it)."""
    window = data[:_RESYNC_WITHIN]
    line_feed = window.find(b"\n")
    controls = [window.find(control) for control in (b"\x1b", b"\x18", b"\x1a")]
    control = min((found for found in controls if found >= 0), default=-1)
    if control >= 0 and (line_feed < 0 or control < line_feed):
        return control
    if line_feed >= 0 and _SEQUENCE_TAIL.match(window, 0, line_feed):
        return line_feed + 1
    return 0


_SEQUENCE_TAIL = re.compile(rb"[0-9;:?]+[\x20-\x2f]*[\x40-\x7e]|[^\x07\x1b]*\x07")
_RESYNC_WITHIN = 4096


_CSI_END = re.compile(rb"[\x40-\x7e\x80-\xff]")  # a final byte; a non-ASCII one ends it too
_ESC_END = re.compile(rb"[\x30-\x7e\x80-\xff]")  # past the intermediates


def _last_transition(data: bytes, pos: int) -> tuple[int, int]:
    """Where the last ESC, CAN, SUB or C1 control before `pos` starts, and which it is
    (a C1 control as its code point); (-1, 0) when there is none."""
    best, which = -1, 0
    for control in (b"\x1b", b"\x18", b"\x1a"):
        found = data.rfind(control, 0, pos)
        if found > best:
            best, which = found, control[0]
    lead = pos - 1
    while (lead := data.rfind(b"\xc2", best + 1, lead)) >= 0:
        if lead + 1 < pos and 0x80 <= data[lead + 1] <= 0x9F:
            return lead, data[lead + 1]
    return best, which


RESETS = frozenset({"reset", "soft_reset"})
_HIDE, _SHOW = b"\x1b[?25l", b"\x1b[?25h"


class CursorVisibility:
    """Whether the cursor was hidden at a position of `data` (CSI ? 25 l, not shown again
    since), for many positions: the last hide and show of all are found once, so a position
    after both costs nothing (rather than a search of the whole buffer for one never sent)."""

    def __init__(self, data: bytes, events: list[Event]) -> None:
        self._data = data
        # A full or soft reset shows the cursor too: taken from the scan's events (a search
        # of the output for one never sent costs 0.6 ms per MB of escape-dense output).
        self._resets = [event.start for event in events if event.kind in RESETS]
        hide, show = data.rfind(_HIDE), self._last_show(len(data))
        self._after_both = max(hide, show) + len(_HIDE)
        self._hidden_after_both = hide > show

    def _last_show(self, pos: int) -> int:
        index = bisect_left(self._resets, pos)
        reset = self._resets[index - 1] if index else -1
        return max(self._data.rfind(_SHOW, 0, pos), reset)

    def hidden_at(self, pos: int) -> bool:
        if pos >= self._after_both:
            return self._hidden_after_both
        return self._data.rfind(_HIDE, 0, pos) > self._last_show(pos)


def charsets(data: bytes, events: list[Event], pos: int) -> str:
    """Sequences that restore the character sets in force at data[pos]: G0/G1 as DEC line
    drawing (designated and not yet put back to ASCII with ESC ( B / ESC ) B) and SO."""
    parts = []
    for which, back in ((0, b"\x1b(B"), (1, b"\x1b)B")):
        start = _last_before(events, pos, "designate", which)
        if start >= 0 and data.find(back, start, pos) < 0:
            parts.append("\x1b(0" if which == 0 else "\x1b)0")
    shifted = data.rfind(b"\x0e", 0, pos)
    reset = _last_before(events, pos, "reset", None)  # (either kind)
    if shifted > reset and data.find(b"\x0f", shifted, pos) < 0:
        parts.append("\x0e")
    return "".join(parts)


def _last_before(events: list[Event], pos: int, kind: str, which: int | None) -> int:
    found = -1
    for event in events:
        if event.start >= pos:
            break
        if event.kind in RESETS:
            # ESC c and CSI ! p put every character set back (and SO): a reset is the last
            # "reset", and no designation before it counts
            found = event.start if kind == "reset" else -1
        elif event.kind == kind and (which is None or event.params[0] == which):
            found = event.start
    return found


# What may appear in a stretch of output that only moves forward (see `screen.scroll_start`):
# text, CR, LF, BS, TAB, BEL, SO/SI, and these sequences, none of which leaves the row.
_SEQUENCE = re.compile(
    rb"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|\][^\x07\x1b]*(?:\x07|\x1b\\)"
    rb"|[\x20-\x2f]+[\x30-\x7e]|[\x30-\x7e])?|[\x0b\x0c]"
)
_IN_ROW = re.compile(
    rb"\x1b\[[0-9;:]*[mKCDGPX@`a]"  # colours; erase, move, delete, insert within the row
    rb"|\x1b\[[>=][0-9;]*m"  # key modifier settings (vim's CSI > 4;2 m)
    rb"|\x1b\[\?(?:1|12|25|1000|1002|1003|1004|1005|1006|1015|2004|2026)[hl]"  # input, cursor
    rb"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks, shell marks
    rb"|\x1b[()][0-9A-Za-z]|\x1b[=>]"  # character sets, keypad
)


def stays_in_rows(data: bytes) -> bool:
    """True when `data` holds nothing that moves the cursor to another row other than by
    a line feed, edits other rows, or changes a mode that shapes the text."""
    return all(_IN_ROW.fullmatch(match.group()) for match in _SEQUENCE.finditer(data))
