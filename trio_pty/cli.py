"""`trio-pty`: run the server, or talk to one.

    trio-pty serve [--host 127.0.0.1] [--port 8765 | --listen-fd N] [--token-file FILE]
                   [--config FILE] [--allow-origin ORIGIN ...] [--allow-host HOST ...]
                   [--node-id NAME] [--log-level LEVEL] [--log-format text|json]
                   [--no-ui | --ui-assets DIR] [--state-dir DIR | --no-state-dir]
                   [--audit-log FILE]
    trio-pty spawn | shell | list | read | write | send | run | commands | screen | wait
             | resize | read-raw | signal | kill | delete-owner | attach | info
             | drain   (the client)
    trio-pty mcp [--connect URL] ...   (an MCP server on stdio: docs/mcp.md)
    trio-pty completion bash|zsh       (a completion script)

The client verbs are in `trio_pty.console` (docs/protocol.md, "The command-line client").
They read `--url` (or TRIO_PTY_URL, default ws://127.0.0.1:8765/rpc), `--token` (or
TRIO_PTY_TOKEN) and `--owner` (or TRIO_PTY_OWNER, default "default").

Exit status: 0 success; 1 the server refused the request (the message and its kind go to
stderr); 2 usage or configuration error; 3 cannot connect, refused at the handshake
(wrong token, origin, host) or connection lost; 4 a wait ended otherwise than asked;
`run`: the command's exit status (124 when it still runs); 130 interrupted.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import trio

from trio_pty.console import (
    CLIENT_VERBS,
    EXIT_CONNECTION,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    add_client_verbs,
    client_options,
    prepare,
    run_client,
)
from trio_pty.console.common import UsageError
from trio_pty.console.completion import SHELLS, completion_script
from trio_pty.errors import unwrap_group

if TYPE_CHECKING:  # the server side is imported by `serve` alone
    from trio_pty.rpc.config import ServeFlags
    from trio_pty.server.http import Site
    from trio_pty.server.serve import ServeSettings

__all__ = ["EXIT_CONNECTION", "EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "main"]

log = logging.getLogger("trio_pty.cli")

_VERBS: Final = frozenset({"serve", "mcp", "completion", *CLIENT_VERBS})


def _prog() -> str:
    return "trio-pty"


def _fail(message: str) -> None:
    print(f"{_prog()}: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Arguments


def build_parser() -> argparse.ArgumentParser:
    return build_parsers()[0]


def invoked_verb(argv: Sequence[str]) -> str | None:
    """The verb `argv` invokes, when it is a known one and no help comes before it: only
    its parser is then built. None: build them all (help, or a word that is no verb)."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help"):
            return None
        if word in ("--url", "--token"):
            next(words, None)
        elif not word.startswith("-"):
            return word if word in _VERBS else None
    return None


def build_parsers(
    only: str | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser (with `only`, that verb's alone), and each verb's (what completion is
    generated from)."""
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="Run commands under real pseudo-terminals, behind a JSON-RPC server.",
        epilog="Exit status: 0 ok, 1 server error, 2 usage, 3 connection/auth, 4 a wait "
        "ended otherwise than asked, 130 interrupted; run: the command's (124: still runs).",
    )
    client_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    if only in (None, "serve"):
        _add_serve(commands)
    add_client_verbs(commands, only)
    commands.add_parser("mcp", help="an MCP server on stdio (see trio-pty mcp --help)")
    if only in (None, "completion"):
        completion = commands.add_parser(
            "completion",
            help='print a completion script: eval "$(trio-pty completion bash)" (or zsh)',
        )
        completion.add_argument("shell", choices=SHELLS)
    verbs: dict[str, argparse.ArgumentParser] = dict(commands.choices or {})
    return parser, verbs


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="run the JSON-RPC server")
    serve.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8765; 0: any free)")
    serve.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help="read the access token from FILE, which must belong to this user with mode "
        "0600 or stricter (a final newline is ignored); else env TRIO_PTY_TOKEN; else one "
        "is generated and printed",
    )
    serve.add_argument(
        "--token",
        default=argparse.SUPPRESS,
        help="access token on the command line, where every local user can read it: prefer "
        "--token-file or TRIO_PTY_TOKEN",
    )
    serve.add_argument("--config", default=None, metavar="FILE", help="TOML config file")
    serve.add_argument(
        "--listen-fd",
        type=int,
        default=None,
        metavar="N",
        help="serve on file descriptor N, a listening TCP socket held by the init system "
        "(systemd socket activation: 3), instead of binding --host/--port",
    )
    serve.add_argument(
        "--node-id",
        default=None,
        metavar="NAME",
        help="this host's name in session ids, pty_NAME_<hex> (a DNS label), so that a "
        "client can route a request to the host holding the session",
    )
    serve.add_argument(
        "--audit-log",
        default=None,
        metavar="FILE",
        help="append an audit log to FILE, one JSON object a line: who spawned what, each "
        "shell command with its exit code, writes (their size), signals, kills (0600 if new)",
    )
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
    serve.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="log lines on stderr as text (default) or one JSON object each (docs/deploy.md)",
    )


# --------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["mcp"]:  # its own options (and its own optional dependency)
        from trio_pty.mcp import main as mcp_main

        return mcp_main(argv[1:])
    invoked = invoked_verb(argv)
    # completion lists every verb; any other verb needs only its own parser.
    parser, verbs = build_parsers(None if invoked == "completion" else invoked)
    # Known args only: the text of `write`, `send` and `run` may hold words that look like
    # options (`write ID -1\n`); prepare() gives them back to it, or refuses them.
    args, extra = parser.parse_known_args(argv)
    try:
        if args.command in ("serve", "completion") and extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "serve":
            return _serve(args)
        if args.command == "completion":
            print(completion_script(args.shell, verbs), end="", flush=True)
            return EXIT_OK
        try:
            prepare(args, extra)
        except UsageError as exc:
            _fail(f"error: {exc}")
            return EXIT_USAGE
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
        return trio.run(run_client, args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `trio-pty read ID | head`: the reader went away; end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    """Compose the settings (the config file, the command line over it), then serve."""
    # Before anything reads a token: the sessions are our children, and must not read our
    # /proc/PID/environ (the environment we started with: the token, every secret the
    # environment filter keeps from them), mem or fd.
    refusal = _harden()
    if refusal is not None:
        _fail(f"error: {refusal}")
        return EXIT_ERROR
    from trio_pty.rpc import config, tokens

    _configure_logging(args.log_level, args.log_format)
    try:
        settings = _settings(args)
    except (config.ConfigError, tokens.TokenError, UsageError) as exc:
        _fail(f"error: {exc}")
        return EXIT_USAGE
    # Everything loaded so far lives as long as the process: out of the collector's sight,
    # every full collection walks ~30k fewer objects (10-20 ms less pause on 2 cores).
    gc.freeze()
    if _dumpable():
        _fail("error: this process became dumpable again; refusing to serve")
        return EXIT_ERROR
    return _run(settings)


def _settings(args: argparse.Namespace) -> ServeSettings:
    """The config file, the command line over it, the token and the page, composed."""
    from trio_pty.posix import activation
    from trio_pty.rpc import config
    from trio_pty.server import serve

    # Sessions never inherit what the init system told us (LISTEN_PID, LISTEN_FDS, ...).
    activation_env = dict(os.environ)
    activation.forget_activation(os.environ)
    file = config.load_config(args.config) if args.config else config.ServeConfig()
    token, generated = _server_token(args)
    return serve.compose(
        file,
        _flags(args),
        token=token,
        token_generated=generated,
        page=_page(args),
        environ=activation_env,
        log_json=args.log_format == "json",
    )


def _flags(args: argparse.Namespace) -> ServeFlags:
    from trio_pty.rpc.config import ServeFlags

    return ServeFlags(
        host=args.host,
        port=args.port,
        allow_origins=tuple(args.allow_origin),
        allow_hosts=tuple(args.allow_host),
        listen_fd=args.listen_fd,
        node_id=args.node_id,
        token_file=args.token_file,
        audit_log=args.audit_log,
        state_dir=None if args.no_state_dir else (args.state_dir or _default_state_dir()),
    )


def _page(args: argparse.Namespace) -> Site | None:
    """The monitor page (None with --no-ui); UsageError when its assets are not usable."""
    if args.no_ui:
        return None
    from trio_pty import ui

    try:
        loaded = ui.load_page(args.ui_assets)
    except ui.AssetsError as exc:
        raise UsageError(str(exc)) from None
    log.info("%s", loaded.describe())
    return loaded.site


def _run(settings: ServeSettings) -> int:
    from trio_pty.server import serve

    # `serve` handles these through a trio signal receiver, which puts back what it found
    # when `serve` is done, and the interpreter's exit puts back the defaults of signals
    # it handles. One more signal from a supervisor that repeats itself while the process
    # exits then turned a clean exit into 130 or a signal death. So the receiver finds a
    # handler that does nothing (a handler, unlike SIG_IGN, is not inherited by the
    # sessions' commands), and once trio is done, when nothing is started any more, they
    # are ignored.
    served = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    for signum in served:
        signal.signal(signum, _after_serve)
    try:
        with unwrap_group():
            return trio.run(serve.serve, settings)
    except OSError as exc:
        where = f"{settings.server.host}:{settings.server.port}"
        _fail(f"error: cannot listen on {where}: {exc.strerror or exc}")
        return EXIT_ERROR
    finally:
        for signum in served:
            signal.signal(signum, signal.SIG_IGN)


def _after_serve(signum: int, frame: object) -> None:
    """A signal that arrives once `serve` is done changes nothing: the teardown has run."""


def _configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from trio_pty.logs import JsonFormatter

        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def _default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):  # unset, or not absolute: ignored, as the XDG spec says
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "trio-pty")


def _harden() -> str | None:
    """Make this process non-dumpable (docs/security.md); why not, if it cannot be."""
    from trio_pty.posix import hardening

    try:
        hardening.harden_process()
    except OSError as exc:
        return f"cannot keep this process's /proc from its sessions: {exc}"
    return None


def _dumpable() -> bool:
    """The re-check before serving: a change of uid or capabilities resets the flag."""
    from trio_pty.posix import hardening

    return hardening.is_dumpable()


def _server_token(args: argparse.Namespace) -> tuple[str, bool]:
    """The server's own token (it may use every owner), and whether it was generated:
    `--token-file`, else `--token` (warned about: argv is readable by every local user),
    else `TRIO_PTY_TOKEN`, else a new one. `TRIO_PTY_TOKEN` leaves the environment in any
    case, so nothing started later inherits it."""
    from trio_pty.rpc import tokens

    from_env = tokens.take_env_token("TRIO_PTY_TOKEN")
    given = getattr(args, "token", None)
    if args.token_file is not None:
        if given:
            raise UsageError("--token-file and --token are two tokens: give one")
        return tokens.read_token_file(args.token_file), False
    if given:
        log.warning(
            "--token puts the token in this process's command line, which every local user "
            "can read (ps, /proc/PID/cmdline): use --token-file or TRIO_PTY_TOKEN"
        )
        return tokens.check_token(given, "--token"), False
    if from_env is not None:
        return from_env, False
    return tokens.generate_token(), True
