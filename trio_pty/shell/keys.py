"""A command for `run`, checked, and the keystrokes that enter it at a shell's prompt.

The command goes in as a bracketed paste followed by Enter whenever the shell's line editor
has bracketed paste on (bash 5.1+ and zsh 5.1+ do by default): the editor then takes the
text literally, so a multi-line command (a for loop, a heredoc) is one command line, a tab
is a tab and not a completion, and the user's key bindings do not apply. Without it only a
single plain line can be typed safely. Pure: no I/O, no trio.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import InvalidInput
from ..limits import Limits

__all__ = ["command_text", "keystrokes"]

_PASTE_START: Final = b"\x1b[200~"
_PASTE_END: Final = b"\x1b[201~"
# Control characters other than newline and tab: an ESC would end the paste early (and
# type the rest as keys), a ^C or ^D would act on the shell.
_CONTROL: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def command_text(value: object, limits: Limits) -> str:
    """The command as the shell will read it (trailing newlines dropped: Enter is added)."""
    if not isinstance(value, str):
        raise InvalidInput("command", f"must be a string, got {type(value).__name__}")
    text = value.rstrip("\n")
    if not text.strip():
        raise InvalidInput("command", "must not be empty or blank")
    control = _CONTROL.search(text)
    if control is not None:
        raise InvalidInput(
            "command",
            f"holds the control character U+{ord(control.group()):04X} at position "
            f"{control.start()}: only newlines and tabs can be part of a command (send keys "
            "such as Ctrl-C with write)",
        )
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput("command", f"is not valid text at position {exc.start}") from None
    most = limits.max_write_bytes - len(_PASTE_START) - len(_PASTE_END) - 1
    if size > most:
        raise InvalidInput("command", f"at most {most} bytes, got {size}")
    return text


def keystrokes(text: str, *, paste: bool) -> bytes:
    """What to write for `text` (from `command_text`) at the prompt."""
    data = text.encode("utf-8")
    if paste:
        return _PASTE_START + data + _PASTE_END + b"\r"
    if "\n" in text or "\t" in text:
        raise InvalidInput(
            "command",
            "this shell has bracketed paste turned off, so only a single line without tabs "
            "can be typed as one command (a newline would run each line on its own, a tab "
            "would complete); turn it on (bash: bind 'set enable-bracketed-paste on'), or "
            "type the lines with write",
        )
    return data + b"\r"
