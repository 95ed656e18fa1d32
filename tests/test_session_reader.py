"""The reader's flood pace on its own (pure: sizes and times in, pause or not out). The
reader on real PTYs is tests/test_flood_reading.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trio_pty.reader import FloodPace

DELAY = 0.001
NO_INPUT = -1.0


def test_passes_close_together_become_a_flood_at_8_kib() -> None:
    pace = FloodPace(DELAY)
    assert not pace.read(4000, 1.0, NO_INPUT)
    assert not pace.read(4000, 1.001, NO_INPUT)
    assert pace.read(200, 1.002, NO_INPUT)  # 8,200 bytes within 2 ms of each other


def test_a_quiet_gap_starts_a_new_burst() -> None:
    pace = FloodPace(DELAY)
    pace.read(6000, 1.0, NO_INPUT)
    assert not pace.read(6000, 1.003, NO_INPUT)  # 3 ms later: a new burst


def test_input_since_the_last_pass_starts_a_new_burst() -> None:
    """Output after a write answers it: a shell's commands sent back to back never add up
    to a flood."""
    pace = FloodPace(DELAY)
    pace.read(6000, 1.0, NO_INPUT)
    assert not pace.read(6000, 1.001, 1.0005)


def test_a_pass_that_reads_nothing_ends_the_flood() -> None:
    pace = FloodPace(DELAY)
    assert pace.read(9000, 1.0, NO_INPUT)
    pace.read_nothing()
    assert not pace.pausing
    assert not pace.read(100, 1.0005, NO_INPUT)


def test_a_writer_two_pauses_found_faster_than_40_mb_s_is_read_without_pauses() -> None:
    pace = FloodPace(DELAY)
    assert pace.read(9000, 1.0, NO_INPUT)
    assert pace.read(60_000, 1.001, NO_INPUT)  # 60 MB/s: one pause found it fast
    assert not pace.read(60_000, 1.002, NO_INPUT)  # the second: no more pauses
    assert not pace.read(60_000, 1.0021, NO_INPUT)  # until its output stops for 50 ms
    assert not pace.read(9000, 1.03, NO_INPUT)
    assert pace.read(9000, 1.1, NO_INPUT)


def test_newline_dense_text_keeps_pausing() -> None:
    """About 13 MB/s: each pause finds the writer slower than 40 MB/s."""
    pace = FloodPace(DELAY)
    for step in range(1, 101):
        assert pace.read(16_000, 1.0 + step * 0.0012, NO_INPUT)


passes = st.lists(
    st.tuples(st.integers(0, 100_000), st.floats(0, 0.01), st.booleans()), max_size=50
)


@given(passes, st.sampled_from([0.0, DELAY]))
def test_a_pause_needs_a_delay_and_8_kib_read_since_the_last_gap_input_or_empty_pass(
    steps: list[tuple[int, float, bool]], delay: float
) -> None:
    """Whatever the passes: never a pause with no delay, and a pause only once the passes
    since the last gap over 2 ms, input or empty pass have read 8 KiB together."""
    pace = FloodPace(delay)
    now, last_read, since_reset, input_at = 1.0, float("-inf"), 0, NO_INPUT
    for got, gap, typed in steps:
        if typed:
            input_at = now + gap / 2
        before = pace.pausing
        now += gap
        if got == 0:
            pace.read_nothing()
            assert not pace.pausing
            since_reset = 0
            continue
        if (not before and now - last_read > 0.002) or input_at > last_read:
            since_reset = 0
        since_reset += got
        last_read = now
        pausing = pace.read(got, now, input_at)
        assert pausing is pace.pausing
        if pausing:
            assert delay > 0 and since_reset >= 8192
