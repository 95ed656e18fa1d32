"""`trio-pty serve`: a manager and its server, from start-up to a bounded shutdown.

`serve(settings, shutdown_trigger=...)` runs until the trigger asks for shutdown. The trigger
is any task that arms itself, reports started, and then calls `request_shutdown(reason)`
each time a shutdown is wanted: the first time begins the shutdown, any later time stops
waiting for clients' closing handshakes (the teardown of the sessions always completes).
`signals` (the default) does that for SIGINT and SIGTERM; tests and embedding programs pass
their own.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from functools import partial
from typing import Protocol, TextIO

import attrs
import trio

from trio_pty.limits import Limits
from trio_pty.manager import open_manager
from trio_pty.model import ExitEvent
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.rpc.handshake import format_page_url, format_url
from trio_pty.rpc.server import RpcServer, ServerOptions
from trio_pty.rpc.websocket import CLOSE_GOING_AWAY

__all__ = ["PAGE_LINE_PREFIX", "ServeSettings", "ShutdownTrigger", "serve", "signals"]

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
    token_generated: bool = False  # then the URLs printed carry it
    state_dir: str | None = None  # sessions recorded for reaping after a crash (docs/guarantees.md)


class ShutdownTrigger(Protocol):
    async def __call__(
        self,
        request_shutdown: Callable[[str], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None: ...


async def signals(
    request_shutdown: Callable[[str], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Shut down on SIGINT or SIGTERM (armed before `serve` prints its URL)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        task_status.started()
        async for signum in received:
            request_shutdown(signal.Signals(signum).name)


class _Shutdown:
    """What the trigger calls: the first request begins the shutdown, later ones abort."""

    def __init__(self) -> None:
        self.requested = trio.Event()
        self.reason = ""
        self.server: RpcServer | None = None

    def __call__(self, reason: str) -> None:
        if not self.requested.is_set():
            self.reason = reason
            self.requested.set()
            return
        log.warning("%s again: no longer waiting for clients; the teardown still completes", reason)
        if self.server is not None:
            self.server.abort()


async def _log_exit(event: ExitEvent) -> None:
    """Sessions spawned with notify_on_exit are also announced in the server's log."""
    how = (
        f"signal {event.exit_signal}"
        if event.exit_signal is not None
        else f"code {event.exit_code}"
    )
    log.info(
        "session %s (owner %s, %r) ended with %s%s; last line: %r",
        event.id,
        event.owner,
        event.description,
        how,
        " after its timeout" if event.timed_out else "",
        event.last_line,
    )


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
                page_url = format_page_url(options.host, server.port, page_token)
                print(f"{PAGE_LINE_PREFIX}{page_url}", file=err, flush=True)
            await shutdown.requested.wait()
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
    print(
        f"shutdown: {len(live)} session{'' if len(live) == 1 else 's'} reaped "
        f"in {torn_down:.2f} s "
        f"(server stopped after {elapsed:.2f} s)",
        file=out,
        flush=True,
    )
    return 0
