"""A shell session's commands: `run` one, list them (`commands`), page one's output.

Functions over a Session whose shell reports its commands (`session.shell`, a
ShellTracker); the manager looks the session up and calls them. They drive a Session, so
this module sits above session.py; what is pure (the marks, the records, the paging of a
command's lines) lives in `shell/` and `output/pages.py`. See docs/shell.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from . import errors
from .audit import Audit
from .limits import Limits
from .model import CommandInfo, CommandResult, Line, ReadPage, RunReason
from .output import pages
from .output.search import CompiledPattern
from .policy import validate
from .session import Session
from .shell.history import CommandRecord, ShellTracker
from .shell.keys import command_text, keystrokes

__all__ = ["Approve", "commands", "read_command", "record", "run", "shell_of"]

Approve = Callable[[str], Awaitable[Session]]
"""Authorizes a command's text under command rules and looks the session up again (the
approval may have taken a while); None when every command is allowed."""


def shell_of(session: Session) -> ShellTracker:
    """The session's command tracker; InvalidInput("id") when it is not a shell session."""
    if session.shell is None:
        raise errors.InvalidInput(
            "id", f"{session.id} is not a shell session (start one with spawn_shell)"
        )
    return session.shell


async def run(
    session: Session,
    command: str,
    *,
    timeout_ms: int | None,
    limits: Limits,
    approve: Approve | None,
    by: str = "",
) -> CommandResult:
    """`Manager.run`: type `command` at the prompt, wait for its end (or the timeout, or the
    session's end) and the prompt after it, and describe what it did. `by` names the token
    that sent it (its record's, for the audit log)."""
    marks = shell_of(session)
    text = command_text(command, limits)
    wait_ms = (
        limits.default_wait_ms
        if timeout_ms is None
        else validate.wait_ms("timeout_ms", timeout_ms, limits)
    )
    session = await _until_idle(session, marks, text, wait_ms, approve)
    raw = keystrokes(text, paste=marks.paste_enabled())
    record = marks.submit(_cut(text, limits), by=by)
    session.command_submitted()
    try:
        # No checkpoint after the keys: waiting for the end below is one.
        await session.write(raw, checkpoint=False)
    except BaseException:
        marks.withdraw(record)
        raise
    with trio.move_on_after(wait_ms / 1000):
        # The end, then the prompt that follows it: return with the shell ready for the
        # next command.
        await session.wait_until(
            lambda: record.ended and (marks.at_prompt or marks.running is not None)
        )
    return _result(session, marks, record, limits)


async def _until_idle(
    session: Session, marks: ShellTracker, text: str, wait_ms: int, approve: Approve | None
) -> Session:
    """Refuse (Busy) while a command runs; wait for the prompt; ask the rules."""
    _check_idle(session, marks)
    if not marks.at_prompt:
        # Right after a command ended its prompt is on its way: typing before it is
        # drawn would have the terminal echo the keys twice.
        with trio.move_on_after(wait_ms / 1000):
            await session.wait_until(lambda: marks.at_prompt or marks.running is not None)
        _check_idle(session, marks)
    if approve is not None:
        # Rules judge the command the caller gave, not the bracketed paste it is typed as.
        session = await approve(text)
        _check_idle(session, marks)
    return session


def _result(
    session: Session, marks: ShellTracker, record: CommandRecord, limits: Limits
) -> CommandResult:
    reason: RunReason = "timeout"
    if record.state == "exited":
        reason = "exited"
    elif record.state == "session_ended" or session.output_complete:
        reason = "session_ended"
    lines: list[Line] = []
    missed, has_more = 0, False
    if record.output_start != record.output_end:  # else it printed nothing: no lines
        where = _span(session, record, limits)
        lines, missed = pages.head_and_tail(session.output, where, limits.default_read_limit)
        retained = where.last + 1 - max(where.first, session.output.first_line)
        has_more = len(lines) < retained
    return CommandResult(
        id=session.id,
        number=record.number,
        command=record.command,
        reason=reason,
        exit_code=record.exit_code if reason == "exited" else session.exit_code,
        lines=lines,
        has_more=has_more,
        missed_lines=missed,
        cwd=record.cwd,
        started_at=record.started_at,
        duration_ms=marks.duration_ms(record),
    )


def commands(session: Session, *, limit: int, limits: Limits) -> list[CommandInfo]:
    """`Manager.commands`: the last `limit` commands, oldest first."""
    marks = shell_of(session)
    limit = validate.int_between("limit", limit, 1, limits.command_history)
    infos = []
    for one in marks.records(limit):
        first, last = pages.line_range(session.output, one.output_start, _output_end(session, one))
        infos.append(
            CommandInfo(
                number=one.number,
                command=one.command,
                source=one.source,
                state=one.state,
                exit_code=one.exit_code,
                first_line=first if last >= first else None,
                last_line=last if last >= first else None,
                cwd=one.cwd,
                started_at=one.started_at,
                duration_ms=marks.duration_ms(one),
            )
        )
    return infos


def record(session: Session, number: int, limits: Limits) -> CommandRecord:
    """Command `number` of a shell session; InvalidInput naming what the history holds."""
    marks = shell_of(session)
    found = marks.record(number)
    if found is None:
        kept = marks.records(limits.command_history)
        known = f"commands {kept[0].number}..{kept[-1].number}" if kept else "no commands"
        raise errors.InvalidInput(
            "command", f"no command {number} in the history of {session.id} (it holds {known})"
        )
    return found


async def read_command(
    session: Session,
    one: CommandRecord,
    offset: int,
    limit: int,
    pattern: CompiledPattern | None,
    limits: Limits,
) -> ReadPage:
    """A page of one command's output (with `pattern`, of its matching lines)."""
    output = session.output
    where = _span(session, one, limits)
    if pattern is None:
        return pages.page(output, where, offset, limit)
    start = max(offset, where.first)
    if where.last < where.first or start > where.last:
        return pages.page(output, where, start, 0)
    found = await session.search(start, limit, pattern)
    lines = []
    for line in found.lines:
        if line.number > where.last:
            break
        # The first and last lines may be pieces: match what the command printed.
        text = line.text
        if line.number == where.first and where.head is not None:
            text = where.head
        elif line.number == where.last and where.tail is not None:
            text = where.tail
        if pattern.search(text) is not None:
            lines.append(Line(line.number, text))
    beyond = len(lines) < len(found.lines) or found.next_offset > where.last
    return attrs.evolve(
        found,
        lines=lines,
        first_line=max(where.first, output.first_line),
        has_more=found.has_more and not beyond,
        next_offset=min(found.next_offset, where.last + 1),
    )


def _check_idle(session: Session, marks: ShellTracker) -> None:
    running = marks.running
    if running is not None and not session.output_complete:
        raise errors.Busy(session.id, number=running.number, command=running.command)


def _cut(text: str, limits: Limits) -> str:
    """A command as its record keeps it (bounded like a line)."""
    limit = limits.max_line_length
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def _output_end(session: Session, one: CommandRecord) -> int | None:
    if one.output_end is None and one.state != "running":
        return session.output.end_offset
    return one.output_end


def _span(session: Session, one: CommandRecord, limits: Limits) -> pages.Span:
    return pages.span(
        session.output,
        one.output_start,
        _output_end(session, one),
        max_line_length=limits.max_line_length,
        max_escape_length=limits.max_escape_length,
    )


def audit_commands(audit: Audit | None, session: Session, token: str) -> None:
    """Each command of a shell session, once it ends, into the audit log, under the name of
    the token that sent it with `run`, or whose write typed it (before any write: `token`,
    which started the session, whose startup files may run commands)."""
    tracker = session.shell
    if audit is None or tracker is None:
        return
    tracker.typed_by = token

    def ended(record: CommandRecord) -> None:
        audit.emit(
            "command",
            token=record.by,
            id=session.id,
            owner=session.owner,
            number=record.number,
            command=record.command,
            source=record.source,
            state=record.state,
            exit_code=record.exit_code,
            cwd=record.cwd,
            duration_ms=tracker.duration_ms(record),
        )

    tracker.on_end = ended
