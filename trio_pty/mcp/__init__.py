"""`trio-pty mcp`: an MCP server over stdio, so that any coding agent can use trio-pty as
its terminal (docs/mcp.md).

    trio-pty mcp [--root DIR] [--config FILE] [--terminate-grace SECONDS]
    trio-pty mcp --connect URL [--owner OWNER]        (token in TRIO_PTY_TOKEN)
    trio-pty mcp --http [--host H] [--port P] [--token-file FILE] [--config FILE] ...

It needs the official MCP SDK, the extra `trio-pty[mcp]`; the modules of this package import
it, this one does not, so that `trio-pty mcp` without it can say how to install it.

- `tools`: the tools (arguments, results, descriptions, what each does);
- `render`: their text and the error texts (pure);
- `backend`: where the tools' requests go: a client in process or over the wire, one owner;
- `stdio`: the stdio transport on trio;
- `http`: the streamable-HTTP transport (`--http`), under hypercorn's trio worker;
- `server`: the SDK's server with the tools, signals, the bounded stop.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .server import InProcess

__all__ = ["DEFAULT_TERMINATE_GRACE", "main"]

#: MCP clients close stdin, wait about 2 s, then SIGTERM, then SIGKILL 2 s later: the
#: teardown (SIGTERM, this grace, SIGKILL, reaping) must fit in the first 2 s.
DEFAULT_TERMINATE_GRACE: Final = 1.0
#: After the grace: SIGKILL and reaping get this long before survivors are given up on.
KILL_MARGIN: Final = 1.5

EXIT_USAGE: Final = 2
EXIT_CONNECTION: Final = 3
INSTALL_HINT: Final = (
    "trio-pty mcp needs the MCP SDK, which is an optional extra: pip install 'trio-pty[mcp]'"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-pty mcp",
        description="An MCP server on stdin/stdout: terminals for coding agents. "
        "See docs/mcp.md for the tools and client configuration.",
    )
    parser.add_argument(
        "--connect",
        metavar="URL",
        default=None,
        help="use a running `trio-pty serve` (ws://HOST:PORT/rpc; token in TRIO_PTY_TOKEN) "
        "instead of running the terminals in this process",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="serve MCP over streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(token: --token-file, else TRIO_PTY_TOKEN, else one is generated and printed; "
        "the config file's [[tokens]] too)",
    )
    parser.add_argument(
        "--host", default=None, help="with --http: the address to listen on (127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=None, help="with --http: the port (default 8766; 0: any)"
    )
    parser.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help="with --http: the server's token, in a file of mode 0600 or stricter",
    )
    parser.add_argument(
        "--owner",
        default=None,
        help="with --connect: the owner of the sessions (default: one of its own per run)",
    )
    parser.add_argument(
        "--root",
        default=None,
        help="in-process: the default workdir and what is inside (default: the current directory)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="in-process: a `trio-pty serve` config file (limits, root, environment, rules)",
    )
    parser.add_argument(
        "--terminate-grace",
        type=float,
        default=DEFAULT_TERMINATE_GRACE,
        metavar="SECONDS",
        help="in-process: SIGTERM to SIGKILL when a session is torn down (default "
        f"{DEFAULT_TERMINATE_GRACE:g}, to fit the MCP client's shutdown budget)",
    )
    parser.add_argument(
        "--channel",
        action="store_true",
        help="say when a session left running ends, as a Claude Code channel message "
        "(notifications/claude/channel; see docs/mcp.md)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="log level on stderr (default warning)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`trio-pty mcp ARGS`: serve until the client leaves; the exit status."""
    args = _parser().parse_args(argv)
    try:
        import mcp.server.lowlevel  # noqa: F401  (the SDK, with all it imports)
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr, flush=True)
        return EXIT_USAGE
    import trio

    import trio_pty
    from trio_pty.errors import unwrap_group

    from . import server

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Our children cannot read our environment or memory from now on; and the token is
    # held by the client only (the environment filter keeps it from children anyway).
    trio_pty.harden_process()
    token = os.environ.pop("TRIO_PTY_TOKEN", None)
    if args.http and args.owner is not None:
        print(
            "trio-pty mcp: with --http the owner comes from the token (or ?owner= in the URL)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_USAGE
    if args.connect is not None and args.http:
        print(
            "trio-pty mcp: --http serves terminals of this process: not with --connect",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_USAGE
    if args.connect is not None:
        return _connected(args, token)
    settings = _in_process(args)
    if settings is None:
        return EXIT_USAGE
    if args.http:
        return _over_http(args, settings, token)
    # What is loaded now lives as long as the process: out of the collector's way.
    gc.freeze()
    with unwrap_group():
        return trio.run(
            partial(
                server.run,
                partial(server.local_backend, settings),
                max_line_bytes=settings.limits.max_message_bytes,
                channel=args.channel,
            )
        )


def _connected(args: argparse.Namespace, token: str | None) -> int:
    """`--connect URL`: serve with the terminals of a running `trio-pty serve`."""
    import trio

    from trio_pty.client.client import ConnectionFailed
    from trio_pty.errors import unwrap_group
    from trio_pty.limits import Limits

    from . import server
    from .backend import remote_backend

    if args.config is not None or args.root is not None:
        print("trio-pty mcp: --config and --root are the server's with --connect", file=sys.stderr)
        return EXIT_USAGE
    opener = partial(remote_backend, args.connect, token, owner=args.owner)
    gc.freeze()
    try:
        with unwrap_group():
            return trio.run(
                partial(
                    server.run,
                    opener,
                    max_line_bytes=Limits().max_message_bytes,
                    channel=args.channel,
                )
            )
    except ConnectionFailed as exc:
        hint = " (is TRIO_PTY_TOKEN the server's token?)" if exc.status == 401 else ""
        print(f"trio-pty mcp: {exc}{hint}", file=sys.stderr, flush=True)
        return EXIT_CONNECTION


def _over_http(args: argparse.Namespace, settings: InProcess, token: str | None) -> int:
    """`--http`: serve MCP over streamable HTTP, with the tokens `serve` would take."""
    import secrets

    try:
        import hypercorn.trio  # noqa: F401  (the extra's HTTP server, with its trio worker)
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr, flush=True)
        return EXIT_USAGE

    import attrs
    import trio

    from trio_pty.errors import unwrap_group
    from trio_pty.rpc.config import ConfigError, ServeConfig, load_config
    from trio_pty.rpc.scope import FULL_ACCESS, TokenScope
    from trio_pty.rpc.tokens import TokenError, check_token, read_token_file

    from . import http

    try:
        file = load_config(args.config) if args.config else ServeConfig()
        if args.token_file is not None:
            token = read_token_file(args.token_file)
        elif token is not None:
            token = check_token(token, "TRIO_PTY_TOKEN")
        generated = token is None
        server_token = token or secrets.token_urlsafe(32)
        tokens: dict[str, TokenScope] = {server_token: FULL_ACCESS}
        for entry in file.tokens:
            value = entry.source.read()
            if value in tokens:
                raise TokenError(f"[[tokens]] {entry.scope.name!r}: the same token twice")
            tokens[value] = entry.scope
    except (ConfigError, TokenError) as exc:
        print(f"trio-pty mcp: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    port = args.port if args.port is not None else file.port
    # Over HTTP each token's owner has the config's own quota (stdio has one owner).
    limits = attrs.evolve(
        settings.limits, max_sessions_per_owner=file.limits.max_sessions_per_owner
    )
    options = http.HttpOptions(
        host=args.host or file.host or "127.0.0.1",
        port=port if port is not None else http.DEFAULT_PORT,
        tokens=tokens,
        allow_hosts=file.allow_hosts,
        allow_origins=file.allow_origins,
        show_token=server_token if generated else None,
    )
    gc.freeze()
    with unwrap_group():
        return trio.run(http.run, attrs.evolve(settings, limits=limits), options)


def _in_process(args: argparse.Namespace) -> InProcess | None:
    """The in-process manager's settings: the config file's, with the MCP mode's grace."""
    import attrs

    from trio_pty.rpc.config import ConfigError, ServeConfig, load_config

    from .server import InProcess

    try:
        file = load_config(args.config) if args.config else ServeConfig()
    except ConfigError as exc:
        print(f"trio-pty mcp: {exc}", file=sys.stderr, flush=True)
        return None
    if not args.terminate_grace >= 0:
        print("trio-pty mcp: --terminate-grace must be 0 or more", file=sys.stderr, flush=True)
        return None
    root = args.root or file.root
    if root is not None and not os.path.isdir(root):
        print(f"trio-pty mcp: the root is not a directory: {root}", file=sys.stderr, flush=True)
        return None
    limits = attrs.evolve(
        file.limits,
        terminate_grace=args.terminate_grace,
        close_timeout=args.terminate_grace + KILL_MARGIN,
        # One client per process: its quota is the manager's.
        max_sessions_per_owner=file.limits.max_sessions,
    )
    return InProcess(
        limits=limits,
        root=root,
        env_mode=file.env_mode,
        env_deny=file.env_deny,
        authorizer=file.authorizer,
    )
