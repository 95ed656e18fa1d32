"""The verbs of the command-line client: the request record each one builds from its
arguments (`arguments.py`), and how its result is printed. `attach` lives in `attach.py`.

Every verb prints, by default, what a person wants to see (ids, lines, a table) on stdout,
and remarks on stderr; with `--json` the result record exactly as the server sent it. A
wait that ended otherwise than asked (its timeout, or the session ending first) makes the
exit status 4, so scripts need no sleeps.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import attrs
import trio

from trio_pty.client.client import TrioPtyClient
from trio_pty.console.arguments import env_pairs, spawn_argv, wait_of, workdir_of
from trio_pty.console.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_WAIT,
    UsageError,
    note,
    plural,
    print_json,
)
from trio_pty.console.tables import exit_text, format_commands, format_table
from trio_pty.model import Line, ReadPage, Wait, WaitReason
from trio_pty.wire import (
    CommandsParams,
    DrainParams,
    ExecParams,
    KillParams,
    ListParams,
    OwnerDeleteParams,
    ReadParams,
    ReadRawParams,
    RecordParams,
    ResizeParams,
    RunParams,
    ScreenParams,
    ServerInfoParams,
    SignalParams,
    SpawnParams,
    SpawnShellParams,
    WriteParams,
)

__all__ = ["VERBS", "Verb"]

Verb = Callable[[TrioPtyClient, argparse.Namespace], Awaitable[int]]

_FOLLOW_IDLE_MS: Final = 50
_FOLLOW_TIMEOUT_MS: Final = 1000


# --------------------------------------------------------------------------------------------
# Waits


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


async def _spawn(client: TrioPtyClient, args: argparse.Namespace) -> int:
    argv = spawn_argv(args)
    wait = wait_of(args)
    info = await client.request(
        SpawnParams(
            command=argv[0],
            args=argv[1:],
            owner=args.owner,
            description=args.description or shlex.join(argv),
            title=args.title,
            workdir=workdir_of(args),
            notify_on_exit=args.notify,
            timeout=args.timeout,
            idle_timeout=args.idle_timeout,
            env=env_pairs(args.env),
            rows=args.rows,
            cols=args.cols,
            ready=wait,
            name=args.name,
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
            workdir=workdir_of(args),
            env=env_pairs(args.env),
            rows=args.rows,
            cols=args.cols,
            timeout=args.timeout,
            login=args.login,
            rc=args.rc,
            title=args.title,
            notify_on_exit=args.notify,
            idle_timeout=args.idle_timeout,
            name=args.name,
        )
    )
    if args.json:
        print_json(info)
    else:
        print(info.id, flush=True)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# Listing


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


async def _print_every_page(client: TrioPtyClient, read: ReadParams) -> None:
    """Print every line `read` selects, from its start, page by page (a command's output
    that did not fit in its answer)."""
    while True:
        page = await client.request(read)
        _report_missed(page)
        for line in page.lines:
            print(line.text)
        if not page.has_more:
            return
        read = attrs.evolve(read, offset=page.next_offset)


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
    wait = wait_of(args, pattern_waits=False)
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
    wait = wait_of(args)
    screen = await client.request(ScreenParams(id=args.id, owner=args.owner, wait=wait))
    if args.json:
        print_json(screen)
    else:
        for line in screen.lines:
            print(line)
    return _wait_status(wait, screen.reason)


async def _wait(client: TrioPtyClient, args: argparse.Namespace) -> int:
    # Read with this connection's own cursor: a wait moves none of yours.
    wait = wait_of(args)
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
    wait = wait_of(args)
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
        await _print_every_page(
            client, ReadParams(id=args.id, owner=args.owner, command=result.number)
        )
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


async def _exec(client: TrioPtyClient, args: argparse.Namespace) -> int:
    """Print the command's output (all of it the buffer holds) and exit with its code, or
    128 + the signal that ended it (as a shell says it)."""
    words = list(args.words)
    if words and words[0] == "--":
        words = words[1:]
    result = await client.request(
        ExecParams(
            command=" ".join(words),
            owner=args.owner,
            shell=args.shell,
            workdir=workdir_of(args),
            env=env_pairs(args.env),
            rows=args.rows,
            cols=args.cols,
            timeout=args.timeout,
            yield_ms=args.wait_ms,
        )
    )
    if args.json:
        print_json(result)
    elif result.has_more or result.missed_lines:
        await _print_every_page(client, ReadParams(id=result.id, owner=args.owner))
    else:
        for line in result.lines:
            print(line.text)
    sys.stdout.flush()
    if result.status == "running":
        note(
            f"(it still runs after {result.duration_ms} ms: trio-pty read {result.id} "
            f"--follow, or trio-pty kill {result.id})"
        )
        return EXIT_TIMEOUT
    others = result.others_ended
    if others:
        note(f"({others} other process{'es' if others != 1 else ''} it left running ended with it)")
    if result.exit_code is not None:
        return result.exit_code
    if result.exit_signal is not None:
        return 128 + result.exit_signal
    return EXIT_ERROR


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
        print(f"{info.id} {info.status} (exit {exit_text(info)})")
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


async def _record(client: TrioPtyClient, args: argparse.Namespace) -> int:
    """The asciicast as the server wrote it (redirect it to a .cast file)."""
    recording = await client.request(
        RecordParams(id=args.id, owner=args.owner, format=int(args.format[1:]))
    )
    if args.json:
        print_json(recording)
    else:
        sys.stdout.write(recording.cast)
    return EXIT_OK


async def _drain(client: TrioPtyClient, args: argparse.Namespace) -> int:
    print_json(await client.request(DrainParams(deadline_s=args.deadline)))
    return EXIT_OK


VERBS: Final[dict[str, Verb]] = {
    "spawn": _spawn,
    "shell": _shell,
    "list": _list,
    "read": _read,
    "write": _write,
    "send": _send,
    "run": _run,
    "exec": _exec,
    "commands": _commands,
    "screen": _screen,
    "wait": _wait,
    "resize": _resize,
    "read-raw": _read_raw,
    "record": _record,
    "signal": _signal,
    "kill": _kill,
    "delete-owner": _delete_owner,
    "info": _info,
    "drain": _drain,
}
