"""The query responder: exactly these queries, each answered once, however split."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trio_pty.output.stubber import QueryResponder

ROWS, COLS = 24, 80
ANSWERS = {
    b"\x1b[c": b"\x1b[?1;2c",
    b"\x1b[0c": b"\x1b[?1;2c",
    b"\x1b[>c": b"\x1b[>0;276;0c",
    b"\x1b[>0c": b"\x1b[>0;276;0c",
    b"\x1b[5n": b"\x1b[0n",
    b"\x1b[18t": b"\x1b[8;24;80t",
    b"\x1b[14t": b"\x1b[4;384;640t",
}
QUERIES = [*ANSWERS, b"\x1b[6n"]
NOT_QUERIES = [b"\x1b[31m", b"\x1b[?25l", b"\x1b[6 n", b"\x1b[?6n", b"\x1b[1c", b"\x1b[>1c",
               b"\x1b[?1$p", b"\x1b[19t", b"\x1b[=c", b"\x1b[ c", b"\x1b]0;t\x07", b"\x1b[16t",
               b"\x1b[4n", b"\x1b[60n", b"\x1b[", b"\x1b", b"[6n", b"6n"]  # fmt: skip
TEXT = [b"a", b"hello ", b"\r\n", b"\n", b"\r", b"\xe2\x82\xac", b"\x1b[3;7H", b"\x1b[H", b"\t"]
streams = st.lists(st.sampled_from(QUERIES + NOT_QUERIES + TEXT), max_size=40).map(b"".join)


def queries_in(stream: bytes) -> list[bytes]:
    """The queries a terminal would see, scanning left to right."""
    found = []
    i = 0
    while i < len(stream):
        for query in QUERIES:
            if stream.startswith(query, i):
                found.append(query)
                i += len(query)
                break
        else:
            i += 1
    return found


def feed_all(chunks: list[bytes], rows: int = ROWS, cols: int = COLS) -> list[bytes]:
    responder = QueryResponder()
    return [responder.feed(chunk, rows, cols) for chunk in chunks]


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(stream)) for cut in cuts})
    return [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]


@given(stream=streams, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_answers_do_not_depend_on_chunking(stream: bytes, cuts: list[int]) -> None:
    whole = b"".join(feed_all([stream]))
    assert b"".join(feed_all(split(stream, cuts))) == whole
    assert b"".join(feed_all([bytes([b]) for b in stream])) == whole


@given(stream=streams, pieces=st.integers(min_value=1, max_value=8))
def test_small_and_large_chunks_are_answered_alike(stream: bytes, pieces: int) -> None:
    """Chunks under 1 KiB are scanned with re (a prompt, an echo), larger ones with RE2:
    the same stream, padded past that size, gets the same answers either way."""
    padded = b"hello \x1b[31m" * 100 + stream * pieces
    assert len(padded) >= 1024
    assert b"".join(feed_all([padded])) == b"".join(
        feed_all(split(padded, list(range(0, 2048, 97))))
    )


@given(stream=streams)
def test_each_query_answered_once_and_nothing_else(stream: bytes) -> None:
    replies = b"".join(feed_all([stream]))
    expected = queries_in(stream)
    # Replace cursor reports (their content varies) by a marker, then compare.
    parts = []
    rest = replies
    for query in expected:
        if query == b"\x1b[6n":
            end = rest.index(b"R") + 1
            report = rest[:end]
            assert report.startswith(b"\x1b[")
            row, col = (int(v) for v in report[2:-1].split(b";"))
            assert 1 <= row <= ROWS
            assert 1 <= col <= COLS
            parts.append(b"CPR")
            rest = rest[end:]
        else:
            answer = ANSWERS[query]
            assert rest.startswith(answer)
            parts.append(answer)
            rest = rest[len(answer) :]
    assert rest == b""


def test_no_escape_no_reply() -> None:
    responder = QueryResponder()
    assert responder.feed(b"plain output\r\n" * 100, ROWS, COLS) == b""
    assert responder.feed(b"\x1b[1;31mred\x1b[0m\x1b[?2004h", ROWS, COLS) == b""


def test_split_query_answered_exactly_once() -> None:
    responder = QueryResponder()
    assert responder.feed(b"abc\x1b[1", ROWS, COLS) == b""
    assert responder.feed(b"8t", ROWS, COLS) == b"\x1b[8;24;80t"
    assert responder.feed(b"\x1b", ROWS, COLS) == b""
    assert responder.feed(b"[", ROWS, COLS) == b""
    assert responder.feed(b">", ROWS, COLS) == b""
    assert responder.feed(b"c\x1b[c", ROWS, COLS) == b"\x1b[>0;276;0c\x1b[?1;2c"
    # A prefix that turns out to be something else gets nothing.
    assert responder.feed(b"\x1b[1", ROWS, COLS) == b""
    assert responder.feed(b"m", ROWS, COLS) == b""
    assert len(responder._carry) == 0


def test_carry_is_bounded() -> None:
    responder = QueryResponder()
    responder.feed(b"x" * 100 + b"\x1b[>0", ROWS, COLS)
    assert responder._carry == b"\x1b[>0"
    responder = QueryResponder(max_carry=2)
    assert responder.feed(b"\x1b[1", ROWS, COLS) == b""
    assert responder._carry == b""
    assert responder.feed(b"4t", ROWS, COLS) == b""  # could not be held: not answered


def cursor(*chunks: bytes, rows: int = ROWS, cols: int = COLS) -> bytes:
    responder = QueryResponder()
    for chunk in chunks:
        responder.feed(chunk, rows, cols)
    return responder.feed(b"\x1b[6n", rows, cols)


def test_cursor_reports() -> None:
    assert cursor() == b"\x1b[1;1R"
    assert cursor(b"$ ") == b"\x1b[1;3R"
    assert cursor(b"line\r\nline\r\n>>> ") == b"\x1b[3;5R"
    assert cursor(b"\x1b[1;32m$\x1b[0m ") == b"\x1b[1;3R"
    assert cursor(b"caf\xc3\xa9") == b"\x1b[1;5R"
    assert cursor(b"x\n" * 100) == b"\x1b[24;1R"  # held at the bottom row
    assert cursor(b"x\n" * 100 + b"\x1b[5;10Habc") == b"\x1b[5;13R"
    assert cursor(b"\x1b[H\x1b[2Jtop") == b"\x1b[1;4R"
    assert cursor(b"\x1b[3;7H", b"\r\nz") == b"\x1b[4;2R"
    assert cursor(b"y" * 85, cols=80) == b"\x1b[2;6R"  # wrapped
    assert cursor(b"y" * 80, cols=80) == b"\x1b[1;80R"  # at the margin, wrap pending
    assert cursor(b"y" * 160, cols=80) == b"\x1b[2;80R"
    assert cursor(b"\x1b[99;999H", rows=10, cols=20) == b"\x1b[10;20R"
    assert cursor(b"progress 10%\rprogress 20%") == b"\x1b[1;13R"


def test_window_size_reports_follow_the_arguments() -> None:
    responder = QueryResponder()
    assert responder.feed(b"\x1b[18t\x1b[14t", 50, 132) == b"\x1b[8;50;132t\x1b[4;800;1056t"
    assert responder.feed(b"\x1b[5n", 50, 132) == b"\x1b[0n"
