"""One command run the way a script runs: `Manager.exec`.

`bash -lc COMMAND` (or zsh) under a PTY of its own: a non-interactive login shell, so the
profile is read and no rc file, prompt or prompt hook is; the session's exit code is the
command's own (bash runs a lone command in its place, and otherwise exits with the status
of the last one). Pagers are told not to page (`PAGER_DEFAULTS`) unless the caller's `env`
says otherwise: a `git log` then prints and ends instead of holding the terminal.

The call returns once the command has ended and its teardown is complete, so the result can
say how many other processes (its background jobs) were ended with it; or after the yield
time, the session still running: the result then has its id to follow it with, and says
whether a pager or a full-screen program is waiting for a key. A caller that gives up
(cancellation) interrupts the command as Ctrl-C would.

Functions over the manager and the session it starts: this module drives a Session, so it
sits beside the manager, above session.py. It is the manager's own code kept out of
manager.py (the facade), so it uses the manager's `_spawn` (to give the environment
defaults of ours, which command rules do not judge as a client's) and `_session`.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import trio

from .errors import InvalidInput
from .model import ExecResult, Screen, Showing
from .output import pages
from .policy import validate
from .posix import proc
from .shell import launch
from .spawning import SpawnOptions
from .tenants import EVERYONE, Tenant

if TYPE_CHECKING:
    from .manager import Manager

__all__ = ["PAGERS", "PAGER_DEFAULTS", "execute", "showing"]

#: What a one-shot command's environment says about pagers unless the caller's env does:
#: nothing pages; where a pager still runs (`less FILE`), it quits when the text fits one
#: screen, keeps colours and leaves no alternate screen behind.
PAGER_DEFAULTS: Final[Mapping[str, str]] = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "LESS": "FRX",
}
_DESCRIPTION_CHARS: Final = 200
#: Programs that page: one of them among the command's processes holds the terminal until
#: it gets a key.
PAGERS: Final = frozenset({"less", "more", "most", "pg"})


def showing(screen: Screen, *, pager_running: bool) -> Showing | None:
    """What waits for a key: a full-screen program (the alternate screen is showing), a
    pager (one runs, and draws on the main screen: `LESS=FRX`), or nothing."""
    if screen.alternate:
        return "full_screen"
    return "pager" if pager_running else None


async def execute(
    manager: Manager,
    command: str,
    *,
    owner: str = "default",
    description: str | None = None,
    shell: str | None = None,
    workdir: str | None = None,
    env: Mapping[str, str] | None = None,
    rows: int = 24,
    cols: int = 80,
    timeout: float | None = None,
    yield_ms: int | None = None,
    tenant: Tenant = EVERYONE,
) -> ExecResult:
    """`Manager.exec`: run one command line the way a script runs (`bash -lc COMMAND`, or
    `shell`), under a PTY of its own; return once it and what it left behind have ended, or
    after `yield_ms` (default `limits.default_wait_ms`) with it still running."""
    limits = manager.limits
    if not isinstance(command, str) or not command.strip():
        raise InvalidInput("command", "must be a non-empty command line")
    wait_ms = (
        limits.default_wait_ms
        if yield_ms is None
        else validate.wait_ms("yield_ms", yield_ms, limits)
    )
    _, program = launch.resolve("bash" if shell is None else shell, {})
    if description is None:
        words = " ".join(command.split())
        description = words[:_DESCRIPTION_CHARS] or "exec"
    began = trio.current_time()
    options = SpawnOptions(
        owner=owner,
        command=program,
        args=["-lc", command],
        description=description,
        workdir=workdir,
        timeout=timeout,
        env=env,
        rows=rows,
        cols=cols,
        defaults_env=PAGER_DEFAULTS,
    )
    # The session is registered (listed) before the spawn returns: a call cancelled in
    # between would leave the command running, uninterrupted. The spawn is bounded
    # (spawn_timeout), so it finishes shielded and the cancellation lands below.
    with trio.CancelScope(shield=True):
        info = await manager._spawn(options, None, tenant=tenant)
    session = manager._session(info.id, owner)
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
        with trio.move_on_after(wait_ms / 1000):
            await session.wait_complete()
        if session.output_complete:
            # Its teardown ends what it left behind; bounded by close_timeout.
            await session.wait_finished()
    except trio.Cancelled:
        if not session.output_complete:
            session.signal_foreground(signal.SIGINT)  # as Ctrl-C would
        raise
    running = not session.output_complete
    output = session.output
    where = pages.span(
        output,
        0,
        None if running else output.end_offset,
        max_line_length=limits.max_line_length,
        max_escape_length=limits.max_escape_length,
    )
    lines, missed = pages.head_and_tail(output, where, limits.default_read_limit)
    retained = where.last + 1 - max(where.first, output.first_line)
    seen = None
    if running:
        snapshot = await manager.screen(session.id, owner=owner)
        pager_running = not PAGERS.isdisjoint(proc.names_below(session.pid))
        seen = showing(snapshot, pager_running=pager_running)
    return ExecResult(
        id=session.id,
        command=command,
        status=session.status,
        exit_code=session.exit_code,
        exit_signal=session.exit_signal,
        lines=lines,
        has_more=len(lines) < retained,
        missed_lines=missed,
        others_ended=None if running else session.others_ended,
        showing=seen,
        duration_ms=round((trio.current_time() - began) * 1000),
    )
