"""Escape decoding for writes sent with escapes=True.

A JSON client cannot easily type Ctrl-C or an arrow key, so a write may spell them:
`\\x03`, `\\x1b[A`, `\\e[A`. The grammar is deliberately small and strict: a typo such as
`\\c` or a cut-off `\\x4` is refused with its position rather than sent to a live program
as something the caller did not mean.
"""

from __future__ import annotations

from trio_pty.errors import InvalidInput

__all__ = ["KNOWN_ESCAPES", "decode_escapes"]

KNOWN_ESCAPES = r"\n \r \t \e \\ \xNN \uNNNN"

_SIMPLE = {"n": b"\n", "r": b"\r", "t": b"\t", "e": b"\x1b", "\\": b"\\"}
# Spelled out: int(..., 16) would also accept "٣", "_" and surrounding blanks.
_HEX = frozenset("0123456789abcdefABCDEF")


def _show(sequence: str) -> str:
    """Render the offending sequence visibly (a newline or tab after `\\` must show)."""
    return "".join(ch if ch.isprintable() else f"<U+{ord(ch):04X}>" for ch in sequence)


def _malformed(text: str, start: int, length: int, why: str) -> InvalidInput:
    sequence = _show(text[start : start + length])
    return InvalidInput(
        "data",
        f'malformed escape at position {start}: "{sequence}" ({why}; known: {KNOWN_ESCAPES})',
    )


def _literal(text: str, start: int, end: int) -> bytes:
    try:
        return text[start:end].encode("utf-8")
    except UnicodeEncodeError as exc:
        where = start + exc.start
        raise InvalidInput(
            "data",
            f"must be well-formed Unicode: lone surrogate U+{ord(text[where]):04X} "
            f"at position {where}",
        ) from None


def _hex_digits(text: str, start: int, count: int) -> int:
    """Read exactly `count` ASCII hex digits after the two-character `\\x`/`\\u` prefix."""
    digits = text[start + 2 : start + 2 + count]
    if len(digits) != count or not _HEX.issuperset(digits):
        letter = text[start + 1]
        raise _malformed(text, start, 2 + count, f"\\{letter} needs exactly {count} hex digits")
    return int(digits, 16)


def decode_escapes(text: str) -> bytes:
    """Turn escaped text into the bytes to write; literal text is encoded as UTF-8.

    `\\xNN` is a raw byte (so `\\xff` is not UTF-8 on purpose); `\\uNNNN` is a code point
    encoded as UTF-8, surrogates excluded. Raises only `InvalidInput`, positions counted in
    characters of `text`.
    """
    if not isinstance(text, str):
        raise InvalidInput("data", f"must be a string, got {type(text).__name__}")
    out = bytearray()
    position = 0
    while True:
        slash = text.find("\\", position)
        if slash < 0:
            out += _literal(text, position, len(text))
            return bytes(out)
        out += _literal(text, position, slash)
        if slash + 1 == len(text):
            raise _malformed(text, slash, 1, "trailing backslash")
        letter = text[slash + 1]
        if letter in _SIMPLE:
            out += _SIMPLE[letter]
            position = slash + 2
        elif letter == "x":
            out.append(_hex_digits(text, slash, 2))
            position = slash + 4
        elif letter == "u":
            code = _hex_digits(text, slash, 4)
            if 0xD800 <= code <= 0xDFFF:
                raise _malformed(text, slash, 6, "surrogates are not characters")
            out += chr(code).encode("utf-8")
            position = slash + 6
        else:
            raise _malformed(text, slash, 2, "unknown escape")
