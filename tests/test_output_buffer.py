"""OutputBuffer: pages, missed lines, pattern pages and resumable searches."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty import errors
from trio_pty.model import CompactPage, Line, ReadPage
from trio_pty.output import OutputBuffer, compile_pattern
from trio_pty.output.lines import HIDDEN
from trio_pty.output.search import CompiledPattern


def buffer(capacity: int = 10_000, **kwargs: int) -> OutputBuffer:
    kwargs.setdefault("max_line_length", 100)
    kwargs.setdefault("max_escape_length", 64)
    return OutputBuffer(capacity, **kwargs)


def pattern(text: str, ignore_case: bool = False) -> CompiledPattern:
    return compile_pattern(text, ignore_case=ignore_case, max_length=100)


def texts(page: ReadPage) -> list[str]:
    return [line.text for line in page.lines]


def test_printf_example() -> None:
    out = buffer()
    assert out.append(b"a\r\nb\033[31mred\033[0m\n10%\r100%\n") == 0
    page = out.read(0, 10)
    assert page == ReadPage(
        lines=[Line(0, "a"), Line(1, "bred"), Line(2, "100%")],
        total_lines=3,
        first_line=0,
        has_more=False,
        next_offset=3,
    )
    assert out.end_offset == 26
    assert out.line_of_offset(0) == 0
    assert out.line_of_offset(3) == 1
    assert out.line_of_offset(26) == 3


def test_paging_and_missed_lines() -> None:
    out = buffer(capacity=60, stretch=8, block_size=16)
    for i in range(20):
        out.append(b"line %02d\n" % i)  # 8 bytes a line: the last 7.5 lines are kept
    assert out.first_line == 13
    assert out.total_lines == 20
    page = out.read(10, 3)
    assert page.missed_lines == 3
    assert texts(page) == ["line 13", "line 14", "line 15"]
    assert (page.first_line, page.next_offset, page.has_more) == (13, 16, True)
    page = out.read(page.next_offset, 100)
    assert texts(page) == ["line 16", "line 17", "line 18", "line 19"]
    assert (page.next_offset, page.has_more, page.missed_lines) == (20, False, 0)
    page = out.read(25, 10)  # beyond the end: nothing yet, come back here
    assert (page.lines, page.next_offset, page.has_more) == ([], 25, False)
    assert out.read(14, 0).lines == []


def test_unfinished_line_is_shown_and_shown_again() -> None:
    out = buffer()
    out.append(b"one\r\n$ ")
    page = out.read(0, 10)
    assert texts(page) == ["one", "$ "]
    assert (page.total_lines, page.next_offset, page.has_more) == (2, 1, False)
    out.append(b"ls\r\nfile\r\n")
    page = out.read(page.next_offset, 10)
    assert [(line.number, line.text) for line in page.lines] == [(1, "$ ls"), (2, "file")]
    assert page.next_offset == 3


def test_long_lines_are_cut_on_read() -> None:
    out = buffer(max_line_length=5)
    out.append(b"0123456789\n")
    assert texts(out.read(0, 1)) == ["01234… [5 more characters]"]
    # A pattern sees the whole line, the page shows it cut.
    assert texts(out.read(0, 1, pattern("789"))) == ["01234… [5 more characters]"]


def test_pattern_pages() -> None:
    out = buffer()
    for i in range(10):
        out.append(b"%s %d\r\n" % (b"even" if i % 2 == 0 else b"odd", i))
    page = out.read(0, 2, pattern("^even"))
    assert [(line.number, line.text) for line in page.lines] == [(0, "even 0"), (2, "even 2")]
    assert (page.next_offset, page.has_more) == (3, True)
    page = out.read(page.next_offset, 10, pattern("EVEN", ignore_case=True))
    assert [line.number for line in page.lines] == [4, 6, 8]
    assert (page.next_offset, page.has_more) == (10, False)
    page = out.read(0, 10, pattern("nothing"))
    assert (page.lines, page.next_offset, page.has_more) == ([], 10, False)


def test_search_from_resumes_without_missing_split_matches() -> None:
    out = buffer()
    ready = pattern("server ready")
    out.append(b"starting\r\n")
    hit, resume = out.search_from(ready, 0)
    assert (hit, resume) == (None, 1)
    out.append(b"server re")
    hit, resume = out.search_from(ready, resume)
    assert (hit, resume) == (None, 1)  # the unfinished line is checked again next time
    out.append(b"ady on :8000\r\nmore\r\n")
    hit, resume = out.search_from(ready, resume)
    assert hit == Line(1, "server ready on :8000")
    assert resume == 2
    assert out.search_from(ready, resume) == (None, 3)


def test_search_from_reports_an_unfinished_match_once() -> None:
    out = buffer()
    out.append(b"$ ")
    hit, resume = out.search_from(pattern(r"\$ $"), 0)
    assert hit == Line(0, "$ ")
    assert resume == 1
    assert out.search_from(pattern(r"\$ $"), resume) == (None, 1)


def test_bytes_views() -> None:
    out = buffer(capacity=8, block_size=4)
    out.append(b"0123456789")
    assert out.start_offset == 2
    assert out.end_offset == 10
    assert out.capacity == 8
    assert out.bytes_since(0) == (b"23456789", 10, True)
    assert out.bytes_since(5, 2) == (b"56", 7, False)
    assert out.snapshot_with_offset() == (b"23456789", 2)
    assert out.recent(3) == b"789"


def test_last_nonblank_line() -> None:
    out = buffer()
    assert out.last_nonblank_line() == ""
    out.append(b"Compiling...\r\nDone in 3s\r\n\r\n\x1b[0m\r\n")
    assert out.last_nonblank_line() == "Done in 3s"


def test_bad_arguments() -> None:
    out = buffer()
    with pytest.raises(errors.InvalidInput):
        out.read(-1, 10)
    with pytest.raises(errors.InvalidInput):
        out.read(0, -1)


TOKENS = [b"ok", b"error", b" ", b"\r\n", b"\n", b"\r", b"\x1b[31m", b"\x1b[0m", b"\xe2\x82\xac"]


@given(
    parts=st.lists(st.sampled_from(TOKENS), max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=15),
    capacity=st.integers(min_value=10, max_value=300),
    offset=st.integers(min_value=0, max_value=30),
    limit=st.integers(min_value=0, max_value=12),
    use_pattern=st.booleans(),
)
def test_pages_do_not_depend_on_chunking(
    parts: list[bytes],
    cuts: list[int],
    capacity: int,
    offset: int,
    limit: int,
    use_pattern: bool,
) -> None:
    stream = b"".join(parts)
    points = sorted({min(cut, len(stream)) for cut in cuts})
    chunked = buffer(capacity, stretch=5, block_size=7)
    for a, b in zip([0, *points], [*points, len(stream)], strict=True):
        chunked.append(stream[a:b])
    whole = buffer(capacity)
    whole.append(stream)
    compiled = pattern("error") if use_pattern else None
    page = chunked.read(offset, limit, compiled)
    assert page == whole.read(offset, limit, compiled)
    assert page.first_line + 0 <= page.total_lines
    numbers = [line.number for line in page.lines]
    assert numbers == sorted(set(numbers))
    assert all(page.first_line <= n < page.total_lines for n in numbers)
    assert len(page.lines) <= limit
    assert page.missed_lines == max(0, page.first_line - offset)
    if compiled is None and page.lines and numbers[0] != max(offset, page.first_line):
        raise AssertionError("a plain page starts where asked (or at first_line)")


def test_long_scans_find_every_match() -> None:
    out = buffer(capacity=300_000)
    for i in range(30_000):
        out.append(b"%s line %d\r\n" % (b"MATCH" if i % 997 == 0 else b"plain", i))
    first = out.first_line
    expected = [i for i in range(first, 30_000) if i % 997 == 0]
    numbers = []
    offset = 0
    while True:
        page = out.read(offset, 3, pattern("^MATCH"))
        numbers += [line.number for line in page.lines]
        offset = page.next_offset
        if not page.has_more:
            break
    assert numbers == expected
    hits = []
    resume = 0
    while True:
        hit, resume = out.search_from(pattern("MATCH"), resume)
        if hit is None:
            break
        hits.append(hit.number)
    assert hits == expected
    assert resume == 30_000


@given(
    lines=st.lists(
        st.sampled_from(["MATCH here", "nothing", "", "xx MATCH", "a" * 300]), max_size=200
    ),
    slice_bytes=st.integers(min_value=1, max_value=4000),
    limit=st.integers(min_value=1, max_value=50),
)
def test_sliced_scans_find_exactly_what_one_scan_finds(
    lines: list[str], slice_bytes: int, limit: int
) -> None:
    """A scan cut into byte slices (as the session does, yielding in between) pages through
    the same matching lines as an unbounded scan: none skipped, none repeated."""
    out = buffer(capacity=1_000_000, max_line_length=1000)
    out.append("".join(line + "\r\n" for line in lines).encode())
    compiled = pattern("MATCH")
    expected = [line.number for line in out.read(0, 10_000, compiled).lines]
    seen: list[int] = []
    offset = 0
    for _ in range(10_000):
        page = out.read(offset, limit, compiled, max_scan_bytes=slice_bytes)
        assert len(page.lines) <= limit
        seen += [line.number for line in page.lines]
        if not page.has_more:
            break
        assert page.next_offset > offset or page.lines
        offset = page.next_offset
    assert seen == expected
    hits: list[int] = []
    resume = 0
    while resume < out.complete_lines:
        hit, resume = out.search_from(compiled, resume, max_scan_bytes=slice_bytes)
        if hit is not None:
            hits.append(hit.number)
    assert hits == expected


def test_a_slice_bounds_the_work_of_one_call() -> None:
    out = buffer(capacity=2_000_000, max_line_length=1000)
    out.append(("nothing to see\r\n" * 60_000).encode())
    page = out.read(0, 10, pattern("MATCH"), max_scan_bytes=64 * 1024)
    assert page.lines == [] and page.has_more
    assert 0 < page.next_offset < out.complete_lines


SCREEN_TOKENS = [*TOKENS, b"\x1b[?1049h", b"\x1b[?1049l", b"x" * 120]


@given(
    parts=st.lists(st.sampled_from(SCREEN_TOKENS), max_size=80),
    capacity=st.integers(min_value=10, max_value=600),
    offset=st.integers(min_value=0, max_value=30),
    limit=st.integers(min_value=0, max_value=12),
)
def test_compact_pages_are_the_object_pages(
    parts: list[bytes], capacity: int, offset: int, limit: int
) -> None:
    """The compact page (built without Line objects) is exactly the object page in its
    compact form, hidden lines (a full-screen program's) skipped and long lines cut alike,
    numbers listed only when the lines shown have a gap; and a page is the start of a
    longer page from the same line."""
    out = buffer(capacity)
    out.append(b"".join(parts))
    compact = out.read_compact(offset, limit)
    page = out.read(offset, limit)
    assert compact.page() == page
    assert CompactPage.of(page) == compact
    numbers = [line.number for line in page.lines]
    assert (compact.numbers is None) == (
        numbers == list(range(compact.start, compact.start + len(numbers)))
    )
    assert compact.start == (numbers[0] if numbers else page.next_offset)
    assert all(text != HIDDEN and len(text) <= 100 + 30 for text in compact.lines)
    longer = out.read(offset, limit + 20)
    assert longer.lines[: len(page.lines)] == page.lines
    if len(longer.lines) > len(page.lines):
        assert page.has_more
