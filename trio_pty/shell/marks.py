"""Shell integration marks in a PTY's output: OSC 133 A/B/C/D carrying a session's nonce.

Pure (no I/O, no trio). The session's reader hands every chunk to `MarkParser.feed` after
storing it, so the common case, a chunk without a mark, costs one `bytes.find` of BEL, a
`memchr` (every mark ends with BEL, which ordinary output hardly ever holds). At each BEL
the parser looks back for the ESC that would start a mark: in the chunk, or in the output
stored before it when a read cut the mark in two. A mark is trusted only when it is exactly
one of the forms our shell scripts print (see shell/scripts/) with this session's nonce in
its fixed place; anything else that looks like a mark is ignored, whatever it claims:

    ESC ] 133 ; A ; tp=<nonce> BEL                  the prompt starts
    ESC ] 133 ; B ; tp=<nonce> BEL                  the prompt ends: input starts
    ESC ] 133 ; C ; tp=<nonce> [; cmd=<line>] BEL   a command line was read, output follows
    ESC ] 133 ; D ; <status> ; tp=<nonce> ; cwd=<dir> [; paste=<0|1>] BEL   it ended

`<line>` and `<dir>` are percent-encoded (at least %, ;, ?, # and control characters), so
a mark never holds a control character: one that does, or an ESC before the BEL (a
terminal would start a new sequence there), is not a mark. (zsh says in D whether its line
editor will take bracketed paste at the prompt that follows: it only announces that with
its own sequence after the prompt is drawn.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Final, Literal
from urllib.parse import unquote_to_bytes

import attrs

__all__ = ["MAX_MARK_BYTES", "PREFIX", "Mark", "MarkKind", "MarkParser", "Stored"]

MarkKind = Literal["A", "B", "C", "D"]

PREFIX: Final = b"\x1b]133;"
#: Longer than any mark our scripts print (a cwd of PATH_MAX bytes, percent-encoded, or a
#: command line of 1000 characters): the parser looks back no further for a mark's start.
MAX_MARK_BYTES: Final = 16_384

# A whole mark: the kind, then `;`-separated fields without control characters.
_MARK: Final = re.compile(rb"\x1b\]133;([ABCD])((?:;[^\x00-\x1f\x7f;]*)*)\x07")
_STATUS: Final = re.compile(rb"[0-9]{1,3}")
_KINDS: Final[dict[bytes, MarkKind]] = {b"A": "A", b"B": "B", b"C": "C", b"D": "D"}

#: stored(start, end): the output bytes [start, end) as far as they are still kept.
Stored = Callable[[int, int], bytes]


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

    __slots__ = ("_key", "_stored")

    def __init__(self, nonce: str, stored: Stored) -> None:
        if not nonce or not nonce.isalnum() or not nonce.isascii():
            raise ValueError("the nonce must be ASCII letters and digits")
        self._key = b"tp=" + nonce.encode("ascii")
        self._stored = stored

    def feed(self, data: bytes, offset: int) -> tuple[Mark, ...]:
        """The trusted marks that end in `data`, which starts at absolute `offset` and
        follows everything fed before."""
        bel = data.find(b"\x07")
        if bel < 0:
            return ()
        marks = []
        while bel >= 0:
            mark = self._ending_at(data, offset, bel)
            if mark is not None:
                marks.append(mark)
            bel = data.find(b"\x07", bel + 1)
        return tuple(marks)

    def _ending_at(self, data: bytes, offset: int, bel: int) -> Mark | None:
        """The mark ending with the BEL at data[bel], if any: it can only start at the last
        ESC before that BEL (a mark holds no other)."""
        low = bel - MAX_MARK_BYTES
        esc = data.rfind(b"\x1b", max(low, 0), bel)
        if esc >= 0:
            start = offset + esc
            candidate = data[esc : bel + 1]
        elif low >= 0:
            return None
        else:
            # Cut by a read: the start is in the output stored before this chunk.
            before = self._stored(offset + low, offset)
            esc = before.rfind(b"\x1b")
            if esc < 0:
                return None
            start = offset - len(before) + esc
            candidate = before[esc:] + data[: bel + 1]
        if not candidate.startswith(PREFIX):
            return None
        match = _MARK.fullmatch(candidate)
        return self._trusted(match, start) if match is not None else None

    def _trusted(self, match: re.Match[bytes], start: int) -> Mark | None:
        """The mark, if it is one of ours in exactly our form; None otherwise."""
        kind = _KINDS[match.group(1)]
        fields = match.group(2).split(b";")[1:]
        end = start + match.end()
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
