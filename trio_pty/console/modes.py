"""What a program turned on in the terminal, read from its output, and what turns it off.

`trio-pty attach` copies a session's output to your terminal byte for byte, so a full-screen
program's modes (the alternate screen, mouse reporting, bracketed paste, application keypad
and cursor keys, a hidden cursor, a scroll region, the kitty keyboard protocol...) reach your
terminal too. Detaching leaves the program running in them, and your terminal with them, as
if the program had crashed. Like tmux, `ModeTracker` follows the output for the sequences
that set such modes and, on detach, `restore()` gives the sequence that undoes exactly those
left on (and resets the attributes), rather than a blind reset that would also clear what
was there before you attached.

Pure: no I/O. One regular expression pass per chunk finds the sequences (text and colour
codes cost one scan at C speed: about 470 MB/s here, four times what a PTY delivers; output
made of nothing but mode switches, the worst case, 19 MB/s); a sequence cut between two
chunks is carried over. A soft reset (DECSTR) is not taken as turning anything off:
terminals differ on what it resets, and turning a mode off twice costs nothing.
"""

from __future__ import annotations

import functools
import re
from typing import Final

import re2

__all__ = ["ModeTracker"]

# Private modes (CSI ? n h / l) that a program may turn on and that must not outlive it, in
# the order they are undone: the alternate screen first (1049 also restores the cursor).
_SCREEN_MODES: Final = (1049, 1047, 47)
_OFF_BY_DEFAULT: Final = (
    *_SCREEN_MODES,
    1,  # application cursor keys (DECCKM)
    5,  # reverse video
    6,  # origin mode
    9,  # mouse: X10
    66,  # application keypad (DECNKM)
    1000,  # mouse: press and release
    1001,  # mouse: highlight
    1002,  # mouse: motion while pressed
    1003,  # mouse: any motion
    1004,  # focus in/out events
    1005,  # mouse: UTF-8 coordinates
    1006,  # mouse: SGR coordinates
    1015,  # mouse: urxvt coordinates
    1016,  # mouse: SGR pixel coordinates
    2004,  # bracketed paste
    2026,  # synchronized output (left on, the terminal stops drawing)
)
_ON_BY_DEFAULT: Final = (
    7,  # auto-wrap
    25,  # the cursor shows
)
_TRACKED: Final = frozenset((*_OFF_BY_DEFAULT, *_ON_BY_DEFAULT))

_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False
_MAX_SEQUENCE: Final = 64  # bytes of one control sequence we wait for across chunks

# The sequences that change what we track (nothing else: colours and cursor motion, most of
# any output, never match). RE2 finds whether a chunk holds any at DFA speed; Python's `re`
# then lists them (RE2's per-match cost is ten times higher).
_PATTERN: Final = (
    rb"\x1b(?:\[(?:\?[0-9;]{0,48}[hl]"  # private modes
    rb"|[0-9;]{0,48}[hlr]"  # insert mode, the scroll region
    rb"|[0-9]{0,3} q"  # cursor style
    rb"|>[0-9;]{0,16}[mu]"  # modifyOtherKeys, kitty keyboard push
    rb"|[<=][0-9;]{0,16}u)"  # kitty keyboard pop, set
    rb"|[()][\x20-\x7e]"  # G0/G1 character set
    rb"|[=>c])"  # keypad application/normal, full reset
    rb"|[\x0e\x0f]"  # shift out / shift in
)
_ANY: Final = re2.compile(_PATTERN, _RE2_OPTIONS)
_ALL: Final = re.compile(_PATTERN)
_PARTIAL: Final = re.compile(rb"\x1b(?:\[[?>=<]?[0-9;:]*[ -/]?|[()])?\Z")


@functools.lru_cache(maxsize=256)
def _parse(sequence: bytes) -> tuple[bytes, bytes, tuple[int, ...]]:
    """(kind, final byte, numbers) of a sequence `_ALL` found; kind is the CSI prefix
    (b"?", b">", ...; b"[" for none), or the byte after ESC, or the byte itself (SO/SI)."""
    if sequence[:2] != b"\x1b[":
        return sequence[:2], sequence[2:], ()
    body = sequence[2:]
    kind = body[:1] if body[:1] in (b"?", b">", b"<", b"=") else b"["
    params = body[len(kind) if kind != b"[" else 0 : -1].rstrip(b" ")
    numbers = tuple(int(p) if p.isdigit() else 0 for p in params.split(b";"))
    return kind, body[-1:], numbers


class ModeTracker:
    """Feed it the output in order; `restore()` undoes the modes left on."""

    def __init__(self) -> None:
        self._reset()
        self._carry = b""
        self.at_line_start = True
        """Whether the main screen's cursor was last seen at the start of a line (after a
        newline): a message printed after detaching then needs no newline first."""

    def _reset(self) -> None:
        self._private: dict[int, bool] = {}  # tracked mode -> set (True) or reset (False)
        self._keypad = False
        self._insert = False  # CSI 4 h
        self._scroll_region = False
        self._cursor_style = False
        self._modify_other_keys = False
        self._kitty_pushes = 0
        self._kitty_set = False
        self._charset = False  # G0 or G1 not ASCII
        self._shifted = False  # SO: G1 in use

    def feed(self, data: bytes) -> None:
        data = self._carry + data
        self._carry = b""
        if _ANY.search(data) is not None:
            for sequence in _ALL.findall(data):
                self._apply(*_parse(sequence))
        cut = data.rfind(b"\x1b")
        if cut >= 0 and len(data) - cut < _MAX_SEQUENCE and _PARTIAL.match(data, cut):
            self._carry = data[cut:]
        if not self._alternate:
            text = data[: len(data) - len(self._carry)]
            if text:
                self.at_line_start = text.endswith(b"\n")

    @property
    def _alternate(self) -> bool:
        return any(self._private.get(mode, False) for mode in _SCREEN_MODES)

    def _apply(self, kind: bytes, final: bytes, numbers: tuple[int, ...]) -> None:
        """Note what one sequence turned on or off. One flat branch per kind of sequence
        (its complexity is their count, 18): a table of callables would say the same less
        plainly."""
        first = numbers[0] if numbers else 0
        if kind == b"?":
            for mode in numbers:
                if mode in _TRACKED:
                    self._private[mode] = final == b"h"
        elif kind == b"[":
            if final == b"r":
                self._scroll_region = any(numbers)
            elif final == b"q":
                self._cursor_style = first != 0
            elif 4 in numbers:
                self._insert = final == b"h"
        elif kind == b">":
            if final == b"u":
                self._kitty_pushes += 1
            elif first == 4:
                self._modify_other_keys = len(numbers) > 1 and numbers[1] != 0
        elif kind == b"<":
            self._kitty_pushes = max(0, self._kitty_pushes - max(1, first))
        elif kind == b"=":
            self._kitty_set = first != 0
        elif kind in (b"\x1b(", b"\x1b)"):
            self._charset = final not in (b"B", b"@")
        elif kind == b"\x1b=":
            self._keypad = True
        elif kind == b"\x1b>":
            self._keypad = False
        elif kind == b"\x1bc":
            self._reset()  # the program reset the terminal itself
        elif kind in (b"\x0e", b"\x0f"):
            self._shifted = kind == b"\x0e"

    def restore(self) -> bytes:
        """The bytes that turn off whatever the program left on, and reset the attributes
        (colours, bold: a program killed mid-line leaves them on, and they cost nothing to
        reset). One `if` per mode `_apply` tracks, in the same order (hence its complexity)."""
        out = bytearray()
        for mode in _SCREEN_MODES:
            if self._private.get(mode):
                out += b"\x1b[?%dl" % mode
        for mode in _OFF_BY_DEFAULT:
            if mode not in _SCREEN_MODES and self._private.get(mode):
                out += b"\x1b[?%dl" % mode
        for mode in _ON_BY_DEFAULT:
            if self._private.get(mode) is False:
                out += b"\x1b[?%dh" % mode
        if self._keypad:
            out += b"\x1b>"
        if self._insert:
            out += b"\x1b[4l"
        if self._scroll_region:
            out += b"\x1b7\x1b[r\x1b8"  # DECSTBM homes the cursor: keep it where it is
        if self._cursor_style:
            out += b"\x1b[0 q"
        if self._modify_other_keys:
            out += b"\x1b[>4m"
        if self._kitty_pushes:
            out += b"\x1b[<%du" % self._kitty_pushes
        if self._kitty_set:
            out += b"\x1b[=0;1u"
        if self._charset:
            out += b"\x1b(B\x1b)B"
        if self._shifted:
            out += b"\x0f"
        out += b"\x1b[0m"
        return bytes(out)
