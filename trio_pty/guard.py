"""The manager's side of the crash guard (see `posix/keeper.py` for the other side).

It keeps one keeper process running for the manager, tells it which sessions start and end,
keeps the state records when there is a state directory, and ends the keeper once every
session is gone after a normal close. It costs a spawn one stat read and one pipe write (and, with a
state directory, one small file).
"""

from __future__ import annotations

import logging
import os
import subprocess
from functools import partial

import trio

from . import logs
from .limits import Limits
from .posix import keeper

log = logging.getLogger("trio_pty")

_KEEPER_MIN_LIFE = 1.0
"""A keeper that *exits* sooner than this after its start is not started again: it could
not start (a broken interpreter), and another would fail the same way."""

_RESTART_PAUSE_MAX = 0.5
"""A keeper *killed* by a signal is always replaced (a session of our uid can kill it, and
a guard that gave up after two quick kills let its processes survive the manager's
SIGKILL); kills in quick succession are answered after a pause doubling from 10 ms to
this, so that the unguarded gap stays bounded without a hot loop of spawns."""


class Guard:
    def __init__(self, manager_id: str, limits: Limits, state_dir: str | None) -> None:
        self._manager_id = manager_id
        self._limits = limits
        self._state_dir = state_dir
        self._state = keeper.StateDir(state_dir, manager_id) if state_dir is not None else None
        self._live: dict[str, keeper.Leader] = {}
        self._link: keeper.Link | None = None
        self._process: trio.Process | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a keeper running until cancelled (the manager is closing): one that dies
        (someone killed it) is replaced, and told about every live session."""
        quick_kills = 0
        while True:
            started_at = trio.current_time()
            try:
                process = await self._start_keeper()
            except OSError as exc:
                log.error(
                    "cannot start the keeper (%s): sessions will not be torn down if this "
                    "process dies without closing the manager",
                    exc,
                )
                task_status.started()
                return
            task_status.started()
            task_status = trio.TASK_STATUS_IGNORED
            code = await process.wait()
            quick = trio.current_time() - started_at < _KEEPER_MIN_LIFE
            if quick and code >= 0:
                log.error(
                    "the keeper (pid %d) exited at once with %d: sessions will not be torn "
                    "down if this process dies without closing the manager",
                    process.pid,
                    code,
                )
                return
            log.error("the keeper (pid %d) exited with %d; starting another", process.pid, code)
            quick_kills = quick_kills + 1 if quick else 0
            if quick_kills > 1:
                await trio.sleep(min(_RESTART_PAUSE_MAX, 0.01 * 2 ** (quick_kills - 2)))

    async def _start_keeper(self) -> trio.Process:
        if self._link is not None:
            self._link.close()
        command = keeper.command(
            self._manager_id,
            grace=self._limits.terminate_grace,
            close_timeout=self._limits.close_timeout,
            state_dir=self._state_dir,
            log_json=logs.writes_json(log),
        )
        read_end, write_end = os.pipe()
        try:
            self._process = await trio.lowlevel.open_process(
                command,
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                env=keeper.environment(self._manager_id),
                start_new_session=True,  # out of reach of signals to our group or terminal
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._link = keeper.Link(write_end)
        for leader in self._live.values():  # a replacement learns what its predecessor knew
            self._link.started(leader)
        return self._process

    def started(self, session_id: str, owner: str, pid: int) -> None:
        """A session's leader runs (and is not reaped yet)."""
        leader = keeper.leader_of(session_id, owner, pid)
        if leader is None:
            return  # cannot happen while it is unreaped; nothing to record then
        self._live[session_id] = leader
        if self._link is not None:
            self._link.started(leader)
        if self._state is not None:
            try:
                self._state.record(leader)
            except OSError as exc:
                log.error("state directory: cannot record session %s: %s", session_id, exc)

    def ended(self, session_id: str) -> None:
        """A session's teardown is over: nothing of it is left."""
        if self._live.pop(session_id, None) is None:
            return
        if self._link is not None:
            self._link.ended(session_id)
        if self._state is not None:
            self._state.forget(session_id)

    async def close(self) -> None:
        """After a normal close (every session gone): end the keeper, our child, before it
        ever acts (it may still be starting: a SIGKILL does not wait for that), then close
        the pipe (an EOF first would have looked like our death)."""
        with trio.CancelScope(shield=True):
            process = self._process
            if process is not None:
                if process.returncode is None:
                    process.kill()
                await process.wait()
            if self._link is not None:
                self._link.close()
            if self._state is not None:
                self._state.close()


async def reap_predecessors(state_dir: str, limits: Limits) -> None:
    """End what managers that died without closing left running (see
    `keeper.reap_predecessors`), logging one line when there was anything."""
    found = await trio.to_thread.run_sync(
        partial(
            keeper.reap_predecessors,
            state_dir,
            grace=limits.terminate_grace,
            close_timeout=limits.close_timeout,
        )
    )
    if found.managers:
        outcome = found.outcome
        log.warning(
            "state directory %s: %d dead managers left %d sessions; %d processes ended, "
            "%d still alive%s",
            state_dir,
            found.managers,
            found.sessions,
            outcome.processes,
            len(outcome.survivors),
            f" {outcome.survivors}" if outcome.survivors else "",
        )
