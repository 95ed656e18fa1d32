"""Paging, pure: a read's plan, and a command's output as numbered lines.

A read's eleven arguments are checked here once, and the plan says where it starts and how
it pages (`plan_read`); `trio_pty/reading.py` carries the plan out over a Session.

A command's output is the bytes from just past its C mark to its D mark (or to where it is
now, while it runs). Lines wholly inside come from the session's line log; the first and
the last line may be pieces of a line (the echo before C, the prompt after D) and are
cleaned on their own, by the same code as every line (`clean_lines`). Pure: no I/O, no trio.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs

from .. import errors
from ..limits import Limits
from ..model import Line, ReadPage, Wait
from ..policy import validate
from .buffer import OutputBuffer, SizeRecord
from .search import CompiledPattern, compile_pattern

__all__ = [
    "ReadMode",
    "ReadPlan",
    "Span",
    "check_screen_wait",
    "check_wait",
    "clean_lines",
    "head_and_tail",
    "line_bytes",
    "line_range",
    "page",
    "plan_read",
    "span",
]

ReadMode = Literal["offset", "tail", "command", "pattern"]


@attrs.frozen(kw_only=True)
class ReadPlan:
    """A read's arguments, checked: where it starts (`offset`, the last `tail` lines, or with
    `since` this reader's cursor), what it pages (the session's lines, one `command`'s, or
    those matching `pattern`) and what it waits for first (`wait`)."""

    offset: int
    limit: int
    reader: str
    tail: int | None = None
    since: bool = False
    command: int | None = None
    pattern: CompiledPattern | None = attrs.field(default=None, eq=False)
    wait: Wait | None = None
    wait_pattern: CompiledPattern | None = attrs.field(default=None, eq=False)

    @property
    def mode(self) -> ReadMode:
        """How the page is made: a command's lines (matching `pattern` if given), the
        last lines, the lines matching `pattern`, or the lines from `offset`."""
        if self.command is not None:
            return "command"
        if self.tail is not None:
            return "tail"
        if self.pattern is not None:
            return "pattern"
        return "offset"


def plan_read(
    *,
    owner: str,
    offset: int,
    limit: int | None,
    pattern: str | None,
    ignore_case: bool,
    wait: Wait | None,
    command: int | None,
    tail: int | None,
    since: Literal["last"] | None,
    reader: str | None,
    shell: bool,
    limits: Limits,
) -> ReadPlan:
    """Check a read's arguments (`Manager.read` says what each means) and plan it; `shell`:
    the session is a shell session. Raises InvalidInput naming the first wrong field."""
    start, count = validate.read_window(offset, limit, limits)
    key = owner if reader is None else validate.reader(reader, limits)
    last = None if tail is None else validate.int_between("tail", tail, 1, limits.max_read_limit)
    if since not in (None, "last"):
        raise errors.InvalidInput("since", f'must be "last", got {since!r}')
    chosen = [name for name, on in (("tail", last), ("since", since)) if on is not None]
    if (start and chosen) or len(chosen) > 1 or (last is not None and pattern is not None):
        raise errors.InvalidInput(
            chosen[-1] if chosen else "tail",
            "offset, tail and since choose where a read starts: give one "
            "(and tail without pattern)",
        )
    compiled = None
    if pattern is not None:
        compiled = compile_pattern(
            pattern, ignore_case=ignore_case, max_length=limits.max_pattern_length
        )
    number = None
    if command is not None:
        if chosen:
            raise errors.InvalidInput(
                "command", "a command's output is paged with offset, not with tail or since"
            )
        number = validate.int_between("command", command, 1, 2**63 - 1)
    return ReadPlan(
        offset=start,
        limit=count,
        reader=key,
        tail=last,
        since=since is not None,
        command=number,
        pattern=compiled,
        wait_pattern=check_wait(wait, limits, shell=shell),
        wait=wait,
    )


def check_wait(wait: Wait | None, limits: Limits, *, shell: bool) -> CompiledPattern | None:
    """Validate a Wait up front (before anything is started or written); its pattern
    compiled. `shell`: the session reports its prompt (a shell session)."""
    if wait is None:
        return None
    if not isinstance(wait, Wait):
        raise errors.InvalidInput("wait", "must be a Wait")
    if wait.pattern is None and wait.idle_ms is None and not wait.exit and not wait.prompt:
        raise errors.InvalidInput("wait", "give a pattern, idle_ms, exit=True or prompt=True")
    if wait.prompt and not shell:
        raise errors.InvalidInput(
            "wait.prompt", "only shell sessions (spawn_shell) report their prompt"
        )
    if wait.idle_ms is not None:
        validate.wait_ms("wait.idle_ms", wait.idle_ms, limits)
    if wait.timeout_ms is not None:
        validate.wait_ms("wait.timeout_ms", wait.timeout_ms, limits)
    if wait.pattern is None:
        return None
    return compile_pattern(
        wait.pattern, ignore_case=wait.ignore_case, max_length=limits.max_pattern_length
    )


def check_screen_wait(wait: Wait | None, limits: Limits) -> CompiledPattern | None:
    """A screen's wait: a pattern (matched against screen lines), idle_ms or exit."""
    if wait is not None and wait.prompt:
        raise errors.InvalidInput(
            "wait.prompt",
            "a screen wait takes a pattern, idle_ms or exit: wait for the "
            "prompt with read(wait=Wait(prompt=True))",
        )
    return check_wait(wait, limits, shell=False)


def clean_lines(
    raw: bytes,
    *,
    max_line_length: int,
    max_escape_length: int,
    start: int = 0,
    sizes: Sequence[SizeRecord] = (),
) -> list[str]:
    """The clean lines of a piece of output that need not start or end at a line boundary
    (cut like `read` cuts them, by the same code: a small OutputBuffer of their own); a
    final newline ends the last line, it does not start an empty one. `raw` is the output
    from offset `start` on, `sizes` the window sizes in force over it
    (`OutputBuffer.sizes_within`): a line wider than the window wraps as it did on the
    screen (none: lines never wrap)."""
    if not raw:
        return []
    buffer = OutputBuffer(
        len(raw), max_line_length=max_line_length, max_escape_length=max_escape_length
    )
    done = 0
    for record in sizes:
        at = min(max(record.offset - start, 0), len(raw))
        buffer.append(raw[done:at])
        done = max(done, at)
        buffer.note_size(record.rows, record.cols)
    buffer.append(raw[done:])
    return [line.text for line in buffer.read(0, buffer.total_lines).lines]


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


def line_bytes(output: OutputBuffer, line: int) -> tuple[int, int, bool]:
    """The raw bytes [start, stop) of line `line` (its newline included), and whether its
    start already left the buffer (then `start` is the oldest byte kept). A line gone
    whole, or not begun yet, is empty. For reading a line whole that `read` cut at
    max_line_length (`pty.read_raw` with `line`)."""
    low, end = output.start_offset, output.end_offset
    if line < output.line_of_offset(low) or line >= output.total_lines:
        return low, low, line < output.first_line

    def first_at(number: int) -> int:
        """The first retained offset whose line is `number` or later (end: none)."""
        lo, hi = low, end
        while lo < hi:
            mid = (lo + hi) // 2
            if output.line_of_offset(mid) >= number:
                hi = mid
            else:
                lo = mid + 1
        return lo

    start = first_at(line)
    partial = start == low and line < output.first_line
    return start, first_at(line + 1), partial


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
        # A read skips hidden numbers and goes on to the next line shown: keep only the
        # span's own. Its first or last line may itself be hidden (output that landed on a
        # row a wrapped command had continued onto: the log shows it in the command's
        # line); its piece, cleaned from the span's own bytes, is still the output.
        shown = {
            line.number: line.text
            for line in output.read(retained, stop - retained).lines
            if line.number < stop
        }
        for number, piece in ((where.first, where.head), (where.last, where.tail)):
            if piece is not None and retained <= number < stop:
                shown[number] = piece
        lines = [Line(number, shown[number]) for number in sorted(shown)]
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
