"""Bugs of the emulator (asciinema's avt, through pyavt) and what the screen does about them
(issue 32 item 5; byte reproductions in docs/output.md). Each test of avt itself is an
expected failure on the pyavt version that has the bug, strict: it says so when an upgrade
fixes it (then the workaround can go, or the known deviation is gone)."""

from __future__ import annotations

import unicodedata

import avt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.screen import LiveScreen, emulator_text

BUGGY_AVT = avt.__version__ == "0.1.2"


def avt_rows(data: str, cols: int = 10, rows: int = 12) -> tuple[list[str], tuple[int, int]]:
    vt = avt.Vt(cols, rows, scrollback_limit=0)
    vt.feed_str(data)
    return [line.text.rstrip(" ") for line in vt.view()], (vt.cursor.row, vt.cursor.col)


def screen_rows(data: bytes, cols: int = 10, rows: int = 12) -> tuple[list[str], tuple[int, int]]:
    buffer = OutputBuffer(1 << 16, max_line_length=2000, max_escape_length=4096)
    buffer.note_size(rows, cols)
    buffer.append(data)
    screen = LiveScreen.replay(buffer).image("x", None)
    return screen.lines, screen.cursor


# ---------------------------------------------------------------- avt as it is


@pytest.mark.xfail(BUGGY_AVT, strict=True, reason="pyavt 0.1.2 prints DEL (0x7f)")
def test_avt_ignores_del() -> None:
    assert avt_rows("a\x7fb")[0][0] == "ab"


@pytest.mark.xfail(BUGGY_AVT, strict=True, reason="pyavt 0.1.2 gives a combining mark a cell")
def test_avt_puts_a_combining_mark_on_the_character_before_it() -> None:
    # After a character in the last column, the mark went to the next row.
    assert avt_rows("123456789e\u0301x") == (["123456789e\u0301", "x"] + [""] * 10, (1, 1))


@pytest.mark.xfail(BUGGY_AVT, strict=True, reason="pyavt 0.1.2: ESC M ignores origin mode")
def test_avt_reverse_index_in_origin_mode_moves_up_one_row() -> None:
    # Region rows 5-10, origin mode: row 2 of the region is row 6 of the screen; a
    # reverse index moves up to row 5. avt lands on row 9.
    assert avt_rows("\x1b[5;10r\x1b[?6h\x1b[2;1H\x1bMX")[1] == (4, 1)


# ---------------------------------------------------------------- the screen's workarounds


def test_the_screen_never_shows_del() -> None:
    lines, cursor = screen_rows(b"a\x7fb\x1b[3\x7f1mc")
    assert lines[0] == "abc"
    assert cursor == (0, 3)


def test_a_combining_mark_joins_the_character_before_it_even_at_the_margin() -> None:
    lines, cursor = screen_rows("123456789e\u0301x".encode())
    assert lines[:2] == ["123456789é", "x"]
    assert cursor == (1, 1)
    lines, cursor = screen_rows("cafe\u0301!".encode())
    assert (lines[0], cursor) == ("café!", (0, 5))
    # A mark with no precomposed form is dropped: what follows stays in its cell.
    lines, cursor = screen_rows("x\u0301y".encode())
    assert (lines[0], cursor) == ("xy", (0, 2))
    # The final byte of a sequence is never taken for a base character.
    lines, cursor = screen_rows("\x1b[31m\u0301a".encode())
    assert (lines[0], cursor) == ("a", (0, 1))


@pytest.mark.xfail(BUGGY_AVT, strict=True, reason="pyavt 0.1.2: ESC M ignores origin mode")
def test_the_screen_reverse_index_in_origin_mode() -> None:
    # Not worked around (the cursor's row relative to the region is avt's to know).
    assert screen_rows(b"\x1b[5;10r\x1b[?6h\x1b[2;1H\x1bMX")[1] == (4, 1)


MARKS = "\u0301\u0308\u20dd\u0e31"  # acute, diaeresis (compose with a-z), enclosing circle, Thai


def without_marks(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if ch not in MARKS)


@given(st.text(alphabet="aeouxyz !\x7f" + MARKS, max_size=60))
def test_text_with_marks_and_del_takes_the_cells_a_terminal_gives_it(text: str) -> None:
    # A mark takes no cell and DEL none: the cursor ends where the other characters put
    # it, and the row shows them in order (each with its mark where one composes).
    fed = emulator_text(text)
    lines, cursor = avt_rows(fed, cols=100, rows=2)
    kept = [ch for ch in text if ch not in MARKS and ch != "\x7f"]
    assert cursor == (0, len(kept))
    assert without_marks(lines[0]) == "".join(kept).rstrip(" ")
    for composed in ("\u00e9", "\u00fc"):  # é, ü: kept when their pieces were typed
        pieces = unicodedata.normalize("NFD", composed)
        assert (pieces in text.replace("\x7f", "")) <= (composed in lines[0])


def test_emulator_text_leaves_text_without_marks_alone() -> None:
    for text in ("plain", "日本語 ✓", "\x1b[31mred\x1b[0m", "👨\u200d👩"):
        assert emulator_text(text) is text or emulator_text(text) == text
