"""One command's output as numbered lines: the session's line numbers, cut to the command.

A command's output is the bytes from just past its C mark to its D mark (or to where it is
now, while it runs). Lines wholly inside come from the session's line log; the first and
the last line may be pieces of a line (the echo before C, the prompt after D) and are
cleaned on their own, by the same code. Pure: no I/O, no trio.
"""

from __future__ import annotations

import attrs

from ..model import Line, ReadPage
from ..output.buffer import OutputBuffer
from .text import clean_lines

__all__ = ["Span", "head_and_tail", "line_range", "page", "span"]


@attrs.frozen
class Span:
    """Lines `first`..`last` (inclusive; none when last < first) hold a command's output;
    `head`/`tail` are the texts of the first/last line when they are pieces of a line
    (None: the line as the log has it)."""

    first: int
    last: int
    head: str | None = None
    tail: str | None = None
    complete: bool = True  # False while the command runs: its last line may still grow

    @property
    def count(self) -> int:
        return max(0, self.last - self.first + 1)


def line_range(output: OutputBuffer, start: int | None, end: int | None) -> tuple[int, int]:
    """(first, last) line of the output bytes [start, end) (end None: up to now); last <
    first when there are none (start None: the command never ran)."""
    if start is None:
        return 0, -1
    stop = output.end_offset if end is None else end
    first = output.line_of_offset(start)
    if stop <= start:
        return first, first - 1
    return first, output.line_of_offset(stop - 1)


def span(
    output: OutputBuffer,
    start: int | None,
    end: int | None,
    *,
    max_line_length: int,
    max_escape_length: int,
) -> Span:
    """The lines of the output bytes [start, end) (end None: up to now, still growing)."""
    complete = end is not None
    first, last = line_range(output, start, end)
    if start is None or last < first:
        return Span(first, last, complete=complete)
    stop = output.end_offset if end is None else end
    # Enough raw bytes for a line cut at max_line_length, escapes and all; a longer piece
    # is left to the log (which then shows the whole line it belongs to).
    window = 4 * max_line_length + max_escape_length

    def clean(raw: bytes, at: int) -> str:
        lines = clean_lines(
            raw,
            max_line_length=max_line_length,
            max_escape_length=max_escape_length,
            start=at,
            sizes=output.sizes_within(at, at + len(raw)),
        )
        return lines[0] if lines else ""

    head = tail = None
    if start >= output.start_offset:
        raw, _, _ = output.bytes_since(start, min(stop - start, window))
        newline = raw.find(b"\n")
        if newline >= 0:
            head = clean(raw[: newline + 1], start)
        elif len(raw) == stop - start:
            head = clean(raw, start)
    if last > first:
        begin = max(start, stop - window)
        raw, after, _ = output.bytes_since(begin, stop - begin)
        newline = raw.rfind(b"\n", 0, len(raw) - 1)
        if newline >= 0:
            tail = clean(raw[newline + 1 :], after - len(raw) + newline + 1)
    # A last piece of a line with nothing visible on it (a C mark of the next command on
    # the line, a colour reset after the last newline) is not a line of output.
    ends_line = output.bytes_since(stop - 1, 1)[0] == b"\n"
    if not ends_line and (tail if last > first else head) == "":
        if last == first:
            return Span(first, first - 1, complete=complete)
        last, tail = last - 1, None
    return Span(first, last, head, tail, complete)


def page(output: OutputBuffer, where: Span, offset: int, limit: int) -> ReadPage:
    """Up to `limit` lines of the span from absolute line `offset` (clamped into it); like
    `read`, `missed_lines` counts requested lines that already left the buffer."""
    start = max(offset, where.first)
    retained = max(start, output.first_line)
    missed = min(retained, where.last + 1) - start if start <= where.last else 0
    stop = min(retained + limit, where.last + 1)
    lines: list[Line] = []
    if stop > retained:
        lines = list(output.read(retained, stop - retained).lines)
        for index, line in enumerate(lines):
            if line.number == where.first and where.head is not None:
                lines[index] = Line(line.number, where.head)
            elif line.number == where.last and where.tail is not None:
                lines[index] = Line(line.number, where.tail)
    next_offset = max(stop, start)
    if not where.complete:
        # Like read: never past a line that may still grow.
        next_offset = min(next_offset, max(output.complete_lines, start))
    return ReadPage(
        lines=lines,
        total_lines=output.total_lines,
        first_line=max(where.first, output.first_line),
        has_more=stop <= where.last,
        next_offset=next_offset,
        missed_lines=max(0, missed),
    )


def head_and_tail(output: OutputBuffer, where: Span, limit: int) -> tuple[list[Line], int]:
    """At most `limit` lines: all of them, or the first and the last halves. Returns the
    lines and how many of the span's lines are not among them (cut, or already gone)."""
    if where.count <= limit:
        shown = page(output, where, where.first, limit).lines
        return shown, where.count - len(shown)
    head = page(output, where, where.first, limit // 2).lines
    tail_count = limit - limit // 2
    tail = page(output, where, where.last - tail_count + 1, tail_count).lines
    tail = [line for line in tail if not head or line.number > head[-1].number]
    shown = head + tail
    return shown, where.count - len(shown)
