"""`trio-pty`: run the server, or talk to one.

    trio-pty serve [--host 127.0.0.1] [--port 8765] [--token T] [--config FILE]
                   [--allow-origin ORIGIN ...] [--allow-host HOST ...] [--log-level LEVEL]
                   [--no-ui | --ui-assets DIR] [--state-dir DIR | --no-state-dir]
    trio-pty spawn [--owner O] [--title T] [--description D] [--workdir DIR] [--notify]
                   [--timeout S] [--env NAME=VALUE ...] -- CMD ARGS...
    trio-pty list [--owner O]
    trio-pty read ID [--offset N] [--limit N] [--pattern RE] [-i] [--follow]
    trio-pty write ID TEXT [--escapes]
    trio-pty kill ID [--cleanup]
    trio-pty attach ID            (detach with Ctrl-])
    trio-pty info
    trio-pty mcp [--connect URL] ...   (an MCP server on stdio: docs/mcp.md)

Client commands read `--url` (or TRIO_PTY_URL, default ws://127.0.0.1:8765/rpc),
`--token` (or TRIO_PTY_TOKEN) and `--owner` (or TRIO_PTY_OWNER, default "default").

Exit status: 0 success; 1 the server refused the request (the message and its kind go to
stderr); 2 usage or configuration error; 3 cannot connect, refused at the handshake
(wrong token, origin, host) or connection lost; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import json
import logging
import os
import re
import secrets
import shlex
import signal
import stat
import sys
import termios
import time
import tty
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Final

import trio

from trio_pty.errors import unwrap_group
from trio_pty.model import ReadPage, SessionInfo, Wait
from trio_pty.rpc.client import (
    DEFAULT_URL,
    ConnectionFailed,
    ConnectionLost,
    RpcError,
    TrioPtyClient,
    connect,
)
from trio_pty.wire import (
    AttachParams,
    KillParams,
    ListParams,
    ReadParams,
    ResizeParams,
    ServerInfoParams,
    SpawnParams,
    WriteParams,
    unstructure_result,
)

__all__ = ["DETACH_KEY", "EXIT_CONNECTION", "EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONNECTION: Final = 3
EXIT_INTERRUPTED: Final = 130

DETACH_KEY: Final = b"\x1d"  # Ctrl-]
DETACH_KEY_NAME: Final = "Ctrl-]"

_FOLLOW_IDLE_MS: Final = 100
_FOLLOW_TIMEOUT_MS: Final = 2000
_INPUT_CHUNK: Final = 4096

log = logging.getLogger("trio_pty.cli")


def _prog() -> str:
    return "trio-pty"


def _fail(message: str) -> None:
    print(f"{_prog()}: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Arguments


def _client_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--url", default=default, help=f"server URL (env TRIO_PTY_URL, default {DEFAULT_URL})"
    )
    parser.add_argument("--token", default=default, help="access token (env TRIO_PTY_TOKEN)")
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print the raw JSON result",
    )


def _owner_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--owner",
        default=os.environ.get("TRIO_PTY_OWNER", "default"),
        help="owner namespace (env TRIO_PTY_OWNER, default 'default')",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="Run commands under real pseudo-terminals, behind a JSON-RPC server.",
        epilog="Exit status: 0 ok, 1 server error, 2 usage, 3 connection/auth, 130 interrupted.",
    )
    _client_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the JSON-RPC server")
    serve.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8765; 0: any free)")
    serve.add_argument(
        "--token",
        default=argparse.SUPPRESS,
        help="access token (env TRIO_PTY_TOKEN; else one is generated and printed)",
    )
    serve.add_argument("--config", default=None, metavar="FILE", help="TOML config file")
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="accept WebSocket requests from this exact Origin (repeatable)",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="accept this Host header besides the bound address and localhost (repeatable)",
    )
    ui = serve.add_mutually_exclusive_group()
    ui.add_argument(
        "--no-ui",
        action="store_true",
        help="do not serve the monitor page (GET / is then 404; /rpc is unchanged)",
    )
    ui.add_argument(
        "--ui-assets",
        default=None,
        metavar="DIR",
        help="serve xterm.js from DIR (a copy made by trio_pty/ui/vendor.py fetch --dest DIR)",
    )
    state = serve.add_mutually_exclusive_group()
    state.add_argument(
        "--state-dir",
        default=None,
        metavar="DIR",
        help="record live sessions in DIR, and end what a killed predecessor left there "
        "(default: $XDG_STATE_HOME/trio-pty or ~/.local/state/trio-pty)",
    )
    state.add_argument("--no-state-dir", action="store_true", help="keep no records")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level on stderr (default info)",
    )

    def client_command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help)
        _client_options(sub, top=False)
        return sub

    spawn = client_command("spawn", "start a command under a new PTY; prints its id")
    _owner_option(spawn)
    spawn.add_argument("--title", default=None)
    spawn.add_argument("--description", default=None, help="why it runs (default: the command)")
    spawn.add_argument("--workdir", default=None)
    spawn.add_argument("--notify", action="store_true", help="notify_on_exit")
    spawn.add_argument("--timeout", type=float, default=None, help="kill after SECONDS")
    spawn.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="set a variable"
    )
    spawn.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")

    lister = client_command("list", "list the owner's sessions")
    _owner_option(lister)

    read = client_command("read", "print a session's output lines")
    read.add_argument("id")
    _owner_option(read)
    read.add_argument("--offset", type=int, default=0, help="first line number")
    read.add_argument("--limit", type=int, default=None, help="at most this many lines")
    read.add_argument("--pattern", default=None, help="only lines matching this RE2 pattern")
    read.add_argument("-i", "--ignore-case", action="store_true")
    read.add_argument("--follow", "-f", action="store_true", help="keep printing until exit")

    write = client_command("write", "type text into a session")
    write.add_argument("id")
    write.add_argument("text")
    _owner_option(write)
    write.add_argument("--escapes", action="store_true", help=r"decode \n \xNN \e[A ...")

    kill = client_command("kill", "kill a session and wait until it is gone")
    kill.add_argument("id")
    _owner_option(kill)
    kill.add_argument("--cleanup", action="store_true", help="also forget its output")

    attach = client_command("attach", f"interactive terminal (detach: {DETACH_KEY_NAME})")
    attach.add_argument("id")
    _owner_option(attach)

    client_command("info", "print server.info")
    commands.add_parser("mcp", help="an MCP server on stdio (see trio-pty mcp --help)")
    return parser


# --------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["mcp"]:  # its own options (and its own optional dependency)
        from trio_pty.mcp import main as mcp_main

        return mcp_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
        return trio.run(_client_main, args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `trio-pty read ID | head`: the reader went away; end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    from trio_pty.rpc import config, serve, server

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        file = config.load_config(args.config) if args.config else config.ServeConfig()
    except config.ConfigError as exc:
        _fail(f"error: {exc}")
        return EXIT_USAGE
    page = None
    if not args.no_ui:
        from trio_pty import ui

        try:
            loaded = ui.load_page(args.ui_assets)
        except ui.AssetsError as exc:
            _fail(f"error: {exc}")
            return EXIT_USAGE
        log.info("%s", loaded.describe())
        page = loaded.site
    token = args.token or os.environ.get("TRIO_PTY_TOKEN") or None
    generated = token is None
    if token is None:
        token = secrets.token_urlsafe(32)
    port = args.port if args.port is not None else file.port
    options = server.ServerOptions(
        token=token,
        host=args.host or file.host or server.DEFAULT_HOST,
        port=port if port is not None else server.DEFAULT_PORT,
        allowed_origins=frozenset((*file.allow_origins, *args.allow_origin)),
        allowed_hosts=frozenset((*file.allow_hosts, *args.allow_host)),
        env_mode=file.env_mode,
        env_deny=file.env_deny,
        page=page,
    )
    if not 0 <= options.port <= 65535:
        _fail(f"error: --port must be 0..65535, got {options.port}")
        return EXIT_USAGE
    state_dir = None if args.no_state_dir else (args.state_dir or _default_state_dir())
    if state_dir is not None:
        from trio_pty.posix import keeper

        try:
            keeper.prepare(state_dir)
        except OSError as exc:
            _fail(f"error: state directory {state_dir}: {exc.strerror or exc}")
            return EXIT_USAGE
    settings = serve.ServeSettings(
        server=options,
        limits=file.limits,
        root=file.root,
        authorizer=file.authorizer,
        token_generated=generated,
        state_dir=state_dir,
    )
    # Everything loaded so far lives as long as the process: out of the collector's sight,
    # every full collection walks ~30k fewer objects (10-20 ms less pause on 2 cores).
    gc.freeze()
    try:
        with unwrap_group():
            return trio.run(serve.serve, settings)
    except OSError as exc:
        _fail(f"error: cannot listen on {options.host}:{options.port}: {exc.strerror or exc}")
        return EXIT_ERROR


def _default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):  # unset, or not absolute: ignored, as the XDG spec says
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "trio-pty")


Command = Callable[[TrioPtyClient, argparse.Namespace], Awaitable[int]]


async def _client_main(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("TRIO_PTY_URL") or DEFAULT_URL
    token = args.token or os.environ.get("TRIO_PTY_TOKEN") or None
    command = _COMMANDS[args.command]
    try:
        if args.command == "spawn":
            _spawn_argv(args)  # usage errors before connecting
    except _UsageError as exc:
        _fail(f"error: {exc}")
        return EXIT_USAGE
    try:
        async with connect(url, token) as client:
            return await command(client, args)
    except RpcError as exc:
        label = exc.kind or str(exc.code)
        _fail(f"error: {exc.message} [{label}]")
        return EXIT_ERROR
    except ConnectionFailed as exc:
        hint = ""
        if exc.status == 401:
            hint = " (set --token or TRIO_PTY_TOKEN)"
        elif exc.status == 403:
            hint = " (the server refuses this Origin or Host)"
        _fail(f"{exc}{hint}")
        return EXIT_CONNECTION
    except ConnectionLost as exc:
        _fail(f"connection lost: {exc}")
        return EXIT_CONNECTION


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


# --------------------------------------------------------------------------------------------
# Commands


class _UsageError(Exception):
    pass


def _spawn_argv(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise _UsageError("spawn needs a command: trio-pty spawn [OPTIONS] -- CMD ARGS...")
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise _UsageError(f"--env expects NAME=VALUE, got {item!r}")
        env[name] = value
    return argv, env


async def _spawn(client: TrioPtyClient, args: argparse.Namespace) -> int:
    argv, env = _spawn_argv(args)
    params = SpawnParams(
        command=argv[0],
        args=argv[1:],
        owner=args.owner,
        description=args.description or shlex.join(argv),
        title=args.title,
        workdir=args.workdir,
        notify_on_exit=args.notify,
        timeout=args.timeout,
        env=env or None,
    )
    info = await client.request(params)
    if args.json:
        _print_json(unstructure_result(info))
    else:
        print(info.id)
    return EXIT_OK


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


def format_table(sessions: Sequence[SessionInfo]) -> str:
    header = ("ID", "STATUS", "PID", "EXIT", "LINES", "AGE", "COMMAND", "DESCRIPTION")
    rows = [header]
    for info in sessions:
        rows.append(
            (
                info.id,
                info.status + (" (timeout)" if info.timed_out else ""),
                str(info.pid),
                _exit_text(info),
                str(info.line_count),
                _age(info.created_at),
                _clip(shlex.join([info.command, *info.args]), 40),
                _clip(info.title or info.description, 40),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


async def _list(client: TrioPtyClient, args: argparse.Namespace) -> int:
    sessions = (await client.request(ListParams(owner=args.owner))).sessions
    if args.json:
        _print_json([unstructure_result(info) for info in sessions])
    elif sessions:
        print(format_table(sessions))
    else:
        print(f"no sessions for owner {args.owner!r}", file=sys.stderr)
    return EXIT_OK


async def _read(client: TrioPtyClient, args: argparse.Namespace) -> int:
    if args.follow:
        return await _follow(client, args)
    page = await client.request(_read_params(args, offset=args.offset))
    if args.json:
        _print_json(unstructure_result(page))
        return EXIT_OK
    _report_missed(page)
    for line in page.lines:
        print(line.text)
    if page.has_more:
        print(f"(more: --offset {page.next_offset})", file=sys.stderr)
    return EXIT_OK


def _read_params(args: argparse.Namespace, *, offset: int, wait: Wait | None = None) -> ReadParams:
    return ReadParams(
        id=args.id,
        owner=args.owner,
        offset=offset,
        limit=args.limit,
        pattern=args.pattern,
        ignore_case=args.ignore_case,
        wait=wait,
    )


def _report_missed(page: ReadPage) -> None:
    if page.missed_lines:
        print(f"({page.missed_lines} lines dropped from the buffer)", file=sys.stderr)


async def _follow(client: TrioPtyClient, args: argparse.Namespace) -> int:
    """Print lines as they complete, until the session has ended and all was printed."""
    offset = args.offset
    wait = Wait(idle_ms=_FOLLOW_IDLE_MS, exit=True, timeout_ms=_FOLLOW_TIMEOUT_MS)
    while True:
        page = await client.request(_read_params(args, offset=offset, wait=wait))
        _report_missed(page)
        finished = page.reason == "exited" and not page.has_more
        for line in page.lines:
            # An unfinished last line is printed once it is complete (or at the end).
            if finished or line.number < page.next_offset:
                print(line.text, flush=True)
        if finished:
            return EXIT_OK
        offset = page.next_offset


async def _write(client: TrioPtyClient, args: argparse.Namespace) -> int:
    params = WriteParams(id=args.id, data=args.text, owner=args.owner, escapes=args.escapes)
    result = await client.request(params)
    if args.json:
        _print_json(unstructure_result(result))
    return EXIT_OK


async def _kill(client: TrioPtyClient, args: argparse.Namespace) -> int:
    info = await client.request(KillParams(id=args.id, owner=args.owner, cleanup=args.cleanup))
    if args.json:
        _print_json(unstructure_result(info))
    else:
        print(f"{info.id} {info.status} (exit {_exit_text(info)})")
    return EXIT_OK


async def _info(client: TrioPtyClient, args: argparse.Namespace) -> int:
    _print_json(unstructure_result(await client.request(ServerInfoParams())))
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# attach


_SURROGATE_BYTE: Final = re.compile("[\udc80-\udcff]")


def keystrokes_to_text(data: bytes) -> str:
    """Encode raw keystroke bytes for `pty.write` with escapes=True, byte for byte:
    valid UTF-8 is sent as text, a backslash as `\\\\`, any other byte as `\\xNN`."""
    text = data.decode("utf-8", "surrogateescape").replace("\\", "\\\\")
    return _SURROGATE_BYTE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)


class _AsyncFd:
    """Async reads/writes on a duplicate of a standard descriptor: a non-blocking FdStream
    for terminals, pipes and sockets, a worker thread for files (epoll refuses them)."""

    def __init__(self, fd: int) -> None:
        mode = os.fstat(fd).st_mode
        self._fd = os.dup(fd)
        self._stream: trio.lowlevel.FdStream | None = None
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            try:
                self._stream = trio.lowlevel.FdStream(self._fd)
            except OSError:
                self._stream = None

    async def receive_some(self, size: int) -> bytes:
        if self._stream is not None:
            return await self._stream.receive_some(size)
        return await trio.to_thread.run_sync(os.read, self._fd, size, abandon_on_cancel=True)

    async def send_all(self, data: bytes) -> None:
        if self._stream is not None:
            await self._stream.send_all(data)
            return
        view = memoryview(data)
        while view:
            written = await trio.to_thread.run_sync(os.write, self._fd, view)
            view = view[written:]

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
        else:
            os.close(self._fd)


@contextlib.contextmanager
def terminal_mode(raw: bool) -> Iterator[None]:
    """Put stdin's terminal in raw mode (when `raw`), and on every way out restore its
    attributes and the blocking mode of stdin and stdout (FdStream makes them
    non-blocking, and the shell shares those open file descriptions)."""
    flags: dict[int, int] = {}
    for fd in (0, 1):
        with contextlib.suppress(OSError):
            flags[fd] = fcntl.fcntl(fd, fcntl.F_GETFL)
    saved = None
    if raw:
        saved = termios.tcgetattr(0)
        tty.setraw(0, termios.TCSANOW)
    try:
        yield
    finally:
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(0, termios.TCSADRAIN, saved)
        for fd, value in flags.items():
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETFL, value)


def _window_size() -> tuple[int, int] | None:
    for fd in (1, 0):
        try:
            size = os.get_terminal_size(fd)
        except OSError:
            continue
        return size.lines, size.columns
    return None


async def _attach(client: TrioPtyClient, args: argparse.Namespace) -> int:
    interactive = os.isatty(0)
    if interactive:
        print(f"[attached to {args.id}; detach with {DETACH_KEY_NAME}]\r", file=sys.stderr)
    with terminal_mode(raw=interactive):
        outcome = await _attach_session(client, args.id, args.owner)
    if outcome.startswith("exited"):
        print(f"[{args.id} {outcome}]", file=sys.stderr)
    else:
        print(f"[detached from {args.id}]", file=sys.stderr)
    return EXIT_OK


async def _attach_session(client: TrioPtyClient, session_id: str, owner: str) -> str:
    """Pump keystrokes in and output out until detach, exit or a terminating signal.
    Returns what ended it."""
    outcome = "detached"
    stdin, stdout = _AsyncFd(0), _AsyncFd(1)
    try:
        async with (
            client.attach(AttachParams(id=session_id, owner=owner, driver=True)) as attachment,
            trio.open_nursery() as nursery,
        ):

            async def pump_output() -> None:
                nonlocal outcome
                async for chunk in attachment:
                    await stdout.send_all(chunk.data)
                event = attachment.exit_event
                if event is not None:
                    if event.exit_signal is not None:
                        outcome = f"exited on signal {event.exit_signal}"
                    else:
                        outcome = f"exited with code {event.exit_code}"
                nursery.cancel_scope.cancel()

            async def pump_input() -> None:
                while True:
                    data = await stdin.receive_some(_INPUT_CHUNK)
                    if not data:
                        return  # end of piped input: keep showing output until exit
                    cut = data.find(DETACH_KEY)
                    if cut >= 0:
                        data = data[:cut]
                    if data:
                        await _type(client, session_id, owner, data)
                    if cut >= 0:
                        nursery.cancel_scope.cancel()
                        return

            async def follow_window() -> None:
                with trio.open_signal_receiver(signal.SIGWINCH) as winches:
                    await _resize(client, session_id, owner)
                    async for _ in winches:
                        await _resize(client, session_id, owner)

            async def stop_on_signal() -> None:
                nonlocal outcome
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
                    async for signum in signals:
                        outcome = f"detached ({signal.Signals(signum).name})"
                        nursery.cancel_scope.cancel()

            nursery.start_soon(pump_output)
            nursery.start_soon(pump_input)
            nursery.start_soon(follow_window)
            nursery.start_soon(stop_on_signal)
    finally:
        await stdin.aclose()
        await stdout.aclose()
    return outcome


async def _type(client: TrioPtyClient, session_id: str, owner: str, data: bytes) -> None:
    try:
        text = keystrokes_to_text(data)
        await client.request(WriteParams(id=session_id, data=text, owner=owner, escapes=True))
    except RpcError as exc:
        if exc.kind != "not_running":  # it ended: the exit notification follows
            raise


async def _resize(client: TrioPtyClient, session_id: str, owner: str) -> None:
    size = _window_size()
    if size is None:
        return
    try:
        await client.request(ResizeParams(id=session_id, owner=owner, rows=size[0], cols=size[1]))
    except RpcError as exc:
        if exc.kind not in ("not_running", "invalid_input"):
            raise


_COMMANDS: Final[dict[str, Command]] = {
    "spawn": _spawn,
    "list": _list,
    "read": _read,
    "write": _write,
    "kill": _kill,
    "attach": _attach,
    "info": _info,
}
