"""Telling a write's echo from the output it causes, so a wait sees only new output.

A terminal echoes what is typed: writing `sleep 2; echo DONE` followed by Enter puts that very
text on the prompt line before the command even starts, and a wait for `DONE` would match it.
The lines a write's echo lands on are known (one per line the write holds, the first after the
prompt that was there before); on each of them only the text after the echo counts. A write
that arrives before the program reads it (typed ahead) is echoed twice: by the terminal as it
arrives, then by the shell's line editor after its prompt. So in the lines right after those,
the text at the end of a line that repeats a written line (of at least `MIN_REPEATED_ECHO`
characters: shorter ones are too likely to end real output) is taken for that second echo.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Keys that do not echo as themselves: escape sequences (arrows, function keys) and controls.
_NOT_ECHOED = re.compile(r"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|O.|.)?|[\x00-\x1f\x7f]")
_ENTER = re.compile(r"\r\n|\r|\n")
MIN_REPEATED_ECHO = 3


def echo_lines(data: bytes) -> list[str]:
    """What each line of the written `data` echoes as: one entry per line it starts or
    continues (Enter is CR, LF or CR LF), controls and escape sequences left out."""
    text = data.decode("utf-8", "replace")
    return [_NOT_ECHOED.sub("", line) for line in _ENTER.split(text)]


def after_echo(text: str, prefix: str, echo: str) -> str | None:
    """The part of a line that is output, not echo: `text` without the `prefix` that was
    there before the write, and without `echo` right after it. None while the line could
    still be the echo arriving (what is there is the start of the echo); a line that is
    neither is output as a whole."""
    rest = text[len(prefix) :] if prefix and text.startswith(prefix) else text
    if rest.startswith(echo):
        return rest[len(echo) :]
    if echo.startswith(rest):
        return None
    return rest


def without_repeated_echo(text: str, echo: Sequence[str], *, finished: bool) -> str:
    """A line in the lines right after a write's echo, without a second echo of one of its
    lines at its end (module doc): a complete line loses the whole echoed line, a line still
    being written any start of one (it may be the echo arriving)."""
    for line in echo:
        if len(line) < MIN_REPEATED_ECHO:
            continue
        if finished:
            if text.endswith(line):
                return text[: -len(line)]
            continue
        for size in range(min(len(line), len(text)), 0, -1):
            if text.endswith(line[:size]):
                return text[:-size]
    return text
