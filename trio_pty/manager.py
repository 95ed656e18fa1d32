"""The facade: the registry and the root nursery; each feature a module called from here.

`Manager` looks sessions up for their owner and hands the work on: starting one to
`spawning.py`, a shell's commands to `commands.py`, reads, writes and the screen to
`terminal.py` (a read planned by `output/pages.py`). What stays here is what the manager
owns: who may start a session (`_Admission`: closing, deleted owners, quotas, eviction,
each as far as the caller's `Tenant` reaches), the drain (`_Drain`), and the runners and
the shutdown (`_Runners`).

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
from typing import Any, Final, Literal, NoReturn, TypeVar

import trio

from . import commands, errors, oneshot, recording, terminal
from .attachment import Attachment
from .audit import Audit
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
    OutputChunk,
    ReadPage,
    Screen,
    SessionInfo,
    SignalResult,
    Wait,
    WriteResult,
)
from .output import pages
from .output.cursors import ReadCursors
from .output.screen import ScreenCache
from .policy import validate
from .policy.authorize import AllowAll, Authorizer, authorize_write
from .policy.environment import EnvAllowList, EnvMode, filtered_base
from .posix import libc, proc, reap, spawn
from .posix.sandbox import Sandbox
from .session import ExitCallback, Session
from .spawning import ShellStart, Spawner, SpawnOptions, until_first_prompt, until_ready
from .tenants import EVERYONE, Tenant

log = logging.getLogger("trio_pty")

#: How many evicted ids the manager remembers, to say "evicted" rather than "not found".
_EVICTED_REMEMBERED: Final = 256

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
        spawner: Spawner,
        *,
        on_exit: ExitCallback | None,
        state_dir: str | None = None,
        node_id: str | None = None,
        audit: Audit | None = None,
    ) -> None:
        self.limits = limits = spawner.limits
        self.audit = audit
        self.id = spawner.manager_id
        self.node_id = node_id
        self.stats = ManagerStats()
        self._guard = Guard(self.id, limits, state_dir)
        self.root = spawner.root
        self._nursery = nursery
        self._on_exit = on_exit
        self._authorizer = spawner.authorizer
        self._spawner = spawner
        self._table = reap.ProcessTable(clock=trio.current_time)
        self._sessions: dict[str, Session] = {}
        self._runners = _Runners(
            nursery,
            limits,
            manager_id=self.id,
            table=self._table,
            guard=self._guard,
            stats=self.stats,
            on_exit=self._notify,
        )
        self._screens = ScreenCache(limits.max_live_screens, limits.screen_idle_timeout)
        self._cursors = ReadCursors(limits.max_read_cursors, sessions=limits.max_sessions)
        self._drain = _Drain(limits, live=self._live)
        self._admission = _Admission(limits, self._sessions, self._drain, remove=self._remove)
        self._starts = _Starts(
            limits,
            spawner,
            self._admission,
            self._runners,
            self._sessions,
            stats=self.stats,
            guard=self._guard,
            table=self._table,
            node_id=node_id,
            on_change=self._drain.wake,
            audit=audit,
        )

    # ------------------------------------------------------------------ queries

    @property
    def env_allow(self) -> EnvAllowList | None:
        """What a client's `env` may set under command rules (None: no check)."""
        return self._spawner.env_allow

    @property
    def sandbox(self) -> Sandbox | None:
        """What wraps every command (None: nothing)."""
        return self._spawner.sandbox

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
            evicted = self._admission.evicted.get(str(session_id)) == owner
            raise errors.SessionNotFound(str(session_id), evicted=evicted)
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
        tenant: Tenant = EVERYONE,
        name: str | None = None,
    ) -> SessionInfo:
        """Start `command` under a new PTY and return once it runs, or, with `ready`, once
        it is ready (pattern seen, quiet after some output, exited, or the wait timed out);
        `SessionInfo.ready` then holds the output so far and the reason.

        `timeout` kills it after that many seconds; `idle_timeout` (default
        `limits.idle_timeout`) once it had no output, no input and no attached client for
        that long. Either way `timed_out` is true and `reason` says which. `tenant` is whom
        it is for: what a full quota may evict, and the tenant's own bound."""
        options = SpawnOptions(
            owner=owner,
            command=command,
            args=args,
            description=description,
            workdir=workdir,
            title=title,
            notify_on_exit=notify_on_exit,
            timeout=timeout,
            idle_timeout=idle_timeout,
            env=env,
            rows=rows,
            cols=cols,
            name=name,
        )
        return await self._spawn(options, ready, tenant=tenant)

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
        tenant: Tenant = EVERYONE,
        name: str | None = None,
    ) -> SessionInfo:
        """Start bash or zsh (`shell`: "bash", "zsh" or a path to one; None: the user's
        $SHELL when it is one of those, else bash) that reports each command through marks
        carrying a random nonce, and return once its first prompt is up (bounded by
        spawn_timeout). `rc` reads the user's startup files (they are never written),
        `login` what a login shell reads. Then `run`, `commands`, `Wait(prompt=True)` and
        `read(..., command=N)` work on it; see docs/shell.md."""
        deadline = trio.current_time() + self.limits.spawn_timeout
        validate.owner(owner, self.limits)
        validate.description(description, self.limits)
        checked_env = validate.env(env, self.limits) or {}
        start = self._spawner.shell(shell, checked_env, login=login, rc=rc)
        try:
            # Rules, SessionInfo and the sandbox see the shell the caller asked for; what
            # runs adds our startup files and their environment (ours, not the client's).
            options = SpawnOptions(
                owner=owner,
                command=start.setup.command,
                description=description,
                workdir=workdir,
                title=title,
                notify_on_exit=notify_on_exit,
                timeout=timeout,
                idle_timeout=idle_timeout,
                env=checked_env,
                rows=rows,
                cols=cols,
                name=name,
            )
            info = await self._spawn(options, None, shell=start, tenant=tenant)
            session = self._sessions[info.id]
            failed = await until_first_prompt(session, start, deadline)
        finally:
            start.setup.remove()  # read by now (or never): the nonce lives on in the shell only
        if failed is None:
            return session.info()
        self._remove(session)
        raise failed

    async def _spawn(
        self,
        requested: SpawnOptions,
        ready: Wait | None,
        *,
        shell: ShellStart | None = None,
        tenant: Tenant = EVERYONE,
    ) -> SessionInfo:
        """Start a session (`_Starts.spawn`), into the audit log once it runs."""
        info = await self._starts.spawn(requested, ready, shell=shell, tenant=tenant)
        self._audit(
            "spawn",
            tenant,
            id=info.id,
            owner=info.owner,
            command=info.command,
            args=info.args,
            workdir=info.workdir,
            env_keys=sorted(requested.env or ()),  # names only: values may be secrets
        )
        return info

    def _audit(self, name: str, tenant: Tenant, **fields: Any) -> None:
        """An audit log entry (when there is an audit log), with the token's name."""
        if self.audit is not None:
            self.audit.emit(name, token=tenant.name, **fields)

    def _remove(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
            self.stats.removed_output_bytes += session.output.end_offset
            self._screens.discard(session.id)
            self._cursors.forget(session.id)
        session.removed()

    async def _notify(self, event: ExitEvent) -> None:
        if self._on_exit is None or not self._admission.notifies(event.owner):
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
        tenant: Tenant = EVERYONE,
    ) -> WriteResult:
        """Type `data` into the session's terminal (UTF-8; with `escapes`, `\\x03` is
        Ctrl-C and `\\e[A` an arrow key). Writes to one session go in arrival order; a
        program that does not read makes the write fail with WriteTimeout after io_timeout.
        With `wait`, return the output the write produced once the wait is over."""
        session = self._session(session_id, owner)
        raw = validate.write_text(data, self.limits, escapes=escapes)
        pattern = pages.check_wait(wait, self.limits, shell=session.shell is not None)
        await authorize_write(
            self._authorizer, command=session.command, data=raw, owner=owner, session_id=session.id
        )
        session = self._session(session_id, owner)  # approval may have taken a while
        self._audit("write", tenant, id=session.id, owner=owner, size=len(raw), source="write")
        if session.shell is not None:
            session.shell.typed_by = tenant.name
        return await terminal.write(session, raw, wait, pattern, self.limits)

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
    ) -> ReadPage:
        """A page of clean numbered lines from absolute line `offset` (with `pattern`, of
        the lines matching that RE2 expression). With `wait`, first block until the wait is
        over (`ReadPage.reason` says why). With `command` (shell sessions), only that
        command's own output: from its first line when `offset` is before it.

        `tail=N` gives the last N lines instead. `since="last"` starts where this reader's
        previous read ended (an empty page if nothing was written since; `missed_lines`
        counts lines that rotated out in between); the first such read starts at the
        oldest line. Every read moves the reader's cursor to the page's `next_offset`. A
        reader is `reader` or, by default, the owner: callers serving several clients (one
        per connection) pass their own key. `read_compact` gives the same page compactly."""
        session = self._session(session_id, owner)
        plan = pages.plan_read(
            owner=owner,
            offset=offset,
            limit=limit,
            pattern=pattern,
            ignore_case=ignore_case,
            wait=wait,
            command=command,
            tail=tail,
            since=since,
            reader=reader,
            shell=session.shell is not None,
            limits=self.limits,
        )
        page = await terminal.read(session, plan, self._cursors, self.limits)
        return page if isinstance(page, ReadPage) else page.page()

    async def read_compact(
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
    ) -> CompactPage:
        """`read`'s page as a CompactPage (one string per line, the numbers implied), which
        a plain read builds without a `Line` object per line: what the RPC server sends for
        `format: "compact"`."""
        session = self._session(session_id, owner)
        plan = pages.plan_read(
            owner=owner,
            offset=offset,
            limit=limit,
            pattern=pattern,
            ignore_case=ignore_case,
            wait=wait,
            command=command,
            tail=tail,
            since=since,
            reader=reader,
            shell=session.shell is not None,
            limits=self.limits,
        )
        page = await terminal.read(session, plan, self._cursors, self.limits)
        return page if isinstance(page, CompactPage) else CompactPage.of(page)

    async def run(
        self,
        session_id: str,
        command: str,
        *,
        owner: str = "default",
        timeout_ms: int | None = None,
        tenant: Tenant = EVERYONE,
    ) -> CommandResult:
        """Run `command` (multi-line allowed) in a shell session and return when the shell
        reports its end ("exited", with its exit code), when `timeout_ms` passes ("timeout":
        it keeps running; wait, write input or Ctrl-C, or run again once it ends), or when
        the shell itself ends ("session_ended", with the session's exit code). Refused with
        Busy while another command runs: nothing is queued."""
        session = self._session(session_id, owner)

        async def approve(text: str) -> Session:
            await authorize_write(
                self._authorizer,
                command=session.command,
                data=text.encode(),
                owner=owner,
                session_id=session.id,
            )
            return self._session(session_id, owner)  # approval may have taken a while

        # AllowAll allows all without a request.
        rules = approve if type(self._authorizer) is not AllowAll else None
        return await commands.run(
            session,
            command,
            timeout_ms=timeout_ms,
            limits=self.limits,
            approve=rules,
            by=tenant.name,
        )

    def commands(
        self, session_id: str, *, owner: str = "default", limit: int = 50
    ) -> builtins.list[CommandInfo]:
        """A shell session's last `limit` commands, oldest first: those sent by `run` and
        those a person typed (through attach or the monitor)."""
        session = self._session(session_id, owner)
        return commands.commands(session, limit=limit, limits=self.limits)

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
        pattern = pages.check_screen_wait(wait, self.limits)
        return await terminal.screen(session, wait, pattern, self._screens)

    async def read_raw(
        self,
        session_id: str,
        *,
        owner: str = "default",
        offset: int = 0,
        limit: int | None = None,
        line: int | None = None,
    ) -> OutputChunk:
        """Raw bytes from absolute byte `offset` (at most `limit`), for exact replay. An
        offset that left the buffer, or lies in the future, gives the oldest retained bytes
        with `gap` set. With `line`, the bytes of that line instead (from `offset` within
        it, newline included): a line `read` cut at max_line_length, whole."""
        session = self._session(session_id, owner)
        offset = validate.byte_offset(offset)
        most = self.limits.max_raw_read_bytes
        limit = most if limit is None else validate.int_between("limit", limit, 1, most)
        if line is not None:
            line = validate.int_between("line", line, 0, 2**62)
            start, stop, partial = pages.line_bytes(session.output, line)
            begin = min(max(offset, start), stop)
            data = b""
            if stop > begin:
                data = session.output.bytes_since(begin, min(limit, stop - begin))[0]
            return OutputChunk(offset=begin, data=data, gap=partial and begin == start)
        data, next_offset, gap = session.output.bytes_since(offset, limit)
        return OutputChunk(offset=next_offset - len(data), data=data, gap=gap)

    async def resize(
        self,
        session_id: str,
        *,
        owner: str = "default",
        rows: int,
        cols: int,
        tenant: Tenant = EVERYONE,
    ) -> SessionInfo:
        """Set the window size; the foreground process gets SIGWINCH. Last resize wins."""
        session = self._session(session_id, owner)
        rows, cols = validate.window(rows, cols, self.limits)
        self._audit("resize", tenant, id=session.id, owner=owner, rows=rows, cols=cols)
        session.resize(rows, cols)
        return session.info()

    async def signal(
        self, session_id: str, signal: str, *, owner: str = "default", tenant: Tenant = EVERYONE
    ) -> SignalResult:
        """Send `signal` ("INT", "SIGTERM", "hup": as `kill -l` names them) to the
        program in front: the terminal's foreground process group, which a key such as
        Ctrl-C reaches (in a shell session, the running command, not the shell). Like
        `kill` and `resize`, it needs no authorization: it cannot start anything."""
        session = self._session(session_id, owner)
        number, name = validate.signal_name(signal)
        pids = await terminal.signal(session, number)
        self._audit("signal", tenant, id=session.id, owner=owner, signal=name, pids=len(pids))
        return SignalResult(id=session.id, signal=name, pids=pids)

    @asynccontextmanager
    async def attach(
        self,
        session_id: str,
        *,
        owner: str = "default",
        offset: int | None = None,
        driver: bool = False,
        active: bool = True,
        redraw: bool = False,
    ) -> AsyncIterator[Attachment]:
        """Stream raw output: `async for chunk in attachment` gives OutputChunks, first the
        retained snapshot (or exactly the bytes after `offset`), then live output, until the
        session is removed or has ended and everything was delivered. An `active` attachment
        keeps the session from its idle timeout; a watcher's (`active=False`) does not. With
        `redraw`, the attachment's `drawn` is the session's state drawn from its screen model
        (docs/output.md) and the chunks start at its offset: no old byte is replayed."""
        session = self._session(session_id, owner)
        drawn = None
        if redraw:
            if offset is not None:
                raise errors.InvalidInput("redraw", "draws the state now: not with an offset")
            drawn = self._screens.draw(session.id, session.output, trio.current_time())
            offset = drawn.offset
        elif offset is not None:
            offset = validate.byte_offset(offset)
        attachment = session.attach(offset, driver=driver, active=active)
        attachment.drawn = drawn
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
        self,
        session_id: str,
        *,
        owner: str = "default",
        cleanup: bool = False,
        tenant: Tenant = EVERYONE,
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
        info = session.info()
        self._audit(
            "kill",
            tenant,
            id=session.id,
            owner=owner,
            cleanup=cleanup,
            status=info.status,
            exit_code=info.exit_code,
            exit_signal=info.exit_signal,
        )
        return info

    async def delete_owner(self, owner: str, *, tenant: Tenant = EVERYONE) -> int:
        """Forget an owner: refuse its future spawns, then reap and remove all its sessions.
        Returns how many sessions were removed. The deletion is remembered among `tenant`'s
        (the last `limits.deleted_owners_remembered` of each tenant)."""
        validate.owner(owner, self.limits)
        await self._admission.delete(owner, tenant)
        sessions = [s for s in self._sessions.values() if s.owner == owner]
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(session.kill)
        for session in sessions:
            self._remove(session)
        self._audit("delete", tenant, owner=owner, removed=len(sessions))
        return len(sessions)

    # ------------------------------------------------------------------ draining

    @property
    def draining(self) -> bool:
        return self._drain.deadline is not None

    def drain_remaining(self) -> float | None:
        """Seconds until the drain's deadline (0 once passed), or None when not draining."""
        return self._drain.remaining()

    def drain_status(self) -> DrainStatus:
        return self._drain.status()

    async def drain(
        self, deadline_s: float | None = None, *, tenant: Tenant = EVERYONE
    ) -> DrainStatus:
        """Begin a drain (what a rolling update needs): from now on new sessions are refused
        with `Draining`; running ones go on until they end or `deadline_s` passes (default
        `limits.drain_timeout`), which `wait_drained` waits for. Everything else (reads,
        writes, kills) works as before. A drain already under way keeps the earlier of the
        two deadlines: a later call can bring it forward, never push it back."""
        status = self._drain.begin(deadline_s)
        self._audit("drain", tenant, deadline_s=deadline_s, running=status.running)
        return status

    async def wait_drained(self) -> None:
        """Until a drain has begun and then no session runs or is being killed (and no spawn
        is in flight), or the drain's deadline has passed. Leaving `open_manager` then tears
        down whatever is left, as always."""
        await self._drain.wait()

    def _live(self) -> int:
        """Sessions a drain waits for: running or being killed, and spawns in flight."""
        live = [s for s in self._sessions.values() if s.status in ("running", "killing")]
        return len(live) + self._admission.pending.total()

    def _close(self) -> None:
        """Leaving `open_manager`: refuse new spawns, then end every session at once."""
        self._admission.closing = True
        self._runners.close()

    # ------------------------------------------------------------------ one-shot commands

    # One command line run as a script, under a PTY of its own (trio_pty/oneshot.py).
    exec = oneshot.execute

    # ------------------------------------------------------------------ recordings

    # The session as an asciicast (trio_pty/recording.py).
    recording = recording.record


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


class _Starts:
    """How a session starts: the spawn counted and logged, its options checked once, a
    quota slot, the workdir and the rules (Spawner), a unique name, then the session's
    runner, which registers it."""

    def __init__(
        self,
        limits: Limits,
        spawner: Spawner,
        admission: _Admission,
        runners: _Runners,
        sessions: dict[str, Session],
        *,
        stats: ManagerStats,
        guard: Guard,
        table: reap.ProcessTable,
        node_id: str | None,
        on_change: Callable[[], None],
        audit: Audit | None,
    ) -> None:
        self._limits = limits
        self._spawner = spawner
        self._admission = admission
        self._runners = runners
        self._sessions = sessions
        self._stats = stats
        self._guard = guard
        self._table = table
        self._node_id = node_id
        self._manager_id = spawner.manager_id
        self._on_change = on_change
        self._audit = audit

    async def spawn(
        self,
        requested: SpawnOptions,
        ready: Wait | None,
        *,
        shell: ShellStart | None = None,
        tenant: Tenant = EVERYONE,
    ) -> SessionInfo:
        """`_start` counted and logged: "started", or the kind of the error that refused it
        (a wrong option too: the options are checked here, once)."""
        try:
            info = await self._start(requested.checked(self._limits), ready, shell, tenant)
        except errors.PtyError as exc:
            self._stats.spawns[exc.kind] += 1
            log.info(
                "spawn refused (%s): %s",
                exc.kind,
                exc.message,
                extra=event("spawn_refused", owner=requested.owner, kind=exc.kind),
            )
            raise
        self._stats.spawns["started"] += 1
        return info

    async def _start(
        self, options: SpawnOptions, ready: Wait | None, shell: ShellStart | None, tenant: Tenant
    ) -> SessionInfo:
        """A quota slot, then the workdir and the rules (Spawner), then the session's task;
        for a shell session (`shell`) with its startup files and its tracker."""
        ready_pattern = pages.check_wait(ready, self._limits, shell=shell is not None)
        self._spawner.check_env(options)
        self.check_name_free(options)
        reservation = await self._admission.reserve_or_wait(options.owner, tenant)
        try:
            async with self._spawner.workdir(options) as handle:
                self._admission.check(options.owner)
                session = self._new_session(options, handle.path)
                if shell is not None:
                    session.shell = shell.tracker(session.output)
                    commands.audit_commands(self._audit, session, tenant.name)
                child_env, argv = self._spawner.launch(options, session.id, handle.path, shell)
                await self._launch(session, child_env, handle.fd, argv, reservation)
        except OSError as exc:  # out of descriptors (workdir handle, openpty) or memory
            raise spawn.spawn_failed(options.command, exc) from None
        finally:
            reservation.release()
        return await until_ready(session, ready, ready_pattern, self._limits)

    async def _launch(
        self,
        session: Session,
        child_env: dict[str, str],
        cwd_fd: int,
        argv: builtins.list[str],
        reservation: _Reservation,
    ) -> None:
        """Start the session's runner; it registers the session as it starts."""

        def register() -> None:
            # Runs in the session task right before it reports started: no await
            # separates taking the registry slot from giving the reservation back.
            self._admission.check_accepting(session.owner)
            self.check_name_free(session)
            self._sessions[session.id] = session
            reservation.release()
            self._guard.started(session.id, session.owner, session.pid)

        await self._runners.launch(session, child_env, cwd_fd, argv, register)

    def check_name_free(self, wanted: SpawnOptions | Session) -> None:
        """A name is unique among the owner's running sessions (an ended one gives it up)."""
        if wanted.name is None:
            return
        for other in self._sessions.values():
            if other.owner == wanted.owner and other.name == wanted.name and not other.ended:
                raise errors.InvalidInput(
                    "name", f"{other.id} of this owner is running under the name {wanted.name!r}"
                )

    def _new_session(self, options: SpawnOptions, workdir: str) -> Session:
        # With a node id, ids say which host holds the session: pty_<node>_<8 hex>.
        prefix = "pty_" if self._node_id is None else f"pty_{self._node_id}_"
        while True:
            session_id = prefix + secrets.token_hex(4)
            if session_id not in self._sessions:
                break
        return Session(
            session_id=session_id,
            options=options,
            workdir=workdir,
            limits=self._limits,
            manager_id=self._manager_id,
            table=self._table,
            on_change=self._on_change,
            shutdown_moment=self._runners.shutdown_moment,
        )


class _Runners:
    """The sessions' runners, each a task of the root nursery, and the shutdown that ends
    them all at once: the moment it began (every grace counts from it), the sweep of
    escaped processes, a collection halfway through the grace; and the orphan reaper."""

    def __init__(
        self,
        nursery: trio.Nursery,
        limits: Limits,
        *,
        manager_id: str,
        table: reap.ProcessTable,
        guard: Guard,
        stats: ManagerStats,
        on_exit: ExitCallback,
    ) -> None:
        self._nursery = nursery
        self._limits = limits
        self._manager_id = manager_id
        self._table = table
        self._guard = guard
        self._stats = stats
        self._on_exit = on_exit
        self.running: set[Session] = set()
        self._none_running = trio.Event()  # set once no session runs during the shutdown
        self._shutting_down_at: float | None = None
        self._cancel_seen_at: float | None = None  # see notice_cancellation

    async def start(self, *, reap_orphans: bool) -> None:
        """The manager's own tasks: the cancellation's witness, the guard, the reaper."""
        self._nursery.start_soon(self.notice_cancellation)
        await self._nursery.start(self._guard.run)
        if reap_orphans:
            self._nursery.start_soon(self.reap_orphans)

    async def finish(self) -> None:
        """After the root nursery: every session is gone, so the keeper may go."""
        try:
            self._table.release_pins()
            await self._guard.close()
        finally:
            if self._shutting_down_at is not None:
                _resume_collector()  # paused by shutdown_moment

    async def launch(
        self,
        session: Session,
        child_env: dict[str, str],
        cwd_fd: int,
        argv: builtins.list[str],
        register: Callable[[], None],
    ) -> None:
        """Start the session's runner in the root nursery, bounded by spawn_timeout."""
        try:
            with trio.fail_after(self._limits.spawn_timeout):
                await self._nursery.start(
                    self._run,
                    session,
                    child_env,
                    cwd_fd,
                    argv,
                    register,
                    name="trio_pty.session",
                )
        except trio.TooSlowError:
            raise errors.SpawnFailed(
                f"{session.command} did not start within spawn_timeout "
                f"({self._limits.spawn_timeout:g} s)",
                command=session.command,
            ) from None
        log.info(
            "session %s started: %s (pid %d, owner %s)",
            session.id,
            session.command,
            session.pid,
            session.owner,
            extra=event(
                "spawn",
                id=session.id,
                owner=session.owner,
                command=session.command,
                pid=session.pid,
            ),
        )

    async def _run(
        self,
        session: Session,
        env: dict[str, str],
        cwd_fd: int,
        argv: builtins.list[str],
        register: Callable[[], None],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The session's runner, as a task of the root nursery."""
        self.running.add(session)
        try:
            running = session.run(
                env=env,
                cwd_fd=cwd_fd,
                argv=argv,
                on_started=register,
                on_exit=self._on_exit,
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
            self.running.discard(session)
            if not self.running and self._shutting_down_at is not None:
                self._none_running.set()
            self._guard.ended(session.id)
            if session.pid:
                self._ended(session)

    def _ended(self, session: Session) -> None:
        """Count and log a session whose teardown is complete."""
        if session.teardown_s is not None:
            self._stats.teardown.observe(session.teardown_s)
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

    async def reap_orphans(self) -> None:
        """Collect adopted zombies now and then, so a session that keeps orphaning short
        lived children cannot fill the pid table before it is torn down.

        Only when a child of ours is a zombie: a scan of /proc costs 5-10 ms a second with
        500 processes on the machine (and holds a snapshot of them all), which an idle
        manager, or a reader under a flood, otherwise paid for nothing. Pins (see
        reap.ProcessTable) are zombies of ours, so while one is held the scans go on."""
        while True:
            await trio.sleep(self._limits.orphan_reap_interval)
            if not proc.zombie_child():
                continue
            try:
                self._table.reap_orphans(self._table.snapshot())
            except OSError as exc:  # out of descriptors for now: try again next time
                log.warning("orphan reaping skipped: %s", exc)

    def close(self) -> None:
        """Stamp every session's teardown with the same moment (every grace counts from
        it), sweep escapees, cancel the nursery."""
        now = self.shutdown_moment()
        for session in self.running:
            session.shut_down(now)
        self._nursery.start_soon(self._sweep)
        self._nursery.cancel_scope.cancel()

    def shutdown_moment(self) -> float:
        """When the shutdown began: the first call fixes it (`_close`, or a session that saw
        the cancellation before `_close` ran), and every grace counts from it."""
        if self._shutting_down_at is None:
            seen = self._cancel_seen_at
            self._shutting_down_at = trio.current_time() if seen is None else seen
            _pause_collector()
            self._nursery.start_soon(self._collect_during_grace, self._shutting_down_at)
        return self._shutting_down_at

    async def notice_cancellation(self) -> None:
        """Note when a cancellation reaches the manager's nursery, the moment the shutdown
        was asked for. Trio delivers a cancellation to every task it reaches inside
        `CancelScope.cancel()`, before any of them runs, an enclosing scope's tasks before
        those of the scopes inside it: this task, directly in the nursery, hears of it
        before any session's does. The first session task to run only comes after all of
        them (at N = 1,024, ~3,000 tasks: 45-50 ms, traced), and its grace used to count
        from then. Only the time is noted here (trio is in the middle of the delivery):
        `shutdown_moment` fixes it."""

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
        if not self.running:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_at(moment + self._limits.terminate_grace / 2) as halfway:
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
                leaders = {s.pid for s in self.running}
                tagged = snapshot.with_tags_of(self._manager_id, orphans_only=True)
                return {e.pid: e for e in tagged if e.pid not in leaders}

            now = self.shutdown_moment()
            report = await reap.Teardown(
                escaped,
                self._table,
                kill_at=now + self._limits.terminate_grace,
                deadline=now + self._limits.close_timeout,
            ).run()
            if report.survivors:
                log.error("processes survived manager shutdown: %s", report.survivors)


class _Admission:
    """Who may start a session: the manager not closing, the owner not deleted, no drain
    begun, and a quota slot (per owner, per tenant, in all), reserved before the spawn's
    first await; an ended session is evicted to make room (never a live one, and only one
    the tenant sees), a full quota refused with the owner's live ids."""

    def __init__(
        self,
        limits: Limits,
        sessions: dict[str, Session],
        drain: _Drain,
        *,
        remove: Callable[[Session], None],
    ) -> None:
        self._limits = limits
        self._sessions = sessions  # the manager's registry (the same dict)
        self._drain = drain
        self._remove = remove
        self.closing = False
        # The ids of the last sessions evicted to make room, and their owners: a lookup of
        # one says so rather than only "not found" (bounded; ids are never reused).
        self.evicted: collections.OrderedDict[str, str] = collections.OrderedDict()
        # Deleted owners, the last few of each tenant: one tenant's flood of deletions
        # cannot push out another's.
        self._deleted: dict[str, collections.OrderedDict[str, None]] = {}
        self.pending: collections.Counter[str] = collections.Counter()  # reserved slots
        self._settled = trio.lowlevel.ParkingLot()  # a reservation was given back

    def check(self, owner: str) -> None:
        """New sessions are refused from the moment a drain begins (a spawn already past
        this check, starting its process, goes on and is waited for like the others)."""
        self.check_accepting(owner)
        self._drain.check()

    def check_accepting(self, owner: str) -> None:
        if self.closing:
            raise errors.ManagerClosing()
        if self._is_deleted(owner):
            raise errors.OwnerDeleted(owner)

    def _is_deleted(self, owner: str) -> bool:
        return any(owner in deleted for deleted in self._deleted.values())

    def notifies(self, owner: str) -> bool:
        """Whether an owner's exit events are still delivered."""
        return not self.closing and not self._is_deleted(owner)

    async def delete(self, owner: str, tenant: Tenant = EVERYONE) -> None:
        """Refuse the owner's spawns from now on (the last owners each tenant deleted are
        remembered), then wait for those in flight (bounded by spawn_timeout)."""
        deleted = self._deleted.setdefault(tenant.name, collections.OrderedDict())
        deleted[owner] = None
        deleted.move_to_end(owner)
        while len(deleted) > self._limits.deleted_owners_remembered:
            deleted.popitem(last=False)
        with trio.move_on_after(self._limits.spawn_timeout):
            while self.pending[owner]:
                await self._settled.park()

    async def reserve_or_wait(self, owner: str, tenant: Tenant = EVERYONE) -> _Reservation:
        """Reserve a slot; when the quota is full only because ended sessions the tenant
        sees are still being torn down (their leftovers in the grace period), wait for the
        oldest of them (bounded by close_timeout) and try once more, rather than refusing a
        caller who just saw it exit. The reservation itself is still taken with no await
        before it."""
        try:
            return self._reserve(owner, tenant)
        except errors.LimitExceeded:
            dying = [
                s
                for s in self._sessions.values()
                if s.ended and not s.finished and tenant.sees(s.owner)
            ]
            own = [s for s in dying if s.owner == owner]
            if not (own or dying):
                raise
            oldest = min(own or dying, key=lambda s: s.created_at)
            with trio.move_on_after(self._limits.close_timeout):
                await oldest.wait_finished()
        return self._reserve(owner, tenant)

    def _reserve(self, owner: str, tenant: Tenant) -> _Reservation:
        """Take a slot for a spawn before its first await, evicting an ended session of the
        owner (then of any owner the tenant sees) when a quota is full. Live sessions are
        never evicted, nor sessions of owners the tenant does not see."""
        self.check(owner)
        limits = self._limits
        owned = [s for s in self._sessions.values() if s.owner == owner]
        visible = [s for s in self._sessions.values() if tenant.sees(s.owner)]
        owned_evictable = owned if tenant.sees(owner) else []
        owner_full = len(owned) + self.pending[owner] >= limits.max_sessions_per_owner
        if owner_full and not self._evict_oldest_ended(owned_evictable):
            self._refuse(
                owner,
                f"owner {owner!r} already has {limits.max_sessions_per_owner} sessions "
                "(max_sessions_per_owner), none of them ended and torn down",
            )
        if tenant.max_sessions is not None:
            # Counted now, after any eviction above.
            held = sum(1 for s in self._sessions.values() if tenant.sees(s.owner))
            held += sum(n for name, n in self.pending.items() if tenant.sees(name))
            if held >= tenant.max_sessions and not (
                self._evict_oldest_ended(owned_evictable) or self._evict_oldest_ended(visible)
            ):
                self._refuse(
                    owner,
                    f"token {tenant.name!r} already has {tenant.max_sessions} sessions (its "
                    "max_sessions), none of them ended and torn down",
                )
        manager_full = len(self._sessions) + self.pending.total() >= limits.max_sessions
        if manager_full and not (
            self._evict_oldest_ended(owned_evictable) or self._evict_oldest_ended(visible)
        ):
            self._refuse(
                owner,
                f"the manager already runs {limits.max_sessions} sessions "
                "(max_sessions), none of them ended and torn down",
            )
        self.pending[owner] += 1
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
        self.evicted[victim.id] = victim.owner
        while len(self.evicted) > _EVICTED_REMEMBERED:
            self.evicted.popitem(last=False)
        self._remove(victim)
        return True

    def release(self, owner: str) -> None:
        self.pending[owner] -= 1
        if self.pending[owner] <= 0:
            del self.pending[owner]
        self._settled.unpark_all()
        self._drain.wake()


class _Drain:
    """A drain (what a rolling update needs): its deadline, and who waits for its end."""

    def __init__(self, limits: Limits, *, live: Callable[[], int]) -> None:
        self._limits = limits
        self._live = live  # sessions running or being killed, and spawns in flight
        self.deadline: float | None = None  # trio time; None: not draining
        self._started = trio.Event()
        self._changed = trio.lowlevel.ParkingLot()

    def wake(self) -> None:
        """A session's status changed, or a reservation was given back: count again."""
        self._changed.unpark_all()

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - trio.current_time())

    def status(self) -> DrainStatus:
        remaining = self.remaining()
        return DrainStatus(
            draining=remaining is not None,
            drain_remaining_s=None if remaining is None else round(remaining, 3),
            running=self._live(),
        )

    def check(self) -> None:
        """Refuse a new session once a drain has begun."""
        remaining = self.remaining()
        if remaining is not None:
            raise errors.Draining(round(remaining, 3))

    def begin(self, deadline_s: float | None) -> DrainStatus:
        if deadline_s is None:
            seconds = self._limits.drain_timeout
        else:
            seconds = validate.seconds_from_zero("deadline_s", deadline_s, self._limits)
        deadline = trio.current_time() + seconds
        first = self.deadline is None
        if self.deadline is None or deadline < self.deadline:
            self.deadline = deadline
            self.wake()
        status = self.status()
        if first:
            log.info(
                "draining: no new sessions; %d running, shutting down within %.0f s",
                status.running,
                seconds,
                extra=event("drain", deadline_s=seconds, running=status.running),
            )
        self._started.set()
        return status

    async def wait(self) -> None:
        await self._started.wait()
        while self._live() and self.deadline is not None:
            with trio.move_on_at(self.deadline) as timer:
                await self._changed.park()
            if timer.cancelled_caught:
                return


class _Reservation:
    """A spawn's claim on a quota slot; released exactly once."""

    def __init__(self, admission: _Admission, owner: str) -> None:
        self._admission = admission
        self._owner = owner
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission.release(self._owner)


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
    audit: Audit | None = None,
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

    `audit` (an `Audit` over a file) records who spawned what, each shell command, writes
    (their size), signals, resizes, kills, deletions and drains (docs/security.md); its
    file is opened here (OSError when it cannot be) and written by a task of the manager.
    """
    libc.require_spawn_support()  # every spawn would fail: refuse now, naming what is missing
    limits = limits or Limits()
    if node_id is not None:
        node_id = validate.node_id(node_id)
    state = os.fspath(state_dir) if state_dir is not None else None
    if state is not None:
        await reap_predecessors(state, limits)
    if audit is not None:
        audit.open()
    if subreaper:
        _acquire_subreaper()
    manager: Manager | None = None
    try:
        async with trio.open_nursery() as nursery:
            spawner = Spawner(
                limits,
                manager_id=secrets.token_hex(8),
                # The environment is filtered once: every spawn starts from the same base.
                base_env=filtered_base(
                    os.environ if environ is None else environ, mode=env_mode, extra_deny=env_deny
                ),
                root=root if root is not None else os.getcwd(),
                authorizer=authorizer or AllowAll(),
                env_allow=_env_allow(authorizer, env_allow),
                sandbox=sandbox,
            )
            manager = Manager._create(
                nursery, spawner, on_exit=on_exit, state_dir=state, node_id=node_id, audit=audit
            )
            if audit is not None:
                nursery.start_soon(audit.run)
            await manager._runners.start(reap_orphans=subreaper)
            try:
                yield manager
            finally:
                manager._close()
    finally:
        try:
            if manager is not None:
                await manager._runners.finish()
        finally:
            if subreaper:
                _release_subreaper()
            if audit is not None:
                audit.close()  # its task closes it; not if the manager failed to start
