"""Shell integration marks in a PTY's output: OSC 133 A/B/C/D carrying a session's nonce.

Pure (no I/O, no trio). The session's reader hands every chunk to `MarkParser.feed`, so
the common case, a chunk without a mark, costs one `bytes.find` plus a look at the chunk's
last few bytes (a mark cut in two by a read). A mark is trusted only when it is exactly
one of the forms our shell scripts print (see shell/scripts/) with this session's nonce in
its fixed place; anything else that looks like a mark is ignored, whatever it claims:

    ESC ] 133 ; A ; tp=<nonce> BEL                  the prompt starts
    ESC ] 133 ; B ; tp=<nonce> BEL                  the prompt ends: input starts
    ESC ] 133 ; C ; tp=<nonce> [; cmd=<line>] BEL   a command line was read, output follows
    ESC ] 133 ; D ; <status> ; tp=<nonce> ; cwd=<dir> [; paste=<0|1>] BEL   it ended

(zsh says in D whether its line editor will take bracketed paste at the prompt that
follows: it only announces that with its own sequence after the prompt is drawn.)

`<line>` and `<dir>` are percent-encoded (at least %, ;, ?, # and control characters), so
a mark never holds a control character: one that does, or an ESC before the BEL (a
terminal would start a new sequence there), is not a mark.
"""

from __future__ import annotations

import os
import re
from typing import Final, Literal
from urllib.parse import unquote_to_bytes

import attrs

__all__ = ["MAX_MARK_BYTES", "PREFIX", "Mark", "MarkKind", "MarkParser"]

MarkKind = Literal["A", "B", "C", "D"]

PREFIX: Final = b"\x1b]133;"
#: Longer than any mark our scripts print (a cwd of PATH_MAX bytes, percent-encoded, or a
#: command line of 1000 characters): an unterminated candidate is dropped past this.
MAX_MARK_BYTES: Final = 16_384

# A whole mark: the kind, then `;`-separated fields without control characters.
_MARK: Final = re.compile(rb"\x1b\]133;([ABCD])((?:;[^\x00-\x1f\x7f;]*)*)\x07")
# A mark that may still be completed by the next chunk: no BEL, no control character yet.
_OPEN: Final = re.compile(rb"\x1b\]133;[^\x00-\x1f\x7f]*\Z")
_STATUS: Final = re.compile(rb"[0-9]{1,3}")
_NO_MARKS: Final[tuple[Mark, ...]] = ()
_KINDS: Final[dict[bytes, MarkKind]] = {b"A": "A", b"B": "B", b"C": "C", b"D": "D"}


@attrs.frozen
class Mark:
    """One trusted mark: `start` is the absolute offset of its ESC, `end` the offset just
    past its BEL. `status`, `cwd` and `paste` come with D (`paste` from zsh only),
    `command` with C (zsh only)."""

    kind: MarkKind
    start: int
    end: int
    status: int | None = None
    cwd: str | None = None
    command: str | None = None
    paste: bool | None = None


def _decode(value: bytes) -> str:
    """A percent-encoded field as text; undecodable bytes kept as in os.fsdecode."""
    return os.fsdecode(unquote_to_bytes(value))


class MarkParser:
    """Finds one session's marks in its output, chunk by chunk, whatever the cuts."""

    __slots__ = ("_key", "_pending", "_pending_at")

    def __init__(self, nonce: str) -> None:
        if not nonce or not nonce.isalnum() or not nonce.isascii():
            raise ValueError("the nonce must be ASCII letters and digits")
        self._key = b"tp=" + nonce.encode("ascii")
        self._pending = b""  # the start of a mark cut off at the end of the last chunk
        self._pending_at = 0

    def feed(self, data: bytes, offset: int) -> tuple[Mark, ...]:
        """The trusted marks completed by `data`, which starts at absolute `offset`."""
        if self._pending:
            data = self._pending + data
            offset = self._pending_at
            self._pending = b""
            found = data.find(PREFIX)
        else:
            found = data.find(PREFIX)
            if found < 0:
                self._keep_tail(data, offset)
                return _NO_MARKS
        marks: list[Mark] = []
        while found >= 0:
            match = _MARK.match(data, found)
            if match is None:
                if _OPEN.match(data, found) and len(data) - found < MAX_MARK_BYTES:
                    self._pending = data[found:]
                    self._pending_at = offset + found
                    return tuple(marks)
                found = data.find(PREFIX, found + 1)
                continue
            mark = self._trusted(match, offset)
            if mark is not None:
                marks.append(mark)
            found = data.find(PREFIX, match.end())
        self._keep_tail(data, offset)
        return tuple(marks)

    def _keep_tail(self, data: bytes, offset: int) -> None:
        """Carry a prefix of PREFIX that ends the chunk (a mark cut right at its start)."""
        tail = data.rfind(b"\x1b", max(0, len(data) - len(PREFIX) + 1))
        if tail >= 0 and PREFIX.startswith(data[tail:]):
            self._pending = data[tail:]
            self._pending_at = offset + tail

    def _trusted(self, match: re.Match[bytes], offset: int) -> Mark | None:
        """The mark, if it is one of ours in exactly our form; None otherwise."""
        kind = _KINDS[match.group(1)]
        fields = match.group(2).split(b";")[1:]
        start, end = offset + match.start(), offset + match.end()
        key = self._key
        if kind in ("A", "B"):
            return Mark(kind, start, end) if fields == [key] else None
        if kind == "C":
            if not fields or fields[0] != key:
                return None
            if len(fields) == 1:
                return Mark("C", start, end)
            if len(fields) == 2 and fields[1].startswith(b"cmd="):
                return Mark("C", start, end, command=_decode(fields[1][4:]))
            return None
        # D;<status>;tp=<nonce>;cwd=<dir>[;paste=<0|1>]
        if len(fields) not in (3, 4) or fields[1] != key or not fields[2].startswith(b"cwd="):
            return None
        if _STATUS.fullmatch(fields[0]) is None or int(fields[0]) > 255:
            return None
        paste = None
        if len(fields) == 4:
            if fields[3] not in (b"paste=0", b"paste=1"):
                return None
            paste = fields[3] == b"paste=1"
        cwd = _decode(fields[2][4:])
        return Mark("D", start, end, status=int(fields[0]), cwd=cwd, paste=paste)
