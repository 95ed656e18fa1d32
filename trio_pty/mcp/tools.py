"""The MCP tools: their arguments, their results, their descriptions, and what each does.

Each tool is a few calls on a `Backend` (the manager for one owner) and a report made by
`render`. Shaped after what coding agents already use: Codex's `exec_command` and
`write_stdin`, Claude Code's background shells, DesktopCommander's process tools.

Two rules hold for every tool:

- A shell session from `exec_command` *is* its command: it runs while the command runs, and
  once the command has ended its shell is closed (`exit`), whichever tool notices first.
- Every tool that shows a session's output moves this owner's read cursor past what it
  showed (a read does; `exec_command` and `spawn` read their tail), so `write_stdin` and
  `read_output` with `since_last` show only what came after.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shlex
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Generic, TypeVar

import attrs
import trio
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from trio_pty.model import CommandInfo, ReadPage, SessionInfo, Wait

from .backend import REFUSALS, Backend
from .render import Shown, State, Status, describe_end, first_command, show_lines, state_of

__all__ = ["QUIET_MS", "TOOLS", "Reply", "Tool"]

#: Output quiet for this long after some arrived counts as "the program is done talking"
#: (write_stdin, and spawn without a ready pattern).
QUIET_MS: Final = 500
#: How much output a reply shows when the caller does not say.
DEFAULT_MAX_CHARS: Final = 20_000
#: How long a cancelled exec_command may take to send its command Ctrl-C.
_INTERRUPT_SECONDS: Final = 0.5
#: read_output's page when no window is given.
DEFAULT_TAIL: Final = 100
#: Lines a since-last read asks for: the most the manager gives (Limits.max_read_limit);
#: the character budget then cuts them in the middle.
_SINCE_LIMIT: Final = 2000


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


_SESSION_ID = Field(description='A session id from an earlier call, like "pty_1a2b3c4d".')
_MAX_CHARS = Field(
    DEFAULT_MAX_CHARS,
    ge=200,
    description="Show at most about this many characters of output (default 20000); the "
    "middle of longer output is left out, with a note saying how to read it.",
)


class ExecCommandArguments(_Arguments):
    cmd: str = Field(
        description="The command line, as you would type it in bash: pipes, &&, quotes, "
        "globs and several lines all work."
    )
    workdir: str | None = Field(
        None,
        description="Where to run it (a relative path starts at the directory the MCP "
        "server runs in, which is also the default).",
    )
    shell: str | None = Field(
        None, description='"bash" or "zsh" (default: $SHELL when it is one of them, else bash).'
    )
    yield_time_ms: int = Field(
        10_000,
        ge=1,
        description="Return after this long if the command is still running (default "
        "10000, at most 30000); it keeps running and you get its session_id.",
    )
    max_output_chars: int = _MAX_CHARS


class WriteStdinArguments(_Arguments):
    session_id: str = _SESSION_ID
    chars: str = Field(
        "",
        description='Keys to type: "\\n" is Enter, "\\u0003" Ctrl-C, "\\u0004" Ctrl-D; '
        "backslash escapes are decoded too (\\x03, \\e[A for the up arrow, \\t), so write a "
        "literal backslash as \\\\. Empty: send nothing, just wait for new output.",
    )
    yield_time_ms: int = Field(
        10_000,
        ge=1,
        description="Wait at most this long for the output to settle (default 10000, at "
        "most 30000).",
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
    workdir: str | None = Field(
        None,
        description="Where to run it (a relative path starts at the directory the MCP "
        "server runs in, which is also the default).",
    )
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
    cwd: str | None
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


async def _command_of(backend: Backend, info: SessionInfo) -> CommandInfo | None:
    """A shell session's command (exec_command's), None for other sessions."""
    if info.shell is None:
        return None
    return first_command(await backend.commands(info.id, limit=50))


async def _state(backend: Backend, session_id: str) -> tuple[SessionInfo, State]:
    """The session and its state; the shell of a command that has ended is told to exit."""
    info = await backend.get(session_id)
    command = await _command_of(backend, info)
    state = state_of(info, command)
    ended = state.status != "running"
    if info.shell is not None and info.status == "running" and info.at_prompt and ended:
        await _close_shell(backend, session_id)
    return info, state


async def _close_shell(backend: Backend, session_id: str) -> None:
    """Tell the shell of a command that has ended to exit, and go on: it leaves in a few
    milliseconds (a kill would wait out the terminate grace, since an interactive shell
    ignores SIGTERM). Saying it twice is harmless, and needed by zsh with jobs running."""
    with contextlib.suppress(*REFUSALS):  # already gone, or the rules refuse: it stays idle
        await backend.write(session_id, "exit\r", escapes=False)


async def _seek(backend: Backend, session_id: str) -> None:
    """Move this owner's read cursor to the end of the output (a read moves it past what it
    returned), so the next since-last read shows only what comes after now."""
    await backend.read(session_id, tail=1)


def _running_hint(session_id: str) -> str:
    poll = json.dumps({"session_id": session_id, "chars": ""})
    return (
        f"Next: write_stdin {poll} waits for more output; chars "
        '"\\u0003" (Ctrl-C) interrupts it; kill ends it.'
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


def _description(tool: str, words: str) -> str:
    words = " ".join(words.split())
    return f"{tool}: {words if len(words) <= 200 else words[:199] + '…'}"


# --------------------------------------------------------------------------------------------
# The tools


async def exec_command(backend: Backend, args: ExecCommandArguments) -> Reply:
    info = await backend.spawn_shell(
        description=_description("exec_command", args.cmd), shell=args.shell, workdir=args.workdir
    )
    try:
        result = await backend.run(info.id, args.cmd, timeout_ms=args.yield_time_ms)
    except REFUSALS:
        await _close_shell(backend, info.id)  # the command never started
        raise
    except trio.Cancelled:
        # The client gave up on the call (or the server is stopping): interrupt the command
        # as Ctrl-C would, without waiting for it (a stop must not wait on it either).
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(_INTERRUPT_SECONDS),
            contextlib.suppress(Exception),  # the session is gone, or the write refused
        ):
            await backend.write(info.id, "\x03", escapes=False)
        raise
    shown = show_lines(result.lines, args.max_output_chars, session_id=info.id, gaps=True)
    jumps = sum(b.number - a.number - 1 for a, b in itertools.pairwise(result.lines))
    gone = max(0, result.missed_lines - jumps)
    notes = [f"({gone} earlier lines had already left the buffer.)"] if gone else []
    if result.reason == "timeout":
        await _seek(backend, info.id)
        state = State("running", None, None)
        waited = f"{args.yield_time_ms / 1000:g} s"
        head = [_exit_line(state), f"Status: still running after {waited}; session_id {info.id}"]
        label = "Output so far"
        notes.append(_running_hint(info.id))
    else:
        if result.reason == "exited":
            await _close_shell(backend, info.id)
            state = State("exited", result.exit_code, None, result.cwd)
        else:  # the shell itself ended: `exit 3`, or killed meanwhile
            _, state = await _state(backend, info.id)
        where = f"; cwd {state.cwd}" if state.cwd else ""
        head = [_exit_line(state), f"Status: {state.status}{where}; session_id {info.id}"]
        label = "Output"
    report = CommandReport(
        session_id=info.id,
        status=state.status,
        exit_code=state.exit_code,
        exit_signal=state.exit_signal,
        output=shown.text,
        lines_omitted=shown.omitted + gone,
        cwd=state.cwd,
    )
    return Reply(_text(head, shown, label=label, notes=notes), report)


async def write_stdin(backend: Backend, args: WriteStdinArguments) -> Reply:
    info, state = await _state(backend, args.session_id)
    head = []
    if args.chars:
        if state.status == "running":
            await backend.write(info.id, args.chars, escapes=True)
        else:
            head.append("Input not sent: it had already ended.")
    wait = Wait(
        idle_ms=QUIET_MS,
        exit=True,
        prompt=info.shell is not None and info.status == "running",
        timeout_ms=args.yield_time_ms,
    )
    page = await backend.read(info.id, since="last", limit=_SINCE_LIMIT, wait=wait)
    info, state = await _state(backend, info.id)
    shown = show_lines(page.lines, args.max_output_chars, session_id=info.id)
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
        page = await backend.read(
            args.session_id,
            since="last" if args.since_last else None,
            offset=args.offset or 0,
            limit=args.limit,
            pattern=args.pattern,
            tail=args.tail,
        )
    else:
        page = await backend.read(args.session_id, tail=args.tail or DEFAULT_TAIL)
    info, state = await _state(backend, args.session_id)
    shown = show_lines(page.lines, args.max_output_chars, session_id=info.id)
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
    snapshot = await backend.screen(args.session_id)
    info, state = await _state(backend, args.session_id)
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


async def list_sessions(backend: Backend, args: NoArguments) -> Reply:
    summaries = []
    for info in await backend.list():
        command = await _command_of(backend, info)
        state = state_of(info, command)
        if info.shell is not None:
            kind, words = "command", command.command if command else "(no command)"
        else:
            kind, words = "program", shlex.join([info.command, *info.args])
        summaries.append(
            SessionSummary(
                session_id=info.id,
                status=state.status,
                exit_code=state.exit_code,
                exit_signal=state.exit_signal,
                kind=kind,
                command=words,
                workdir=info.workdir,
                cwd=state.cwd,
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
    await backend.kill(args.session_id, cleanup=False)
    page = await backend.read(args.session_id, since="last", limit=_SINCE_LIMIT)
    info, state = await _state(backend, args.session_id)
    shown = show_lines(page.lines, DEFAULT_MAX_CHARS, session_id=info.id)
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
    info = await backend.spawn(
        args.command,
        args.args,
        description=_description("spawn", words),
        workdir=args.workdir,
        ready=ready,
    )
    page = info.ready
    assert page is not None  # spawn with `ready` always reports it
    await _seek(backend, info.id)
    if page.reason == "exited":
        info = await backend.get(info.id)
    state = state_of(info, None)
    shown = show_lines(page.lines, args.max_output_chars, session_id=info.id)
    matched = page.reason == "matched"
    head = [_exit_line(state), f"Status: {state.status}; session_id {info.id}; pid {info.pid}"]
    if args.ready_pattern is not None and state.status == "running":
        pattern = json.dumps(args.ready_pattern)
        waited = f"{args.yield_time_ms / 1000:g} s"
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
Run a shell command in a fresh bash (or zsh) under a real terminal; return its exit code \
and output. Use it for commands that finish: builds, tests, git, grep, installs. For \
servers, REPLs and other programs that keep running, use spawn.

It returns when the command ends, or after yield_time_ms (default 10 s, at most 30 s): then \
you get a session_id and the output so far, and the command keeps running: continue with \
write_stdin (type input, or empty chars to wait for more output), read_output, screen, or \
kill.

Each call is a new shell in workdir (default: the directory the MCP server runs in): `cd` \
and `export` do not carry over to the next call, so chain with &&. The result's cwd is \
where the shell was when the command ended. The output is the command's own (no prompt, no \
echo), as the terminal showed it (colors removed, progress redraws resolved); the middle of \
long output is left out, with a note saying how to read it.

Example: {"cmd": "pytest -q tests/test_api.py", "workdir": "backend", "yield_time_ms": 20000}"""

_WRITE = """\
Type into a running session (a command from exec_command, a program from spawn), then \
return the output that came after what you last saw of it. With empty chars nothing is \
sent: it just waits for new output.

It returns when the command ends (its shell prompt is back), when the program exits, when \
the output has been quiet for 0.5 s, or after yield_time_ms (default 10 s, at most 30 s).

Keys: "\\n" is Enter, "\\u0003" Ctrl-C, "\\u0004" Ctrl-D; backslash escapes are decoded \
as well (\\x03, \\e[A for the up arrow, \\t for Tab), so a literal backslash is \\\\.

Example: answer a question with {"session_id": "pty_1a2b3c4d", "chars": "y\\n"}"""

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
programs from spawn, and ended sessions whose output is still kept; each with its \
session_id, status, exit code and command.

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
exec_command runs a shell command and returns its exit code and output; spawn starts a \
program that keeps running (a server, a REPL). Both give a session_id when the program \
outlives the call: write_stdin types into it and shows new output, read_output reads or \
searches its output, screen shows full-screen programs, kill ends it, list_sessions lists \
them. Everything still running ends when this MCP server stops."""


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
        CommandReport,
        exec_command,
        _annotations("Run a shell command", destructive=True),
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
