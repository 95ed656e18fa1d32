"""The MCP tools: their arguments, their results, their descriptions, and what each does.

Each tool is a few requests through a `Backend` (a client, in process or over the wire,
and the owner) and a report made by `render`. Shaped after what coding agents already use:
Codex's `exec_command` and `write_stdin`, Claude Code's background shells, DesktopCommander's
process tools.

Rules every tool keeps:

- **Input is literal.** What the model sends is what the program receives: JSON has already
  decoded `\\n` and `\\u0003`, and nothing decodes backslashes a second time unless the call
  says `escapes: true`. Keys that are hard to write go in `keys` by name (`["C-c", "Up"]`).
- `exec_command` runs one command the way a script runs (`Manager.exec`); `shell_command`
  runs commands in one shell that lives on between calls (`spawn_shell` + `run`).
- Every tool that shows a session's output moves this owner's read cursor past what it
  showed, so `write_stdin` and `read_output` with `since_last` show only what came after.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Generic, TypeVar

import attrs
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from trio_pty.console.keys import KeySpecError, key_bytes, keystrokes_to_text
from trio_pty.limits import Limits
from trio_pty.model import ExecResult, Line, ReadPage, SessionInfo, Wait
from trio_pty.output.pages import clean_lines
from trio_pty.wire import (
    ExecParams,
    GetParams,
    KillParams,
    ListParams,
    ReadParams,
    ReadRawParams,
    RunParams,
    ScreenParams,
    SpawnParams,
    SpawnShellParams,
    WriteParams,
)

from . import progress
from .backend import Backend, ServiceError
from .render import Shown, State, Status, describe_end, show_lines, state_of

__all__ = ["EMPTY_POLL_FLOOR_MS", "QUIET_MS", "TOOLS", "Reply", "Tool"]

#: Output quiet for this long after some arrived counts as "the program is done talking":
#: after typed input (write_stdin), and spawn without a ready pattern. Never for a poll
#: that sends nothing: following a build, quiet between two lines is not the end.
QUIET_MS: Final = 500
#: A poll that sends nothing waits at least this long unless something happens (the
#: program ends, a shell prompt, the pattern): agents poll in a loop, each a model turn.
EMPTY_POLL_FLOOR_MS: Final = 5_000
#: How much output a reply shows when the caller does not say.
DEFAULT_MAX_CHARS: Final = 20_000
#: read_output's page when no window is given.
DEFAULT_TAIL: Final = 100
#: Lines a since-last read asks for: the most the manager gives (Limits.max_read_limit);
#: the character budget then cuts them in the middle.
_SINCE_LIMIT: Final = 2000
#: The longest escape sequence cleaning a long line keeps whole (the manager's default).
_ESCAPE_LENGTH: Final = Limits().max_escape_length


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


_SESSION_ID = Field(description='A session id from an earlier call, like "pty_1a2b3c4d".')
_MAX_CHARS = Field(
    DEFAULT_MAX_CHARS,
    ge=200,
    description="Show at most about this many characters of output (default 20000); the "
    "middle of longer output is left out, with a note saying how to read it.",
)


_WORKDIR = Field(
    None,
    description="Where to run it (a relative path starts at the directory the MCP server "
    "runs in, which is also the default).",
)
_SHELL = Field(None, description='"bash" (the default) or "zsh".')
_YIELD = Field(
    10_000,
    ge=1,
    description="Return after this long if the command is still running (default 10000, "
    "at most 30000); it keeps running and you get its session_id.",
)


class ExecCommandArguments(_Arguments):
    cmd: str = Field(
        description="The command line, as you would write it in a bash script: pipes, &&, "
        "quotes, globs and several lines all work."
    )
    workdir: str | None = _WORKDIR
    shell: str | None = _SHELL
    yield_time_ms: int = _YIELD
    max_output_chars: int = _MAX_CHARS


class ShellCommandArguments(_Arguments):
    cmd: str = Field(description="The command line, typed into the shell as it is.")
    session_id: str | None = Field(
        None,
        description="A shell from an earlier shell_command. Default: your shell, which the "
        "first call starts (and the next starts again if it ended).",
    )
    workdir: str | None = Field(
        None,
        description="Where a new shell starts (default: the directory the MCP server runs "
        "in). An existing shell stays where it is: cd moves it.",
    )
    shell: str | None = Field(
        None,
        description='"bash" or "zsh" for a new shell (default: $SHELL when it is one of '
        "them, else bash).",
    )
    yield_time_ms: int = _YIELD
    max_output_chars: int = _MAX_CHARS


class WriteStdinArguments(_Arguments):
    session_id: str = _SESSION_ID
    chars: str = Field(
        "",
        description='Text to type, sent exactly as given: "\\n" (JSON\'s newline) is Enter, '
        '"\\u0003" Ctrl-C, "\\u0004" Ctrl-D. A backslash is a backslash. Empty (and no '
        "keys): send nothing, just wait for new output.",
    )
    keys: list[str] = Field(
        default_factory=list,
        description='Keys to press after chars, by name: "Enter", "Tab", "Escape", '
        '"BSpace", "Up", "Down", "Left", "Right", "Home", "End", "PageUp", "PageDown", '
        '"Delete", "F1".."F12", "C-c" (Ctrl-C), "C-d", "M-x" (Alt-x), or one character.',
    )
    escapes: bool = Field(
        False,
        description="Decode backslash escapes in chars first (\\e or \\x1b for Escape, "
        "\\t, \\r, \\\\ for one backslash). Off by default: chars go as typed.",
    )
    pattern: str | None = Field(
        None,
        description="Return as soon as a new line matches this RE2 regular expression, like "
        '"error|passed|Listening on".',
    )
    yield_time_ms: int = Field(
        10_000,
        ge=1,
        description="Wait at most this long (default 10000, at most 30000; with nothing to "
        f"send at least {EMPTY_POLL_FLOOR_MS}).",
    )
    max_output_chars: int = _MAX_CHARS


class ReadOutputArguments(_Arguments):
    session_id: str = _SESSION_ID
    tail: int | None = Field(
        None, ge=1, description=f"The last N lines (the default, with {DEFAULT_TAIL})."
    )
    pattern: str | None = Field(
        None,
        description='Only lines matching this RE2 regular expression, like "error|FAIL" or '
        '"(?i)warning". With offset or since_last, not with tail.',
    )
    since_last: bool = Field(
        False, description="Only lines after the ones your previous read of this session showed."
    )
    offset: int | None = Field(
        None, ge=0, description="Start at this line number (lines are numbered from 0)."
    )
    limit: int | None = Field(
        None, ge=1, description="At most this many lines from offset (default 500)."
    )
    max_line_chars: int | None = Field(
        None,
        ge=1,
        description="Show each line up to this many characters (lines longer than 2000 "
        "are otherwise cut, saying how many characters were left out).",
    )
    max_output_chars: int = _MAX_CHARS


class SessionArguments(_Arguments):
    session_id: str = _SESSION_ID


class NoArguments(_Arguments):
    pass


class SpawnArguments(_Arguments):
    command: str = Field(description='The program, like "python3" or "npm" (looked up on PATH).')
    args: list[str] = Field(
        default_factory=list, description='Its arguments, one string each: ["run", "dev"].'
    )
    workdir: str | None = _WORKDIR
    ready_pattern: str | None = Field(
        None,
        description='Return once a line matches this RE2 regular expression, like "Listening '
        'on|ready in". Without it: once the output has been quiet for 0.5 s.',
    )
    yield_time_ms: int = Field(
        5_000,
        ge=1,
        description="Return after this long even if not ready (default 5000, at most 30000); "
        "it keeps running.",
    )
    max_output_chars: int = _MAX_CHARS


class SessionReport(BaseModel):
    """What every tool that reports on one session returns."""

    session_id: str
    status: Status
    exit_code: int | None
    exit_signal: int | None
    output: str
    lines_omitted: int


class ExecReport(SessionReport):
    others_ended: int | None
    showing: str | None


class CommandReport(SessionReport):
    cwd: str | None


class StartReport(SessionReport):
    ready: bool | None


class ScreenReport(BaseModel):
    session_id: str
    status: Status
    exit_code: int | None
    exit_signal: int | None
    rows: int
    cols: int
    lines: list[str]
    cursor_row: int
    cursor_col: int
    cursor_visible: bool
    title: str | None
    alternate: bool


class SessionSummary(BaseModel):
    session_id: str
    status: Status
    exit_code: int | None
    exit_signal: int | None
    kind: str
    command: str
    workdir: str
    started_at: float


class SessionList(BaseModel):
    sessions: list[SessionSummary]


A = TypeVar("A", bound=BaseModel)


@attrs.frozen
class Reply:
    """A tool's answer: the text the model reads and the same facts for programs."""

    text: str
    data: BaseModel


@attrs.frozen
class Tool(Generic[A]):
    name: str
    description: str
    arguments: type[A]
    result: type[BaseModel]
    handler: Callable[[Backend, A], Awaitable[Reply]]
    annotations: ToolAnnotations


# --------------------------------------------------------------------------------------------
# Shared steps


async def _get(backend: Backend, session_id: str) -> tuple[SessionInfo, State]:
    info = await backend.request(GetParams(id=session_id, owner=backend.owner))
    return info, state_of(info)


async def _read(backend: Backend, session_id: str, **window: Any) -> ReadPage:
    return await backend.request(ReadParams(id=session_id, owner=backend.owner, **window))


async def _seek(backend: Backend, session_id: str) -> None:
    """Move this owner's read cursor to the end of the output (a read moves it past what it
    returned), so the next since-last read shows only what comes after now."""
    await _read(backend, session_id, tail=1)


def _input_of(args: WriteStdinArguments) -> str:
    """What write_stdin types: `chars` as given, then the named keys."""
    try:
        keys = b"".join(key_bytes(name) for name in args.keys)
    except KeySpecError as exc:
        raise ServiceError("invalid_input", f"keys: {exc}") from None
    if args.escapes:
        return args.chars + keystrokes_to_text(keys)  # the keys survive the decoding
    return args.chars + keys.decode("utf-8")


#: The keys that leave a full-screen program, for the hint (write_stdin `keys`).
_LEAVE_KEYS: Final = (
    '["q"] for less, man, top and htop; ["Escape", ":", "q", "!", "Enter"] for vim; '
    '["C-x"] for nano'
)


def _running_hint(session_id: str, showing: str | None = None) -> str:
    poll = json.dumps({"session_id": session_id})
    if showing == "pager":
        leave = json.dumps({"session_id": session_id, "keys": ["q"]})
        return (
            f"A pager is waiting for a key: screen {poll} shows it; write_stdin {leave} leaves it."
        )
    if showing == "full_screen":
        return (
            f"A full-screen program is showing: screen {poll} shows it. Leave it with "
            f"write_stdin keys: {_LEAVE_KEYS}."
        )
    return (
        f"Next: write_stdin {poll} waits until it ends or yield_time_ms passes (add a "
        '"pattern" to stop at a line); keys ["C-c"] interrupts it; kill ends it.'
    )


def _exit_line(state: State) -> str:
    if state.status == "running":
        return "Exit code: none yet (running)"
    if state.exit_code is not None and state.exit_signal is None:
        return f"Exit code: {state.exit_code}"
    return f"Exit code: none ({describe_end(state)})"


def _text(head: Sequence[str], output: Shown, *, label: str, notes: Sequence[str] = ()) -> str:
    parts = [*head, f"{label}:" if output.text else f"{label}: (none)"]
    if output.text:
        parts.append(output.text)
    parts.extend(notes)
    return "\n".join(parts)


def _page_notes(page: ReadPage, session_id: str) -> list[str]:
    notes = []
    if page.missed_lines:
        notes.append(f"({page.missed_lines} earlier lines had already left the buffer.)")
    if page.has_more:
        more = json.dumps({"session_id": session_id, "offset": page.next_offset})
        notes.append(f"More lines follow: read_output {more}")
    return notes


async def _command_output(
    backend: Backend, lines: list[Line], missed: int, budget: int, session_id: str
) -> tuple[Shown, int, list[str]]:
    """A command's output (its first and last lines when long): shown, the lines no longer
    kept, and the note saying so. The manager gives the first and last 250 lines; when the
    budget holds more, the lines between are read too, so the cut follows the budget."""
    jumps = sum(b.number - a.number - 1 for a, b in itertools.pairwise(lines))
    lines = await _fill(backend, session_id, lines, budget)
    lines = await _whole_lines(backend, session_id, lines)
    shown = show_lines(lines, budget, session_id=session_id, gaps=True)
    gone = max(0, missed - jumps)
    notes = [f"({gone} earlier lines had already left the buffer.)"] if gone else []
    return shown, gone, notes


def _cost(lines: Sequence[Line]) -> int:
    return sum(len(line.text) + 1 for line in lines)


async def _fill(backend: Backend, session_id: str, lines: list[Line], budget: int) -> list[Line]:
    """`lines` with the gap in their numbers (a head and a tail) read in from both ends, as
    far as half the budget each side, so that show_lines cuts at the budget and not at the
    manager's head and tail."""
    gap = next(
        (i for i, (a, b) in enumerate(itertools.pairwise(lines)) if b.number > a.number + 1),
        None,
    )
    if gap is None or _cost(lines) >= budget:
        return lines
    head, tail = lines[: gap + 1], lines[gap + 1 :]
    # Forward from the head.
    while _cost(head) < budget // 2 and head[-1].number + 1 < tail[0].number:
        start = head[-1].number + 1
        page = await _side_read(backend, session_id, start, tail[0].number - start)
        got = [line for line in page.lines if start <= line.number < tail[0].number]
        if not got:
            break
        head += got
    # Backward from the tail, a page at a time.
    while _cost(tail) < budget - _cost(head) and head[-1].number + 1 < tail[0].number:
        stop = tail[0].number
        start = max(head[-1].number + 1, stop - _SINCE_LIMIT)
        page = await _side_read(backend, session_id, start, stop - start)
        got = [line for line in page.lines if head[-1].number < line.number < stop]
        if not got:
            break
        tail[:0] = got
    return head + tail


async def _side_read(backend: Backend, session_id: str, offset: int, limit: int) -> ReadPage:
    """Lines read to fill in a reply, on a cursor of their own (the call's is not moved)."""
    return await backend.request(
        ReadParams(
            id=session_id,
            owner=backend.owner,
            offset=offset,
            limit=max(1, min(limit, _SINCE_LIMIT)),
            reader=backend.side_reader,
        )
    )


#: How the manager marks a line it cut at `Limits.max_line_length`.
_CUT_MARK: Final = re.compile(r"… \[(\d+) more characters\]$")
#: Cut lines per reply whose length is counted from their bytes (a request each).
_WHOLE_LINES: Final = 20


async def _whole_lines(
    backend: Backend, session_id: str, lines: list[Line], max_line_chars: int | None = None
) -> list[Line]:
    """Lines the manager cut, with the number of characters left out counted from the line's
    own bytes (the manager's count is wrong past twice its cut) and the call that reads the
    line whole; with `max_line_chars`, as much of the line as that."""
    out, counted = [], 0
    for line in lines:
        mark = _CUT_MARK.search(line.text)
        if mark is None:
            out.append(line)
            continue
        shown = line.text[: mark.start()]
        whole = None
        if counted < _WHOLE_LINES:
            counted += 1
            whole = await _line_text(backend, session_id, line.number)
        if whole is not None and max_line_chars is not None:
            shown = whole[:max_line_chars]
        if whole is not None and len(whole) <= len(shown):
            out.append(Line(line.number, whole))
            continue
        more = f"{len(whole) - len(shown)} more characters" if whole else "more characters"
        read = json.dumps(
            {
                "session_id": session_id,
                "offset": line.number,
                "limit": 1,
                "max_line_chars": len(whole) if whole else 100_000,
            }
        )
        out.append(Line(line.number, f"{shown}… [{more}; read_output {read} shows it whole]"))
    return out


async def _line_text(backend: Backend, session_id: str, number: int) -> str | None:
    """The whole clean text of line `number`, from its bytes (None: no longer kept)."""
    chunk = await backend.request(ReadRawParams(id=session_id, owner=backend.owner, line=number))
    if chunk.gap or not chunk.data:
        return None
    raw = chunk.data.rstrip(b"\n")
    cleaned = clean_lines(
        raw, max_line_length=len(raw) + 1, max_escape_length=_ESCAPE_LENGTH, start=chunk.offset
    )
    return cleaned[0] if cleaned else ""


def _description(tool: str, words: str) -> str:
    words = " ".join(words.split())
    return f"{tool}: {words if len(words) <= 200 else words[:199] + '…'}"


def _waited(ms: int) -> str:
    return f"{ms / 1000:g} s"


# --------------------------------------------------------------------------------------------
# The tools


async def exec_command(backend: Backend, args: ExecCommandArguments) -> Reply:
    result: ExecResult = await backend.request(
        ExecParams(
            command=args.cmd,
            owner=backend.owner,
            description=_description("exec_command", args.cmd),
            shell=args.shell,
            workdir=args.workdir,
            yield_ms=args.yield_time_ms,
        )
    )
    session_id = result.id
    shown, gone, notes = await _command_output(
        backend, result.lines, result.missed_lines, args.max_output_chars, session_id
    )
    await _seek(backend, session_id)  # running or ended: what it showed counts as seen
    if result.status == "running":
        state = State("running", None, None)
        waited = _waited(args.yield_time_ms)
        head = [_exit_line(state), f"Status: still running after {waited}; session_id {session_id}"]
        label = "Output so far"
        notes.append(_running_hint(session_id, result.showing))
    else:
        state = State(
            "killed" if result.status in ("killing", "killed") else "exited",
            result.exit_code,
            result.exit_signal,
        )
        head = [_exit_line(state), f"Status: {state.status}; session_id {session_id}"]
        label = "Output"
        others = result.others_ended
        if others:
            what = "process" if others == 1 else "processes"
            notes.append(
                f"({others} other {what} it left running, such as background jobs, ended "
                "with it: everything a command starts ends when it does. Start what must "
                "keep running with spawn.)"
            )
    report = ExecReport(
        session_id=session_id,
        status=state.status,
        exit_code=state.exit_code,
        exit_signal=state.exit_signal,
        output=shown.text,
        lines_omitted=shown.omitted + gone,
        others_ended=result.others_ended,
        showing=result.showing,
    )
    return Reply(_text(head, shown, label=label, notes=notes), report)


async def _shell_for(backend: Backend, args: ShellCommandArguments) -> tuple[str, bool]:
    """The shell to run in (the one asked for, or this backend's own, started when there
    is none or it ended) and whether it was started now."""
    if args.session_id is not None:
        return args.session_id, False
    async with backend.shell_lock:
        if backend.shell_id is not None:
            info, _ = await _get(backend, backend.shell_id)
            if info.status == "running":
                return info.id, False
        info = await backend.request(
            SpawnShellParams(
                owner=backend.owner,
                description=_description("shell_command", "a shell that lives between calls"),
                shell=args.shell,
                workdir=args.workdir,
            )
        )
        backend.shell_id = info.id
        return info.id, True


async def shell_command(backend: Backend, args: ShellCommandArguments) -> Reply:
    session_id, started = await _shell_for(backend, args)
    notes = []
    if args.workdir is not None and not started:
        notes.append(
            "(workdir applies when a shell starts: this one stays where it was; cd moves it.)"
        )
    async with progress.following(backend, session_id, total_ms=args.yield_time_ms):
        result = await backend.request(
            RunParams(
                id=session_id, command=args.cmd, owner=backend.owner, timeout_ms=args.yield_time_ms
            )
        )
    await _seek(backend, session_id)
    shown, gone, cut = await _command_output(
        backend, result.lines, result.missed_lines, args.max_output_chars, session_id
    )
    notes[:0] = cut
    if result.reason == "timeout":
        state = State("running", None, None)
        waited = _waited(args.yield_time_ms)
        head = [_exit_line(state), f"Status: still running after {waited}; session_id {session_id}"]
        label = "Output so far"
        # An interactive shell's pager (less) uses the alternate screen.
        snapshot = await backend.request(ScreenParams(id=session_id, owner=backend.owner))
        notes.append(_running_hint(session_id, "full_screen" if snapshot.alternate else None))
    elif result.reason == "exited":
        state = State("exited", result.exit_code, None, result.cwd)
        where = f"; cwd {result.cwd}" if result.cwd else ""
        head = [_exit_line(state), f"Status: exited{where}; shell session_id {session_id}"]
        label = "Output"
    else:  # the shell itself ended (`exit`, or killed meanwhile)
        info, state = await _get(backend, session_id)
        if backend.shell_id == info.id:
            backend.shell_id = None
        head = [_exit_line(state), f"Status: the shell ended; session_id {session_id}"]
        label = "Output"
        notes.append("The next shell_command starts a new shell.")
    report = CommandReport(
        session_id=session_id,
        status=state.status,
        exit_code=state.exit_code,
        exit_signal=state.exit_signal,
        output=shown.text,
        lines_omitted=shown.omitted + gone,
        cwd=state.cwd,
    )
    return Reply(_text(head, shown, label=label, notes=notes), report)


async def write_stdin(backend: Backend, args: WriteStdinArguments) -> Reply:
    data = _input_of(args)
    info, state = await _get(backend, args.session_id)
    head = []
    if data:
        if state.status == "running":
            await backend.request(
                WriteParams(id=info.id, data=data, owner=backend.owner, escapes=args.escapes)
            )
        else:
            head.append("Input not sent: it had already ended.")
    # After typed input, quiet means the program answered; a poll waits for an event.
    yield_ms = args.yield_time_ms if data else max(args.yield_time_ms, EMPTY_POLL_FLOOR_MS)
    wait = Wait(
        pattern=args.pattern,
        idle_ms=QUIET_MS if data else None,
        exit=True,
        prompt=info.shell is not None and info.status == "running",
        timeout_ms=yield_ms,
    )
    async with progress.following(backend, info.id, total_ms=yield_ms):
        page = await _read(backend, info.id, since="last", limit=_SINCE_LIMIT, wait=wait)
    info, state = await _get(backend, info.id)
    lines = await _whole_lines(backend, info.id, page.lines)
    shown = show_lines(lines, args.max_output_chars, session_id=info.id)
    head[:0] = [_exit_line(state), f"Status: {state.status}; session_id {info.id}"]
    notes = _page_notes(page, info.id)
    if state.status == "running":
        notes.append(_running_hint(info.id))
    return Reply(
        _text(head, shown, label="New output", notes=notes),
        _session_report(info.id, state, shown, page),
    )


async def read_output(backend: Backend, args: ReadOutputArguments) -> Reply:
    # The manager refuses what does not go together (tail with a pattern, say).
    if args.since_last or args.offset is not None or args.pattern is not None:
        page = await _read(
            backend,
            args.session_id,
            since="last" if args.since_last else None,
            offset=args.offset or 0,
            limit=args.limit,
            pattern=args.pattern,
            tail=args.tail,
        )
    else:
        page = await _read(backend, args.session_id, tail=args.tail or DEFAULT_TAIL)
    info, state = await _get(backend, args.session_id)
    lines = await _whole_lines(backend, info.id, page.lines, args.max_line_chars)
    budget = args.max_output_chars
    if args.max_line_chars is not None:  # a line asked for whole is not cut by the budget
        budget = max(budget, min(_cost(lines), args.max_line_chars + 200))
    shown = show_lines(lines, budget, session_id=info.id)
    if page.lines:
        where = f"lines {page.lines[0].number}-{page.lines[-1].number} of {page.total_lines}"
    else:
        where = f"no lines here ({page.total_lines} in all)"
    head = [_exit_line(state), f"Status: {state.status}; session_id {info.id}; {where}"]
    return Reply(
        _text(head, shown, label="Output", notes=_page_notes(page, info.id)),
        _session_report(info.id, state, shown, page),
    )


def _session_report(session_id: str, state: State, shown: Shown, page: ReadPage) -> SessionReport:
    return SessionReport(
        session_id=session_id,
        status=state.status,
        exit_code=state.exit_code,
        exit_signal=state.exit_signal,
        output=shown.text,
        lines_omitted=shown.omitted + page.missed_lines,
    )


async def screen(backend: Backend, args: SessionArguments) -> Reply:
    snapshot = await backend.request(ScreenParams(id=args.session_id, owner=backend.owner))
    info, state = await _get(backend, args.session_id)
    row, col = snapshot.cursor
    shown = list(snapshot.lines)
    while shown and not shown[-1]:
        shown.pop()
    facts = [
        f"{snapshot.rows} rows x {snapshot.cols} columns",
        f"cursor at row {row}, column {col}",
    ]
    if not snapshot.cursor_visible:
        facts.append("cursor hidden")
    if snapshot.alternate:
        facts.append("a full-screen program is showing")
    if snapshot.title:
        facts.append(f"title {json.dumps(snapshot.title)}")
    head = [_exit_line(state), f"Status: {state.status}; session_id {info.id}", "; ".join(facts)]
    blank = len(snapshot.lines) - len(shown)
    notes = []
    if shown and blank:
        rows = (
            f"row {len(shown)} is" if blank == 1 else f"rows {len(shown)}-{snapshot.rows - 1} are"
        )
        notes.append(f"({rows} blank)")
    if snapshot.alternate and state.status == "running":
        notes.append(f"To leave it, write_stdin keys: {_LEAVE_KEYS}.")
    report = ScreenReport(
        session_id=info.id,
        status=state.status,
        exit_code=state.exit_code,
        exit_signal=state.exit_signal,
        rows=snapshot.rows,
        cols=snapshot.cols,
        lines=snapshot.lines,
        cursor_row=row,
        cursor_col=col,
        cursor_visible=snapshot.cursor_visible,
        title=snapshot.title,
        alternate=snapshot.alternate,
    )
    text = _text(head, Shown("\n".join(shown), 0), label="Screen", notes=notes)
    return Reply(text, report)


def _kind(info: SessionInfo) -> tuple[str, str]:
    """What a session is to the model: a shell (shell_command), a command (exec_command: a
    shell's `-lc COMMAND`), or a program (spawn); and its words."""
    if info.shell is not None:
        return "shell", info.shell
    if len(info.args) == 2 and info.args[0] == "-lc":
        return "command", info.args[1]
    return "program", shlex.join([info.command, *info.args])


async def list_sessions(backend: Backend, args: NoArguments) -> Reply:
    listed = await backend.request(ListParams(owner=backend.owner))
    summaries = []
    for info in listed.sessions:
        state = state_of(info)
        kind, words = _kind(info)
        summaries.append(
            SessionSummary(
                session_id=info.id,
                status=state.status,
                exit_code=state.exit_code,
                exit_signal=state.exit_signal,
                kind=kind,
                command=words,
                workdir=info.workdir,
                started_at=info.created_at,
            )
        )
    if not summaries:
        return Reply("No sessions.", SessionList(sessions=[]))
    now = time.time()
    rows = [f"{len(summaries)} session{'s' if len(summaries) != 1 else ''}:"]
    for summary in summaries:
        state = State(summary.status, summary.exit_code, summary.exit_signal)
        status = "running" if summary.status == "running" else describe_end(state)
        age = max(0, int(now - summary.started_at))
        rows.append(
            f"{summary.session_id}  {status}  {summary.kind}: {summary.command}  "
            f"(started {age} s ago in {summary.workdir})"
        )
    return Reply("\n".join(rows), SessionList(sessions=summaries))


async def kill(backend: Backend, args: SessionArguments) -> Reply:
    await backend.request(KillParams(id=args.session_id, owner=backend.owner, cleanup=False))
    page = await _read(backend, args.session_id, since="last", limit=_SINCE_LIMIT)
    info, state = await _get(backend, args.session_id)
    lines = await _whole_lines(backend, info.id, page.lines)
    shown = show_lines(lines, DEFAULT_MAX_CHARS, session_id=info.id)
    head = [_exit_line(state), f"Status: {state.status}; session_id {info.id}"]
    return Reply(
        _text(head, shown, label="Output you had not seen", notes=_page_notes(page, info.id)),
        _session_report(info.id, state, shown, page),
    )


async def spawn(backend: Backend, args: SpawnArguments) -> Reply:
    if args.ready_pattern is not None:
        ready = Wait(pattern=args.ready_pattern, exit=True, timeout_ms=args.yield_time_ms)
    else:
        ready = Wait(idle_ms=QUIET_MS, exit=True, timeout_ms=args.yield_time_ms)
    words = shlex.join([args.command, *args.args])
    info = await backend.request(
        SpawnParams(
            command=args.command,
            args=list(args.args),
            owner=backend.owner,
            description=_description("spawn", words),
            workdir=args.workdir,
            ready=ready,
        )
    )
    page = info.ready
    assert page is not None  # spawn with `ready` always reports it
    await _seek(backend, info.id)
    if page.reason == "exited":
        info, state = await _get(backend, info.id)
    else:
        state = state_of(info)
    lines = await _whole_lines(backend, info.id, page.lines)
    shown = show_lines(lines, args.max_output_chars, session_id=info.id)
    matched = page.reason == "matched"
    head = [_exit_line(state), f"Status: {state.status}; session_id {info.id}; pid {info.pid}"]
    if args.ready_pattern is not None and state.status == "running":
        pattern = json.dumps(args.ready_pattern)
        waited = _waited(args.yield_time_ms)
        head.append(
            f"Ready: {pattern} seen" if matched else f"Not ready: {pattern} not seen in {waited}"
        )
    notes = _page_notes(page, info.id)
    if state.status == "running":
        notes.append(_running_hint(info.id))
    report = StartReport(
        session_id=info.id,
        status=state.status,
        exit_code=state.exit_code,
        exit_signal=state.exit_signal,
        output=shown.text,
        lines_omitted=shown.omitted + page.missed_lines,
        ready=matched if args.ready_pattern is not None else None,
    )
    return Reply(_text(head, shown, label="Output", notes=notes), report)


# --------------------------------------------------------------------------------------------
# Descriptions, written for the model that calls them

_EXEC = """\
Run a command line the way a script runs it, under a real terminal, and return its exit \
code and output. Use it for commands that finish: builds, tests, git, grep, installs. For \
servers, REPLs and other programs that keep running, use spawn; to keep cd and variables \
between commands, use shell_command.

It runs as `bash -lc CMD` (zsh with shell: "zsh"): your profile is read, interactive \
startup files and prompts are not. Pagers do not page (PAGER, GIT_PAGER and MANPAGER are \
cat), so git log and man print and end. The exit code is the command's own. Everything the \
command starts ends when it ends: a `cmd &` left running is ended too, and the result says \
so.

It returns when the command ends, or after yield_time_ms (default 10 s, at most 30 s): then \
you get a session_id and the output so far, and the command keeps running: continue with \
write_stdin (type input, or nothing to wait for more output), read_output, screen, or kill.

The output is the command's own, as the terminal showed it (colors removed, progress \
redraws resolved); the middle of long output is left out, with a note saying how to read it.

Example: {"cmd": "pytest -q tests/test_api.py", "workdir": "backend", "yield_time_ms": 20000}"""

_SHELL_COMMAND = """\
Run a command in your shell: one bash (or zsh) that lives on between calls, so cd, export, \
shell variables, functions and an activated virtualenv carry over to the next \
shell_command. The first call starts it (in workdir); if it ends (`exit`), the next call \
starts a new one. It reads your interactive startup files, as a terminal would, so a \
pager may page here (git log, man): use exec_command for those, or git --no-pager.

It returns the command's exit code, its output (no prompt, no echo) and the shell's cwd \
afterwards, when the command ends or after yield_time_ms (default 10 s, at most 30 s): \
then the command keeps running in that shell, and the shell takes no other command until \
it ends: use write_stdin with its session_id to answer it, wait for it, or press keys \
["C-c"].

Example: {"cmd": "cd backend && source .venv/bin/activate"}"""

_WRITE = """\
Type into a running session (a command from exec_command or shell_command, a program from \
spawn), then return the output that came after what you last saw of it. With empty chars \
and no keys nothing is sent: it just waits for new output.

It returns when the program exits, when a shell shows its prompt again, when a new line \
matches pattern, or after yield_time_ms (default 10 s, at most 30 s); after typed input \
also once the output has been quiet for 0.5 s. With nothing to send (following a build) it \
waits at least 5 s for one of those: call it once per wait, not in a loop.

Input is literal: chars reach the program exactly as you send them ("\\n" in JSON is \
Enter, "\\u0003" Ctrl-C, "\\u0004" Ctrl-D; a backslash stays a backslash, so code and \
regular expressions go in unchanged). Keys by name go in keys, pressed after chars: \
["Enter"], ["C-c"], ["Up"], ["Escape", ":", "q", "!", "Enter"]. escapes: true decodes \
backslash escapes in chars (\\e, \\x1b, \\t) for those who want them.

Example: answer a question with {"session_id": "pty_1a2b3c4d", "chars": "y", "keys": \
["Enter"]}"""

_READ = """\
Read a session's output as clean numbered lines (what the terminal showed, escape codes \
removed). Default: the last 100 lines. tail: the last N lines. since_last: only lines after \
those your previous read of this session showed (write_stdin and exec_command count too). \
pattern: only lines matching an RE2 regular expression, from offset or since_last. offset \
(and limit): from that line number on, to page through long output or read lines another \
result left out.

Example: {"session_id": "pty_1a2b3c4d", "pattern": "(?i)error|failed", "offset": 0}"""

_SCREEN = """\
Show a session's terminal screen as it is now: the visible rows, the cursor, the title. Use \
it for full-screen programs (vim, less, top, a TUI installer or menu), whose output makes no \
sense as lines, and to see exactly what a program waiting for input shows.

Example: {"session_id": "pty_1a2b3c4d"}"""

_LIST = """\
List your sessions: commands from exec_command still running past their yield time, \
your shell from shell_command, programs from spawn, and ended sessions whose output is \
still kept; each with its session_id, status, exit code and command.

Example: {}"""

_KILL = """\
End a session: its program and everything it started (a hang-up, SIGTERM, then SIGKILL \
after a short grace). Returns its final status and the output you had not seen yet; \
read_output still works afterwards.

Example: {"session_id": "pty_1a2b3c4d"}"""

_SPAWN = """\
Start a long-running program under a real terminal, without a shell: dev servers, \
watchers, REPLs (python3, node), databases. It returns once a line matches ready_pattern (an \
RE2 regular expression), or without one once the output has been quiet for 0.5 s, or after \
yield_time_ms (default 5 s, at most 30 s); the program keeps running. Then use write_stdin, \
read_output and screen with its session_id, and kill to stop it. For commands that finish, \
use exec_command.

Example: {"command": "python3", "args": ["-m", "http.server", "8000"], "ready_pattern": \
"Serving HTTP"}"""

INSTRUCTIONS: Final = """\
trio-pty runs commands in real terminals (PTYs) and never leaves a process behind. \
exec_command runs a command line as a script would and returns its exit code and output; \
shell_command runs commands in one shell that keeps cd and variables between calls; spawn \
starts a program that keeps running (a server, a REPL). Each gives a session_id when the \
program outlives the call: write_stdin types into it (literally: what you send is what it \
gets; keys by name in keys) and shows new output (with nothing to send it waits until the \
program ends, its shell prompt returns or a pattern matches: one call follows a build), \
read_output reads or searches its output, \
screen shows full-screen programs, kill ends it, list_sessions lists them. Everything still \
running ends when this MCP server stops."""


def _annotations(title: str, *, read_only: bool = False, destructive: bool = False) -> Any:
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=read_only,
        open_world_hint=not read_only,
    )


TOOLS: Final[Sequence[Tool[Any]]] = (
    Tool(
        "exec_command",
        _EXEC,
        ExecCommandArguments,
        ExecReport,
        exec_command,
        _annotations("Run a command", destructive=True),
    ),
    Tool(
        "shell_command",
        _SHELL_COMMAND,
        ShellCommandArguments,
        CommandReport,
        shell_command,
        _annotations("Run a command in your shell", destructive=True),
    ),
    Tool(
        "write_stdin",
        _WRITE,
        WriteStdinArguments,
        SessionReport,
        write_stdin,
        _annotations("Type into a session", destructive=True),
    ),
    Tool(
        "read_output",
        _READ,
        ReadOutputArguments,
        SessionReport,
        read_output,
        _annotations("Read a session's output", read_only=True),
    ),
    Tool(
        "screen",
        _SCREEN,
        SessionArguments,
        ScreenReport,
        screen,
        _annotations("Show a session's screen", read_only=True),
    ),
    Tool(
        "list_sessions",
        _LIST,
        NoArguments,
        SessionList,
        list_sessions,
        _annotations("List sessions", read_only=True),
    ),
    Tool(
        "kill",
        _KILL,
        SessionArguments,
        SessionReport,
        kill,
        _annotations("End a session", destructive=True),
    ),
    Tool(
        "spawn",
        _SPAWN,
        SpawnArguments,
        StartReport,
        spawn,
        _annotations("Start a long-running program", destructive=True),
    ),
)
