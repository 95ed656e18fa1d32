"""A session's terminal, in and out, over a Session: a write (and the output it produced),
a read's plan carried out, the screen. The manager looks the session up, checks the
caller's arguments and asks the rules; these drive the session. They sit above session.py.

A read: first the wait, if any; then the page, made the way the plan's mode says
(`output/pages.py`, pure); then the reader's cursor moves to the page's end. A plain page
keeps the compact form the buffer builds (no `Line` object per line): `Manager.read` and
`Manager.read_compact` each turn the page into their own form.
"""

from __future__ import annotations

from signal import SIGINT

import attrs
import trio

from . import commands
from .limits import Limits
from .model import CompactPage, ReadPage, Screen, Wait, WriteResult
from .output.cursors import Cursor, ReadCursors
from .output.echo import echo_lines
from .output.pages import ReadPlan
from .output.screen import ScreenCache
from .output.search import CompiledPattern
from .session import Session

__all__ = ["read", "screen", "signal", "write"]


async def write(
    session: Session, raw: bytes, wait: Wait | None, pattern: CompiledPattern | None, limits: Limits
) -> WriteResult:
    """`Manager.write` once the write is allowed: the keys, then with `wait` the output they
    produced (`pattern`: the wait's, compiled)."""
    output = session.output
    prefix_line = output.line_of_offset(output.end_offset)
    prefix = _line_text(session, prefix_line)
    prompts_seen = None
    if wait is not None and wait.prompt and session.shell is not None:
        prompts_seen = session.shell.prompts  # a prompt drawn after this write began
    marks = session.shell
    # Ctrl-C at the prompt: delivered whole, as by `signal`.
    interrupt = marks is not None and marks.running is None and b"\x03" in raw
    if marks is not None:
        # Enter or Ctrl-C at the prompt: a new one comes. Said before the keys go out:
        # said after, the shell's D could be read while the write awaits, and the next
        # `run` would wait its whole timeout for another.
        marks.keys_typed(raw)
    start, written = await session.write(raw, settle=interrupt)
    result = WriteResult(id=session.id, bytes_written=written, offset=start)
    if wait is None:
        return result
    first = output.line_of_offset(start)
    reason = await session.wait(
        wait,
        pattern=pattern,
        start_line=first,
        has_output=lambda: output.end_offset > start,
        first_line_prefix=prefix if first == prefix_line else None,
        prompts_seen=prompts_seen,
        echo=echo_lines(raw),
    )
    page = output.read(first, limits.default_read_limit)
    return attrs.evolve(result, output=attrs.evolve(page, reason=reason))


def _line_text(session: Session, line: int) -> str:
    lines = session.output.read(line, 1).lines
    return lines[0].text if lines and lines[0].number == line else ""


async def screen(
    session: Session, wait: Wait | None, pattern: CompiledPattern | None, screens: ScreenCache
) -> Screen:
    """`Manager.screen`: a snapshot from the session's emulator (`screens` keeps them), now
    or once `wait` is over."""

    def snapshot() -> Screen:
        return screens.snapshot(session.id, session.output, trio.current_time())

    if wait is None:
        return snapshot()
    return await session.wait_screen(wait, pattern=pattern, snapshot=snapshot)


async def read(
    session: Session, plan: ReadPlan, cursors: ReadCursors, limits: Limits
) -> ReadPage | CompactPage:
    """The page `plan` asks for (`reason` set when it waited)."""
    record = None
    if plan.command is not None:
        record = commands.record(session, plan.command, limits)
    output = session.output
    offset, seen = plan.offset, -1  # since: the end offset at this reader's previous read
    if plan.since:
        cursor = cursors.get(session.id, plan.reader)
        if cursor is not None:
            offset, seen = cursor
    reason = None
    if plan.wait is not None:
        prompts_seen = None
        if plan.wait.prompt and session.shell is not None:
            # A read waits for the prompt to be up: now, if it is.
            prompts_seen = session.shell.prompts - session.shell.at_prompt
        start = offset if plan.tail is None else output.complete_lines  # a tail waits for news
        reason = await session.wait(
            plan.wait,
            pattern=plan.wait_pattern,
            start_line=start,
            has_output=lambda: output.total_lines > start and output.end_offset != seen,
            prompts_seen=prompts_seen,
        )
    end = output.end_offset
    page: ReadPage | CompactPage
    if record is not None:
        page = await commands.read_command(
            session, record, offset, plan.limit, plan.pattern, limits
        )
    elif plan.tail is not None:
        page = output.tail(plan.tail)
    elif end == seen and offset >= output.complete_lines:  # it read all, none came since
        page = attrs.evolve(output.read(output.total_lines, 0), next_offset=offset)
    elif plan.pattern is None:
        page = output.read_compact(offset, plan.limit)
    else:
        page = await session.search(offset, plan.limit, plan.pattern)
    cursors.set(session.id, plan.reader, Cursor(page.next_offset, end))
    return page if reason is None else attrs.evolve(page, reason=reason)


async def signal(session: Session, number: int) -> list[int]:
    """`Manager.signal`: `number` to the terminal's foreground process group; the pids it
    reached. Ctrl-C's signal at a shell's prompt waits until the shell reads its keys, so
    that its line editor handles it whole, and the shell then drops its line."""
    marks = session.shell
    at_prompt = number == SIGINT and marks is not None and marks.running is None
    if at_prompt:
        await session.until_leader_waits()
    pids = session.signal_foreground(number)
    if at_prompt and marks is not None and pids:
        marks.leave_prompt()  # the shell drops its line: run waits for its new prompt
    return pids
