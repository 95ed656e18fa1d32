"""When output arrived, and a session as an asciicast (v3, or v2 for older players).

Pure: no I/O, no trio. `TimingIndex` sits beside the ring: the reader tells it, per chunk,
the ring's new end and the time (one comparison and, at most once per `window`, an append);
it forgets what the ring dropped. `cast_events` then pairs the retained bytes with those
times, the window sizes, the shell's command marks and the exit; `format_cast` writes them
as asciicast lines (https://docs.asciinema.org/manual/asciicast/v3/).

Output is decoded as UTF-8 incrementally, so a character split across two reads is written
whole in the later event; bytes that are not UTF-8 become U+FFFD (an asciicast is JSON text
and cannot carry them), the rule asciinema's own recorder follows.
"""

from __future__ import annotations

import codecs
import json
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, Literal, NamedTuple

import attrs

DEFAULT_WINDOW: Final = 0.010  # output arriving within 10 ms of a stretch's first byte joins it
DEFAULT_LIMIT: Final = 4096  # stretches kept at most (16 bytes each); past it, pairs merge

CastVersion = Literal[2, 3]
CAST_VERSIONS: Final[tuple[CastVersion, ...]] = (3, 2)


class TimingIndex:
    """The arrival time of each stretch of output: stretch i holds the bytes from the end of
    stretch i - 1 to `ends[i]`, the first of them read at `times[i]` (monotonic seconds).

    Memory is bounded by `limit` stretches. A session that keeps writing a little every
    few milliseconds for hours would exceed it while its bytes are still in the ring: then
    neighbouring stretches merge pairwise (each keeps the earlier time) and the window
    doubles, so timing gets coarser instead of memory growing."""

    __slots__ = ("_ends", "_head", "_limit", "_times", "_window")

    def __init__(self, *, window: float = DEFAULT_WINDOW, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 2:
            raise ValueError("limit must be at least 2")
        self._ends = array("q")
        self._times = array("d")
        self._head = 0  # stretches before it are forgotten (compacted lazily)
        self._window = window
        self._limit = limit

    def arrived(self, end: int, now: float, start: int = 0) -> None:
        """Output up to offset `end` has arrived at `now` (the reader's hot path); the ring
        holds the bytes from `start`. A new stretch first forgets those wholly before it
        (so the common case, a stretch growing, costs one comparison and one store)."""
        times = self._times
        if len(times) > self._head and now - times[-1] < self._window:
            self._ends[-1] = end
            return
        if start:
            self.forget_before(start)
        self._ends.append(end)
        times.append(now)
        if len(times) - self._head > self._limit:
            self._merge_pairs()

    def forget_before(self, offset: int) -> None:
        """The ring no longer holds bytes before `offset`: drop the stretches wholly before."""
        ends = self._ends
        head = bisect_right(ends, offset, self._head)
        self._head = head
        if head > len(ends) // 2:
            del ends[:head]
            del self._times[:head]
            self._head = 0

    def stretches(self, start: int) -> Iterator[tuple[int, int, float]]:
        """(first offset, end offset, time) of each stretch from offset `start` on; the first
        may begin before `start` and is cut there."""
        ends, times = self._ends, self._times
        i = bisect_right(ends, start, self._head)
        previous = start
        for j in range(i, len(ends)):
            yield previous, ends[j], times[j]
            previous = ends[j]

    def time_at(self, offset: int) -> float | None:
        """When the byte at `offset` arrived (the time of its stretch), None if unknown."""
        i = bisect_right(self._ends, offset, self._head)
        return self._times[i] if i < len(self._times) else None

    def copy(self) -> TimingIndex:
        """The stretches as they are now, in an index that later output does not change
        (a recording is written from it in a worker thread)."""
        clone = TimingIndex(window=self._window, limit=self._limit)
        clone._ends = self._ends[self._head :]
        clone._times = self._times[self._head :]
        return clone

    @property
    def count(self) -> int:
        return len(self._ends) - self._head

    @property
    def window(self) -> float:
        return self._window

    def _merge_pairs(self) -> None:
        ends = self._ends[self._head :]
        times = self._times[self._head :]
        self._ends = array("q", ends[1::2])
        self._times = array("d", times[0::2][: len(self._ends)])
        if len(ends) % 2:  # the newest stretch stays whole
            self._ends.append(ends[-1])
            self._times.append(times[-1])
        self._head = 0
        self._window *= 2


class Mark(NamedTuple):
    """Something at an output offset: a window size or a shell command's start."""

    offset: int
    time: float
    code: Literal["r", "m"]
    data: str


@attrs.frozen(kw_only=True)
class CastHeader:
    cols: int
    rows: int
    timestamp: int  # unix seconds at the recording's first event
    term: str = "xterm-256color"
    command: str | None = None
    title: str | None = None
    shell: str | None = None  # the only variable of the environment a recording carries


class Event(NamedTuple):
    time: float  # seconds since the recording's start
    code: str
    data: str


def cast_events(
    data: bytes,
    start: int,
    index: TimingIndex,
    *,
    origin: float,
    marks: Iterable[Mark] = (),
    exit_status: tuple[float, int] | None = None,
) -> list[Event]:
    """The events of a recording of `data` (the retained output, from offset `start`),
    times measured from `origin`: output split at every mark's offset, so a resize or a
    command's marker sits exactly between the bytes before and after it; the exit last."""
    end = start + len(data)
    pending = sorted((m for m in marks if start <= m.offset <= end), key=lambda m: m.offset)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    events: list[Event] = []
    done, when, k = start, origin, 0

    def output(upto: int, when: float) -> None:
        nonlocal done
        text = decoder.decode(data[done - start : upto - start])
        if text:
            events.append(Event(when - origin, "o", text))
        done = upto

    for _, last, when in index.stretches(start):
        last = min(last, end)
        while k < len(pending) and pending[k].offset <= last:
            mark = pending[k]
            output(mark.offset, when)
            events.append(Event(mark.time - origin, mark.code, mark.data))
            k += 1
        output(last, when)
        if done >= end:
            break
    output(end, when)  # bytes the index has no time for (none when the reader noted each)
    tail = decoder.decode(b"", final=True)
    if tail:
        events.append(Event(when - origin, "o", tail))
    for mark in pending[k:]:
        events.append(Event(mark.time - origin, mark.code, mark.data))
    if exit_status is not None:
        when, status = exit_status
        events.append(Event(when - origin, "x", str(status)))
    _monotonic(events)
    return events


def _monotonic(events: list[Event]) -> None:
    """Times never go back: a stretch's time is its first byte's, so a mark noted while the
    stretch was filling is followed by bytes stamped a moment earlier; they move up to it."""
    latest = 0.0
    for i, event in enumerate(events):
        if event.time < latest:
            events[i] = event._replace(time=latest)
        latest = events[i].time


def format_cast(version: CastVersion, header: CastHeader, events: Sequence[Event]) -> Iterator[str]:
    """The asciicast's lines (each without its newline): the header, then one per event.
    v3 writes intervals rounded to milliseconds from the rounded running total, so rounding
    errors never add up (the last event is within 0.5 ms of its true time); v2 writes times
    since the start. v2 has no exit event: it is left out."""
    yield json.dumps(_header(version, header), ensure_ascii=False)
    written = 0  # milliseconds, the running total of the intervals written so far
    for event in events:
        if version == 2:
            if event.code != "x":
                yield json.dumps([round(event.time, 6), event.code, event.data], ensure_ascii=False)
            continue
        total = round(event.time * 1000)
        interval = max(0, total - written)
        written += interval
        rest = json.dumps([event.code, event.data], ensure_ascii=False)[1:]
        yield f"[{interval / 1000:.3f}, {rest}"


def _header(version: CastVersion, header: CastHeader) -> dict[str, object]:
    fields: dict[str, object]
    if version == 3:
        fields = {
            "version": 3,
            "term": {"cols": header.cols, "rows": header.rows, "type": header.term},
            "timestamp": header.timestamp,
        }
    else:
        fields = {
            "version": 2,
            "width": header.cols,
            "height": header.rows,
            "timestamp": header.timestamp,
        }
    if header.command is not None:
        fields["command"] = header.command
    if header.title is not None:
        fields["title"] = header.title
    env: dict[str, str] = {}
    if header.shell is not None:
        env["SHELL"] = header.shell
    if version == 2:
        env["TERM"] = header.term
    if env:
        fields["env"] = env
    return fields
