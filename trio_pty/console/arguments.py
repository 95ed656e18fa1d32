"""The arguments of the client verbs: each verb's parser, the words argparse leaves over,
the usage errors found before connecting, and the values requests are built from (a Wait,
a workdir, an environment).

Waits are the server's (`Wait`): the options `--pattern`, `--idle`, `--prompt`, `--exit`
say what ends one, `--wait-ms` bounds it, `--wait` (`--ready` on spawn) alone waits for the
output to settle.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Final, cast

from trio_pty.console.common import UsageError, client_options
from trio_pty.console.keys import DEFAULT_DETACH_KEYS, KeySpecError, parse_keys
from trio_pty.model import Wait

__all__ = [
    "DEFAULT_IDLE_MS",
    "add_attach",
    "add_verbs",
    "check",
    "check_attach",
    "claim_extra_words",
    "env_pairs",
    "spawn_argv",
    "wait_of",
    "workdir_of",
]

DEFAULT_IDLE_MS: Final = 500  # what `--wait` alone waits for: the output to settle
DEFAULT_READER: Final = "cli"

# Verbs whose text may hold words that look like options (`write ID -1\n`,
# `send ID ls -la`, `run ID grep -v x`): argparse leaves those words over, they go back in.
_TEXT_VERBS: Final = frozenset({"write", "send", "run", "exec"})


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


def _name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name",
        default=None,
        help="a name to address it by instead of its id (unique among your running sessions)",
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


def _idle_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="kill it after SECONDS without output, input or an attached client "
        "(default: the server's idle_timeout)",
    )


def _window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=24, help="window rows (default 24)")
    parser.add_argument("--cols", type=int, default=80, help="window columns (default 80)")


class _Unused:
    """Stands in for the parser of a verb that is not invoked: takes its arguments and keeps
    none (building all twenty parsers was a twentieth of a call's time)."""

    def add_argument(self, *args: object, **kwargs: object) -> None:
        pass

    def add_argument_group(self, *args: object, **kwargs: object) -> _Unused:
        return self

    def add_mutually_exclusive_group(self, *args: object, **kwargs: object) -> _Unused:
        return self

    def set_defaults(self, **kwargs: object) -> None:
        pass


def add_verbs(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], only: str | None = None
) -> None:
    """Add the client verbs' parsers to `commands` (the top parser's subparsers): every
    verb's, or with `only`, that one verb's."""

    def verb(name: str, help: str, *, text: bool = False) -> argparse.ArgumentParser:
        if only is not None and name != only:
            return cast("argparse.ArgumentParser", _Unused())
        # allow_abbrev=False: a word of the text must not pass for an abbreviated option.
        sub = commands.add_parser(name, help=help, description=help, allow_abbrev=not text)
        client_options(sub, top=False)
        return sub

    spawn = verb("spawn", "start a command under a new PTY; prints its id")
    _owner(spawn)
    spawn.add_argument("--title", default=None)
    _name(spawn)
    spawn.add_argument("--description", default=None, help="why it runs (default: the command)")
    _workdir(spawn)
    spawn.add_argument("--notify", action="store_true", help="notify_on_exit")
    spawn.add_argument("--timeout", type=float, default=None, help="kill it after SECONDS")
    _idle_timeout(spawn)
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
    _name(shell)
    shell.add_argument("--description", default="shell", help="why it runs (default: shell)")
    _workdir(shell)
    shell.add_argument("--notify", action="store_true", help="notify_on_exit")
    shell.add_argument("--timeout", type=float, default=None, help="kill it after SECONDS")
    _idle_timeout(shell)
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

    once = verb(
        "exec",
        "run a command line as a script runs (bash -lc CMD) under a PTY of its own; prints "
        "its output and exits with its exit code",
        text=True,
    )
    once.add_argument("words", nargs="*", metavar="-- CMD")
    _owner(once)
    once.add_argument("--shell", default=None, help="bash (the default) or zsh")
    _workdir(once)
    _environment(once)
    _window(once)
    once.add_argument("--timeout", type=float, default=None, help="kill it after SECONDS")
    once.add_argument(
        "--wait-ms",
        type=int,
        metavar="MS",
        help="give up waiting after MS ms, leaving it running (exit 124; default: the "
        "server's default_wait_ms, 10 s)",
    )

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

    record = verb("record", "write a session as an asciicast (what it retains) to stdout")
    record.add_argument("id")
    _owner(record)
    record.add_argument(
        "--format",
        choices=("v3", "v2"),
        default="v3",
        help="asciicast v3 (the default) or v2 (older players, no exit event)",
    )

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

    drain = verb("drain", "drain the server: no new sessions; it stops once they have ended")
    drain.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop then even if sessions still run (default: the server's drain_timeout)",
    )


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
    if args.command in ("spawn", "shell", "exec"):
        env_pairs(args.env)
        workdir_of(args)
    if args.command == "spawn":
        spawn_argv(args)
    if args.command == "write" and args.text is None:
        raise UsageError("write needs TEXT: trio-pty write ID TEXT")
    if args.command in ("send", "run", "exec") and not args.words:
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


def _asked_to_wait(args: argparse.Namespace) -> bool:
    return bool(
        args.wait
        or args.wait_ms is not None
        or args.idle is not None
        or getattr(args, "prompt", False)
        or args.until_exit
    )


def wait_of(args: argparse.Namespace, *, pattern_waits: bool = True) -> Wait | None:
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


# --------------------------------------------------------------------------------------------
# Values


def env_pairs(items: Sequence[str]) -> dict[str, str] | None:
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env expects NAME=VALUE, got {item!r}")
        env[name] = value
    return env or None


def workdir_of(args: argparse.Namespace) -> str | None:
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


def spawn_argv(args: argparse.Namespace) -> list[str]:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("spawn needs a command: trio-pty spawn [OPTIONS] -- CMD ARGS...")
    return argv


# --------------------------------------------------------------------------------------------
# attach (the verb itself is attach.py, imported only when it runs)


def add_attach(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "attach",
        help=f"connect your terminal to a session (detach: {DEFAULT_DETACH_KEYS})",
    )
    client_options(sub, top=False)
    sub.add_argument("id", nargs="?", default=None, help="default: your most recent session")
    _owner(sub)
    sub.add_argument(
        "--detach-key",
        default=os.environ.get("TRIO_PTY_DETACH_KEY") or DEFAULT_DETACH_KEYS,
        metavar="KEYS",
        help="tmux-style keys that detach, e.g. 'C-]' or 'C-b d'; pressed twice, the first "
        "key is sent instead (env TRIO_PTY_DETACH_KEY, default C-])",
    )
    sub.add_argument(
        "--read-only", action="store_true", help="watch: send nothing, keep the session's size"
    )


def check_attach(args: argparse.Namespace) -> None:
    """The detach keys are checked before connecting."""
    try:
        parse_keys(args.detach_key)
    except KeySpecError as exc:
        raise UsageError(f"--detach-key: {exc}") from None
