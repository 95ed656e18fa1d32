"""The timing index and the asciicast export, driven directly (pure code), with hypothesis for
what must hold however output is chunked and timed; asciinema itself (PyPI's, 2.4) reads
the v2 files back as the oracle."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty.output.record import (
    CastHeader,
    Event,
    Mark,
    TimingIndex,
    cast_events,
    format_cast,
)

HEADER = CastHeader(cols=80, rows=24, timestamp=1_700_000_000, command="bash", shell="/bin/bash")


@st.composite
def sessions(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, float]]]:
    """Text (any Unicode, UTF-8 encoded) cut into reads at arbitrary byte positions, even
    inside a character, each read with its arrival time."""
    data = draw(st.text(min_size=1, max_size=300)).encode()
    cuts = sorted(set(draw(st.lists(st.integers(1, len(data)), max_size=30))) | {len(data)})
    gaps = draw(st.lists(st.floats(0, 2), min_size=len(cuts), max_size=len(cuts)))
    times = list(itertools.accumulate(gaps))
    return data, list(zip(cuts, times, strict=True))


def indexed(reads: list[tuple[int, float]], **kwargs: float) -> TimingIndex:
    index = TimingIndex(**kwargs)  # type: ignore[arg-type]
    for end, now in reads:
        index.arrived(end, now)
    return index


def output_text(events: list[Event]) -> str:
    return "".join(e.data for e in events if e.code == "o")


@given(sessions())
def test_the_output_events_carry_the_text_whole_and_in_order(
    session: tuple[bytes, list[tuple[int, float]]],
) -> None:
    data, reads = session
    events = cast_events(data, 0, indexed(reads), origin=0.0)
    assert output_text(events) == data.decode()
    assert all(e.data for e in events)  # a character split across reads is never cut
    times = [e.time for e in events]
    assert times == sorted(times)


@given(sessions(), st.data())
def test_marks_sit_between_the_bytes_before_and_after_them(
    session: tuple[bytes, list[tuple[int, float]]], draw: st.DataObject
) -> None:
    data, reads = session
    offsets = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=5)))
    index = indexed(reads)
    marks = [Mark(o, index.time_at(o) or reads[-1][1], "m", f"mark {o}") for o in offsets]
    events = cast_events(data, 0, index, origin=0.0, marks=marks, exit_status=(99.0, 3))
    assert [e.data for e in events if e.code == "m"] == [m.data for m in marks]
    for mark in marks:
        position = next(i for i, e in enumerate(events) if e.data == mark.data)
        before = output_text(events[:position]).encode()
        # Up to the mark, except the start of a character the mark's offset cuts.
        assert data.startswith(before) and mark.offset - 3 <= len(before) <= mark.offset
    assert events[-1] == Event(99.0, "x", "3")


@given(sessions(), st.integers(2, 8))
def test_the_index_is_bounded_and_never_dates_a_byte_late(
    session: tuple[bytes, list[tuple[int, float]]], limit: int
) -> None:
    data, reads = session
    index = indexed(reads, limit=limit)
    assert index.count <= limit
    start = 0
    for end, now in reads:
        for offset in range(start, end):
            when = index.time_at(offset)
            assert when is not None and when <= now
        start = end
    assert index.time_at(len(data)) is None


@given(sessions(), st.integers(0, 300))
def test_forgetting_keeps_every_retained_byte_timed(
    session: tuple[bytes, list[tuple[int, float]]], cut: int
) -> None:
    data, reads = session
    index = indexed(reads)
    before = {o: index.time_at(o) for o in range(len(data))}
    cut = min(cut, len(data))
    index.forget_before(cut)
    assert {o: index.time_at(o) for o in range(cut, len(data))} == {
        o: before[o] for o in range(cut, len(data))
    }
    assert sum(1 for _ in index.stretches(cut)) == index.count


@given(st.lists(st.floats(0, 5), min_size=1, max_size=100))
def test_v3_intervals_add_up_without_drift(gaps: list[float]) -> None:
    times = list(itertools.accumulate(gaps))
    events = [Event(t, "o", "x") for t in times]
    lines = list(format_cast(3, HEADER, events))
    intervals = [json.loads(line)[0] for line in lines[1:]]
    assert all(i >= 0 for i in intervals)
    assert all(line.startswith("[") and ", " in line for line in lines[1:])
    assert abs(sum(intervals) - times[-1]) <= 0.0005 + 1e-9


def test_headers_follow_each_version() -> None:
    events = [Event(0.5, "o", "hi"), Event(1.0, "r", "90x30"), Event(1.5, "x", "0")]
    v3 = list(format_cast(3, HEADER, events))
    assert json.loads(v3[0]) == {
        "version": 3,
        "term": {"cols": 80, "rows": 24, "type": "xterm-256color"},
        "timestamp": 1_700_000_000,
        "command": "bash",
        "env": {"SHELL": "/bin/bash"},
    }
    assert [json.loads(line) for line in v3[1:]] == [
        [0.5, "o", "hi"],
        [0.5, "r", "90x30"],
        [0.5, "x", "0"],
    ]
    v2 = list(format_cast(2, HEADER, events))
    header = json.loads(v2[0])
    assert (header["version"], header["width"], header["height"]) == (2, 80, 24)
    assert header["env"] == {"SHELL": "/bin/bash", "TERM": "xterm-256color"}
    assert [json.loads(line) for line in v2[1:]] == [[0.5, "o", "hi"], [1.0, "r", "90x30"]]


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    data = b"ok \xff\xfe done \xe2\x82"  # two invalid bytes, then a cut-off character
    index = indexed([(len(data), 0.1)])
    assert output_text(cast_events(data, 0, index, origin=0.0)) == "ok \ufffd\ufffd done \ufffd"


def test_a_retained_window_starts_at_the_ring_start() -> None:
    data = b"0123456789"
    index = indexed([(4, 1.0), (10, 2.0)])
    index.forget_before(6)
    events = cast_events(data[6:], 6, index, origin=2.0)
    assert events == [Event(0.0, "o", "6789")]


@pytest.mark.skipif(
    shutil.which("asciinema", path=str(Path(sys.executable).parent)) is None,
    reason="asciinema is not installed (pip install -e '.[test]')",
)
def test_asciinema_plays_the_v2_file_back_byte_for_byte(tmp_path: Path) -> None:
    data = "héllo \x1b[1mwörld\x1b[0m\r\n日本語 ✅\r\n".encode() * 20
    reads = [(end, i * 0.013) for i, end in enumerate(range(7, len(data), 7))]
    reads.append((len(data), 1.0))
    marks = [Mark(100, 0.2, "r", "100x30"), Mark(200, 0.3, "m", "ls")]
    events = cast_events(data, 0, indexed(reads), origin=0.0, marks=marks)
    path = tmp_path / "session.cast"
    path.write_text("\n".join(format_cast(2, HEADER, events)) + "\n")
    asciinema = str(Path(sys.executable).parent / "asciinema")
    played = subprocess.run(
        [asciinema, "cat", str(path)], capture_output=True, timeout=30, check=True
    )
    assert played.stdout == data
