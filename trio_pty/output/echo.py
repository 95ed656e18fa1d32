"""Telling a write's echo from the output it causes, so a wait sees only new output.

A terminal echoes what is typed: writing `sleep 2; echo DONE` followed by Enter puts that very
text on the prompt line before the command even starts, and a wait for `DONE` would match it.
The lines a write's echo lands on are known (one per line the write holds, the first after the
prompt that was there before); on each of them only the text after the echo counts.

Not recognised: a write typed ahead (before the program reads) is echoed twice, by the
terminal as it arrives and again by a shell's line editor after its next prompt; that second
echo is taken for output. It cannot be told from output that repeats the input (`cat`,
`read x; echo "got $x"`), and missing such output would be worse.
"""

from __future__ import annotations

import re

# Keys that do not echo as themselves: escape sequences (arrows, function keys) and controls.
_NOT_ECHOED = re.compile(r"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|O.|.)?|[\x00-\x1f\x7f]")
_ENTER = re.compile(r"\r\n|\r|\n")


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
