"""The root nursery: registry, owners, reservations, eviction, reaping and shutdown.

Every session's task tree runs in the manager's root nursery, so cancelling that nursery is
the cleanup: each session's `finally` tears it down, shielded and bounded by close_timeout,
all of them at the same time.
"""

from __future__ import annotations

import builtins
import collections
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Literal

import attrs
import trio

from . import errors
from .guard import Guard, reap_predecessors
from .limits import Limits
from .model import ExitEvent, OutputChunk, ReadPage, SessionInfo, Wait, WriteResult
from .output.search import CompiledPattern, compile_pattern
from .policy import validate
from .policy.authorize import (
    AllowAll,
    Authorizer,
    authorize_spawn,
    authorize_write,
    open_workdir,
)
from .policy.environment import filtered_base, finish_environment
from .posix import proc, reap, spawn
from .session import Attachment, ExitCallback, Session

log = logging.getLogger("trio_pty")

EnvMode = Literal["inherit", "fixed"]

_subreaper_users = 0
_subreaper_was_on = False


def _acquire_subreaper() -> None:
    global _subreaper_users, _subreaper_was_on
    if _subreaper_users == 0:
        _subreaper_was_on = proc.set_child_subreaper(True)
    _subreaper_users += 1


def _release_subreaper() -> None:
    global _subreaper_users
    _subreaper_users -= 1
    if _subreaper_users == 0 and not _subreaper_was_on:
        proc.set_child_subreaper(False)


class Manager:
    """Owns every session. Get one from `open_manager`."""

    def __init__(
        self,
        nursery: trio.Nursery,
        limits: Limits,
        *,
        on_exit: ExitCallback | None,
        env_mode: EnvMode,
        env_deny: Sequence[str],
        environ: Mapping[str, str],
        root: str,
        authorizer: Authorizer,
        state_dir: str | None = None,
    ) -> None:
        self.limits = limits
        self.id = secrets.token_hex(8)
        self._guard = Guard(self.id, limits, state_dir)
        self.root = os.path.realpath(root)
        self._nursery = nursery
        self._on_exit = on_exit
        # The environment is filtered once: every spawn starts from the same base.
        self._base_env = filtered_base(environ, mode=env_mode, extra_deny=env_deny)
        self._authorizer = authorizer
        self._table = reap.ProcessTable(clock=trio.current_time)
        self._sessions: dict[str, Session] = {}
        self._pending: collections.Counter[str] = collections.Counter()
        self._spawn_settled = trio.lowlevel.ParkingLot()
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._running: set[Session] = set()
        self._closing = False

    # ------------------------------------------------------------------ queries

    @property
    def closing(self) -> bool:
        return self._closing

    def list(self, owner: str = "default") -> list[SessionInfo]:
        """This owner's sessions, oldest first."""
        validate.owner(owner, self.limits)
        return [s.info() for s in self._sessions.values() if s.owner == owner]

    def list_all(self) -> builtins.list[SessionInfo]:
        """Every owner's sessions (for trusted embedding code and operator views)."""
        return [s.info() for s in self._sessions.values()]

    def get(self, session_id: str, *, owner: str = "default") -> SessionInfo:
        return self._session(session_id, owner).info()

    def owner_deleted(self, owner: str) -> bool:
        return owner in self._deleted

    def _session(self, session_id: str, owner: str) -> Session:
        """Look a session up for an owner; another owner's session does not exist."""
        validate.owner(owner, self.limits)
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or session.owner != owner:
            raise errors.SessionNotFound(str(session_id))
        return session

    # ------------------------------------------------------------------ spawning

    async def spawn(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        owner: str = "default",
        description: str,
        workdir: str | None = None,
        title: str | None = None,
        notify_on_exit: bool = False,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        rows: int = 24,
        cols: int = 80,
        ready: Wait | None = None,
    ) -> SessionInfo:
        """Start `command` under a new PTY and return once it runs, or, with `ready`, once
        it is ready (pattern seen, quiet after some output, exited, or the wait timed out);
        `SessionInfo.ready` then holds the output so far and the reason."""
        limits = self.limits
        validate.owner(owner, limits)
        validate.command(command, limits)
        args = list(validate.args(args, limits))
        validate.description(description, limits)
        if workdir is not None:
            validate.workdir(workdir, limits)
        validate.title(title, limits)
        timeout = validate.timeout(timeout, limits)
        env = validate.env(env, limits)
        validate.window(rows, cols, limits)
        ready_pattern = self._check_wait(ready)

        reservation = await self._reserve_or_wait(owner)
        try:
            with open_workdir(workdir, root=self.root) as handle:
                await authorize_spawn(
                    self._authorizer, command=command, args=args, workdir=handle, owner=owner
                )
                self._check_accepting(owner)
                session = self._new_session(
                    owner=owner,
                    command=command,
                    args=args,
                    workdir=handle.path,
                    title=title,
                    description=description,
                    notify_on_exit=notify_on_exit,
                    timeout=timeout,
                    rows=rows,
                    cols=cols,
                )
                child_env = finish_environment(
                    self._base_env,
                    overrides=env,
                    tags={proc.TAG_MANAGER: self.id, proc.TAG_SESSION: session.id},
                    workdir=handle.path,
                )
                spawn.resolve_command(
                    command, path=child_env.get("PATH", os.defpath), cwd=handle.path
                )

                def register() -> None:
                    # Runs in the session task right before it reports started: no await
                    # separates taking the registry slot from giving the reservation back.
                    self._check_accepting(owner)
                    self._sessions[session.id] = session
                    reservation.release()
                    self._guard.started(session.id, owner, session.pid)

                try:
                    with trio.fail_after(limits.spawn_timeout):
                        await self._nursery.start(
                            self._run_session,
                            session,
                            child_env,
                            handle.fd,
                            register,
                            name="trio_pty.session",
                        )
                except trio.TooSlowError:
                    raise errors.SpawnFailed(
                        f"{command} did not start within spawn_timeout "
                        f"({limits.spawn_timeout:g} s)",
                        command=command,
                    ) from None
        except OSError as exc:  # out of descriptors (workdir handle, openpty) or memory
            raise spawn.spawn_failed(command, exc) from None
        finally:
            reservation.release()
        if ready is None:
            return session.info()
        reason = await session.wait(
            ready,
            pattern=ready_pattern,
            start_line=0,
            has_output=lambda: session.output.end_offset > 0,
        )
        page = session.output.read(0, limits.default_read_limit)
        return attrs.evolve(session.info(), ready=attrs.evolve(page, reason=reason))

    def _check_wait(self, wait: Wait | None) -> CompiledPattern | None:
        """Validate a Wait up front (before anything is started or written)."""
        if wait is None:
            return None
        if not isinstance(wait, Wait):
            raise errors.InvalidInput("wait", "must be a Wait")
        if wait.pattern is None and wait.idle_ms is None and not wait.exit:
            raise errors.InvalidInput("wait", "give a pattern, idle_ms or exit=True")
        if wait.idle_ms is not None:
            validate.wait_ms("wait.idle_ms", wait.idle_ms, self.limits)
        if wait.timeout_ms is not None:
            validate.wait_ms("wait.timeout_ms", wait.timeout_ms, self.limits)
        if wait.pattern is None:
            return None
        return compile_pattern(
            wait.pattern, ignore_case=wait.ignore_case, max_length=self.limits.max_pattern_length
        )

    def _new_session(self, **fields: object) -> Session:
        while True:
            session_id = "pty_" + secrets.token_hex(4)
            if session_id not in self._sessions:
                break
        return Session(
            session_id=session_id,
            limits=self.limits,
            manager_id=self.id,
            table=self._table,
            **fields,  # type: ignore[arg-type]
        )

    def _check_accepting(self, owner: str) -> None:
        if self._closing:
            raise errors.ManagerClosing()
        if owner in self._deleted:
            raise errors.OwnerDeleted(owner)

    async def _reserve_or_wait(self, owner: str) -> _Reservation:
        """Reserve a slot; when the quota is full only because ended sessions are still
        being torn down (their leftovers in the grace period), wait for the oldest of them
        (bounded by close_timeout) and try once more, rather than refusing a caller who just
        saw it exit. The reservation itself is still taken with no await before it."""
        try:
            return self._reserve(owner)
        except errors.LimitExceeded:
            dying = [s for s in self._sessions.values() if s.ended and not s.finished]
            own = [s for s in dying if s.owner == owner]
            if not (own or dying):
                raise
            oldest = min(own or dying, key=lambda s: s.created_at)
            with trio.move_on_after(self.limits.close_timeout):
                await oldest.wait_finished()
        return self._reserve(owner)

    def _reserve(self, owner: str) -> _Reservation:
        """Take a slot for a spawn before its first await, evicting an ended session of the
        owner (then of anyone) when a quota is full. Live sessions are never evicted."""
        self._check_accepting(owner)
        limits = self.limits
        owned = [s for s in self._sessions.values() if s.owner == owner]
        owner_full = len(owned) + self._pending[owner] >= limits.max_sessions_per_owner
        if owner_full and not self._evict_oldest_ended(owned):
            self._refuse(
                owner,
                f"owner {owner!r} already has {limits.max_sessions_per_owner} sessions "
                "(max_sessions_per_owner), none of them ended and torn down",
            )
        manager_full = len(self._sessions) + self._pending.total() >= limits.max_sessions
        if manager_full and not (
            self._evict_oldest_ended(owned)
            or self._evict_oldest_ended(builtins.list(self._sessions.values()))
        ):
            self._refuse(
                owner,
                f"the manager already runs {limits.max_sessions} sessions "
                "(max_sessions), none of them ended and torn down",
            )
        self._pending[owner] += 1
        return _Reservation(self, owner)

    def _refuse(self, owner: str, why: str) -> None:
        live = [s.id for s in self._sessions.values() if s.owner == owner and not s.ended]
        raise errors.LimitExceeded(
            f"Session limit reached: {why}. Live sessions of this owner: "
            f"{', '.join(live) or 'none'}; kill one or reuse it.",
            live_ids=live,
        )

    def _evict_oldest_ended(self, candidates: builtins.list[Session]) -> bool:
        """Evict the oldest session that has ended *and* is torn down: one still dying
        (killing, or exited with leftovers in their grace) holds processes and counts."""
        ended = [s for s in candidates if s.finished and s.id in self._sessions]
        if not ended:
            return False
        victim = min(ended, key=lambda s: s.created_at)
        log.info("evicting ended session %s of owner %s", victim.id, victim.owner)
        self._remove(victim)
        return True

    def _release(self, owner: str) -> None:
        self._pending[owner] -= 1
        if self._pending[owner] <= 0:
            del self._pending[owner]
        self._spawn_settled.unpark_all()

    def _remove(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        session.removed()

    async def _notify(self, event: ExitEvent) -> None:
        if self._on_exit is None or self._closing or event.owner in self._deleted:
            return
        await self._on_exit(event)

    # ------------------------------------------------------------------ I/O

    async def write(
        self,
        session_id: str,
        data: str,
        *,
        owner: str = "default",
        escapes: bool = False,
        wait: Wait | None = None,
    ) -> WriteResult:
        """Type `data` into the session's terminal (UTF-8; with `escapes`, `\\x03` is
        Ctrl-C and `\\e[A` an arrow key). Writes to one session go in arrival order; a
        program that does not read makes the write fail with WriteTimeout after io_timeout.
        With `wait`, return the output the write produced once the wait is over."""
        session = self._session(session_id, owner)
        raw = validate.write_text(data, self.limits, escapes=escapes)
        pattern = self._check_wait(wait)
        await authorize_write(
            self._authorizer, command=session.command, data=raw, owner=owner, session_id=session.id
        )
        session = self._session(session_id, owner)  # approval may have taken a while
        prefix_line = session.output.line_of_offset(session.output.end_offset)
        prefix = self._line_text(session, prefix_line)
        start, written = await session.write(raw)
        result = WriteResult(id=session.id, bytes_written=written, offset=start)
        if wait is None:
            return result
        first = session.output.line_of_offset(start)
        reason = await session.wait(
            wait,
            pattern=pattern,
            start_line=first,
            has_output=lambda: session.output.end_offset > start,
            first_line_prefix=prefix if first == prefix_line else None,
        )
        page = session.output.read(first, self.limits.default_read_limit)
        return attrs.evolve(result, output=attrs.evolve(page, reason=reason))

    @staticmethod
    def _line_text(session: Session, line: int) -> str:
        lines = session.output.read(line, 1).lines
        return lines[0].text if lines and lines[0].number == line else ""

    async def read(
        self,
        session_id: str,
        *,
        owner: str = "default",
        offset: int = 0,
        limit: int | None = None,
        pattern: str | None = None,
        ignore_case: bool = False,
        wait: Wait | None = None,
    ) -> ReadPage:
        """A page of clean numbered lines from absolute line `offset` (with `pattern`, of
        the lines matching that RE2 expression). With `wait`, first block until the wait is
        over (`ReadPage.reason` says why)."""
        session = self._session(session_id, owner)
        offset, limit = validate.read_window(offset, limit, self.limits)
        compiled = None
        if pattern is not None:
            compiled = compile_pattern(
                pattern, ignore_case=ignore_case, max_length=self.limits.max_pattern_length
            )
        wait_pattern = self._check_wait(wait)
        reason = None
        if wait is not None:
            reason = await session.wait(
                wait,
                pattern=wait_pattern,
                start_line=offset,
                has_output=lambda: session.output.total_lines > offset,
            )
        if compiled is None:
            page = session.output.read(offset, limit)
        else:
            page = await session.search(offset, limit, compiled)
        return page if reason is None else attrs.evolve(page, reason=reason)

    async def read_raw(
        self,
        session_id: str,
        *,
        owner: str = "default",
        offset: int = 0,
        limit: int | None = None,
    ) -> OutputChunk:
        """Raw bytes from absolute byte `offset` (at most `limit`), for exact replay. An
        offset that left the buffer, or lies in the future, gives the oldest retained bytes
        with `gap` set."""
        session = self._session(session_id, owner)
        offset = validate.byte_offset(offset)
        most = self.limits.max_raw_read_bytes
        limit = most if limit is None else validate.int_between("limit", limit, 1, most)
        data, next_offset, gap = session.output.bytes_since(offset, limit)
        return OutputChunk(offset=next_offset - len(data), data=data, gap=gap)

    async def resize(
        self, session_id: str, *, owner: str = "default", rows: int, cols: int
    ) -> SessionInfo:
        """Set the window size; the foreground process gets SIGWINCH. Last resize wins."""
        session = self._session(session_id, owner)
        rows, cols = validate.window(rows, cols, self.limits)
        session.resize(rows, cols)
        return session.info()

    @asynccontextmanager
    async def attach(
        self,
        session_id: str,
        *,
        owner: str = "default",
        offset: int | None = None,
        driver: bool = False,
    ) -> AsyncIterator[Attachment]:
        """Stream raw output: `async for chunk in attachment` gives OutputChunks, first the
        retained snapshot (or exactly the bytes after `offset`), then live output, until the
        session is removed or has ended and everything was delivered."""
        session = self._session(session_id, owner)
        if offset is not None:
            offset = validate.byte_offset(offset)
        attachment = session.attach(offset, driver=driver)
        try:
            yield attachment
        finally:
            attachment.close()

    async def wait_exit(self, session_id: str, *, owner: str = "default") -> ExitEvent:
        """Block until the session has ended (its output complete), then describe the end.
        Unbounded by design (a session may run for hours): cancel it to stop watching."""
        session = self._session(session_id, owner)
        await session.wait_complete()
        return session.exit_event()

    # ------------------------------------------------------------------ ending sessions

    async def kill(
        self, session_id: str, *, owner: str = "default", cleanup: bool = False
    ) -> SessionInfo:
        """Kill the session and wait until nothing of it remains; keep its output unless
        `cleanup`."""
        session = self._session(session_id, owner)
        await session.kill()
        if cleanup:
            self._remove(session)
        return session.info()

    async def delete_owner(self, owner: str) -> int:
        """Forget an owner: refuse its future spawns, then reap and remove all its sessions.
        Returns how many sessions were removed."""
        validate.owner(owner, self.limits)
        self._deleted[owner] = None
        self._deleted.move_to_end(owner)
        while len(self._deleted) > self.limits.deleted_owners_remembered:
            self._deleted.popitem(last=False)
        with trio.move_on_after(self.limits.spawn_timeout):
            while self._pending[owner]:
                await self._spawn_settled.park()
        sessions = [s for s in self._sessions.values() if s.owner == owner]
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(session.kill)
        for session in sessions:
            self._remove(session)
        return len(sessions)

    async def _run_session(
        self,
        session: Session,
        env: dict[str, str],
        cwd_fd: int,
        register: Callable[[], None],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The session's runner, as a task of the root nursery."""
        self._running.add(session)
        try:
            running = session.run(
                env=env,
                cwd_fd=cwd_fd,
                on_started=register,
                on_exit=self._notify,
                task_status=task_status,
            )
            # This frame lives as long as the session: hold only what it needs.
            del env, register
            await running
        finally:
            self._running.discard(session)
            self._guard.ended(session.id)

    async def _reap_orphans(self) -> None:
        """Collect adopted zombies now and then, so a session that keeps orphaning short
        lived children cannot fill the pid table before it is torn down."""
        while True:
            await trio.sleep(self.limits.orphan_reap_interval)
            try:
                self._table.reap_orphans(self._table.snapshot())
            except OSError as exc:  # out of descriptors for now: try again next time
                log.warning("orphan reaping skipped: %s", exc)

    async def _sweep(self) -> None:
        """At shutdown: end every process carrying this manager's tag that was reparented to
        PID 1 or to us (escaped descendants; with the subreaper off they are found only here),
        concurrently with the sessions' own teardowns."""
        with trio.CancelScope(shield=True):

            def escaped(snapshot: proc.Snapshot) -> dict[int, proc.ProcEntry]:
                # Leaders belong to trio (it reaps them); their sessions end them.
                leaders = {s.pid for s in self._running}
                tagged = snapshot.with_tags_of(self.id, orphans_only=True)
                return {e.pid: e for e in tagged if e.pid not in leaders}

            now = trio.current_time()
            report = await reap.Teardown(
                escaped,
                self._table,
                kill_at=now + self.limits.terminate_grace,
                deadline=now + self.limits.close_timeout,
            ).run()
            if report.survivors:
                log.error("processes survived manager shutdown: %s", report.survivors)


class _Reservation:
    """A spawn's claim on a quota slot; released exactly once."""

    def __init__(self, manager: Manager, owner: str) -> None:
        self._manager = manager
        self._owner = owner
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._manager._release(self._owner)


@asynccontextmanager
async def open_manager(
    limits: Limits | None = None,
    *,
    on_exit: ExitCallback | None = None,
    env_mode: EnvMode = "inherit",
    env_deny: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    root: str | None = None,
    authorizer: Authorizer | None = None,
    subreaper: bool = True,
    state_dir: str | os.PathLike[str] | None = None,
) -> AsyncIterator[Manager]:
    """Run a manager for the duration of the block. Leaving or cancelling the block tears
    every session down concurrently, bounded by `limits.close_timeout`.

    A keeper process (posix/keeper.py) tears the sessions down if this process dies
    without leaving the block. With `state_dir`, live sessions are also recorded there, and
    whatever managers that died on the same directory left running (their keepers killed
    too) is torn down before the block starts.

    `subreaper=False` leaves orphan reaping to PID 1, for applications that reap children
    themselves; processes that escape a session are then found only at shutdown.
    """
    limits = limits or Limits()
    state = os.fspath(state_dir) if state_dir is not None else None
    if state is not None:
        await reap_predecessors(state, limits)
    if subreaper:
        _acquire_subreaper()
    manager: Manager | None = None
    try:
        async with trio.open_nursery() as nursery:
            manager = Manager(
                nursery,
                limits,
                on_exit=on_exit,
                env_mode=env_mode,
                env_deny=env_deny,
                environ=os.environ if environ is None else environ,
                root=root if root is not None else os.getcwd(),
                authorizer=authorizer or AllowAll(),
                state_dir=state,
            )
            await nursery.start(manager._guard.run)
            if subreaper:
                nursery.start_soon(manager._reap_orphans)
            try:
                yield manager
            finally:
                manager._closing = True
                now = trio.current_time()
                for session in manager._running:
                    session.shut_down(now)  # every grace counts from this one moment
                nursery.start_soon(manager._sweep)
                nursery.cancel_scope.cancel()
    finally:
        if manager is not None:
            manager._table.release_pins()
            await manager._guard.close()  # every session is gone: the keeper may go
        if subreaper:
            _release_subreaper()
