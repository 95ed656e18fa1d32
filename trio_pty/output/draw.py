"""The drawn state: what a person attaching is sent instead of the retained raw bytes.

Replaying raw output to a person's terminal replays the terminal queries in it (vim's
`ESC[6n`, `ESC[>c`): the terminal answers them again and the answers arrive as keystrokes.
Replaying it at another width garbles it. A drawing holds no query and is laid out for the
session's size: the retained history as clean lines (for the scrollback), then the screen
model's state (avt's `dump`: both screens, attributes, cursor, scroll region, charsets,
origin, wrap and insert modes), then what the dump does not carry and the raw output says:
the input modes (application cursor keys and keypad, mouse reporting and its encodings,
focus events, bracketed paste) and the window title. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import attrs
import re2

from .lines import char_width

__all__ = [
    "Drawn",
    "draw",
    "history_lines",
    "input_modes",
    "on_screen_count",
    "pending_sequence",
    "seven_bit",
]

# Private modes that change what the terminal sends (so the person's terminal must have
# them as the program set them) and that avt's dump leaves out, except DECCKM, which the
# dump carries only when the emulator saw it set (a late-started replay may not have).
INPUT_MODES: Final = (1, 9, 66, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1015, 1016, 2004)
_NUMBERS = b"|".join(str(mode).encode() for mode in INPUT_MODES)


def _compile(pattern: bytes) -> Any:
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


# Mode switches naming one of INPUT_MODES, the keypad modes (ESC = and ESC >) and RIS. RE2
# skips from ESC to ESC at memchr speed, and other modes (the cursor's visibility, toggled
# around every redraw) are never matched, so they cost no Python work.
_SWITCHES = _compile(
    rb"\x1b(?:\[\?((?:[0-9;]{0,32};)?(?:" + _NUMBERS + rb")(?:;[0-9;]{0,32})?)([hl])|([=>c]))"
)


def input_modes(data: bytes) -> dict[int, bool]:
    """The INPUT_MODES switched on or off last in `data` (66 stands for the keypad's ESC =
    and ESC > too); a full reset (RIS) switches all of them off."""
    state: dict[int, bool] = {}
    for match in _SWITCHES.finditer(data):
        params, final, short = match.groups()
        if short is not None:
            if short == b"c":
                state = dict.fromkeys(INPUT_MODES, False)
            else:
                state[66] = short == b"="
            continue
        on = final == b"h"
        for part in params.split(b";"):
            if part and int(part) in INPUT_MODES:
                state[int(part)] = on
    return state


# avt writes these introducers as C1 controls; as code points in UTF-8 text, terminals ignore
# them. CSI, OSC, DCS, SOS, PM, APC.
_C1: Final = {
    "\x9b": "\x1b[",
    "\x9d": "\x1b]",
    "\x90": "\x1bP",
    "\x98": "\x1bX",
    "\x9e": "\x1b^",
    "\x9f": "\x1b_",
}
_C1_INTRODUCERS = re.compile("[" + "".join(_C1) + "]")
# The blanks that end a row: erased (EL) rather than written, so that the terminal keeps
# them as empty cells (a copy or a right-trimmed read of the row leaves them out).
# The last row is followed by the end of the grid: a plain SGR reset, then the cursor placed.
_TRAILING_BLANKS = re.compile(r" +(?:\x1b\[[0-9]+b)?(?=\r\n|\x1b\[m\x1b\[[0-9]+;[0-9]+H)")
_REPEAT = re.compile(r"(.)\x1b\[([0-9]+)b", re.DOTALL)
_TO_ALTERNATE = re.compile(r"(?:\x1b7)?(\x1b\[m)?\x1b\[\?1047h")
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROLS_BUT_LF = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The same, looked for in UTF-8 by RE2 (a C1 control is C2 80-9F): 1 ms per MB where
# Python's re takes 50.
_ANY_CONTROL_BUT_LF = _compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def seven_bit(dump: str) -> str:
    """avt's dump as every terminal reads it: its 8-bit CSI (U+009B, which terminals reading
    UTF-8 ignore) as ESC [ (and the other C1 introducers likewise), the blanks ending a row
    erased, a repeat (REP, CSI n b) written out, and colours with colons (`38:5:n`,
    `38:2:r:g:b`) with semicolons, which older terminals also read."""
    dump = _C1_INTRODUCERS.sub(lambda match: _C1[match.group()], dump)
    dump = _TRAILING_BLANKS.sub("\x1b[K", dump)
    dump = _REPEAT.sub(lambda match: match.group(1) * (int(match.group(2)) + 1), dump)
    dump = _SGR.sub(lambda match: match.group().replace(":", ";"), dump)
    dump = _tab_stops_first(dump)
    # Its switch to the alternate screen saves the cursor, then switches (DECSC, 1047):
    # written as 1049, which does both, so that the program's own 1049 off restores it
    # (tmux restores only a cursor 1049 saved).
    return _TO_ALTERNATE.sub(lambda match: "\x1b[?1049h" + (match.group(1) or ""), dump, 1)


# Tab stops as avt's dump sets them (once they differ from the default, after a resize):
# clear all (CSI 5 W), then move to each column and set one (CSI n `, CSI W).
_TAB_STOPS = re.compile(r"\x1b\[5W(?:\x1b\[[0-9]+`\x1b\[W)*")


def _tab_stops_first(dump: str) -> str:
    """The dump with its tab stops set first, then the cursor homed: avt sets them after
    drawing the primary screen, moving the cursor, so a switch to the alternate screen
    that follows saved the cursor where the last stop was. Written as TBC 3 and HTS,
    which every terminal reads (CTC is rarer)."""
    found = _TAB_STOPS.search(dump)
    if found is None:
        return dump
    stops = found.group().replace("\x1b[5W", "\x1b[3g").replace("\x1b[W", "\x1bH")
    return stops + "\x1b[H" + dump[: found.start()] + dump[found.end() :]


# A sequence cut short at the end of a dump: the emulator's parser is inside it.
_PENDING = re.compile(r"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*|[\]PX^_][^\x07\x1b]*|[\x20-\x2f]*)\Z")


def pending_sequence(dump: str) -> int:
    """Where a `seven_bit` dump ends with a sequence it left unfinished, or -1."""
    found = _PENDING.search(dump)
    return found.start() if found else -1


def clean(text: str) -> str:
    """`text` without control characters (tabs kept): a history line or a title can carry
    nothing the terminal would act on."""
    return _CONTROLS.sub("", text)


def _rows_taken(text: str, cols: int) -> int:
    """The rows a line takes on a screen `cols` wide (a wrapped line takes several)."""
    width = len(text) if text.isascii() else sum(map(char_width, text))
    return max(1, -(-width // cols))


def on_screen_count(texts: Sequence[str], rows_above: int, cols: int) -> int:
    """How many of the last `texts` the screen still shows, when `rows_above` rows hold the
    lines before the cursor's: the lines are walked back from the last, each taking the rows
    it wraps into, while they fit (a line partly scrolled away counts as history)."""
    budget = rows_above
    count = 0
    for text in reversed(texts):
        taken = _rows_taken(text, cols)
        if taken > budget:
            break
        budget -= taken
        count += 1
    return count


def history_lines(texts: Sequence[str], rows_above: int, cols: int) -> str:
    """The lines that scrolled off the screen, each ended by CR LF, without control
    characters: `texts` (the line log's, oldest first, up to the cursor's row) without those
    the screen shows. Cleaned as one text (a per-line pass cost 60 ms for a 1 MB log)."""
    history = texts[: len(texts) - on_screen_count(texts, rows_above, cols)]
    if not history:
        return ""
    text = "\n".join(history)
    if _ANY_CONTROL_BUT_LF.search(text.encode()) is not None:
        text = _CONTROLS_BUT_LF.sub("", text)
    return text.replace("\n", "\r\n") + "\r\n"


@attrs.frozen
class Drawn:
    """A session's state drawn for a terminal of `rows` x `cols`, standing for its output
    up to `offset`: live output continues from exactly there."""

    data: bytes
    offset: int
    rows: int
    cols: int


def draw(
    history: str,
    screen: str,
    rows: int,
    modes: dict[int, bool],
    title: str | None,
) -> str:
    """The bytes of a drawing: the history lines (`history_lines`), then `rows` - 1 line
    feeds (whatever the terminal showed above the cursor's row, which a line feed left
    empty, the history included, goes up into its scrollback), the screen from the
    home position (`screen`: a `seven_bit` dump, which expects a clear screen and default
    attributes), then the input modes that are on and the title."""
    parts = ["\x1b[0m"]
    parts.append(history)
    parts.append("\r\n" * (rows - 1) + "\x1b[H\x1b[J")
    parts.append(screen)
    parts += [f"\x1b[?{mode}h" for mode in INPUT_MODES if modes.get(mode) and mode != 66]
    if modes.get(66):
        parts.append("\x1b=")
    if title:
        parts.append(f"\x1b]2;{clean(title)}\x07")
    return "".join(parts)
