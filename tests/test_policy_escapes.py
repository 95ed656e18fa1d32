"""Escape decoding, checked against an independent reference and with arbitrary text."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trio_pty.errors import InvalidInput
from trio_pty.policy.escapes import decode_escapes

# -- a reference model, written differently: one regex alternation per token kind -----------------

_TOKEN = re.compile(
    r"""
      (?P<literal>[^\\]+)
    | \\(?P<simple>[nrte\\])
    | \\x(?P<byte>[0-9a-fA-F]{2})
    | \\u(?P<code>[0-9a-fA-F]{4})
    """,
    re.VERBOSE,
)
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "e": "\x1b", "\\": "\\"}


def reference(text: str) -> bytes | int:
    """The decoded bytes, or the position of the first malformed escape."""
    pieces: list[bytes] = []
    position = 0
    while position < len(text):
        token = _TOKEN.match(text, position)
        if token is None:
            return position
        if token["literal"] is not None:
            pieces.append(token["literal"].encode("utf-8"))
        elif token["simple"] is not None:
            pieces.append(_SIMPLE[token["simple"]].encode("ascii"))
        elif token["byte"] is not None:
            pieces.append(bytes.fromhex(token["byte"]))
        else:
            code = int(token["code"], 16)
            if 0xD800 <= code < 0xE000:
                return position
            pieces.append(chr(code).encode("utf-8"))
        position = token.end()
    return b"".join(pieces)


# Text built from the pieces escapes are made of, so that hypothesis hits the edges often.
fragments = st.one_of(
    st.sampled_from(
        ["\\", "\\n", "\\r", "\\t", "\\e", "\\\\", "\\x", "\\u", "\\q", "\\0", "\\ ", "\\\n"]
    ),
    st.text("0123456789abcdefABCDEFgxu٣_ \\", max_size=6),
    st.text(st.characters(codec="utf-8"), max_size=6),
)
escaped_texts = st.lists(fragments, max_size=12).map("".join)


@given(text=escaped_texts)
@example(text="\\x1b[A")
@example(text="\\ud800")
@example(text="\\uDFFF")
@example(text="\\x٣٣")
@example(text="\\x 1")
@example(text="\\x1_")
def test_matches_reference(text: str) -> None:
    expected = reference(text)
    if isinstance(expected, bytes):
        assert decode_escapes(text) == expected
    else:
        with pytest.raises(InvalidInput) as info:
            decode_escapes(text)
        assert info.value.field == "data"
        assert f"malformed escape at position {expected}:" in str(info.value)


# st.text() never draws surrogates; JSON input can carry them, so mix them in explicitly.
any_text = st.lists(
    st.one_of(st.text(), fragments, st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
    max_size=8,
).map("".join)


@given(text=any_text)
def test_arbitrary_text_only_ever_raises_invalid_input(text: str) -> None:
    try:
        decode_escapes(text)
    except InvalidInput as error:
        assert error.field == "data"


@given(text=st.text(st.characters(codec="utf-8", exclude_characters="\\")))
def test_text_without_backslashes_is_plain_utf8(text: str) -> None:
    assert decode_escapes(text) == text.encode("utf-8")


@given(data=st.binary(max_size=40))
def test_every_byte_can_be_spelled(data: bytes) -> None:
    assert decode_escapes("".join(f"\\x{b:02x}" for b in data)) == data


@given(char=st.characters(codec="utf-8", max_codepoint=0xFFFF))
def test_every_bmp_character_can_be_spelled(char: str) -> None:
    assert decode_escapes(f"\\u{ord(char):04X}") == char.encode("utf-8")


def test_examples() -> None:
    assert decode_escapes("\\x03") == b"\x03"
    assert decode_escapes("\\x1b[A") == b"\x1b[A"
    assert decode_escapes("\\e[B") == b"\x1b[B"
    assert decode_escapes("ls -l\\n") == b"ls -l\n"
    assert decode_escapes("a\\\\nb") == b"a\\nb"
    assert decode_escapes("\\xff") == b"\xff"  # a raw byte, not U+00FF
    assert decode_escapes("\\u00ff") == "ÿ".encode()
    assert decode_escapes("\\u20ac5") == "€5".encode()
    assert decode_escapes("\\x414") == b"A4"
    assert decode_escapes("\\x00") == b"\0"
    assert decode_escapes("héllo\\t😀") == "héllo\t😀".encode()
    assert decode_escapes("") == b""


@pytest.mark.parametrize(
    ("text", "position", "shown"),
    [
        ("abc\\", 3, '"\\"'),
        ("\\x4", 0, '"\\x4"'),
        ("ok \\u12", 3, '"\\u12"'),
        ("\\u12G4", 0, '"\\u12G4"'),
        ("é\\q", 1, '"\\q"'),
        ("\\\n", 0, '"\\<U+000A>"'),
        ("\\uD83D\\uDE00", 0, '"\\uD83D"'),
        ("\\\\\\", 2, '"\\"'),
    ],
)
def test_malformed_escapes_name_their_position(text: str, position: int, shown: str) -> None:
    with pytest.raises(InvalidInput) as info:
        decode_escapes(text)
    assert str(info.value).startswith(f"data: malformed escape at position {position}: {shown}")


def test_lone_surrogate_in_literal_text() -> None:
    with pytest.raises(InvalidInput, match="lone surrogate U\\+D800 at position 2"):
        decode_escapes("ab\ud800")
    with pytest.raises(InvalidInput, match="at position 7"):
        decode_escapes("\\x41b\\n\udfff")


def test_wrong_type() -> None:
    with pytest.raises(InvalidInput, match="must be a string"):
        decode_escapes(b"\\n")  # type: ignore[arg-type]
