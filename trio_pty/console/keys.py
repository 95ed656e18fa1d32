"""Keys at the attach prompt: detach-key sequences written as tmux writes them, the matcher
that finds them in what the user types, and the byte-exact encoding of keystrokes for
`pty.write`. Pure: no I/O, no trio.

A detach sequence is one or more keys, `C-]` or `C-b d`. Typing the whole sequence detaches;
typing its first key twice sends that key through once (so a program that uses Ctrl-] still
gets it). With a one-key sequence the first press is therefore ambiguous until the next key:
the matcher holds it, and detaches when nothing follows within `DETACH_DELAY` (or when any
other key follows, which is then dropped: it was typed after the detach).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import attrs

__all__ = [
    "DEFAULT_DETACH_KEYS",
    "DETACH_DELAY",
    "DetachMatcher",
    "KeySpecError",
    "key_bytes",
    "keystrokes_to_text",
    "parse_keys",
]

DEFAULT_DETACH_KEYS: Final = "C-]"
DETACH_DELAY: Final = 0.3  # seconds a lone one-key sequence waits for its second press

_NAMED: Final[dict[str, bytes]] = {
    "escape": b"\x1b",
    "esc": b"\x1b",
    "enter": b"\r",
    "tab": b"\t",
    "btab": b"\x1b[Z",
    "space": b" ",
    "bspace": b"\x7f",
    "backspace": b"\x7f",
    # What an xterm sends in its normal cursor mode (readline, less and vim take these too).
    "up": b"\x1b[A",
    "down": b"\x1b[B",
    "right": b"\x1b[C",
    "left": b"\x1b[D",
    "home": b"\x1b[H",
    "end": b"\x1b[F",
    "ic": b"\x1b[2~",
    "insert": b"\x1b[2~",
    "dc": b"\x1b[3~",
    "delete": b"\x1b[3~",
    "ppage": b"\x1b[5~",
    "pageup": b"\x1b[5~",
    "npage": b"\x1b[6~",
    "pagedown": b"\x1b[6~",
    **{f"f{n}": code for n, code in enumerate((b"\x1bOP", b"\x1bOQ", b"\x1bOR", b"\x1bOS"), 1)},
    **{
        f"f{n}": f"\x1b[{code}~".encode()
        for n, code in zip(range(5, 13), (15, 17, 18, 19, 20, 21, 23, 24), strict=True)
    },
}
# C-x for the characters a terminal can send with Ctrl held (as tmux spells them).
_CONTROL: Final[dict[str, int]] = {
    **{chr(code): code & 0x1F for code in range(ord("a"), ord("z") + 1)},
    "@": 0x00,
    "space": 0x00,
    " ": 0x00,
    "[": 0x1B,
    "\\": 0x1C,
    "]": 0x1D,
    "^": 0x1E,
    "_": 0x1F,
    "?": 0x7F,
}


class KeySpecError(ValueError):
    """A detach-key spec that is not one (the message says why)."""


def key_bytes(word: str) -> bytes:
    """One key, tmux style: `C-x` or `^x` (Ctrl), `M-x` (Meta: ESC then x), a name
    (`Escape`, `Enter`, `Tab`, `BTab`, `Space`, `BSpace`, `Up`, `Down`, `Left`, `Right`,
    `Home`, `End`, `PageUp`/`PPage`, `PageDown`/`NPage`, `Insert`/`IC`, `Delete`/`DC`,
    `F1`..`F12`; any case) or one character."""
    if word.startswith("M-") and len(word) > 2:
        return b"\x1b" + key_bytes(word[2:])
    control = None
    if word.startswith("C-") and len(word) > 2:
        control = word[2:]
    elif word.startswith("^") and len(word) == 2:
        control = word[1:]
    if control is not None:
        code = _CONTROL.get(control.lower())
        if code is None:
            raise KeySpecError(
                f"no Ctrl key for {control!r} (C-a .. C-z, C-@ C-[ C-\\ C-] C-^ C-_ C-?)"
            )
        return bytes([code])
    named = _NAMED.get(word.lower())
    if named is not None:
        return named
    if len(word) == 1:
        return word.encode("utf-8")
    raise KeySpecError(
        f"not a key: {word!r} (C-x, M-x, ^x, Escape, Enter, Tab, Space, BSpace, Up, Down, "
        "Left, Right, Home, End, PageUp, PageDown, Delete, F1..F12, or one character)"
    )


def parse_keys(spec: str) -> tuple[bytes, ...]:
    """A detach sequence ("C-]", "C-b d") -> each key's bytes."""
    keys = tuple(key_bytes(word) for word in spec.split())
    if not keys:
        raise KeySpecError("give at least one key, e.g. C-] or 'C-b d'")
    sequence, twice = b"".join(keys), keys[0] * 2
    if len(keys) > 1 and (sequence.startswith(twice) or twice.startswith(sequence)):
        raise KeySpecError(
            f"{spec!r} starts like its first key pressed twice, which sends that key through"
        )
    return keys


@attrs.define
class DetachMatcher:
    """Feed it what the user types: it says what to send and when to detach."""

    keys: Sequence[bytes]
    _pending: bytes = b""

    @property
    def _sequence(self) -> bytes:
        return b"".join(self.keys)

    @property
    def _twice(self) -> bytes:
        return self.keys[0] * 2

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """Bytes to send on, and whether the user detached (bytes after the sequence are
        dropped: they were typed after it)."""
        out = bytearray()
        sequence, twice = self._sequence, self._twice
        for byte in data:
            pending = self._pending + bytes([byte])
            while pending:
                if pending == twice:
                    out += self.keys[0]
                    pending = b""
                elif sequence.startswith(pending) or twice.startswith(pending):
                    if pending == sequence and len(self.keys) > 1:
                        self._pending = b""
                        return bytes(out), True
                    break  # could still become either
                elif pending.startswith(sequence):
                    # A lone one-key sequence, then another key: that was a detach.
                    self._pending = b""
                    return bytes(out), True
                else:
                    out.append(pending[0])  # not ours: the first byte goes on, re-check the rest
                    pending = pending[1:]
            self._pending = pending
        return bytes(out), False

    @property
    def waiting(self) -> bool:
        """Something is held that only time can decide: a lone one-key sequence (a detach
        unless pressed again), or a key cut in the middle (the ESC of `M-x`, or an Escape
        typed alone). A held key of a longer sequence waits for the next key instead."""
        if not self._pending:
            return False
        if self._pending == self._sequence:
            return True
        complete = b""
        for key in self.keys:
            complete += key
            if complete == self._pending:
                return False
        return True

    def expire(self) -> tuple[bytes, bool]:
        """`DETACH_DELAY` passed with nothing typed while `waiting`: detach, or send on."""
        held, self._pending = self._pending, b""
        if held == self._sequence:
            return b"", True
        return held, False


_SURROGATE_BYTE: Final = re.compile("[\udc80-\udcff]")


def keystrokes_to_text(data: bytes) -> str:
    """Encode raw keystroke bytes for `pty.write` with escapes=True, byte for byte:
    valid UTF-8 is sent as text, a backslash as `\\\\`, any other byte as `\\xNN`."""
    text = data.decode("utf-8", "surrogateescape").replace("\\", "\\\\")
    return _SURROGATE_BYTE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)
