"""The pure parts of `trio-pty attach`: detach-key specs and their matcher, and the tracker
of what a program turned on in the terminal (checked against a real VT emulator)."""

from __future__ import annotations

from collections.abc import Sequence

import avt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.console.keys import DetachMatcher, KeySpecError, key_bytes, parse_keys
from trio_pty.console.modes import ModeTracker

# --------------------------------------------------------------------------------------------
# Detach keys


@pytest.mark.parametrize(
    ("spec", "keys"),
    [
        ("C-]", (b"\x1d",)),
        ("^]", (b"\x1d",)),
        ("C-b d", (b"\x02", b"d")),
        ("C-B   d", (b"\x02", b"d")),
        ("M-x", (b"\x1bx",)),
        ("M-C-a", (b"\x1b\x01",)),
        ("C-Space", (b"\x00",)),
        ("C-@", (b"\x00",)),
        ("C-?", (b"\x7f",)),
        ("Escape", (b"\x1b",)),
        ("C-a Enter", (b"\x01", b"\r")),
        ("é", ("é".encode(),)),
    ],
)
def test_key_specs(spec: str, keys: tuple[bytes, ...]) -> None:
    assert parse_keys(spec) == keys


@pytest.mark.parametrize(
    "spec", ["", "  ", "C-", "C-1", "C-é", "ctrl-]", "F13", "C-b C-b", "Escape M-x", "x x y"]
)
def test_key_specs_refused(spec: str) -> None:
    with pytest.raises(KeySpecError):
        parse_keys(spec)


@pytest.mark.parametrize(
    ("name", "sent"),
    [
        ("Up", b"\x1b[A"),
        ("down", b"\x1b[B"),
        ("Left", b"\x1b[D"),
        ("Home", b"\x1b[H"),
        ("PageUp", b"\x1b[5~"),
        ("NPage", b"\x1b[6~"),
        ("Delete", b"\x1b[3~"),
        ("BTab", b"\x1b[Z"),
        ("F1", b"\x1bOP"),
        ("F5", b"\x1b[15~"),
        ("F12", b"\x1b[24~"),
        ("M-Up", b"\x1b\x1b[A"),
        ("C-c", b"\x03"),
        ("\\", b"\\"),
    ],
)
def test_named_keys_are_what_an_xterm_sends(name: str, sent: bytes) -> None:
    """The names MCP's write_stdin `keys` take (and the detach keys)."""
    assert key_bytes(name) == sent


SPECS = ["C-]", "C-b d", "M-d", "C-a C-d", "q", "M-x y", "Escape"]


def feed_in_pieces(matcher: DetachMatcher, data: bytes, cuts: Sequence[int]) -> tuple[bytes, bool]:
    out, start = b"", 0
    for cut in [*sorted(cuts), len(data)]:
        sent, detached = matcher.feed(data[start:cut])
        out += sent
        start = cut
        if detached:
            return out, True
    return out, False


def plain_text(first: bytes) -> st.SearchStrategy[bytes]:
    """Typing that never starts the sequence (no byte of its first key)."""
    return st.binary(max_size=40).map(lambda data: bytes(b for b in data if b not in first))


@given(data=st.data(), spec=st.sampled_from(SPECS))
def test_typing_passes_through_and_the_first_key_twice_sends_it(
    data: st.DataObject, spec: str
) -> None:
    keys = parse_keys(spec)
    text = plain_text(keys[0])
    before, after = data.draw(text), data.draw(text)
    typed = before + keys[0] * 2 + after
    cuts = data.draw(st.lists(st.integers(0, len(typed)), max_size=5))
    matcher = DetachMatcher(keys)
    assert feed_in_pieces(matcher, typed, cuts) == (before + keys[0] + after, False)
    assert not matcher.waiting


@given(data=st.data(), spec=st.sampled_from(SPECS))
def test_the_sequence_detaches_and_drops_what_follows(data: st.DataObject, spec: str) -> None:
    keys = parse_keys(spec)
    before, after = data.draw(plain_text(keys[0])), data.draw(plain_text(keys[0]))
    typed = before + b"".join(keys)
    cuts = data.draw(st.lists(st.integers(0, len(typed)), max_size=5))
    matcher = DetachMatcher(keys)
    if len(keys) > 1:
        assert feed_in_pieces(matcher, typed + after, cuts) == (before, True)
        return
    # One key: held until it is clear that no second press follows.
    assert feed_in_pieces(matcher, typed, cuts) == (before, False)
    assert matcher.waiting
    if after:
        assert matcher.feed(after) == (b"", True)  # another key: that was a detach
    else:
        assert matcher.expire() == (b"", True)  # nothing within DETACH_DELAY


def test_a_key_cut_in_the_middle_waits_then_goes_on() -> None:
    """An Escape typed alone, when the detach key is M-d, reaches the program after the
    delay; a prefix key of a longer sequence waits for the next key however long."""
    matcher = DetachMatcher(parse_keys("M-d"))
    assert matcher.feed(b"\x1b") == (b"", False) and matcher.waiting
    assert matcher.expire() == (b"\x1b", False)
    prefix = DetachMatcher(parse_keys("C-b d"))
    assert prefix.feed(b"\x02") == (b"", False) and not prefix.waiting
    assert prefix.feed(b"x") == (b"\x02x", False)


# --------------------------------------------------------------------------------------------
# Modes


VIM_START = (
    b"\x1b[?1049h\x1b[22;0;0t\x1b[>4;2m\x1b[?1h\x1b=\x1b[?2004h\x1b[?1004h\x1b[1;24r"
    b"\x1b[?12h\x1b[?12l\x1b[22;2t\x1b[22;1t\x1b[27m\x1b[23m\x1b[29m\x1b[m\x1b[H\x1b[2J"
    b"\x1b[?25l\x1b[1;1H~\x1b[?1000h\x1b[?1006h\x1b[?25h"
)


def test_vim_is_undone_exactly() -> None:
    tracker = ModeTracker()
    tracker.feed(VIM_START)
    assert tracker.restore() == (
        b"\x1b[?1049l"  # the alternate screen first: it also puts the cursor back
        b"\x1b[?1l\x1b[?1000l\x1b[?1004l\x1b[?1006l\x1b[?2004l"
        b"\x1b>"  # keypad
        b"\x1b7\x1b[r\x1b8"  # the scroll region, the cursor kept in place
        b"\x1b[>4m"  # modifyOtherKeys
        b"\x1b[0m"
    )
    nothing = ModeTracker()
    assert nothing.restore() == b"\x1b[0m"
    vim_quit = ModeTracker()
    vim_quit.feed(
        VIM_START + b"\x1b[?1004l\x1b[?1000l\x1b[?1006l\x1b[?2004l\x1b[?1l\x1b>\x1b[?1049l"
    )
    assert vim_quit.restore() == b"\x1b7\x1b[r\x1b8\x1b[>4m\x1b[0m"


TRACKED = [
    b"\x1b[?1049h",
    b"\x1b[?1049l",
    b"\x1b[?47h",
    b"\x1b[?1047h",
    b"\x1b[?1h",
    b"\x1b[?1l",
    b"\x1b[?25l",
    b"\x1b[?25h",
    b"\x1b[?7l",
    b"\x1b[?1000;1006h",
    b"\x1b[?1002h",
    b"\x1b[?1003l",
    b"\x1b[?2004h",
    b"\x1b[?2026h",
    b"\x1b=",
    b"\x1b>",
    b"\x1b[4h",
    b"\x1b[4l",
    b"\x1b[2;10r",
    b"\x1b[r",
    b"\x1b[5 q",
    b"\x1b[>4;2m",
    b"\x1b[>1u",
    b"\x1b[<u",
    b"\x1b[=1;1u",
    b"\x1b(0",
    b"\x1b(B",
    b"\x0e",
    b"\x0f",
    b"\x1b[!p",
    b"\x1bc",
]
OTHER = [b"\x1b[31m", b"\x1b[1;1H", b"\x1b[K", b"\x1b]0;title\x07", b"\x1b[2J", b"\r\n"]
streams = st.lists(
    st.sampled_from(TRACKED) | st.sampled_from(OTHER) | st.binary(max_size=8), max_size=30
).map(b"".join)


@given(stream=streams, cuts=st.lists(st.integers(0, 400), max_size=8))
def test_a_sequence_cut_between_chunks_counts_the_same(stream: bytes, cuts: list[int]) -> None:
    whole = ModeTracker()
    whole.feed(stream)
    pieces = ModeTracker()
    start = 0
    for cut in [*sorted(c for c in cuts if c <= len(stream)), len(stream)]:
        pieces.feed(stream[start:cut])
        start = cut
    assert pieces.restore() == whole.restore()


@given(stream=streams)
def test_restore_leaves_nothing_on(stream: bytes) -> None:
    """After the restoring bytes, the tracker itself sees nothing left on, and a real VT
    emulator shows the main screen, the cursor, and normal cursor keys."""
    tracker = ModeTracker()
    tracker.feed(stream)
    restore = tracker.restore()
    after = ModeTracker()
    after.feed(stream + restore)
    assert after.restore() == b"\x1b[0m"

    if b"\x1bc" in stream:
        return  # avt keeps application cursor keys through a full reset (xterm does not)
    vt = avt.Vt(20, 5, scrollback_limit=0)
    vt.feed_str((stream + restore).decode("latin-1"))
    assert vt.cursor.visible and not vt.cursor_key_app_mode
    dump = vt.dump()  # (it shows what the alternate screen holds, then switches back)
    assert dump.rfind("?1047h") <= dump.rfind("?1047l")


def test_the_line_start_is_followed_on_the_main_screen_only() -> None:
    tracker = ModeTracker()
    assert tracker.at_line_start
    tracker.feed(b"$ vim notes.txt\r\n")
    assert tracker.at_line_start
    tracker.feed(b"\x1b[?1049hfull screen text, no newline")
    assert tracker.at_line_start  # what the alternate screen shows does not count
    tracker.feed(b"\x1b[?1049l$ ")
    assert not tracker.at_line_start
