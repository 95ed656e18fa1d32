"""The root nursery: registry, owners, reservations, eviction, reaping and shutdown.

Every session's task tree runs in the manager's root nursery, so cancelling that nursery is
the cleanup: each session's `finally` tears it down, shielded and bounded by close_timeout,
all of them at the same time.
"""

from __future__ import annotations

import builtins
import collections
import gc
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from signal import SIGINT
from typing import Any, Literal, NoReturn, TypeVar, overload

import attrs
import trio

from . import errors
from .guard import Guard, reap_predecessors
from .limits import Limits
from .logs import event
from .metrics import ManagerStats
from .model import (
    CommandInfo,
    CommandResult,
    CompactPage,
    DrainStatus,
    ExitEvent,
    Line,
    OutputChunk,
    ReadPage,
    RunReason,
    Screen,
    SessionInfo,
    SignalResult,
    Wait,
    WriteResult,
)
from .output.cursors import Cursor, ReadCursors
from .output.echo import echo_lines
from .output.screen import ScreenCache
from .output.search import CompiledPattern, compile_pattern
from .policy import validate
from .policy.authorize import (
    AllowAll,
    Authorizer,
    authorize_spawn,
    authorize_write,
    open_workdir,
)
from .policy.environment import EnvAllowList, EnvMode, filtered_base, finish_environment
from .posix import libc, proc, reap, spawn
from .posix.sandbox import Sandbox
from .session import Attachment, ExitCallback, Session
from .shell import launch, pages
from .shell.history import CommandRecord, ShellTracker
from .shell.keys import command_text, keystrokes

log = logging.getLogger("trio_pty")

T = TypeVar("T")

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


_collector_pauses = 0
_collector_was_on = False


def _pause_collector() -> None:
    """Garbage collection off while a manager tears down (as with the subreaper, counted
    across managers, and left as the embedding program had it): with a thousand sessions a
    full collection walks every session's objects and takes hundreds of ms, which would land
    in the teardown's bound (docs/benchmarks.md). Teardown allocates little; what cycles it
    leaves are collected once collection is back on."""
    global _collector_pauses, _collector_was_on
    if _collector_pauses == 0:
        _collector_was_on = gc.isenabled()
        gc.disable()
    _collector_pauses += 1


def _resume_collector() -> None:
    global _collector_pauses
    _collector_pauses -= 1
    if _collector_pauses == 0 and _collector_was_on:
        gc.enable()


class _NoPublicConstructor(type):
    """A class that only its factory may instantiate (trio's Nursery does the same): calling
    the class raises, the factory calls `_create`."""

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"{cls.__qualname__} has no public constructor: use open_manager()")

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        instance: T = super().__call__(*args, **kwargs)  # type: ignore[misc]
        return instance


class Manager(metaclass=_NoPublicConstructor):
    """Owns every session. The only way to get one is `open_manager`."""

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
        env_allow: EnvAllowList | None,
        sandbox: Sandbox | None,
        state_dir: str | None = None,
        node_id: str | None = None,
    ) -> None:
        self.limits = limits
        self.id = secrets.token_hex(8)
        self.node_id = node_id
        self.stats = ManagerStats()
        self._guard = Guard(self.id, limits, state_dir)
        self.root = os.path.realpath(root)
        self._nursery = nursery
        self._on_exit = on_exit
        # The environment is filtered once: every spawn starts from the same base.
        self._base_env = filtered_base(environ, mode=env_mode, extra_deny=env_deny)
        self._authorizer = authorizer
        # Under command rules the client's env is checked against the operator's allow-list
        # and the command is resolved with our PATH: a rule judges a command line, and the
        # environment decides what that command line runs. None: no rules, no checks.
        self._env_allow = env_allow
        self._sandbox = sandbox
        self._table = reap.ProcessTable(clock=trio.current_time)
        self._sessions: dict[str, Session] = {}
        self._pending: collections.Counter[str] = collections.Counter()
        self._spawn_settled = trio.lowlevel.ParkingLot()
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._running: set[Session] = set()
        self._none_running = trio.Event()  # set once no session runs during the shutdown
        self._closing = False
        self._shutting_down_at: float | None = None
        self._cancel_seen_at: float | None = None  # see _notice_cancellation
        self._screens = ScreenCache(limits.max_live_screens, limits.screen_idle_timeout)
        self._cursors = ReadCursors(limits.max_read_cursors)
        self._drain_deadline: float | None = None  # trio time; None: not draining
        self._drain_started = trio.Event()
        self._status_changed = trio.lowlevel.ParkingLot()

    # ------------------------------------------------------------------ queries

    @property
    def env_allow(self) -> EnvAllowList | None:
        """What a client's `env` may set under command rules (None: no check)."""
        return self._env_allow

    @property
    def sandbox(self) -> Sandbox | None:
        """What wraps every command (None: nothing)."""
        return self._sandbox

    def list(self, owner: str = "default") -> list[SessionInfo]:
        """This owner's sessions, oldest first."""
        validate.owner(owner, self.limits)
        return [s.info() for s in self._sessions.values() if s.owner == owner]

    def list_all(self) -> builtins.list[SessionInfo]:
        """Every owner's sessions (for trusted embedding code and operator views)."""
        return [s.info() for s in self._sessions.values()]

    def get(self, session_id: str, *, owner: str = "default") -> SessionInfo:
        return self._session(session_id, owner).info()

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
        idle_timeout: float | None = None,
    ) -> SessionInfo:
        """Start `command` under a new PTY and return once it runs, or, with `ready`, once
        it is ready (pattern seen, quiet after some output, exited, or the wait timed out);
        `SessionInfo.ready` then holds the output so far and the reason.

        `timeout` kills it after that many seconds; `idle_timeout` (default
        `limits.idle_timeout`) once it had no output, no input and no attached client for
        that long. Either way `timed_out` is true and `reason` says which."""
        return await self._spawn(
            command,
            args,
            owner=owner,
            description=description,
            workdir=workdir,
            title=title,
            notify_on_exit=notify_on_exit,
            timeout=timeout,
            env=env,
            rows=rows,
            cols=cols,
            ready=ready,
            idle_timeout=idle_timeout,
        )

    async def _spawn(self, command: str, args: Sequence[str] = (), **options: Any) -> SessionInfo:
        """`_start` counted and logged: "started", or the kind of the error that refused it."""
        try:
            info = await self._start(command, args, **options)
        except errors.PtyError as exc:
            self.stats.spawns[exc.kind] += 1
            owner = options.get("owner")
            log.info(
                "spawn refused (%s): %s",
                exc.kind,
                exc.message,
                extra=event("spawn_refused", owner=owner, kind=exc.kind),
            )
            raise
        self.stats.spawns["started"] += 1
        return info

    async def _start(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        owner: str,
        description: str,
        workdir: str | None,
        title: str | None,
        notify_on_exit: bool,
        timeout: float | None,
        env: Mapping[str, str] | None,
        rows: int,
        cols: int,
        ready: Wait | None,
        idle_timeout: float | None = None,
        shell: _ShellStart | None = None,
    ) -> SessionInfo:
        """spawn, and for a shell session (`shell`) what runs besides the command asked for,
        and the tracker its reader feeds from the first byte."""
        limits = self.limits
        validate.owner(owner, limits)
        validate.command(command, limits)
        args = list(validate.args(args, limits))
        validate.description(description, limits)
        if workdir is not None:
            validate.workdir(workdir, limits)
        validate.title(title, limits)
        timeout = validate.timeout(timeout, limits)
        idle_timeout = validate.timeout(idle_timeout, limits, field="idle_timeout")
        if idle_timeout is None:
            idle_timeout = limits.idle_timeout
        env = validate.env(env, limits)
        validate.window(rows, cols, limits)
        ready_pattern = self._check_wait(ready, shell=shell is not None)
        if self._env_allow is not None:
            self._env_allow.check(env)  # the client's variables only; a shell's are ours

        reservation = await self._reserve_or_wait(owner)
        try:
            with open_workdir(workdir, root=self.root) as handle:
                await authorize_spawn(
                    self._authorizer, command=command, args=args, workdir=handle, owner=owner
                )
                self._check_accepting(owner)
                self._check_draining()
                session = self._new_session(
                    owner=owner,
                    command=command,
                    args=args,
                    workdir=handle.path,
                    title=title,
                    description=description,
                    notify_on_exit=notify_on_exit,
                    timeout=timeout,
                    idle_timeout=idle_timeout,
                    rows=rows,
                    cols=cols,
                )
                if shell is not None:
                    session.shell = shell.tracker(session)
                child_env = finish_environment(
                    self._base_env,
                    overrides=env if shell is None else {**(env or {}), **shell.env},
                    tags={proc.TAG_MANAGER: self.id, proc.TAG_SESSION: session.id},
                    workdir=handle.path,
                )
                if shell is None:
                    argv = self._program(command, args, child_env, handle.path)
                else:
                    argv = self._program(
                        command, shell.args, child_env, handle.path, readable=(shell.directory,)
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
                            argv,
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
        log.info(
            "session %s started: %s (pid %d, owner %s)",
            session.id,
            command,
            session.pid,
            owner,
            extra=event("spawn", id=session.id, owner=owner, command=command, pid=session.pid),
        )
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

    def _program(
        self,
        command: str,
        args: Sequence[str],
        child_env: dict[str, str],
        workdir: str,
        *,
        readable: Sequence[str] = (),
    ) -> builtins.list[str]:
        """What the session's leader execs; may replace `child_env`'s content (sandbox).
        `readable` names paths of ours the program must read (a shell's startup files).

        Without command rules the command is looked up in the child's own PATH (a client may
        set PATH), here once so that a bad command fails with its reason, then again by
        `spawn.start_child` (in the opened workdir) so the program sees argv[0] as given.
        Under rules it is resolved with our PATH, absolute entries only, and that path is
        what runs. Then the sandbox wraps it.
        """
        if self._env_allow is None:
            spawn.resolve_command(command, path=child_env.get("PATH", os.defpath), cwd=workdir)
            argv = [command, *args]
        else:
            path = self._base_env.get("PATH", os.defpath)
            resolved = spawn.resolve_command(
                command, path=path, cwd=workdir, absolute_dirs_only=True
            )
            argv = [resolved, *args]
        if self._sandbox is not None:
            argv, wrapped_env = self._sandbox.wrap(argv, child_env, workdir, readable=readable)
            child_env.clear()
            child_env.update(wrapped_env)
        return argv

    async def spawn_shell(
        self,
        *,
        owner: str = "default",
        description: str,
        shell: str | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        rows: int = 24,
        cols: int = 80,
        timeout: float | None = None,
        login: bool = False,
        rc: bool = True,
        title: str | None = None,
        notify_on_exit: bool = False,
        idle_timeout: float | None = None,
    ) -> SessionInfo:
        """Start bash or zsh (`shell`: "bash", "zsh" or a path to one; None: the user's
        $SHELL when it is one of those, else bash) that reports each command through marks
        carrying a random nonce, and return once its first prompt is up (bounded by
        spawn_timeout). `rc` reads the user's startup files (they are never written),
        `login` what a login shell reads. Then `run`, `commands`, `Wait(prompt=True)` and
        `read(..., command=N)` work on it; see docs/shell.md."""
        limits = self.limits
        deadline = trio.current_time() + limits.spawn_timeout
        validate.owner(owner, limits)
        validate.description(description, limits)
        checked_env = validate.env(env, limits) or {}
        for field, flag in (("login", login), ("rc", rc)):
            if not isinstance(flag, bool):
                raise errors.InvalidInput(field, f"must be true or false, got {flag!r}")
        environ = {**self._base_env, **checked_env}
        name, command = launch.resolve(shell, environ)
        nonce = secrets.token_hex(8)
        setup = launch.prepare(name, command, nonce=nonce, rc=rc, login=login, environ=environ)
        try:

            def tracker(session: Session) -> ShellTracker:
                return ShellTracker(
                    name,
                    nonce,
                    session.output,
                    history=limits.command_history,
                    max_line_length=limits.max_line_length,
                    max_escape_length=limits.max_escape_length,
                )

            # Rules, SessionInfo and the sandbox see the shell the caller asked for; what
            # runs adds our startup files and their environment (ours, not the client's).
            info = await self._spawn(
                setup.command,
                (),
                owner=owner,
                description=description,
                workdir=workdir,
                title=title,
                notify_on_exit=notify_on_exit,
                timeout=timeout,
                env=checked_env,
                rows=rows,
                cols=cols,
                ready=None,
                idle_timeout=idle_timeout,
                shell=_ShellStart(
                    args=setup.args, env=setup.env, directory=setup.directory, tracker=tracker
                ),
            )
            session = self._sessions[info.id]
            marks = session.shell
            assert marks is not None
            with trio.move_on_at(deadline):
                await session.wait_until(lambda: marks.prompts > 0)
        finally:
            setup.remove()  # read by now (or never): the nonce lives on in the shell only
        if marks.prompts > 0:
            return session.info()
        # No prompt: the user's startup files failed, asked something, or took too long.
        last = session.output.last_nonblank_line()
        await session.kill()
        self._remove(session)
        how = (
            f"exited with code {session.exit_code} before its first prompt"
            if session.exit_code is not None
            else f"showed no prompt within spawn_timeout ({limits.spawn_timeout:g} s)"
        )
        raise errors.SpawnFailed(
            f"{name} {how}; its last output: {last!r}" if last else f"{name} {how}",
            command=command,
        )

    def _check_wait(self, wait: Wait | None, *, shell: bool) -> CompiledPattern | None:
        """Validate a Wait up front (before anything is started or written)."""
        if wait is None:
            return None
        if not isinstance(wait, Wait):
            raise errors.InvalidInput("wait", "must be a Wait")
        if wait.pattern is None and wait.idle_ms is None and not wait.exit and not wait.prompt:
            raise errors.InvalidInput("wait", "give a pattern, idle_ms, exit=True or prompt=True")
        if wait.prompt and not shell:
            raise errors.InvalidInput(
                "wait.prompt", "only shell sessions (spawn_shell) report their prompt"
            )
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
        # With a node id, ids say which host holds the session: pty_<node>_<8 hex>.
        prefix = "pty_" if self.node_id is None else f"pty_{self.node_id}_"
        while True:
            session_id = prefix + secrets.token_hex(4)
            if session_id not in self._sessions:
                break
        return Session(
            session_id=session_id,
            limits=self.limits,
            manager_id=self.id,
            table=self._table,
            on_change=self._wake_status_waiters,
            shutdown_moment=self._shutdown_moment,
            **fields,  # type: ignore[arg-type]
        )

    def _check_accepting(self, owner: str) -> None:
        if self._closing:
            raise errors.ManagerClosing()
        if owner in self._deleted:
            raise errors.OwnerDeleted(owner)

    def _wake_status_waiters(self) -> None:
        """A session's status changed (`wait_drained` counts the live ones again)."""
        self._status_changed.unpark_all()

    def _check_draining(self) -> None:
        """New sessions are refused from the moment a drain begins (a spawn already past
        this check, starting its process, goes on and is waited for like the others)."""
        remaining = self.drain_remaining()
        if remaining is not None:
            raise errors.Draining(round(remaining, 3))

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
        self._check_draining()
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
        self._status_changed.unpark_all()

    def _remove(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
            self.stats.removed_output_bytes += session.output.end_offset
            self._screens.discard(session.id)
            self._cursors.forget(session.id)
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
        pattern = self._check_wait(wait, shell=session.shell is not None)
        await authorize_write(
            self._authorizer, command=session.command, data=raw, owner=owner, session_id=session.id
        )
        session = self._session(session_id, owner)  # approval may have taken a while
        prefix_line = session.output.line_of_offset(session.output.end_offset)
        prefix = self._line_text(session, prefix_line)
        prompts_seen = None
        if wait is not None and wait.prompt and session.shell is not None:
            prompts_seen = session.shell.prompts  # a prompt drawn after this write began
        marks = session.shell
        # Ctrl-C at the prompt: delivered whole, as by `signal`.
        interrupt = marks is not None and marks.running is None and b"\x03" in raw
        if marks is not None:
            # Enter or Ctrl-C at the prompt: a new one comes. Said before the keys go out:
            # said after, the shell's D could be read while the write awaits, and the next
            # `run` would wait its whole timeout for another.
            marks.keys_typed(raw)
        start, written = await session.write(raw, settle=interrupt)
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
            prompts_seen=prompts_seen,
            echo=echo_lines(raw),
        )
        page = session.output.read(first, self.limits.default_read_limit)
        return attrs.evolve(result, output=attrs.evolve(page, reason=reason))

    @staticmethod
    def _line_text(session: Session, line: int) -> str:
        lines = session.output.read(line, 1).lines
        return lines[0].text if lines and lines[0].number == line else ""

    @overload
    async def read(
        self,
        session_id: str,
        *,
        owner: str = ...,
        offset: int = ...,
        limit: int | None = ...,
        pattern: str | None = ...,
        ignore_case: bool = ...,
        wait: Wait | None = ...,
        command: int | None = ...,
        tail: int | None = ...,
        since: Literal["last"] | None = ...,
        reader: str | None = ...,
        compact: Literal[False] = ...,
    ) -> ReadPage: ...

    @overload
    async def read(
        self,
        session_id: str,
        *,
        owner: str = ...,
        offset: int = ...,
        limit: int | None = ...,
        pattern: str | None = ...,
        ignore_case: bool = ...,
        wait: Wait | None = ...,
        command: int | None = ...,
        tail: int | None = ...,
        since: Literal["last"] | None = ...,
        reader: str | None = ...,
        compact: Literal[True],
    ) -> CompactPage: ...

    @overload
    async def read(
        self,
        session_id: str,
        *,
        owner: str = ...,
        offset: int = ...,
        limit: int | None = ...,
        pattern: str | None = ...,
        ignore_case: bool = ...,
        wait: Wait | None = ...,
        command: int | None = ...,
        tail: int | None = ...,
        since: Literal["last"] | None = ...,
        reader: str | None = ...,
        compact: bool,
    ) -> ReadPage | CompactPage: ...

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
        command: int | None = None,
        tail: int | None = None,
        since: Literal["last"] | None = None,
        reader: str | None = None,
        compact: bool = False,
    ) -> ReadPage | CompactPage:
        """A page of clean numbered lines from absolute line `offset` (with `pattern`, of
        the lines matching that RE2 expression). With `wait`, first block until the wait is
        over (`ReadPage.reason` says why). With `command` (shell sessions), only that
        command's own output: from its first line when `offset` is before it.

        `tail=N` gives the last N lines instead. `since="last"` starts where this reader's
        previous read ended (an empty page if nothing was written since; `missed_lines`
        counts lines that rotated out in between); the first such read starts at the
        oldest line. Every read moves the reader's cursor to the page's `next_offset`. A
        reader is `reader` or, by default, the owner: callers serving several clients (one
        per connection) pass their own key.

        `compact=True` returns the same page as a CompactPage (one string per line, the
        numbers implied), which a plain read builds without a `Line` object per line: what
        the RPC server sends for `format: "compact"`."""
        session = self._session(session_id, owner)
        offset, limit = validate.read_window(offset, limit, self.limits)
        reader = owner if reader is None else validate.reader(reader, self.limits)
        if tail is not None:
            tail = validate.int_between("tail", tail, 1, self.limits.max_read_limit)
        if since not in (None, "last"):
            raise errors.InvalidInput("since", f'must be "last", got {since!r}')
        chosen = [name for name, on in (("tail", tail), ("since", since)) if on is not None]
        if (offset and chosen) or len(chosen) > 1 or (tail is not None and pattern is not None):
            raise errors.InvalidInput(
                chosen[-1] if chosen else "tail",
                "offset, tail and since choose where a read starts: give one "
                "(and tail without pattern)",
            )
        compiled = None
        if pattern is not None:
            compiled = compile_pattern(
                pattern, ignore_case=ignore_case, max_length=self.limits.max_pattern_length
            )
        record = None
        if command is not None:
            if chosen:
                raise errors.InvalidInput(
                    "command", "a command's output is paged with offset, not with tail or since"
                )
            record = self._record(session, command)
        wait_pattern = self._check_wait(wait, shell=session.shell is not None)
        output = session.output
        seen = -1  # since: the end offset at this reader's previous read
        if since is not None:
            cursor = self._cursors.get(session.id, reader)
            if cursor is not None:
                offset, seen = cursor
        reason = None
        if wait is not None:
            prompts_seen = None
            if wait.prompt and session.shell is not None:
                # A read waits for the prompt to be up: now, if it is.
                prompts_seen = session.shell.prompts - session.shell.at_prompt
            start = offset if tail is None else output.complete_lines  # a tail waits for news
            reason = await session.wait(
                wait,
                pattern=wait_pattern,
                start_line=start,
                has_output=lambda: output.total_lines > start and output.end_offset != seen,
                prompts_seen=prompts_seen,
            )
        end = output.end_offset
        page: ReadPage | CompactPage
        if record is not None:
            page = await self._read_command(session, record, offset, limit, compiled)
        elif tail is not None:
            page = output.tail(tail)
        elif end == seen and offset >= output.complete_lines:  # it read all, none came since
            page = output.read(output.total_lines, 0)
            page = attrs.evolve(page, next_offset=offset)
        elif compiled is None:
            plain = output.read_compact(offset, limit)
            page = plain if compact else plain.page()
        else:
            page = await session.search(offset, limit, compiled)
        if compact and isinstance(page, ReadPage):
            page = CompactPage.of(page)
        self._cursors.set(session.id, reader, Cursor(page.next_offset, end))
        return page if reason is None else attrs.evolve(page, reason=reason)

    def _record(self, session: Session, number: object) -> CommandRecord:
        marks = self._shell_of(session)
        number = validate.int_between("command", number, 1, 2**63 - 1)
        record = marks.record(number)
        if record is None:
            kept = marks.records(self.limits.command_history)
            known = f"commands {kept[0].number}..{kept[-1].number}" if kept else "no commands"
            raise errors.InvalidInput(
                "command", f"no command {number} in the history of {session.id} (it holds {known})"
            )
        return record

    async def _read_command(
        self,
        session: Session,
        record: CommandRecord,
        offset: int,
        limit: int,
        pattern: CompiledPattern | None,
    ) -> ReadPage:
        """A page of one command's output (with `pattern`, of its matching lines)."""
        output = session.output
        where = self._span(session, record)
        if pattern is None:
            return pages.page(output, where, offset, limit)
        start = max(offset, where.first)
        if where.last < where.first or start > where.last:
            return pages.page(output, where, start, 0)
        found = await session.search(start, limit, pattern)
        lines = []
        for line in found.lines:
            if line.number > where.last:
                break
            # The first and last lines may be pieces: match what the command printed.
            text = line.text
            if line.number == where.first and where.head is not None:
                text = where.head
            elif line.number == where.last and where.tail is not None:
                text = where.tail
            if pattern.search(text) is not None:
                lines.append(Line(line.number, text))
        beyond = len(lines) < len(found.lines) or found.next_offset > where.last
        return attrs.evolve(
            found,
            lines=lines,
            first_line=max(where.first, output.first_line),
            has_more=found.has_more and not beyond,
            next_offset=min(found.next_offset, where.last + 1),
        )

    async def run(
        self,
        session_id: str,
        command: str,
        *,
        owner: str = "default",
        timeout_ms: int | None = None,
    ) -> CommandResult:
        """Run `command` (multi-line allowed) in a shell session and return when the shell
        reports its end ("exited", with its exit code), when `timeout_ms` passes ("timeout":
        it keeps running; wait, write input or Ctrl-C, or run again once it ends), or when
        the shell itself ends ("session_ended", with the session's exit code). Refused with
        Busy while another command runs: nothing is queued."""
        limits = self.limits
        session = self._session(session_id, owner)
        marks = self._shell_of(session)
        text = command_text(command, limits)
        wait_ms = (
            limits.default_wait_ms
            if timeout_ms is None
            else validate.wait_ms("timeout_ms", timeout_ms, limits)
        )
        self._check_idle(session, marks)
        if not marks.at_prompt:
            # Right after a command ended its prompt is on its way: typing before it is
            # drawn would have the terminal echo the keys twice.
            with trio.move_on_after(wait_ms / 1000):
                await session.wait_until(lambda: marks.at_prompt or marks.running is not None)
            self._check_idle(session, marks)
        if type(self._authorizer) is not AllowAll:  # it allows all without a request
            # Rules judge the command the caller gave, not the bracketed paste it is typed as.
            await authorize_write(
                self._authorizer,
                command=session.command,
                data=text.encode(),
                owner=owner,
                session_id=session.id,
            )
            session = self._session(session_id, owner)  # approval may have taken a while
            self._check_idle(session, marks)
        raw = keystrokes(text, paste=marks.paste_enabled())
        record = marks.submit(self._cut(text))
        session.command_submitted()
        try:
            # No checkpoint after the keys: waiting for the end below is one.
            await session.write(raw, checkpoint=False)
        except BaseException:
            marks.withdraw(record)
            raise
        with trio.move_on_after(wait_ms / 1000):
            # The end, then the prompt that follows it: return with the shell ready for the
            # next command.
            await session.wait_until(
                lambda: record.ended and (marks.at_prompt or marks.running is not None)
            )
        reason: RunReason = "timeout"
        if record.state == "exited":
            reason = "exited"
        elif record.state == "session_ended" or session.output_complete:
            reason = "session_ended"
        lines: builtins.list[Line] = []
        missed, has_more = 0, False
        if record.output_start != record.output_end:  # else it printed nothing: no lines
            where = self._span(session, record)
            lines, missed = pages.head_and_tail(session.output, where, limits.default_read_limit)
            retained = where.last + 1 - max(where.first, session.output.first_line)
            has_more = len(lines) < retained
        return CommandResult(
            id=session.id,
            number=record.number,
            command=record.command,
            reason=reason,
            exit_code=record.exit_code if reason == "exited" else session.exit_code,
            lines=lines,
            has_more=has_more,
            missed_lines=missed,
            cwd=record.cwd,
            started_at=record.started_at,
            duration_ms=marks.duration_ms(record),
        )

    def commands(
        self, session_id: str, *, owner: str = "default", limit: int = 50
    ) -> builtins.list[CommandInfo]:
        """A shell session's last `limit` commands, oldest first: those sent by `run` and
        those a person typed (through attach or the monitor)."""
        session = self._session(session_id, owner)
        marks = self._shell_of(session)
        limit = validate.int_between("limit", limit, 1, self.limits.command_history)
        infos = []
        for record in marks.records(limit):
            first, last = pages.line_range(
                session.output, record.output_start, self._output_end(session, record)
            )
            infos.append(
                CommandInfo(
                    number=record.number,
                    command=record.command,
                    source=record.source,
                    state=record.state,
                    exit_code=record.exit_code,
                    first_line=first if last >= first else None,
                    last_line=last if last >= first else None,
                    cwd=record.cwd,
                    started_at=record.started_at,
                    duration_ms=marks.duration_ms(record),
                )
            )
        return infos

    @staticmethod
    def _shell_of(session: Session) -> ShellTracker:
        if session.shell is None:
            raise errors.InvalidInput(
                "id", f"{session.id} is not a shell session (start one with spawn_shell)"
            )
        return session.shell

    @staticmethod
    def _check_idle(session: Session, marks: ShellTracker) -> None:
        running = marks.running
        if running is not None and not session.output_complete:
            raise errors.Busy(session.id, number=running.number, command=running.command)

    def _cut(self, text: str) -> str:
        """A command as its record keeps it (bounded like a line)."""
        limit = self.limits.max_line_length
        if len(text) <= limit:
            return text
        return f"{text[:limit]}… [{len(text) - limit} more characters]"

    @staticmethod
    def _output_end(session: Session, record: CommandRecord) -> int | None:
        if record.output_end is None and record.state != "running":
            return session.output.end_offset
        return record.output_end

    def _span(self, session: Session, record: CommandRecord) -> pages.Span:
        return pages.span(
            session.output,
            record.output_start,
            self._output_end(session, record),
            max_line_length=self.limits.max_line_length,
            max_escape_length=self.limits.max_escape_length,
        )

    async def screen(
        self, session_id: str, *, owner: str = "default", wait: Wait | None = None
    ) -> Screen:
        """The terminal as it shows now (see `Screen`). With `wait`, once a screen line
        matches `wait.pattern` (or the output was quiet for idle_ms, the session ended, or
        timeout_ms passed; `Screen.reason` says which).

        The first snapshot of a session replays its retained output into an emulator (a
        few ms for a full 1 MB buffer of line output, up to ~20 ms when a full-screen
        program left nothing that lets the replay start late); later ones feed only what
        came since. Up to `Limits.max_live_screens` emulators are kept, each for
        `Limits.screen_idle_timeout` seconds after its last use."""
        session = self._session(session_id, owner)
        if wait is not None and wait.prompt:
            raise errors.InvalidInput(
                "wait.prompt",
                "a screen wait takes a pattern, idle_ms or exit: wait for the "
                "prompt with read(wait=Wait(prompt=True))",
            )
        pattern = self._check_wait(wait, shell=False)

        def snapshot() -> Screen:
            return self._screens.snapshot(session.id, session.output, trio.current_time())

        if wait is None:
            return snapshot()
        return await session.wait_screen(wait, pattern=pattern, snapshot=snapshot)

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

    async def signal(self, session_id: str, signal: str, *, owner: str = "default") -> SignalResult:
        """Send `signal` ("INT", "SIGTERM", "hup": as `kill -l` names them) to the
        program in front: the terminal's foreground process group, which a key such as
        Ctrl-C reaches (in a shell session, the running command, not the shell). Like
        `kill` and `resize`, it needs no authorization: it cannot start anything."""
        session = self._session(session_id, owner)
        number, name = validate.signal_name(signal)
        marks = session.shell
        at_prompt = number == SIGINT and marks is not None and marks.running is None
        if at_prompt:
            await session.until_leader_waits()  # so that its line editor handles it whole
        pids = session.signal_foreground(number)
        if at_prompt and marks is not None and pids:
            marks.leave_prompt()  # the shell drops its line: run waits for its new prompt
        return SignalResult(id=session.id, signal=name, pids=pids)

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
        log.info(
            "session %s: kill requested (owner %s)",
            session.id,
            owner,
            extra=event("kill", id=session.id, owner=owner),
        )
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

    # ------------------------------------------------------------------ draining

    @property
    def draining(self) -> bool:
        return self._drain_deadline is not None

    def drain_remaining(self) -> float | None:
        """Seconds until the drain's deadline (0 once passed), or None when not draining."""
        if self._drain_deadline is None:
            return None
        return max(0.0, self._drain_deadline - trio.current_time())

    def drain_status(self) -> DrainStatus:
        remaining = self.drain_remaining()
        return DrainStatus(
            draining=remaining is not None,
            drain_remaining_s=None if remaining is None else round(remaining, 3),
            running=self._live(),
        )

    def _live(self) -> int:
        """Sessions a drain waits for: running or being killed, and spawns in flight."""
        live = [s for s in self._sessions.values() if s.status in ("running", "killing")]
        return len(live) + self._pending.total()

    async def drain(self, deadline_s: float | None = None) -> DrainStatus:
        """Begin a drain (what a rolling update needs): from now on new sessions are refused
        with `Draining`; running ones go on until they end or `deadline_s` passes (default
        `limits.drain_timeout`), which `wait_drained` waits for. Everything else (reads,
        writes, kills) works as before. A drain already under way keeps the earlier of the
        two deadlines: a later call can bring it forward, never push it back."""
        if deadline_s is None:
            seconds = self.limits.drain_timeout
        else:
            seconds = validate.seconds_from_zero("deadline_s", deadline_s, self.limits)
        deadline = trio.current_time() + seconds
        first = self._drain_deadline is None
        if self._drain_deadline is None or deadline < self._drain_deadline:
            self._drain_deadline = deadline
            self._status_changed.unpark_all()
        status = self.drain_status()
        if first:
            log.info(
                "draining: no new sessions; %d running, shutting down within %.0f s",
                status.running,
                seconds,
                extra=event("drain", deadline_s=seconds, running=status.running),
            )
        self._drain_started.set()
        return status

    async def wait_drained(self) -> None:
        """Until a drain has begun and then no session runs or is being killed (and no spawn
        is in flight), or the drain's deadline has passed. Leaving `open_manager` then tears
        down whatever is left, as always."""
        await self._drain_started.wait()
        while self._live() and self._drain_deadline is not None:
            with trio.move_on_at(self._drain_deadline) as timer:
                await self._status_changed.park()
            if timer.cancelled_caught:
                return

    async def _run_session(
        self,
        session: Session,
        env: dict[str, str],
        cwd_fd: int,
        argv: builtins.list[str],
        register: Callable[[], None],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The session's runner, as a task of the root nursery."""
        self._running.add(session)
        try:
            running = session.run(
                env=env,
                cwd_fd=cwd_fd,
                argv=argv,
                on_started=register,
                on_exit=self._notify,
                task_status=task_status,
            )
            # This frame lives as long as the session: hold only what it needs.
            del env, register, argv
            await running
        except (trio.Cancelled, BaseExceptionGroup) as exc:
            # The cancellation asked for this session's end, and its teardown is complete:
            # end quietly. Re-raised, the Cancelled of each session's three tasks (in a
            # group, as trio's nurseries raise) went into one group of 3 x N leaves that
            # the cancelled scope then took apart again: at N = 1,024, 40-130 ms after the
            # last teardown. The block's own task still raises its Cancelled, so the scope
            # that was cancelled still sees one. Anything but cancellations is re-raised,
            # and so is a runner still under a cancelled spawn's `start` (or trio would
            # report that it never started).
            if not (
                session.finished
                and trio.lowlevel.current_task().parent_nursery is self._nursery
                and _only_cancelled(exc)
            ):
                raise
        finally:
            self._running.discard(session)
            if not self._running and self._shutting_down_at is not None:
                self._none_running.set()
            self._guard.ended(session.id)
            if session.pid:
                self._ended(session)

    def _ended(self, session: Session) -> None:
        """Count and log a session whose teardown is complete."""
        if session.teardown_s is not None:
            self.stats.teardown.observe(session.teardown_s)
        how = (
            f"signal {session.exit_signal}"
            if session.exit_signal is not None
            else f"code {session.exit_code}"
        )
        log.info(
            "session %s ended with %s (%s%s)",
            session.id,
            how,
            session.status,
            f", {session.reason}" if session.reason else "",
            extra=event(
                "exit",
                id=session.id,
                owner=session.owner,
                exit_code=session.exit_code,
                exit_signal=session.exit_signal,
                timed_out=session.timed_out,
                reason=session.reason,
                teardown_s=None if session.teardown_s is None else round(session.teardown_s, 6),
            ),
        )

    async def _reap_orphans(self) -> None:
        """Collect adopted zombies now and then, so a session that keeps orphaning short
        lived children cannot fill the pid table before it is torn down.

        Only when a child of ours is a zombie: a scan of /proc costs 5-10 ms a second with
        500 processes on the machine (and holds a snapshot of them all), which an idle
        manager, or a reader under a flood, otherwise paid for nothing. Pins (see
        reap.ProcessTable) are zombies of ours, so while one is held the scans go on."""
        while True:
            await trio.sleep(self.limits.orphan_reap_interval)
            if not proc.zombie_child():
                continue
            try:
                self._table.reap_orphans(self._table.snapshot())
            except OSError as exc:  # out of descriptors for now: try again next time
                log.warning("orphan reaping skipped: %s", exc)

    def _close(self) -> None:
        """Leaving `open_manager`: refuse new spawns, stamp every session's teardown with
        the same moment (every grace counts from it), sweep escapees, cancel the nursery."""
        self._closing = True
        now = self._shutdown_moment()
        for session in self._running:
            session.shut_down(now)
        self._nursery.start_soon(self._sweep)
        self._nursery.cancel_scope.cancel()

    def _shutdown_moment(self) -> float:
        """When the shutdown began: the first call fixes it (`_close`, or a session that saw
        the cancellation before `_close` ran), and every grace counts from it."""
        if self._shutting_down_at is None:
            seen = self._cancel_seen_at
            self._shutting_down_at = trio.current_time() if seen is None else seen
            _pause_collector()
            self._nursery.start_soon(self._collect_during_grace, self._shutting_down_at)
        return self._shutting_down_at

    async def _notice_cancellation(self) -> None:
        """Note when a cancellation reaches the manager's nursery, the moment the shutdown
        was asked for. Trio delivers a cancellation to every task it reaches inside
        `CancelScope.cancel()`, before any of them runs, an enclosing scope's tasks before
        those of the scopes inside it: this task, directly in the nursery, hears of it
        before any session's does. The first session task to run only comes after all of
        them (at N = 1,024, ~3,000 tasks: 45-50 ms, traced), and its grace used to count
        from then. Only the time is noted here (trio is in the middle of the delivery):
        `_shutdown_moment` fixes it."""

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            if self._cancel_seen_at is None:
                self._cancel_seen_at = trio.current_time()
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def _collect_during_grace(self, moment: float) -> None:
        """Halfway through the grace, if sessions still run, collect the young garbage the
        cancellation left (the cycles of every cancelled task: ~25 tracebacks and frames
        per session). With the collector paused it would all wait for the collection
        that comes once the collector is back on, after the last teardown: 35-130 ms at
        N = 1,024. Halfway through the grace the loop is idle, waiting for SIGKILL time.
        Only when the program had the collector on: one that turned it off collects itself."""
        if not self._running:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_at(moment + self.limits.terminate_grace / 2) as halfway:
                await self._none_running.wait()
            if halfway.cancelled_caught and _collector_was_on:
                gc.collect(0)

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

            now = self._shutdown_moment()
            report = await reap.Teardown(
                escaped,
                self._table,
                kill_at=now + self.limits.terminate_grace,
                deadline=now + self.limits.close_timeout,
            ).run()
            if report.survivors:
                log.error("processes survived manager shutdown: %s", report.survivors)


def _only_cancelled(exc: BaseException) -> bool:
    """A trio.Cancelled, or a group of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


def _env_allow(authorizer: Authorizer | None, names: Sequence[str] | None) -> EnvAllowList | None:
    """Rules are in place when an authorizer other than AllowAll is (or env_allow is given)."""
    if names is None and (authorizer is None or isinstance(authorizer, AllowAll)):
        return None
    return EnvAllowList(names or ())


@attrs.frozen
class _ShellStart:
    """What a shell session runs besides the shell asked for: its arguments naming our
    startup files, the environment those need (ours, not the client's: never checked against
    env_allow), their directory (which a sandbox must let it read), and the tracker its
    reader feeds."""

    args: builtins.list[str]
    env: dict[str, str]
    directory: str
    tracker: Callable[[Session], ShellTracker]


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
    env_allow: Sequence[str] | None = None,
    sandbox: Sandbox | None = None,
    subreaper: bool = True,
    state_dir: str | os.PathLike[str] | None = None,
    node_id: str | None = None,
) -> AsyncIterator[Manager]:
    """Run a manager for the duration of the block. Leaving or cancelling the block tears
    every session down concurrently, bounded by `limits.close_timeout`.

    With an `authorizer` (command rules), a spawn's `env` may only set the variables
    `env_allow` names (default: none; see `EnvAllowList`) and the command is resolved with
    this process's PATH. Passing `env_allow` applies that check without an authorizer too.
    `sandbox` wraps every command (e.g. `BubblewrapSandbox()`); clients cannot turn it off.

    A keeper process (posix/keeper.py) tears the sessions down if this process dies
    without leaving the block. With `state_dir`, live sessions are also recorded there, and
    whatever managers that died on the same directory left running (their keepers killed
    too) is torn down before the block starts.

    `subreaper=False` leaves orphan reaping to PID 1, for applications that reap children
    themselves; processes that escape a session are then found only at shutdown.

    `node_id` (a DNS label, docs/deploy.md) makes session ids `pty_<node_id>_<8 hex>`, so a
    client can tell which host holds a session.
    """
    libc.require_spawn_support()  # every spawn would fail: refuse now, naming what is missing
    limits = limits or Limits()
    if node_id is not None:
        node_id = validate.node_id(node_id)
    state = os.fspath(state_dir) if state_dir is not None else None
    if state is not None:
        await reap_predecessors(state, limits)
    if subreaper:
        _acquire_subreaper()
    manager: Manager | None = None
    try:
        async with trio.open_nursery() as nursery:
            manager = Manager._create(
                nursery,
                limits,
                on_exit=on_exit,
                env_mode=env_mode,
                env_deny=env_deny,
                environ=os.environ if environ is None else environ,
                root=root if root is not None else os.getcwd(),
                authorizer=authorizer or AllowAll(),
                env_allow=_env_allow(authorizer, env_allow),
                sandbox=sandbox,
                state_dir=state,
                node_id=node_id,
            )
            nursery.start_soon(manager._notice_cancellation)
            await nursery.start(manager._guard.run)
            if subreaper:
                nursery.start_soon(manager._reap_orphans)
            try:
                yield manager
            finally:
                manager._close()
    finally:
        try:
            if manager is not None:
                manager._table.release_pins()
                await manager._guard.close()  # every session is gone: the keeper may go
        finally:
            if manager is not None and manager._shutting_down_at is not None:
                _resume_collector()  # paused by _shutdown_moment
            if subreaper:
                _release_subreaper()
