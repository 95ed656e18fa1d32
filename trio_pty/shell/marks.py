"""Shell integration marks in a PTY's output: OSC 133 A/B/C/D carrying a session's nonce.

Pure (no I/O, no trio). The session's reader hands every chunk to `MarkParser.feed` after
storing it, so the common case, a chunk without a mark, costs one `bytes.find` of BEL, a
`memchr` (every mark ends with BEL, which ordinary output hardly ever holds). A chunk
with a BEL is searched with one pattern of this session's exact forms; a BEL with no ESC
before it in the chunk looks back into the output stored before it (a read cut its mark in
two). A mark is trusted only when it is exactly
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
from typing import Final, Literal, NamedTuple
from urllib.parse import unquote_to_bytes

__all__ = ["MAX_MARK_BYTES", "PREFIX", "Mark", "MarkKind", "MarkParser", "Stored"]

MarkKind = Literal["A", "B", "C", "D"]

PREFIX: Final = b"\x1b]133;"
#: Longer than any mark our scripts print (a cwd of PATH_MAX bytes, percent-encoded, or a
#: command line of 1000 characters): the parser looks back no further for a mark's start.
MAX_MARK_BYTES: Final = 16_384

# A field's value: no control character, no `;` (our scripts percent-encode them).
_FIELD: Final = rb"[^\x00-\x1f\x7f;]*"
_KINDS: Final[dict[bytes, MarkKind]] = {b"A": "A", b"B": "B"}


def _our_marks(key: bytes) -> re.Pattern[bytes]:
    """Exactly the forms our scripts print, with this session's `tp=<nonce>` in its place.
    A match holds one ESC and one BEL, at its ends: a mark starts at the last ESC before
    its BEL."""
    key = re.escape(key)
    return re.compile(
        rb"\x1b\]133;(?:"
        rb"(?P<prompt>[AB]);" + key + rb"|C;" + key + rb"(?:;cmd=(?P<cmd>" + _FIELD + rb"))?"
        rb"|D;(?P<status>[0-9]{1,3});" + key + rb";cwd=(?P<cwd>" + _FIELD + rb")"
        rb"(?:;paste=(?P<paste>[01]))?"
        rb")\x07"
    )


#: stored(start, end): the output bytes [start, end) as far as they are still kept.
Stored = Callable[[int, int], bytes]


class Mark(NamedTuple):
    """One trusted mark: `start` is the absolute offset of its ESC, `end` the offset just
    past its BEL. `status`, `cwd` and `paste` come with D (`paste` from zsh only),
    `command` with C (zsh only). A tuple: the reader makes four per command, and a
    frozen attrs class takes three times as long to build."""

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

    __slots__ = ("_ours", "_stored")

    def __init__(self, nonce: str, stored: Stored) -> None:
        if not nonce or not nonce.isalnum() or not nonce.isascii():
            raise ValueError("the nonce must be ASCII letters and digits")
        self._ours = _our_marks(b"tp=" + nonce.encode("ascii"))
        self._stored = stored

    def feed(self, data: bytes, offset: int) -> tuple[Mark, ...]:
        """The trusted marks that end in `data`, which starts at absolute `offset` and
        follows everything fed before."""
        bel = data.find(b"\x07")
        if bel < 0:
            return ()
        marks = []
        if bel < MAX_MARK_BYTES and data.rfind(b"\x1b", 0, bel) < 0:
            # The first BEL with no ESC before it in this chunk: a read may have cut its
            # mark in two (a later such BEL cannot end one: this BEL would be inside).
            mark = self._cut_at(data, offset, bel)
            if mark is not None:
                marks.append(mark)
        for match in self._ours.finditer(data):
            start, end = match.span()
            if end - start <= MAX_MARK_BYTES:
                mark = self._mark(match, offset + start)
                if mark is not None:
                    marks.append(mark)
        return tuple(marks)

    def _cut_at(self, data: bytes, offset: int, bel: int) -> Mark | None:
        """The mark ending with the BEL at data[bel] that starts in the stored output."""
        before = self._stored(offset + bel - MAX_MARK_BYTES, offset)
        esc = before.rfind(b"\x1b")
        if esc < 0:
            return None
        match = self._ours.fullmatch(before[esc:] + data[: bel + 1])
        return self._mark(match, offset - len(before) + esc) if match is not None else None

    @staticmethod
    def _mark(match: re.Match[bytes], start: int) -> Mark | None:
        """The Mark of one of our forms (None for a status over 255)."""
        end = start + match.end() - match.start()
        # The named groups in the pattern's order, in one call (the reader's path).
        prompt, command, status, cwd, paste = match.groups()
        if prompt is not None:
            return Mark(_KINDS[prompt], start, end)
        if status is None:
            return Mark("C", start, end, command=None if command is None else _decode(command))
        code = int(status)
        if code > 255:
            return None
        paste_on = None if paste is None else paste == b"1"
        return Mark("D", start, end, status=code, cwd=_decode(cwd), paste=paste_on)
