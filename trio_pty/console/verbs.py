"""The verbs of the command-line client: each one's arguments, the request record it builds,
and how its result is printed. `attach` lives in `attach.py`.

Every verb prints, by default, what a person wants to see (ids, lines, a table) on stdout,
and remarks on stderr; with `--json` the result record exactly as the server sent it.
Waits are the server's (`Wait`): the options `--pattern`, `--idle`, `--prompt`, `--exit`
say what ends one, `--wait-ms` bounds it, and a wait that ended otherwise than asked (its
timeout, or the session ending first) makes the exit status 4, so scripts need no sleeps.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

from trio_pty.console.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_WAIT,
    UsageError,
    client_options,
    note,
    plural,
    print_json,
)
from trio_pty.model import CommandInfo, Line, ReadPage, SessionInfo, Wait, WaitReason
from trio_pty.rpc.client import TrioPtyClient
from trio_pty.wire import (
    CommandsParams,
    KillParams,
    ListParams,
    OwnerDeleteParams,
    ReadParams,
    ReadRawParams,
    ResizeParams,
    RunParams,
    ScreenParams,
    ServerInfoParams,
    SignalParams,
    SpawnParams,
    SpawnShellParams,
    WriteParams,
)

__all__ = [
    "VERBS",
    "Verb",
    "add_verbs",
    "check",
    "claim_extra_words",
    "format_commands",
    "format_table",
]

Verb = Callable[[TrioPtyClient, argparse.Namespace], Awaitable[int]]

DEFAULT_IDLE_MS: Final = 500  # what `--wait` alone waits for: the output to settle
DEFAULT_READER: Final = "cli"
_FOLLOW_IDLE_MS: Final = 50
_FOLLOW_TIMEOUT_MS: Final = 1000

# Verbs whose text may hold words that look like options (`write ID -1\n`,
# `send ID ls -la`, `run ID grep -v x`): argparse leaves those words over, they go back in.
_TEXT_VERBS: Final = frozenset({"write", "send", "run"})


# --------------------------------------------------------------------------------------------
# Arguments


def _owner(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--owner",
        default=os.environ.get("TRIO_PTY_OWNER") or "default",
        help="owner namespace (env TRIO_PTY_OWNER, default 'default')",
    )


def _waiting(
    parser: argparse.ArgumentParser,
    *,
    flag: str | None = "--wait",
    pattern: bool = True,
    prompt: bool = True,
    short_i: bool = True,
) -> None:
    """The options of a server-side wait. `pattern=False`: the verb's own --pattern
    (read's filter) is also what `--wait` waits for."""
    group = parser.add_argument_group(
        "waiting",
        "any of these waits (server-side) before answering; a wait that ends otherwise "
        "than asked (its timeout, or the session ending) exits with status 4",
    )
    if flag is None:
        parser.set_defaults(wait=False)
    else:
        group.add_argument(
            flag,
            dest="wait",
            action="store_true",
            help=f"wait (alone: until the output is quiet for {DEFAULT_IDLE_MS} ms)",
        )
    if pattern:
        group.add_argument("--pattern", metavar="RE", help="until a line matches this RE2")
    if short_i and pattern:
        group.add_argument("-i", "--ignore-case", action="store_true", help="for --pattern")
    elif pattern:
        group.add_argument("--ignore-case", action="store_true", help="for --pattern")
    group.add_argument("--idle", type=int, metavar="MS", help="until quiet for MS ms")
    if prompt:
        group.add_argument(
            "--prompt", action="store_true", help="until the shell is back at its prompt"
        )
    group.add_argument(
        "--exit", dest="until_exit", action="store_true", help="until the session ends"
    )
    group.add_argument(
        "--wait-ms",
        type=int,
        metavar="MS",
        help="give up after MS ms (default: the server's default_wait_ms, 10 s)",
    )


def _workdir(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--workdir",
        metavar="DIR",
        help="start in DIR (relative to your directory; default: your directory)",
    )
    where.add_argument(
        "--server-root",
        action="store_true",
        help="start in the server's root directory instead of yours",
    )


def _environment(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="set a variable"
    )


def _window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=24, help="window rows (default 24)")
    parser.add_argument("--cols", type=int, default=80, help="window columns (default 80)")


def add_verbs(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add every client verb's parser to `commands` (the top parser's subparsers)."""

    def verb(name: str, help: str, *, text: bool = False) -> argparse.ArgumentParser:
        # allow_abbrev=False: a word of the text must not pass for an abbreviated option.
        sub = commands.add_parser(name, help=help, description=help, allow_abbrev=not text)
        client_options(sub, top=False)
        return sub

    spawn = verb("spawn", "start a command under a new PTY; prints its id")
    _owner(spawn)
    spawn.add_argument("--title", default=None)
    spawn.add_argument("--description", default=None, help="why it runs (default: the command)")
    _workdir(spawn)
    spawn.add_argument("--notify", action="store_true", help="notify_on_exit")
    spawn.add_argument("--timeout", type=float, default=None, help="kill it after SECONDS")
    _environment(spawn)
    _window(spawn)
    _waiting(spawn, flag="--ready", prompt=False)
    spawn.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")

    shell = verb("shell", "start bash or zsh that reports each command; prints its id")
    _owner(shell)
    shell.add_argument("--shell", default=None, help="bash, zsh or a path (default: $SHELL)")
    shell.add_argument("--login", action="store_true", help="run it as a login shell")
    shell.add_argument(
        "--no-rc", dest="rc", action="store_false", help="do not read your startup files"
    )
    shell.add_argument("--title", default=None)
    shell.add_argument("--description", default="shell", help="why it runs (default: shell)")
    _workdir(shell)
    shell.add_argument("--notify", action="store_true", help="notify_on_exit")
    shell.add_argument("--timeout", type=float, default=None, help="kill it after SECONDS")
    _environment(shell)
    _window(shell)

    lister = verb("list", "list sessions (the owner's, or every owner's)")
    _owner(lister)
    lister.add_argument("--all-owners", action="store_true", help="every owner's sessions")

    read = verb("read", "print a session's output lines")
    read.add_argument("id")
    _owner(read)
    start = read.add_mutually_exclusive_group()
    start.add_argument("--offset", type=int, default=None, help="from line N (default 0)")
    start.add_argument("--tail", type=int, default=None, metavar="N", help="the last N lines")
    start.add_argument("--new", action="store_true", help="what came since your last read")
    read.add_argument(
        "--reader",
        default=os.environ.get("TRIO_PTY_READER") or DEFAULT_READER,
        help="whose last read --new means (env TRIO_PTY_READER, default 'cli')",
    )
    read.add_argument("--limit", type=int, default=None, help="at most this many lines")
    read.add_argument("--pattern", default=None, metavar="RE", help="only lines matching RE2")
    read.add_argument("-i", "--ignore-case", action="store_true")
    read.add_argument(
        "--command",
        dest="command_number",  # `command` is the verb's name
        type=int,
        metavar="N",
        help="shell sessions: command N only",
    )
    read.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the session ends"
    )
    _waiting(read, pattern=False)

    write = verb("write", r"type TEXT (escapes decoded: \n \r \t \e \\ \xNN \uNNNN)", text=True)
    write.add_argument("id")
    write.add_argument("text", nargs="?", metavar="TEXT")
    _owner(write)
    write.add_argument("--literal", action="store_true", help="send TEXT as is, no escapes")
    write.add_argument("--escapes", action="store_true", help=argparse.SUPPRESS)  # the default now
    _waiting(write, short_i=False)

    send = verb("send", "type a line: the words, then Enter", text=True)
    send.add_argument("id")
    send.add_argument("words", nargs="*", metavar="WORD")
    _owner(send)
    send.add_argument("--raw", action="store_true", help="no Enter after the words")
    _waiting(send, short_i=False)

    run = verb("run", "run a command in a shell session; exits with its exit code", text=True)
    run.add_argument("id")
    run.add_argument("words", nargs="*", metavar="-- CMD")
    _owner(run)
    run.add_argument("--wait-ms", type=int, metavar="MS", help="give up after MS ms (exit 124)")

    history = verb("commands", "a shell session's command history")
    history.add_argument("id")
    _owner(history)
    history.add_argument("--limit", type=int, default=50, help="the last N (default 50)")

    screen = verb("screen", "print the screen as the terminal shows it")
    screen.add_argument("id")
    _owner(screen)
    _waiting(screen, prompt=False)

    wait = verb("wait", "wait until a line matches, the output settles, the prompt or the end")
    wait.add_argument("id")
    _owner(wait)
    wait.add_argument("--offset", type=int, default=0, help="look from line N (default 0)")
    _waiting(wait, flag=None)

    resize = verb("resize", "set a session's window size")
    resize.add_argument("id")
    resize.add_argument("rows", type=int)
    resize.add_argument("cols", type=int)
    _owner(resize)

    raw = verb("read-raw", "write a session's raw output bytes to a file or stdout")
    raw.add_argument("id")
    _owner(raw)
    raw.add_argument("--offset", type=int, default=0, help="from byte N (default 0)")
    raw.add_argument("--limit", type=int, default=None, help="at most N bytes")
    raw.add_argument("-o", "--output", default="-", metavar="FILE", help="default: stdout")

    sig = verb("signal", "send a signal to the program in front (as Ctrl-C reaches it)")
    sig.add_argument("id")
    sig.add_argument("signal", help="INT, TERM, HUP, KILL, QUIT, USR1, WINCH, ...")
    _owner(sig)

    kill = verb("kill", "kill a session and wait until it is gone")
    kill.add_argument("id")
    _owner(kill)
    kill.add_argument("--cleanup", action="store_true", help="also forget its output")

    delete = verb("delete-owner", "kill and forget every session of OWNER; refuse its spawns")
    delete.add_argument("owner")

    verb("info", "print server.info")


def claim_extra_words(args: argparse.Namespace, extra: Sequence[str]) -> None:
    """Words argparse took for unknown options (`-1\\n`, `-la`) belong to the text of
    `write`, `send` and `run`; anywhere else they are an error."""
    if not extra:
        return
    if args.command not in _TEXT_VERBS:
        raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
    if extra[0] == "--":  # the separator, when options came between it and the verb's ID
        extra = extra[1:]
    if args.command == "write":
        if args.text is not None or len(extra) != 1:
            raise UsageError("write takes one TEXT (quote it)")
        args.text = extra[0]
    else:
        args.words = [*args.words, *extra]


def check(args: argparse.Namespace) -> None:
    """Usage errors a verb can find before connecting."""
    if args.command in ("spawn", "shell"):
        _env_pairs(args.env)
        _workdir_of(args)
    if args.command == "spawn":
        _spawn_argv(args)
    if args.command == "write" and args.text is None:
        raise UsageError("write needs TEXT: trio-pty write ID TEXT")
    if args.command in ("send", "run") and not args.words:
        what = "WORD..." if args.command == "send" else "-- CMD"
        raise UsageError(f"{args.command} needs {what}")
    if args.command == "wait" and not (
        args.pattern or args.idle is not None or args.prompt or args.until_exit
    ):
        raise UsageError("wait for what? give --pattern, --idle, --prompt or --exit")
    if args.command == "read" and args.follow and _asked_to_wait(args):
        raise UsageError("--follow waits by itself: drop --wait, --idle, --prompt, --exit")
    if args.command == "read" and args.follow and args.command_number is not None:
        raise UsageError("--follow follows the session: for one command, use run or --command")


# --------------------------------------------------------------------------------------------
# Waits


def _asked_to_wait(args: argparse.Namespace) -> bool:
    return bool(
        args.wait
        or args.wait_ms is not None
        or args.idle is not None
        or getattr(args, "prompt", False)
        or args.until_exit
    )


def _wait_of(args: argparse.Namespace, *, pattern_waits: bool = True) -> Wait | None:
    """The Wait the options ask for. `pattern_waits=False` (read): --pattern filters, and
    also waits only with --wait."""
    asked = _asked_to_wait(args)
    pattern = args.pattern if pattern_waits or asked else None
    if pattern is not None:
        asked = True
    if not asked:
        return None
    prompt = getattr(args, "prompt", False)
    idle = args.idle
    if pattern is None and idle is None and not prompt and not args.until_exit:
        idle = DEFAULT_IDLE_MS
    return Wait(
        pattern=pattern,
        ignore_case=args.ignore_case,
        idle_ms=idle,
        exit=args.until_exit,
        prompt=prompt,
        timeout_ms=args.wait_ms,
    )


_REASON_OF: Final[dict[str, WaitReason]] = {
    "pattern": "matched",
    "idle_ms": "idle",
    "prompt": "prompt",
    "exit": "exited",
}


def _wait_status(wait: Wait | None, reason: WaitReason | None) -> int:
    """0 when the wait ended as asked (or there was none), else 4 with a remark."""
    if wait is None or reason is None:
        return EXIT_OK
    asked = {r for name, r in _REASON_OF.items() if getattr(wait, name) not in (None, False)}
    if reason in asked:
        return EXIT_OK
    note(f"(the wait ended: {reason})")
    return EXIT_WAIT


# --------------------------------------------------------------------------------------------
# Starting sessions


def _env_pairs(items: Sequence[str]) -> dict[str, str] | None:
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env expects NAME=VALUE, got {item!r}")
        env[name] = value
    return env or None


def _workdir_of(args: argparse.Namespace) -> str | None:
    """Where to start: yours by default (the server still decides whether it may), a
    directory relative to yours, or (None) the server's root."""
    if args.server_root:
        return None
    try:
        return os.path.abspath(args.workdir) if args.workdir else os.getcwd()
    except OSError as exc:
        raise UsageError(
            f"cannot tell your working directory ({exc.strerror}): "
            "give --workdir DIR or --server-root"
        ) from None


def _spawn_argv(args: argparse.Namespace) -> list[str]:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("spawn needs a command: trio-pty spawn [OPTIONS] -- CMD ARGS...")
    return argv


async def _spawn(client: TrioPtyClient, args: argparse.Namespace) -> int:
    argv = _spawn_argv(args)
    wait = _wait_of(args)
    info = await client.request(
        SpawnParams(
            command=argv[0],
            args=argv[1:],
            owner=args.owner,
            description=args.description or shlex.join(argv),
            title=args.title,
            workdir=_workdir_of(args),
            notify_on_exit=args.notify,
            timeout=args.timeout,
            env=_env_pairs(args.env),
            rows=args.rows,
            cols=args.cols,
            ready=wait,
        )
    )
    if args.json:
        print_json(info)
    else:
        print(info.id, flush=True)
    return _wait_status(wait, info.ready.reason if info.ready is not None else None)


async def _shell(client: TrioPtyClient, args: argparse.Namespace) -> int:
    info = await client.request(
        SpawnShellParams(
            owner=args.owner,
            description=args.description,
            shell=args.shell,
            workdir=_workdir_of(args),
            env=_env_pairs(args.env),
            rows=args.rows,
            cols=args.cols,
            timeout=args.timeout,
            login=args.login,
            rc=args.rc,
            title=args.title,
            notify_on_exit=args.notify,
        )
    )
    if args.json:
        print_json(info)
    else:
        print(info.id, flush=True)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# Listing


def _age(created_at: float) -> str:
    seconds = max(0, int(time.time() - created_at))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _exit_text(info: SessionInfo) -> str:
    if info.exit_signal is not None:
        return f"sig{info.exit_signal}"
    if info.exit_code is not None:
        return str(info.exit_code)
    return "-"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    everything = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(row[i]) for row in everything) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in everything
    )


def format_table(sessions: Sequence[SessionInfo], *, owners: bool = False) -> str:
    """The `list` table; `owners` adds an OWNER column."""
    header = ["ID", "STATUS", "PID", "EXIT", "LINES", "AGE", "COMMAND", "DESCRIPTION"]
    rows = []
    for info in sessions:
        status = info.status + (" (timeout)" if info.timed_out else "")
        if info.shell is not None and info.status == "running":
            status += " (prompt)" if info.at_prompt else " (busy)"
        row = [
            info.id,
            status,
            str(info.pid),
            _exit_text(info),
            str(info.line_count),
            _age(info.created_at),
            _clip(shlex.join([info.command, *info.args]), 40),
            _clip(info.title or info.terminal_title or info.description, 40),
        ]
        rows.append([info.owner, *row] if owners else row)
    return _table(["OWNER", *header] if owners else header, rows)


async def _list(client: TrioPtyClient, args: argparse.Namespace) -> int:
    all_owners = args.all_owners
    params = ListParams(all_owners=True) if all_owners else ListParams(owner=args.owner)
    sessions = (await client.request(params)).sessions
    if args.json:
        print_json(sessions)
    elif sessions:
        print(format_table(sessions, owners=args.all_owners))
    else:
        note("no sessions" if args.all_owners else f"no sessions for owner {args.owner!r}")
    return EXIT_OK


def format_commands(commands: Sequence[CommandInfo]) -> str:
    rows = []
    for info in commands:
        exit_code = "-" if info.exit_code is None else str(info.exit_code)
        if info.first_line is None or info.last_line is None:
            lines = "-"
        else:
            lines = f"{info.first_line}-{info.last_line}"
        rows.append(
            [
                str(info.number),
                info.state,
                exit_code,
                lines,
                f"{info.duration_ms / 1000:.1f}s",
                info.cwd or "-",
                _clip(info.command, 60),
            ]
        )
    return _table(["N", "STATE", "EXIT", "LINES", "TIME", "CWD", "COMMAND"], rows)


async def _commands(client: TrioPtyClient, args: argparse.Namespace) -> int:
    commands = (
        await client.request(CommandsParams(id=args.id, owner=args.owner, limit=args.limit))
    ).commands
    if args.json:
        print_json(commands)
    elif commands:
        print(format_commands(commands))
    else:
        note(f"no commands in {args.id} yet")
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# Reading


def _report_missed(page: ReadPage) -> None:
    if page.missed_lines:
        note(f"({plural(page.missed_lines, 'line')} dropped from the buffer)")


def _read_params(args: argparse.Namespace, *, wait: Wait | None) -> ReadParams:
    return ReadParams(
        id=args.id,
        owner=args.owner,
        offset=args.offset or 0,
        tail=args.tail,
        since="last" if args.new else None,
        reader=args.reader,
        limit=args.limit,
        pattern=args.pattern,
        ignore_case=args.ignore_case,
        command=args.command_number,
        wait=wait,
    )


async def _read(client: TrioPtyClient, args: argparse.Namespace) -> int:
    if args.follow:
        return await _follow(client, args)
    wait = _wait_of(args, pattern_waits=False)
    page = await client.request(_read_params(args, wait=wait))
    if args.json:
        print_json(page)
        return _wait_status(wait, page.reason)
    _report_missed(page)
    for line in page.lines:
        print(line.text)
    if page.has_more:
        note(f"(more: --offset {page.next_offset})")
    return _wait_status(wait, page.reason)


class _FollowPrinter:
    """Prints lines as they come, the unfinished last one too (a `Password: ` prompt shows
    at once), and what is added to it later; a line rewritten since (a `\\r` progress bar)
    is drawn again in place on a terminal, or printed again on the next line."""

    def __init__(self, *, in_place: bool) -> None:
        self._in_place = in_place
        self._open: Line | None = None  # the unfinished line printed last, as printed

    def show(self, lines: Sequence[Line], next_offset: int, *, finished: bool) -> None:
        out = sys.stdout
        for line in lines:
            complete = finished or line.number < next_offset
            shown = self._open
            self._open = None
            if shown is not None and shown.number == line.number:
                if line.text.startswith(shown.text):
                    out.write(line.text[len(shown.text) :])
                elif self._in_place:
                    out.write("\r\x1b[K" + line.text)
                else:
                    out.write("\n" + line.text)
            else:
                if shown is not None:
                    out.write("\n")  # the unfinished line ended elsewhere
                out.write(line.text)
            if complete:
                out.write("\n")
            else:
                self._open = line
        out.flush()

    def close(self) -> None:
        if self._open is not None:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._open = None


async def _follow(client: TrioPtyClient, args: argparse.Namespace) -> int:
    """Print lines as they come (from --offset/--tail/--new, default the start), until the
    session has ended and everything was printed. Uses the reader's cursor, so a later
    `read --new` starts after what was printed."""
    printer = _FollowPrinter(in_place=sys.stdout.isatty())
    wait = Wait(idle_ms=_FOLLOW_IDLE_MS, exit=True, timeout_ms=_FOLLOW_TIMEOUT_MS)
    params = _read_params(args, wait=None)
    try:
        while True:
            page = await client.request(params)
            finished = page.reason == "exited" and not page.has_more
            if args.json:
                print_json(page)
            else:
                _report_missed(page)
                # With a pattern only whole lines that match are shown.
                lines = [
                    line
                    for line in page.lines
                    if args.pattern is None or finished or line.number < page.next_offset
                ]
                printer.show(lines, page.next_offset, finished=finished)
            if finished:
                return EXIT_OK
            params = ReadParams(
                id=args.id,
                owner=args.owner,
                since="last",
                reader=args.reader,
                limit=args.limit,
                pattern=args.pattern,
                ignore_case=args.ignore_case,
                command=args.command_number,
                wait=wait,
            )
    finally:
        printer.close()


async def _screen(client: TrioPtyClient, args: argparse.Namespace) -> int:
    wait = _wait_of(args)
    screen = await client.request(ScreenParams(id=args.id, owner=args.owner, wait=wait))
    if args.json:
        print_json(screen)
    else:
        for line in screen.lines:
            print(line)
    return _wait_status(wait, screen.reason)


async def _wait(client: TrioPtyClient, args: argparse.Namespace) -> int:
    # Read with this connection's own cursor: a wait moves none of yours.
    wait = _wait_of(args)
    page = await client.request(
        ReadParams(id=args.id, owner=args.owner, offset=args.offset, limit=1, wait=wait)
    )
    if args.json:
        print_json(page)
    return _wait_status(wait, page.reason)


async def _read_raw(client: TrioPtyClient, args: argparse.Namespace) -> int:
    """Every retained byte from --offset (at most --limit), in as many calls as it takes."""
    offset, left = args.offset, args.limit
    chunks = []
    try:
        if args.output == "-":
            target = trio.wrap_file(sys.stdout.buffer)
        else:
            target = await trio.open_file(args.output, "wb")
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror}") from None
    try:
        while left is None or left > 0:
            chunk = await client.request(
                ReadRawParams(id=args.id, owner=args.owner, offset=offset, limit=left)
            )
            if chunk.gap:
                note(f"(bytes before {chunk.offset} are no longer in the buffer)")
            if not chunk.data:
                break
            if args.json:
                chunks.append(chunk)
            else:
                await target.write(chunk.data)
                await target.flush()
            offset = chunk.next_offset
            if left is not None:
                left -= len(chunk.data)
    finally:
        if args.output != "-":
            await target.aclose()
    if args.json:
        print_json(chunks)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# Typing


async def _type(client: TrioPtyClient, args: argparse.Namespace, data: str, escapes: bool) -> int:
    wait = _wait_of(args)
    result = await client.request(
        WriteParams(id=args.id, owner=args.owner, data=data, escapes=escapes, wait=wait)
    )
    if args.json:
        print_json(result)
        return _wait_status(wait, result.output.reason if result.output else None)
    if result.output is None:
        return EXIT_OK
    for line in result.output.lines:
        print(line.text)
    return _wait_status(wait, result.output.reason)


async def _write(client: TrioPtyClient, args: argparse.Namespace) -> int:
    return await _type(client, args, args.text, escapes=not args.literal)


async def _send(client: TrioPtyClient, args: argparse.Namespace) -> int:
    line = " ".join(args.words)
    return await _type(client, args, line if args.raw else line + "\r", escapes=False)


async def _run(client: TrioPtyClient, args: argparse.Namespace) -> int:
    """Print the command's output (all of it the buffer holds) and exit with its code."""
    command = " ".join(args.words)
    result = await client.request(
        RunParams(id=args.id, owner=args.owner, command=command, timeout_ms=args.wait_ms)
    )
    if args.json:
        print_json(result)
    elif result.has_more or result.missed_lines:
        offset = 0
        while True:
            page = await client.request(
                ReadParams(id=args.id, owner=args.owner, command=result.number, offset=offset)
            )
            _report_missed(page)
            for line in page.lines:
                print(line.text)
            if not page.has_more:
                break
            offset = page.next_offset
    else:
        for line in result.lines:
            print(line.text)
    sys.stdout.flush()
    if result.reason == "timeout":
        note(
            f"(command {result.number} still runs after {result.duration_ms} ms: "
            f"trio-pty wait {result.id} --prompt, or trio-pty signal {result.id} INT)"
        )
        return EXIT_TIMEOUT
    if result.exit_code is None:
        note(f"(the session ended during command {result.number}, killed by a signal)")
        return EXIT_ERROR
    if result.reason == "session_ended":
        note(f"(the shell ended during command {result.number})")
    return result.exit_code


# --------------------------------------------------------------------------------------------
# Controlling sessions


async def _resize(client: TrioPtyClient, args: argparse.Namespace) -> int:
    info = await client.request(
        ResizeParams(id=args.id, owner=args.owner, rows=args.rows, cols=args.cols)
    )
    if args.json:
        print_json(info)
    else:
        print(f"{info.id} {info.rows}x{info.cols}")
    return EXIT_OK


async def _signal(client: TrioPtyClient, args: argparse.Namespace) -> int:
    result = await client.request(SignalParams(id=args.id, owner=args.owner, signal=args.signal))
    if args.json:
        print_json(result)
    elif result.pids:
        print(f"{result.signal} -> {' '.join(map(str, result.pids))}")
    else:
        note(f"{result.signal}: no process in front of {result.id}'s terminal")
    return EXIT_OK


async def _kill(client: TrioPtyClient, args: argparse.Namespace) -> int:
    info = await client.request(KillParams(id=args.id, owner=args.owner, cleanup=args.cleanup))
    if args.json:
        print_json(info)
    else:
        print(f"{info.id} {info.status} (exit {_exit_text(info)})")
    return EXIT_OK


async def _delete_owner(client: TrioPtyClient, args: argparse.Namespace) -> int:
    result = await client.request(OwnerDeleteParams(owner=args.owner))
    if args.json:
        print_json(result)
    else:
        print(f"owner {result.owner!r}: {plural(result.removed, 'session')} removed")
    return EXIT_OK


async def _info(client: TrioPtyClient, args: argparse.Namespace) -> int:
    print_json(await client.request(ServerInfoParams()))
    return EXIT_OK


VERBS: Final[dict[str, Verb]] = {
    "spawn": _spawn,
    "shell": _shell,
    "list": _list,
    "read": _read,
    "write": _write,
    "send": _send,
    "run": _run,
    "commands": _commands,
    "screen": _screen,
    "wait": _wait,
    "resize": _resize,
    "read-raw": _read_raw,
    "signal": _signal,
    "kill": _kill,
    "delete-owner": _delete_owner,
    "info": _info,
}
