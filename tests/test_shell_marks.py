"""The shell mark parser (pure): exactly our marks, whatever the chunking and the noise."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.shell.marks import MAX_MARK_BYTES, PREFIX, Mark, MarkParser

NONCE = "0123456789abcdef"
KEY = f"tp={NONCE}"


def a_mark(kind: str) -> bytes:
    return f"\x1b]133;{kind};{KEY}\x07".encode()


def d_mark(status: int, cwd: str = "/tmp") -> bytes:
    return f"\x1b]133;D;{status};{KEY};cwd={cwd}\x07".encode()


class Stream:
    """Output as the session stores it: each chunk is stored, then handed to the parser."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.parser = MarkParser(NONCE, lambda start, end: bytes(self.data[start:end]))

    def feed(self, chunk: bytes) -> tuple[Mark, ...]:
        offset = len(self.data)
        self.data += chunk
        return self.parser.feed(chunk, offset)


def feed_all(chunks: list[bytes]) -> list[Mark]:
    stream = Stream()
    return [mark for chunk in chunks for mark in stream.feed(chunk)]


def parse(data: bytes) -> tuple[Mark, ...]:
    return Stream().feed(data)


def test_each_kind_with_its_fields() -> None:
    data = (
        b"x" + a_mark("A") + b"$ " + a_mark("B") + b"ls\r\n"
        b"\x1b]133;C;" + KEY.encode() + b";cmd=echo%20%3B%0Ahi%25\x07out\r\n" + d_mark(3, "/a%3Bb")
    )
    stream = Stream()
    stream.feed(b"x" * 100)
    marks = stream.feed(data)
    assert [m.kind for m in marks] == ["A", "B", "C", "D"]
    assert marks[0].start == 101 and data[marks[0].start - 100 : marks[0].end - 100] == a_mark("A")
    assert marks[2].command == "echo ;\nhi%"
    assert (marks[3].status, marks[3].cwd, marks[3].paste) == (3, "/a;b", None)
    assert marks[3].end == 100 + len(data)
    (zsh,) = parse(f"\x1b]133;D;0;{KEY};cwd=/;paste=1\x07".encode())
    assert (zsh.status, zsh.paste) == (0, True)


def test_c_without_a_command_line() -> None:
    (mark,) = parse(a_mark("C"))
    assert mark.kind == "C" and mark.command is None


@pytest.mark.parametrize(
    "forged",
    [
        b"\x1b]133;D;0\x07",  # no nonce at all (what any program can print)
        b"\x1b]133;D;0;tp=ffffffffffffffff;cwd=/\x07",  # another nonce
        f"\x1b]133;D;0;cwd=/;{KEY}\x07".encode(),  # fields out of place
        f"\x1b]133;D;256;{KEY};cwd=/\x07".encode(),  # not an exit status
        f"\x1b]133;D;-1;{KEY};cwd=/\x07".encode(),
        f"\x1b]133;D;0;{KEY}\x07".encode(),  # no cwd
        f"\x1b]133;D;0;{KEY};cwd=/;x=1\x07".encode(),  # an extra field
        f"\x1b]133;D;0;{KEY};cwd=/;paste=2\x07".encode(),
        f"\x1b]133;A;{KEY};x\x07".encode(),
        f"\x1b]133;C;{KEY};x=1\x07".encode(),
        f"\x1b]133;E;{KEY}\x07".encode(),  # not a kind we print
        f"\x1b]133;A;{KEY}\x1b\\".encode(),  # ST instead of BEL: not ours
        f"\x1b]133;D;0;{KEY};cwd=/a\nb\x07".encode(),  # a control character inside
        f"\x1b]133;D;0;{KEY};cwd=/a\x1bb\x07".encode(),  # ESC inside: a new sequence there
        f"\x1b]7;file://h/\x07\x1b]1337;{KEY}\x07".encode(),
    ],
)
def test_forged_and_malformed_marks_are_ignored(forged: bytes) -> None:
    assert parse(b"out " + forged + b" more") == ()
    # ... and they do not disturb a real mark right after them.
    (mark,) = parse(forged + d_mark(7))
    assert (mark.kind, mark.status, mark.start) == ("D", 7, len(forged))


def test_no_mark_is_longer_than_the_bound() -> None:
    stream = Stream()
    assert stream.feed(PREFIX + b"D;0;" + b"x" * MAX_MARK_BYTES) == ()
    # its BEL arrives: too far from its start to be a mark
    offset = len(stream.data)
    assert stream.feed(b"\x07" + a_mark("B")) == (
        Mark("B", offset + 1, offset + 1 + len(a_mark("B"))),
    )


def test_a_mark_split_at_every_byte() -> None:
    data = b"hello " + d_mark(42, "/x") + b" world"
    expected = parse(data)
    assert len(expected) == 1
    for cut in range(len(data) + 1):
        assert feed_all([data[:cut], data[cut:]]) == list(expected), cut
    assert feed_all([bytes([b]) for b in data]) == list(expected)


def test_a_bad_nonce_is_refused() -> None:
    with pytest.raises(ValueError):
        MarkParser("not a nonce;", lambda start, end: b"")


# ------------------------------------------------------------------ property

_real = st.one_of(
    st.sampled_from("ABC").map(a_mark),
    st.builds(d_mark, st.integers(0, 255), st.sampled_from(["/", "/tmp", "/a%3Bb%0A"])),
    st.text("abc ;\n", max_size=30).map(
        lambda cmd: (
            f"\x1b]133;C;{KEY};cmd={cmd.replace(';', '%3B').replace(chr(10), '%0A')}\x07".encode()
        )
    ),
)
_noise = st.one_of(
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"\x1b",
            b"\x1b]",
            b"\x1b]13",
            PREFIX,
            PREFIX + b"D;0;",
            b"\x07",
            b"\x1b\\",
            b"\x1b]133;D;0\x07",
            b"\x1b]133;A;tp=ffffffffffffffff\x07",
            b"\x1b]133;D;1;tp=0123456789abcdee;cwd=/\x07",
            b"\x1b]7;file://host/tmp\x07",
            b"\x1b]0;a title\x07",
            b"\x07\x07",
            PREFIX + b"B;tp=01234",  # the start of our nonce only
            b"\x1b[?2004h",
            b"\r\n",
        ]
    ),
)


@given(
    st.lists(
        st.one_of(_real.map(lambda piece: (True, piece)), _noise.map(lambda p: (False, p))),
        max_size=30,
    ),
    st.lists(st.integers(0, 400), max_size=12),
)
def test_exactly_the_real_marks_whatever_the_noise_and_the_cuts(
    pieces: list[tuple[bool, bytes]], cuts: list[int]
) -> None:
    """Real marks (with our nonce) come out exactly once, with their offsets, however the
    stream is cut into chunks; forged marks, partial marks and random bytes never do."""
    stream = b""
    expected: list[tuple[int, int]] = []
    for real, piece in pieces:
        if real:
            expected.append((len(stream), len(stream) + len(piece)))
        stream += piece
    # Noise cannot hold our nonce (then it would be a real mark, by definition).
    assert KEY.encode() not in b"".join(piece for real, piece in pieces if not real)
    positions = sorted({min(cut, len(stream)) for cut in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *positions], [*positions, len(stream)], strict=True)]
    got = feed_all(chunks)
    whole = parse(stream)
    assert [(m.start, m.end) for m in got] == expected
    assert got == list(whole)
