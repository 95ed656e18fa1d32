"""The lazy screen: modes found by scanning, where a replay may start, chunking independence,
the LRU of live emulators, the title; and the line log against the emulator: edited lines and
full-screen programs."""

from __future__ import annotations

import attrs
import avt
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trio_pty.output import compile_pattern, modes
from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.lines import char_width
from trio_pty.output.screen import LiveScreen, ScreenCache, collapse_overwrites, scroll_start


def buffer_of(
    data: bytes = b"", *, rows: int = 6, cols: int = 30, capacity: int = 1 << 20
) -> OutputBuffer:
    buffer = OutputBuffer(capacity, max_line_length=2000, max_escape_length=4096)
    buffer.note_size(rows, cols)
    if data:
        buffer.append(data)
    return buffer


def from_the_start(buffer: OutputBuffer) -> list[str]:
    """What the screen shows when every byte is fed from offset 0: the truth."""
    assert buffer.start_offset == 0
    screen = LiveScreen.from_oldest(buffer).image("x", None)
    return [*screen.lines, repr(screen.cursor), repr(screen.cursor_visible)]


def seen(buffer: OutputBuffer) -> list[str]:
    # The late start, even on output short enough to be replayed whole by default.
    screen = LiveScreen.replay(buffer, whole_up_to=0, probed_above=0).image("x", None)
    return [*screen.lines, repr(screen.cursor), repr(screen.cursor_visible)]


# Pieces of terminal output, full-screen programs' included: what a replay start must get right.
PIECES = [
    b"plain text",
    b"\r\n",
    b"\n",
    b"\r",
    b"\rab\rxyz\rq\r12345",  # a line rewritten in place: collapsed for the replay
    b"\x08",
    b"\t",
    "日本語 ✓ é".encode(),
    b"\x1b[31mred\x1b[0m",
    b"\x1b[K",
    b"\x1b[2K",
    b"\x1b[3D",
    b"\x1b[5G",
    b"\x1b[2P",
    b"\x1b[2@",
    b"\x1b[A",
    b"\x1b[2B",
    b"\x1b[3;4H",
    b"\x1b[H",
    b"\x1b[H\x1b[2J",
    b"\x1b[2J",
    b"\x1b[J",
    b"\x1b[?1049h",
    b"\x1b[?1049l",
    b"\x1b[?47h",
    b"\x1b[?25l",
    b"\x1b[?25h",
    b"\x1b[2;4r",
    b"\x1b[r",
    b"\x1b[?6h",
    b"\x1b[?6l",
    b"\x1b[?7l",
    b"\x1b[?7h",
    b"\x1b[4h",
    b"\x1b[4l",
    b"\x1b(0lqk",
    b"\x1b(B",
    b"\x0e",
    b"\x0f",
    b"\x1b7",
    b"\x1b8",
    b"\x1bM",
    b"\x1bc",
    b"\x1b[!p",  # DECSTR: a soft reset (tput init)
    b"\x1b]2;title\x07",
    b"\x1b[L",
    b"\x1b[M",
    b"\x1b[S",
]
streams = st.lists(st.sampled_from(PIECES) | st.binary(max_size=8), max_size=60)
lines_of_text = st.lists(st.text("abc xyz日", max_size=40), min_size=1, max_size=20)


@given(streams, streams, lines_of_text)
@example(before=[b"\x1b]"], after=[], lines=[""] * 12)  # an OSC that never ends takes all
@example(before=[b"\x1b[1"], after=[], lines=[""] * 12 + ["abc"])  # a CSI left open
@example(before=[b"\x1b[4h"], after=[b"\rab\rxyz\rq\r12345"], lines=[""])  # inserting
@example(before=[b"\x1b["], after=[b"\rAB\rxyz\rq\r12345"], lines=[""])  # in a CSI
def test_a_late_start_shows_what_a_replay_from_the_first_byte_shows(
    before: list[bytes], after: list[bytes], lines: list[str]
) -> None:
    # Plain lines in the middle give the scroll start a chance; the pieces around them
    # give resets, clears, homes and modes every chance to be mis-carried.
    middle = "".join(line + "\r\n" for line in lines).encode()
    buffer = buffer_of(b"".join(before) + middle + b"".join(after))
    assert seen(buffer) == from_the_start(buffer)


FULL_REDRAW = b"".join(b"\x1b[%d;1H" % row + b"x" * 30 for row in range(1, 7))


@pytest.mark.parametrize(
    "data",
    [
        b"\x1b[4h\x1b[!p\x1b[H\x1b[2Jabc\rX",  # insert mode
        b"\x1b[2;4r\x1b[?6h\x1b[!p\x1b[H\x1b[2J\x1b[HX",  # origin mode and region
        b"\x1b(0\x1b[!p\x1b[H\x1b[2Jqqq",  # G0 as line drawing
        b"\x1b)0\x0e\x1b[!p\x1b[H\x1b[2Jqqq",  # G1 shifted in
        b"\x1b[?25l\x1b[!p\x1b[H\x1b[2Jabc",  # the cursor hidden
        b"\x1b[?25l\x1bc" + FULL_REDRAW,  # the same, reset by RIS
        b"\x1b[3;3H\x1b7\x1b[!p\x1b[H\x1b[2J\x1b8X",  # a cursor saved before it
        b"\x1b[?7l\x1b[!p\x1b[H\x1b[2J" + b"y" * 40,  # auto-wrap stays off (avt)
    ],
)
def test_a_late_start_honours_a_soft_or_full_reset_before_it(data: bytes) -> None:
    # Issue 32 item 3: DECSTR (CSI ! p, sent by `tput init`) clears insert mode, origin
    # mode, the scroll region, the character sets and the saved cursor, and shows the
    # cursor; a late start re-applied what it cleared.
    buffer = buffer_of(data)
    assert seen(buffer) == from_the_start(buffer)


# Rows rewritten at absolute positions, as top and vim redraw: a replay may start at one.
rewrites = st.lists(
    st.tuples(st.integers(1, 6), st.integers(1, 30), st.text("ab xy", max_size=32)), max_size=40
)


def rewritten(rows: list[tuple[int, int, str]]) -> bytes:
    return b"".join(f"\x1b[{row};{col}H{text}\x1b[K".encode() for row, col, text in rows)


@given(streams, rewrites, streams)
def test_a_start_at_a_cursor_position_shows_what_a_replay_from_the_first_byte_shows(
    before: list[bytes], rows: list[tuple[int, int, str]], after: list[bytes]
) -> None:
    buffer = buffer_of(b"".join(before) + rewritten(rows) + b"".join(after))
    assert seen(buffer) == from_the_start(buffer)


def test_a_screen_redrawn_row_by_row_is_replayed_from_a_late_cursor_position() -> None:
    # A first frame, then frames that each redraw two of the six rows: the replay starts
    # where the rows redrawn since cover the screen, not at the clear long before. (Output
    # that never rotated is probed only past 512 KiB: shorter, it is replayed whole.)
    frames = [b"\x1b[H\x1b[2J" + rewritten([(row, 1, f"first {row}") for row in range(1, 7)])]
    frames += [
        rewritten([(n % 6 + 1, 1, f"row {n % 1000}"), ((n + 3) % 6 + 1, 1, f"row {n % 1000}")])
        for n in range(20_000)
    ]
    buffer = buffer_of(b"".join(frames))
    assert buffer.end_offset > 8 * 65_536
    live = LiveScreen.replay(buffer)
    assert live.started > buffer.end_offset - 65_536
    assert seen(buffer) == from_the_start(buffer)
    short = buffer_of(b"".join(frames[:400]))
    assert LiveScreen.replay(short).started == 0
    assert seen(short) == from_the_start(short)
    kept = (
        rewritten([(row, 1, f"row {row}") for row in range(1, 7)])
        + rewritten([(1, 1, "x")]) * 60_000
    )
    buffer = buffer_of(kept)  # row 1 only, for ever after: rows 2-6 still need the start
    assert LiveScreen.replay(buffer).started == 0
    assert seen(buffer) == from_the_start(buffer)


@given(
    st.text("ab ✓\r\n", max_size=30),
    st.lists(st.text("xyz -", max_size=14), min_size=4, max_size=12),
    st.integers(4, 12),
    st.booleans(),
)
def test_a_collapsed_run_of_rewrites_leaves_the_row_and_cursor_as_the_run_does(
    before: str, rewrites: list[str], cols: int, autowrap: bool
) -> None:
    run = "".join("\r" + rewrite for rewrite in rewrites).encode()
    collapsed = collapse_overwrites(run, cols)
    if max(map(len, rewrites)) > cols:
        assert collapsed is None
        return
    assert collapsed is not None and len(collapsed) <= 2 * cols + 2

    def shown(tail: bytes) -> tuple[list[str], tuple[int, int]]:
        vt = avt.Vt(cols, 4, scrollback_limit=0)
        vt.feed_str(("" if autowrap else "\x1b[?7l") + before + tail.decode() + "z")
        return [line.text for line in vt.view()], (vt.cursor.row, vt.cursor.col)

    assert shown(collapsed) == shown(run)  # "z": a pending wrap must be kept too


@given(streams, st.lists(st.integers(0, 400), max_size=6))
def test_feeding_in_pieces_is_feeding_at_once(pieces: list[bytes], cuts: list[int]) -> None:
    data = b"".join(pieces)
    whole = buffer_of(data)
    parts = buffer_of()
    cache = ScreenCache(4, 60)
    last = 0
    for cut in sorted({min(cut, len(data)) for cut in cuts}):
        parts.append(data[last:cut])
        cache.snapshot("s", parts, 0.0)
        last = cut
    parts.append(data[last:])
    shot = cache.snapshot("s", parts, 0.0)
    assert [*shot.lines, repr(shot.cursor), repr(shot.cursor_visible)] == from_the_start(whole)
    assert shot.alternate == LiveScreen.replay(whole).image("x", None).alternate


def test_resizes_apply_at_their_offsets() -> None:
    buffer = buffer_of(b"a" * 5 + b"\r\n", rows=3, cols=10)
    buffer.note_size(3, 30)
    buffer.append(b"b" * 35)  # wraps at 30 columns, not at 10
    shot = LiveScreen.replay(buffer).image("x", None)
    assert (shot.rows, shot.cols) == (3, 30)
    assert shot.lines == ["aaaaa", "b" * 30, "b" * 5]
    cache = ScreenCache(2, 60)
    cache.snapshot("s", buffer, 0.0)
    buffer.note_size(4, 12)  # with no output since: the live emulator still resizes
    assert cache.snapshot("s", buffer, 0.0).rows == 4


def test_a_scroll_start_needs_a_screenful_of_rows_that_move_forward() -> None:
    rows = 3  # 2 x 3 - 1 = 5 line feeds scroll away every row, wherever the cursor was
    assert scroll_start(b"x\r\na\r\nb\r\nc\r\nd\r\ne\r\nf", rows) == 3
    assert scroll_start(b"a\r\nb\r\nc\r\nd\r\ne", rows) == -1  # not enough rows
    assert scroll_start(b"x\r\na\r\nb\x1b[A\r\nc\r\nd\r\ne\r\nf", rows) == -1  # moves up
    assert scroll_start(b"x\na\nb\nc\nd\ne\nf", rows) == -1  # bare LF: column unknown
    coloured = b"x\r\n\x1b[1ma\x1b[0m\x1b[K\r\nb\x1b]0;t\x07\r\nc\r\nd\r\ne\r\nf"
    assert scroll_start(coloured, rows) == 3


def test_alternate_screen_title_and_cursor_visibility() -> None:
    buffer = buffer_of(b"shell$ \x1b]2;my title\x07")
    cache = ScreenCache(2, 60)
    assert cache.snapshot("s", buffer, 0.0).title == "my title"
    buffer.append(b"\x1b[?1049h\x1b[H\x1b[2J\x1b[?25lfull screen")
    shot = cache.snapshot("s", buffer, 0.0)
    assert shot.alternate and not shot.cursor_visible and shot.lines[0] == "full screen"
    assert shot.offset == buffer.end_offset
    buffer.append(b"\x1b[?104")  # a switch split across two snapshots
    cache.snapshot("s", buffer, 0.0)
    buffer.append(b"9l\x1b[?25h")
    shot = cache.snapshot("s", buffer, 0.0)
    assert not shot.alternate and shot.cursor_visible and shot.lines[0] == "shell$"


def test_wide_characters_once_and_cursor_in_cells() -> None:
    shot = LiveScreen.replay(buffer_of("日本語|".encode())).image("x", None)
    assert shot.lines[0] == "日本語|" and shot.cursor == (0, 7)


def test_the_cache_keeps_at_most_capacity_and_drops_idle_emulators() -> None:
    cache = ScreenCache(2, 10.0)
    buffers = {key: buffer_of(key.encode()) for key in "abc"}
    for key, buffer in buffers.items():
        cache.snapshot(key, buffer, 0.0)
    assert len(cache) == 2 and "a" not in cache
    cache.snapshot("b", buffers["b"], 5.0)
    cache.expire(12.0)
    assert "c" not in cache and "b" in cache
    cache.discard("b")
    assert len(cache) == 0


def test_an_emulator_behind_the_ring_is_rebuilt() -> None:
    buffer = buffer_of(b"first\r\n", capacity=64)
    cache = ScreenCache(2, 60)
    cache.snapshot("s", buffer, 0.0)
    buffer.append(b"x" * 100 + b"\r\nlast")  # rotates past what the emulator was fed
    assert cache.snapshot("s", buffer, 0.0).lines[:3] == ["x" * 30, "x" * 28, "last"]


def test_modes_fold() -> None:
    state = modes.Modes()
    data = b"\x1b[?1049;25l\x1b[2;5r\x1b[?6h\x1b[?2004h\x1b[?7l\x1b[4;20h\x1b[?25l"
    for event in modes.scan(data):
        state.apply(event)
    assert state.region == (2, 5) and state.origin and not state.autowrap
    assert state.insert and state.newline and not state.alternate
    assert state.preamble(24) == "\x1b[2;5r\x1b[?6h\x1b[?7l\x1b[4h\x1b[20h"
    visibility = modes.CursorVisibility(data, list(modes.scan(data)))
    assert visibility.hidden_at(len(data)) and not visibility.hidden_at(10)
    # A full or a soft reset shows the cursor; the soft one keeps auto-wrap and newline mode.
    for reset in (b"\x1bc", b"\x1b[!p"):
        hidden = b"\x1b[?25l" + reset + b"x"
        visibility = modes.CursorVisibility(hidden, list(modes.scan(hidden)))
        assert visibility.hidden_at(6) and not visibility.hidden_at(len(hidden))
    soft = attrs.evolve(state)
    for event in modes.scan(b"\x1b[!p"):
        soft.apply(event)
    assert soft == attrs.evolve(state, region=(0, 0), origin=False, insert=False)
    for event in modes.scan(b"\x1bc"):
        state.apply(event)
    assert state == modes.Modes()


def test_title_scan_is_incremental_and_sees_split_sequences() -> None:
    buffer = buffer_of(b"\x1b]0;first\x07")
    assert buffer.terminal_title == "first"
    buffer.append(b"\x1b]2;sec")
    assert buffer.terminal_title == "first"
    buffer.append(b"ond\x1b\\ text")
    assert buffer.terminal_title == "second"


# Editing within a row, as shells and progress bars do it.
EDITS = st.sampled_from(["a", "bc", "hello", " ", "日", "本語", "\r", "\x08", "\t"]) | st.builds(
    lambda count, final: f"\x1b[{count}{final}",
    st.sampled_from(["", "0", "1", "2", "3", "7"]),
    st.sampled_from(list("DCGKPX@")),
)


def expand_tabs(text: str) -> str:
    """A TAB as the terminal shows it: blanks to the next multiple of 8 (in cells)."""
    out, col = [], 0
    for char in text:
        if char == "\t":
            out.append(" " * (8 - col % 8))
            col += 8 - col % 8
        else:
            out.append(char)
            col += char_width(char)
    return "".join(out)


@given(st.lists(EDITS, max_size=30), st.text("xyz", max_size=5))
def test_the_line_log_ends_an_edited_line_as_the_emulator_shows_it(
    edits: list[str], prompt: str
) -> None:
    # A wide window, so that the emulator's right margin never comes into play.
    line = (prompt + "".join(edits)).encode()
    output = buffer_of(line + b"\r\n", rows=3, cols=300)
    shown = ScreenCache(1, 60).snapshot("s", output, 0.0).lines[0]
    logged = output.read(0, 1).lines[0].text
    assert expand_tabs(logged).rstrip(" ") == shown


# Editing a line that wraps: as above, and moves up its rows (readline's way back across the
# margin is CR, CSI A, CSI C). Not CSI B: below its last row the emulator leaves the line,
# which the line log does not follow. Not wide characters: one that does not fit in a row
# leaves the last cell as it was in xterm and in the line log, where avt blanks it.
# (tests/test_output_lines.py checks both against a reference model.)
WRAPPED_EDITS = EDITS.filter(lambda edit: not any(char_width(c) == 2 for c in edit)) | (
    st.sampled_from(["\x1b[A", "\x1b[2A", "\x1b[9C"])
)


def cells_of(text: str) -> int:
    return sum(char_width(char) for char in text)


def layout(text: str, cols: int) -> list[str]:
    """The rows `text` takes when printed into an empty window `cols` wide: it wraps at the
    margin (a wide character that does not fit leaves the last cell blank), a TAB moves to
    the next multiple of 8 in its row, at most to the row's last cell."""
    rows: list[list[str]] = [[]]
    col, pending = 0, False
    for char in text:
        row = rows[-1]
        size = char_width(char)
        if char == "\t":
            stop = min((col // 8 + 1) * 8, cols - 1)
            row += [" "] * (stop - len(row))
            col, pending = stop, False
            continue
        if size == 0:
            row[-1] += char
            continue
        if pending or (size == 2 and col == cols - 1):
            row += [" "] * (cols - len(row))
            rows.append([])
            row, col, pending = rows[-1], 0, False
        row += [" "] * (col + size - len(row))
        row[col : col + size] = [char, ""][:size]
        col += size
        if col == cols:
            col, pending = cols - 1, True
    return ["".join(row).rstrip(" ") for row in rows]


@given(st.lists(WRAPPED_EDITS, max_size=30), st.text("xyz", max_size=5), st.integers(2, 12))
def test_the_line_log_ends_a_wrapped_line_as_the_emulator_shows_its_rows(
    edits: list[str], prompt: str, cols: int
) -> None:
    # Enough rows that nothing scrolls away. The logged line, printed afresh into a window
    # of that width, shows what the edits left on the rows.
    line = prompt + "".join(edits)
    rows = 2 * cells_of(line) // cols + 3
    output = buffer_of(line.encode() + b"\r\n", rows=rows, cols=cols)
    shown = ScreenCache(1, 60).snapshot("s", output, 0.0).lines
    logged = layout(output.read(0, 1).lines[0].text, cols)
    while logged and not logged[-1]:
        logged.pop()
    assert logged == shown[: len(logged)]
    assert not "".join(shown[len(logged) :])


NOT_KEPT = "its screen is not kept as lines]"


def test_alternate_screen_output_is_one_marker_line_and_the_screen_shows_it() -> None:
    output = buffer_of(b"$ vim notes\r\n\x1b[?1049h\x1b[H\x1b[2Jline 1\r\n~\r\n~", rows=4)
    page = output.read(0, 100)
    assert [(line.number, line.text) for line in page.lines] == [
        (0, "$ vim notes"),
        (1, "[full-screen program running since output byte 13: see the screen]"),
    ]
    assert page.total_lines == 4
    screen = LiveScreen.replay(output).image("x", None)
    assert screen.alternate and screen.lines[:3] == ["line 1", "~", "~"]
    output.append(b"\x1b[?1049l$ ls\r\nfile\r\n")
    page = output.read(0, 100)
    assert [(line.number, line.text) for line in page.lines] == [
        (0, "$ vim notes"),
        (1, "[full-screen program ran here (output bytes 13-48, 2 lines): " + NOT_KEPT),
        (3, "$ ls"),
        (4, "file"),
    ]
    assert [line.number for line in output.tail(3).lines] == [1, 3, 4]
    found, _ = output.search_from(compile_pattern("~|.*", ignore_case=False, max_length=9), 2)
    assert found is not None and found.number == 3  # hidden lines never match
    assert output.last_nonblank_line() == "file"


@given(
    st.lists(
        st.sampled_from(
            [b"text", b"\r\n", b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[?47h", b"\x1bc", b"\x1b[?104"]
        ),
        max_size=40,
    ),
    st.lists(st.integers(0, 200), max_size=8),
)
def test_alternate_screen_spans_do_not_depend_on_chunking_or_reads(
    pieces: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(pieces)
    whole = buffer_of(data)
    parts = buffer_of()
    last = 0
    for cut in sorted({min(cut, len(data)) for cut in cuts}):
        parts.append(data[last:cut])
        parts.read(0, 1000)
        last = cut
    parts.append(data[last:])
    assert parts.read(0, 1000) == whole.read(0, 1000)
    assert parts.tail(5) == whole.tail(5)


PARSER_PIECES = [
    b"\x1b",
    b"\x1b[",
    b"\x1b[1;2",
    b"\x1b[?",
    b"\x1b]",
    b"\x1b]2;t",
    b"\x1bP",
    b"\x1b_",
    b"\x1b^",
    b"\x1bX",
    b"\x1b(",
    b"\x1b#",
    b"\x1b\\",
    b"\x07",
    b"\x18",
    b"\x1a",
    b"\r\n",
    b"m",
    b"A",
    b"9",
    b" ",
    "é".encode(),
    "©".encode(),
    "\x9b".encode(),
    "\x9c".encode(),
    "\x9d".encode(),
    "\x90".encode(),
    "\x85".encode(),
]


@given(st.lists(st.sampled_from(PARSER_PIECES), max_size=12))
def test_ground_at_says_whether_the_emulator_prints_the_next_character(
    pieces: list[bytes],
) -> None:
    """The emulator itself is the reference: in the ground state the next letter is
    printed; inside a sequence or a string it is taken as part of it."""
    data = b"".join(pieces)
    vt = avt.Vt(300, 4, scrollback_limit=0)
    vt.feed_str(data.decode("utf-8", "replace") + "Z")
    printed = any("Z" in line.text for line in vt.view())
    assert modes.ground_at(data, len(data)) == printed


def test_a_replay_never_starts_inside_a_sequence_the_rotation_cut() -> None:
    # Issue 32 item 4: htop's row 0 began with `(B...`, the tail of an `ESC ( B` whose ESC
    # had rotated out. Here the ring's oldest retained byte falls inside an ESC ( B, a CSI
    # and an OSC in turn; the replay starts where a parser is surely in step.
    for cut_in in (b"\x1b(B", b"\x1b[38;5;123m", b"\x1b]2;a long window title\x07"):
        head = b"x" * 200 + cut_in
        capacity = 256
        buffer = buffer_of(capacity=capacity, rows=4, cols=600)
        buffer.append(head + b"\x1b[2;1Hrow two")
        # Rotate until the oldest retained byte lies inside `cut_in`.
        while not len(head) - len(cut_in) < buffer.start_offset < len(head):
            buffer.append(b"y")
            assert buffer.start_offset < len(head), "the ring rotated past the sequence"
        lines = seen(buffer)
        assert not any(piece in "".join(lines) for piece in ("(B", "123m", "title")), lines
        shown = buffer.end_offset - len(head) - len(b"\x1b[2;1Hrow two")
        assert lines[1] == "row two" + "y" * shown, lines
    assert modes.resync(b"(Bxyz\x1b[H") == 5
    assert modes.resync(b"3mtext\r\nmore\x1b[H") == 8
    assert modes.resync(b"text without a control " * 300) == 0  # nothing to skip to
