"""The drawn state (output/draw.py, `ScreenCache.draw`): a terminal that gets the drawing and
then the output from its offset shows what one that got every byte shows; the drawing holds no
terminal query; the input modes and the history lines are found."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from trio_pty.output import draw
from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.screen import LiveScreen, ScreenCache

PIECES = [
    b"plain text",
    b"\r\n",
    b"\r",
    "日本語 ✓".encode(),
    b"\x1b[31mred\x1b[0m",
    b"\x1b[38;5;200mx\x1b[38;2;1;2;3my\x1b[4;7mz\x1b[m",
    b"\x1b[44m\x1b[K",
    b"\x1b[3;4H",
    b"\x1b[H\x1b[2J",
    b"\x1b[?1049h",
    b"\x1b[?1049l",
    b"\x1b[?25l",
    b"\x1b[?25h",
    b"\x1b[2;4r",
    b"\x1b[?7l",
    b"\x1b(0lqk\x1b(B",
    b"\x1b7",
    b"\x1b8",
    b"\x1b[6n",  # a cursor position query
    b"\x1b[>c",  # a device attributes query
    b"\x1b]2;title\x07",
    b"\x1b[?2004h",
    b"\x1b[?1h\x1b=",
    b"\x1b[?1000;1006h",
]
streams = st.lists(st.sampled_from(PIECES) | st.binary(max_size=6), max_size=40)


def buffer_of(data: bytes, *, rows: int = 6, cols: int = 20) -> OutputBuffer:
    buffer = OutputBuffer(1 << 20, max_line_length=2000, max_escape_length=4096)
    buffer.note_size(rows, cols)
    if data:
        buffer.append(data)
    return buffer


def shown(data: bytes) -> tuple[object, ...]:
    """What a terminal that read `data` shows (the screen model fed every byte)."""
    screen = LiveScreen.from_oldest(buffer_of(data)).image("x", None)
    return (screen.lines, screen.cursor, screen.cursor_visible, screen.alternate)


@given(streams, streams)
@example(before=[b"abc\x1b[3"], after=[b"1mred"])  # the output ends inside a sequence
@example(before=["日".encode()[:2]], after=["日".encode()[2:]])  # inside a character
@example(before=[b"\x1b[?1049h", b"vim"], after=[b"\x1b[?1049l", b"back"])
def test_the_drawing_then_the_rest_shows_what_every_byte_shows(
    before: list[bytes], after: list[bytes]
) -> None:
    first, rest = b"".join(before), b"".join(after)
    buffer = buffer_of(first)
    drawn = ScreenCache(4, 60).draw("x", buffer, 0.0)
    assert 0 <= drawn.offset <= len(first)
    assert shown(drawn.data + first[drawn.offset :] + rest) == shown(first + rest)


@given(streams)
def test_a_late_started_emulator_draws_the_same(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    buffer = buffer_of(data)
    late = LiveScreen.replay(buffer, whole_up_to=0, probed_above=0).draw(buffer)
    assert shown(late.data + data[late.offset :]) == shown(data)


@given(streams)
def test_a_drawing_asks_the_terminal_nothing(pieces: list[bytes]) -> None:
    drawn = ScreenCache(4, 60).draw("x", buffer_of(b"".join(pieces)), 0.0)
    assert re.search(rb"\x1b\[[0-9;>?]*[nc]", drawn.data) is None
    assert b"\x9b" not in drawn.data.decode().encode("latin-1", "replace")


def test_the_input_modes_come_from_the_whole_output() -> None:
    data = b"\x1b[?2004h\x1b[?1h\x1b=\x1b[?1000;1006h ... \x1b[?1000l\x1b[?2004l\x1b[?2004h"
    assert draw.input_modes(data) == {2004: True, 1: True, 66: True, 1000: False, 1006: True}
    assert not any(draw.input_modes(data + b"\x1bc").values())
    drawn = ScreenCache(4, 60).draw("x", buffer_of(b"\x1b[?2004h\x1b]0;top\x07$ "), 0.0)
    assert drawn.data.endswith(b"\x1b[?2004h\x1b]2;top\x07")


def test_history_is_what_scrolled_off_the_screen() -> None:
    lines = [f"line {n}" for n in range(10)]
    buffer = buffer_of(("\r\n".join(lines) + "\r\n$ ").encode(), rows=4)
    drawn = ScreenCache(4, 60).draw("x", buffer, 0.0)
    text = drawn.data.decode()
    history, screen = text.split("\x1b[H\x1b[J")
    assert history.startswith("\x1b[0m" + "".join(f"line {n}\r\n" for n in range(7)))
    assert "line 7" not in history and "line 7" in screen
    # A wrapped line takes its rows: the one partly scrolled away counts as history.
    assert draw.history_lines(["a", "b" * 25, "c"], rows_above=3, cols=20) == "a\r\n"
    assert draw.history_lines(["a\x1b[6n", "b" * 45, "c"], 3, 20) == "a[6n\r\n" + "b" * 45 + "\r\n"
    assert draw.history_lines(["a", "b"], rows_above=2, cols=20) == ""


def test_seven_bit_writes_out_repeats_csi_and_colours() -> None:
    assert draw.seven_bit("ab \x1b[3b\x9b1;2H\x1b[0;38:5:200m") == "ab    \x1b[1;2H\x1b[0;38;5;200m"
    assert draw.seven_bit("ab \x1b[3b\r\nc  \r\n") == "ab\x1b[K\r\nc\x1b[K\r\n"


def test_a_sequence_the_output_ends_inside_is_sent_live_whole() -> None:
    for cut in (b"\x1b", b"\x1b[3", b"\x1b[?10", b"\x1b]2;ti", b"\x1b(", b"\x1bP1;2"):
        drawn = ScreenCache(4, 60).draw("x", buffer_of(b"abc" + cut), 0.0)
        assert drawn.offset == 3, cut
        assert draw.pending_sequence(drawn.data.decode()) == -1


def test_the_alternate_screen_is_entered_with_the_cursor_saved_by_1049() -> None:
    drawn = ScreenCache(4, 60).draw("x", buffer_of(b"$ vim\r\n\x1b[?1049h\x1b[Hvim"), 0.0)
    text = drawn.data.decode()
    assert "\x1b[?1049h" in text and "\x1b[?1047h" not in text
    assert text.index("\x1b[2;1H") < text.index("\x1b[?1049h")  # the primary's cursor, saved


def test_tab_stops_after_a_resize_leave_the_saved_cursor_alone() -> None:
    buffer = buffer_of(b"$ vim\r\n\x1b[?1049h\x1b[Hvim", rows=4, cols=80)
    buffer.note_size(5, 100)
    buffer.append(b"\x1b[Hvim\tx")
    drawn = ScreenCache(4, 60).draw("x", buffer, 0.0)
    text = drawn.data.decode()
    assert "\x1b[5W" not in text and "\x1b[W" not in text
    screen = text.split("\x1b[H\x1b[J", 1)[1]
    assert screen.startswith("\x1b[3g") and screen.index("\x1bH") < screen.index("\x1b[?1049h")
    rest = b"\tY\x1b[?1049l$"
    resized = buffer_of(b"", rows=5, cols=100)
    resized.append(drawn.data + rest)
    everything = buffer_of(b"", rows=4, cols=80)
    everything.append(b"$ vim\r\n\x1b[?1049h\x1b[Hvim")
    everything.note_size(5, 100)
    everything.append(b"\x1b[Hvim\tx" + rest)
    mine = LiveScreen.from_oldest(resized).image("x", None)
    truth = LiveScreen.from_oldest(everything).image("x", None)
    assert (mine.lines, mine.cursor) == (truth.lines, truth.cursor)


def test_on_the_alternate_screen_the_history_stops_above_the_primary_screen() -> None:
    lines = "".join(f"line {n}\r\n" for n in range(12)) + "$ vim\r\n"
    for resized in (False, True):  # after a resize, the dump sets tab stops too
        buffer = buffer_of(lines.encode(), rows=4, cols=80)
        if resized:
            buffer.note_size(5, 100)
        buffer.append(b"\x1b[?1049h\x1b[H~\r\n~")
        text = ScreenCache(4, 60).draw("x", buffer, 0.0).data.decode()
        history, screen = text.split("\x1b[H\x1b[J")
        assert "line 8\r\n" in history and "$ vim" not in history, (resized, history)
        assert "$ vim" in screen
