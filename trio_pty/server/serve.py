"""`trio-pty serve`: a manager and its server, from start-up to a bounded shutdown.

`serve(settings, shutdown_trigger=...)` runs until the trigger asks for shutdown. The trigger
is any task that arms itself, reports started, and then calls `request_shutdown(reason)`
each time a shutdown is wanted: the first time begins the shutdown, any later time stops
waiting for clients' closing handshakes (the teardown of the sessions always completes).
`request_shutdown(reason, drain=True)` asks for a drain instead (`Manager.drain`: no new
sessions, the running ones until they end or `drain_timeout`), after which the same
shutdown runs by itself; so does a drain begun by `server.drain`. `signals` (the default)
does that for SIGINT and SIGTERM, and drains on SIGUSR1; tests and embedding programs pass
their own.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import MutableMapping
from functools import partial
from typing import Protocol, TextIO

import attrs
import trio

from trio_pty.audit import Audit
from trio_pty.errors import InvalidInput
from trio_pty.limits import Limits
from trio_pty.logs import event
from trio_pty.manager import Manager, open_manager
from trio_pty.model import ExitEvent
from trio_pty.policy import validate
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.posix import activation, keeper
from trio_pty.posix.sandbox import Sandbox
from trio_pty.rpc.config import ConfigError, ServeConfig, ServeFlags, with_flags
from trio_pty.rpc.handshake import format_page_url, format_url
from trio_pty.rpc.tokens import ScopedToken, TokenError
from trio_pty.server.http import Site
from trio_pty.server.server import DEFAULT_HOST, DEFAULT_PORT, RpcServer, ServerOptions
from trio_pty.server.websocket import CLOSE_GOING_AWAY

__all__ = [
    "PAGE_LINE_PREFIX",
    "RequestShutdown",
    "ServeSettings",
    "ShutdownTrigger",
    "compose",
    "serve",
    "signals",
]

log = logging.getLogger("trio_pty.server")

# `trio-pty serve` prints the monitor page's URL on stderr after this prefix.
PAGE_LINE_PREFIX = "monitor page: "


@attrs.frozen(kw_only=True)
class ServeSettings:
    """Everything `serve` runs: how the endpoint is exposed (its environment policy is also
    the manager's) and the manager behind it."""

    server: ServerOptions
    limits: Limits = attrs.Factory(Limits)
    root: str | None = None
    authorizer: RulesAuthorizer | None = None
    env_allow: tuple[str, ...] | None = None  # see open_manager
    sandbox: Sandbox | None = None  # the operator's; no client can turn it off
    token_generated: bool = False  # then the URLs printed carry it
    state_dir: str | None = None  # sessions recorded for reaping after a crash (docs/guarantees.md)
    node_id: str | None = None  # session ids pty_<node_id>_<hex> (docs/deploy.md)
    log_json: bool = False  # stderr carries JSON log lines only: log the page's URL too
    audit_log: str | None = None  # the audit log's file (docs/security.md)


def compose(
    config: ServeConfig,
    flags: ServeFlags,
    *,
    token: str,
    token_generated: bool = False,
    page: Site | None = None,
    environ: MutableMapping[str, str],
    log_json: bool = False,
) -> ServeSettings:
    """Everything `serve` runs, from the config file with the command line over it
    (`with_flags`: a flag replaces the file's setting), the server's own token and the
    monitor page. `environ` is the environment the process started with (socket
    activation's variables). Reads the `[[tokens]]`' tokens, checks the sandbox can work
    here and prepares the state directory; ConfigError says what is wrong."""
    config = with_flags(config, flags)
    scoped = _scoped_tokens(config)
    hidden = (flags.token_file, *(entry.source.file for entry in config.tokens))
    files = tuple(path for path in hidden if path is not None)
    sandbox = config.sandbox.build(hidden=files) if config.sandbox is not None else None
    node_id = _node_id(flags.node_id)
    listen_socket = _listen_socket(config, flags.listen_fd, environ)
    host, port = config.host or DEFAULT_HOST, config.port
    if listen_socket is not None:
        host, port = listen_socket.getsockname()[:2]
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {port}")
    try:
        options = ServerOptions(
            token=token,
            scoped_tokens=scoped,
            host=host,
            port=port if port is not None else DEFAULT_PORT,
            listen_socket=listen_socket,
            allowed_origins=frozenset(config.allow_origins),
            allowed_hosts=frozenset(config.allow_hosts),
            env_mode=config.env_mode,
            env_deny=config.env_deny,
            page=page,
        )
    except ValueError as exc:  # two tokens alike
        raise ConfigError(str(exc)) from None
    _prepare_state_dir(flags.state_dir)
    _check_audit_log(config.audit_log)
    return ServeSettings(
        server=options,
        limits=config.limits,
        root=config.root,
        authorizer=config.authorizer,
        env_allow=config.env_allow,
        sandbox=sandbox,
        token_generated=token_generated,
        state_dir=flags.state_dir,
        node_id=node_id,
        log_json=log_json,
        audit_log=config.audit_log,
    )


def _scoped_tokens(config: ServeConfig) -> tuple[ScopedToken, ...]:
    try:
        return tuple(ScopedToken(entry.source.read(), entry.scope) for entry in config.tokens)
    except TokenError as exc:
        raise ConfigError(str(exc)) from None


def _node_id(given: str | None) -> str | None:
    try:
        return validate.node_id(given) if given is not None else None
    except InvalidInput as exc:
        raise ConfigError(f"--node-id {exc.message.removeprefix('node_id: ')}") from None


def _listen_socket(
    config: ServeConfig, listen_fd: int | None, environ: MutableMapping[str, str]
) -> socket.socket | None:
    if listen_fd is None:
        return None
    if config.host or config.port is not None:
        raise ConfigError("--listen-fd serves on that socket: give no --host/--port (nor config)")
    try:
        return activation.listening_socket(listen_fd, environ)
    except ValueError as exc:
        raise ConfigError(f"--listen-fd: {exc}") from None


def _prepare_state_dir(state_dir: str | None) -> None:
    if state_dir is None:
        return
    try:
        keeper.prepare(state_dir)
    except OSError as exc:
        raise ConfigError(f"state directory {state_dir}: {exc.strerror or exc}") from None


def _check_audit_log(path: str | None) -> None:
    """Refuse now an audit log that cannot be opened (created 0600 if missing)."""
    if path is None:
        return
    try:
        Audit(path).open_once()
    except OSError as exc:
        raise ConfigError(f"audit log {path}: {exc.strerror or exc}") from None


class RequestShutdown(Protocol):
    def __call__(self, reason: str, *, drain: bool = False) -> None: ...


class ShutdownTrigger(Protocol):
    async def __call__(
        self,
        request_shutdown: RequestShutdown,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None: ...


async def signals(
    request_shutdown: RequestShutdown,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Shut down on SIGINT or SIGTERM, drain on SIGUSR1 (armed before `serve` prints its
    URL)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGUSR1) as received:
        task_status.started()
        async for signum in received:
            name = signal.Signals(signum).name
            request_shutdown(name, drain=signum == signal.SIGUSR1)


class _Shutdown:
    """What the trigger calls: the first request begins the shutdown, later ones abort; a
    drain request is remembered until the manager is there to drain."""

    def __init__(self) -> None:
        self.requested = trio.Event()
        self.reason = ""
        self.server: RpcServer | None = None
        self.drain_requested = trio.Event()

    def __call__(self, reason: str, *, drain: bool = False) -> None:
        if drain:
            self.drain_requested.set()  # a second drain request changes nothing
            return
        if not self.requested.is_set():
            self.reason = reason
            self.requested.set()
            return
        log.warning("%s again: no longer waiting for clients; the teardown still completes", reason)
        if self.server is not None:
            self.server.abort()


async def _log_exit(exit: ExitEvent) -> None:
    """Sessions spawned with notify_on_exit are also announced in the server's log (without
    their last line: no log line holds what a session printed)."""
    how = f"signal {exit.exit_signal}" if exit.exit_signal is not None else f"code {exit.exit_code}"
    after = {"timeout": " after its timeout", "idle_timeout": " after its idle timeout"}
    log.info(
        "session %s (owner %s, %r) ended with %s%s",
        exit.id,
        exit.owner,
        exit.description,
        how,
        after.get(exit.reason or "", ""),
    )


async def _drain_when_asked(shutdown: _Shutdown, manager: Manager) -> None:
    await shutdown.drain_requested.wait()
    await manager.drain()


async def _shut_down_when_drained(shutdown: _Shutdown, manager: Manager) -> None:
    """However the drain began (a signal, `server.drain`), its end begins the shutdown."""
    await manager.wait_drained()
    shutdown("drained")


async def serve(
    settings: ServeSettings,
    *,
    shutdown_trigger: ShutdownTrigger = signals,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the server until the trigger asks for shutdown, then shut down; the exit status.

    On shutdown: stop accepting, cancel every request and close every connection with 1001
    (in the background), tear every session down (the manager bounds that by close_timeout)
    and print one summary line.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    options = settings.server
    shutdown = _Shutdown()
    async with trio.open_nursery() as root_nursery:
        await root_nursery.start(shutdown_trigger, shutdown)
        async with open_manager(
            settings.limits,
            on_exit=_log_exit,
            env_mode=options.env_mode,
            env_deny=options.env_deny,
            root=settings.root,
            authorizer=settings.authorizer,
            state_dir=settings.state_dir,
            env_allow=settings.env_allow,
            sandbox=settings.sandbox,
            node_id=settings.node_id,
            audit=Audit(settings.audit_log) if settings.audit_log is not None else None,
        ) as manager:
            server: RpcServer = await root_nursery.start(partial(RpcServer(manager, options).run))
            shutdown.server = server
            print(server.url, file=out, flush=True)
            if settings.token_generated:
                print(
                    format_url(options.host, server.port, options.path, options.token),
                    file=out,
                    flush=True,
                )
            if options.page is not None:
                # The monitor page, on stderr: stdout's lines are a contract (the URLs, then
                # only the shutdown summary). The token rides along only when it was
                # generated (a token the user chose is typed into the page instead).
                page_token = options.token if settings.token_generated else None
                if settings.log_json:  # a log line, and no log line holds the token
                    page_url = format_page_url(options.host, server.port)
                    log.info("%s%s", PAGE_LINE_PREFIX, page_url, extra=event("page", url=page_url))
                else:
                    page_url = format_page_url(options.host, server.port, page_token)
                    print(f"{PAGE_LINE_PREFIX}{page_url}", file=err, flush=True)
            async with trio.open_nursery() as draining:
                draining.start_soon(_drain_when_asked, shutdown, manager)
                draining.start_soon(_shut_down_when_drained, shutdown, manager)
                await shutdown.requested.wait()
                draining.cancel_scope.cancel()
            began = trio.current_time()
            live = [s for s in manager.list_all() if s.status in ("running", "killing")]
            log.info("%s: shutting down (%d live sessions)", shutdown.reason, len(live))
            server.stop(CLOSE_GOING_AWAY)
            # Leaving this block tears every session down (bounded by close_timeout), while
            # the connections finish their closing handshakes.
        torn_down = trio.current_time() - began
        await server.finished.wait()
        root_nursery.cancel_scope.cancel()
    elapsed = trio.current_time() - began
    log.info(
        "shutdown: %d sessions reaped in %.2f s, server stopped after %.2f s",
        len(live),
        torn_down,
        elapsed,
        extra=event(
            "shutdown",
            sessions=len(live),
            teardown_s=round(torn_down, 6),
            stopped_s=round(elapsed, 6),
        ),
    )
    print(
        f"shutdown: {len(live)} session{'' if len(live) == 1 else 's'} reaped "
        f"in {torn_down:.2f} s "
        f"(server stopped after {elapsed:.2f} s)",
        file=out,
        flush=True,
    )
    return 0
