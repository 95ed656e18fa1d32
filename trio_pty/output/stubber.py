"""Answers the terminal capability queries a program sends, as a terminal would.

Programs probe their terminal (device attributes, cursor position, window size) and some
wait for the reply, hanging or degrading without one when nobody is attached. Exactly these
queries are answered, each once even when split across reads:

    ESC[c, ESC[0c     DA1      -> ESC[?1;2c          (VT100 with Advanced Video Option)
    ESC[>c, ESC[>0c   DA2      -> ESC[>0;276;0c      (VT100-class, xterm patch 276)
    ESC[5n            DSR 5    -> ESC[0n             (terminal OK)
    ESC[6n            DSR 6    -> ESC[{row};{col}R   (best-effort cursor, 1-based, clamped)
    ESC[18t           XTWINOPS -> ESC[8;{rows};{cols}t
    ESC[14t           XTWINOPS -> ESC[4;{rows*16};{cols*8}t (cells taken as 8x16 pixels)

Nothing else gets a reply (colours, private modes, DECRQM, malformed look-alikes).

The cursor is located only when asked, from the last 4 KiB of output: the last CUP/HVP
(ESC[r;cH, ESC[r;cf, ESC[H) there sets the position, newlines after it move down (held at
the last row); without one, the row is 1 + all newlines so far. The column counts the
characters after the last CR/LF (escapes removed, one column per UTF-8 character, control
characters none), wrapping at `cols`. Other cursor motion (CUU, CHA, tabs, wide characters,
scroll regions) is not followed: good enough for shells and prompt libraries that ask
whether they are at the start of a line.
"""

from __future__ import annotations

import re
from typing import Any

import re2

CELL_WIDTH = 8
CELL_HEIGHT = 16

_QUERIES = (b"\x1b[c", b"\x1b[0c", b"\x1b[>c", b"\x1b[>0c", b"\x1b[5n", b"\x1b[6n",
            b"\x1b[18t", b"\x1b[14t")  # fmt: skip
_LONGEST = max(len(query) for query in _QUERIES)
_PREFIXES = frozenset(query[:i] for query in _QUERIES for i in range(1, len(query)))


def _query_pattern() -> Any:
    """RE2, not re: its DFA skips colour codes about three times faster."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(b"|".join(re2.escape(query) for query in _QUERIES), options)


_QUERY = _query_pattern()
# The same queries for re, which scans a chunk of a few hundred bytes (a prompt, an echo)
# in ~0.6 µs where a call into RE2 alone costs ~1.8 µs; from about 1 KiB on RE2 is faster.
_SMALL_QUERY = re.compile(b"|".join(re.escape(query) for query in _QUERIES))
_SMALL_CHUNK = 1024
_CUP = re.compile(rb"\x1b\[(\d{0,6})(?:;(\d{0,6}))?[Hf]")
_ESCAPE = re.compile(
    rb"\x1b(?:\[[\x20-\x3f]*[\x40-\x7e]?|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x20-\x2f]*[\x30-\x7e]?)"
)
_NOT_A_COLUMN = bytes(range(0x80, 0xC0)) + bytes(range(0x00, 0x20)) + b"\x7f"
_WINDOW = 4096  # recent output kept for locating the cursor
_DA1 = b"\x1b[?1;2c"
_DA2 = b"\x1b[>0;276;0c"
_STATUS_OK = b"\x1b[0n"


class QueryResponder:
    """Finds capability queries in the output stream and builds the replies.

    Per chunk, the common case costs one `in` scan (no ESC) or one RE2 scan (colour
    codes), a newline count until the cursor reaches the bottom row, and keeping a
    reference to the chunk; the cursor itself is worked out only when a program asks.
    """

    __slots__ = ("_carry", "_max_carry", "_newlines", "_recent", "_recent_bytes")

    def __init__(self, max_carry: int = _LONGEST - 1) -> None:
        if max_carry < 0:
            raise ValueError(f"max_carry must not be negative, got {max_carry!r}")
        self._max_carry = min(max_carry, _LONGEST - 1)
        self._carry = b""
        self._newlines = 0  # counted until it reaches the row count (then it cannot matter)
        # The last chunks, at least _WINDOW bytes (a list: at most 64 items, and an idle
        # session should not pay for a deque block).
        self._recent: list[bytes] = []
        self._recent_bytes = 0

    def feed(self, data: bytes, rows: int, cols: int) -> bytes:
        """Scan one chunk of output; return the bytes to write back (usually b"")."""
        if self._carry:
            data = self._carry + data
            self._carry = b""
        if b"\x1b" in data:
            # A query cut by the end of the chunk waits for its rest (a few bytes at most).
            cut = data.rfind(b"\x1b", max(0, len(data) - _LONGEST + 1))
            if cut >= 0 and len(data) - cut <= self._max_carry and data[cut:] in _PREFIXES:
                self._carry = data[cut:]
                data = data[:cut]
            match = (_SMALL_QUERY if len(data) < _SMALL_CHUNK else _QUERY).search(data)
            if match is not None:
                return self._answer_all(data, match, rows, cols)
        self._follow(data, rows)
        return b""

    def _answer_all(self, data: bytes, match: Any, rows: int, cols: int) -> bytes:
        replies: list[bytes] = []
        done = 0
        while match is not None:
            start, end = match.span()
            self._follow(data[done:start], rows)
            replies.append(self._answer(data[start:end], rows, cols))
            done = end
            match = _QUERY.search(data, done)
        self._follow(data[done:], rows)
        return b"".join(replies)

    def _follow(self, data: bytes, rows: int) -> None:
        """Account for output the cursor moved through."""
        if not data:
            return
        if self._newlines < rows and b"\n" in data:
            self._newlines += data.count(b"\n")
        recent = self._recent
        recent.append(data)
        self._recent_bytes += len(data)
        while self._recent_bytes - len(recent[0]) >= _WINDOW:
            self._recent_bytes -= len(recent.pop(0))
        if len(recent) > 64:  # many tiny chunks: merge them
            merged = b"".join(recent)[-_WINDOW:]
            recent.clear()
            recent.append(merged)
            self._recent_bytes = len(merged)

    def _cursor(self, rows: int, cols: int) -> tuple[int, int]:
        """Best-effort (row, col), 1-based and clamped to the window."""
        rows = max(rows, 1)
        cols = max(cols, 1)
        # Exactly the last _WINDOW bytes: the answer must not depend on the chunking.
        recent = b"".join(self._recent)[-_WINDOW:]
        moved = None
        for moved in _CUP.finditer(recent):  # noqa: B007 - the last one counts
            pass
        column = 0
        if moved is not None:
            row = min(int(moved.group(1) or 1), rows)  # terminals clamp CUP to the screen
            column = min(max(int(moved.group(2) or 1), 1), cols) - 1
            recent = recent[moved.end() :]
            row += recent.count(b"\n")
        else:
            row = 1 + self._newlines
        line_start = max(recent.rfind(b"\n"), recent.rfind(b"\r"))
        if line_start >= 0:
            column = 0
            recent = recent[line_start + 1 :]
        column += len(_ESCAPE.sub(b"", recent).translate(None, _NOT_A_COLUMN))
        # Long lines wrap (after the last column the cursor waits there for the next
        # character); the screen scrolls, so the cursor never leaves the last row.
        wraps, col = divmod(column, cols)
        if column and not col:
            wraps, col = wraps - 1, cols
        else:
            col += 1
        return min(max(row + wraps, 1), rows), col

    def _answer(self, query: bytes, rows: int, cols: int) -> bytes:
        if query.endswith(b"c"):
            return _DA2 if query[2:3] == b">" else _DA1
        if query == b"\x1b[5n":
            return _STATUS_OK
        if query == b"\x1b[6n":
            row, col = self._cursor(rows, cols)
            return b"\x1b[%d;%dR" % (row, col)
        if query == b"\x1b[18t":
            return b"\x1b[8;%d;%dt" % (rows, cols)
        return b"\x1b[4;%d;%dt" % (rows * CELL_HEIGHT, cols * CELL_WIDTH)
