"""A stateful model of the manager: hypothesis drives real processes, a pure model predicts.

How it runs. `ManagerModel` is a hypothesis `RuleBasedStateMachine`: each example is a program
of rules (spawn from a menu of nasty children, spawn bursts, write, read, wait, kill, kill
with cleanup, delete_owner, resize, attach, intrusion by another owner, letting time pass,
cancel-everything), and after every rule the invariants are checked against a small pure
model (which sessions exist, in which order, whose they are, what a spawn must evict or
refuse, which statuses may follow which). State machines are synchronous, the manager is
not: each example runs ONE trio event loop in *guest mode* (`trio.lowlevel.start_guest_run`)
on the test's own thread. A rule hands one async function to that loop and pumps the loop's
callbacks until the function returns; between rules the loop does not run at all, so a rule
never interleaves with hypothesis and a step is as deterministic as the children allow. We
chose this over (a) a trio loop in a second thread (two threads touching one manager, and a
leaked loop when a test fails) and over (b) generating a flat list of steps and interpreting
it in one `trio.run` (the steps' arguments depend on the state: which session ids exist,
which owner holds them; bundles and the stateful shrinker handle that, and a failure prints
as a readable program of rule calls). The guest run ends with the example: when it returns,
structured concurrency guarantees every task of it has ended.

What is checked (after every rule unless said otherwise):
- quotas, at every single trio task step (a trio Instrument): sessions in the registry plus
  spawns holding a reservation never exceed `max_sessions` or `max_sessions_per_owner`, and
  neither do sessions still holding processes or a PTY (those being torn down included);
- list()/list_all() agree with the model: same ids, registry order, owner; each owner sees
  only its own; a spawn evicts exactly the session the model predicts (the oldest one of the
  owner that ended and was torn down, then of any owner its tenant sees: every owner, or
  two of three for a token's `Tenant` with a bound of its own) or is refused with exactly
  the owner's live ids;
- statuses only move forward (running -> exited, running -> killing -> killed), byte and line
  counts never shrink, an "exited" session is one whose program exits by itself, with the
  exit code the program gives (a stolen exit status would show here), a session that exited
  with known output has exactly that output (nothing lost at exit);
- every process of a finished session (killed, cleaned, deleted, evicted, or reaped after its
  leader exited) is gone; kill and delete_owner return only when that is so, within
  terminate_grace + TEARDOWN_MARGIN;
- another owner gets SessionNotFound, worded exactly like a missing id, for every call;
- exit events: at most one per session, only with notify_on_exit, only for natural exits or
  timeouts, never for an owner after its deletion;
- cancel-everything (cancelling the scope around the manager block) returns within
  terminate_grace + TEARDOWN_MARGIN and leaves no process, no fd, no task; every example
  ends with one (in teardown), after which the fds are back to what they were before it.

What the model peeks at: the registry, the reservations and the running session runners
(`Manager._sessions`, `_pending`, `_running`, `Session.finished`, `Session.lifecycle.removed`).
The public API does not expose reservations, and "finished" (teardown complete) is the moment
after which nothing of a session may remain; see `quota_usage` and `Tracked.finished`.

Every refused spawn still adds one (never existing) id to the bundle, so that what
hypothesis draws never depends on timing (a replay must draw the same). What the model has
found so far is listed in docs/guarantees.md; each find has a regression test in
test_faults.py or below.

Size: CI runs MODEL_EXAMPLES examples of up to MODEL_STEPS rules (10-20 s on 2 cores).
Set TRIO_PTY_MODEL_EXAMPLES / TRIO_PTY_MODEL_STEPS, or HYPOTHESIS_PROFILE=long, for a long
run; TRIO_PTY_MODEL_REPORT=1 (with pytest -s) prints the measured teardown times.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import queue
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import attrs
import outcome
import pytest
import trio
from hypothesis import HealthCheck, Phase, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

import trio_pty
from trio_pty import Limits, Wait, errors
from trio_pty.manager import Manager
from trio_pty.model import ExitEvent, SessionInfo
from trio_pty.tenants import EVERYONE, Tenant

from . import leaks
from .helpers import tagged_by_session, tagged_processes, wait_for_status, wait_for_text

T = TypeVar("T")

_LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
MODEL_EXAMPLES = int(os.environ.get("TRIO_PTY_MODEL_EXAMPLES", "300" if _LONG else "15"))
MODEL_STEPS = int(os.environ.get("TRIO_PTY_MODEL_STEPS", "30" if _LONG else "12"))

GRACE = 0.2
LIMITS = Limits(
    max_sessions=4,
    max_sessions_per_owner=2,
    terminate_grace=GRACE,
    close_timeout=5.0,
    notification_timeout=0.5,
    io_timeout=1.0,
    orphan_reap_interval=0.1,  # the orphan reaper races trio's own waits all the time
    buffer_size=65_536,  # a flood rotates the ring many times over
)
# What a bounded teardown may take beyond the grace: the SIGKILL round, reaping, EOF on the
# master and the unwinding of the task tree, on a loaded 2-core machine. Measured: see
# docs/guarantees.md ("Proof"). Kill, delete_owner and cancel-everything are held to it.
TEARDOWN_MARGIN = 1.0
# Every bounded teardown the model timed; TRIO_PTY_MODEL_REPORT=1 prints a summary (run
# pytest with -s), which is how the margin in docs/guarantees.md was measured.
MEASURED: dict[str, list[float]] = collections.defaultdict(list)
WAIT_SLACK = 0.5  # how late a bounded Wait may return past its timeout
STEP_TIMEOUT = 20.0  # no single rule may take longer (trio.fail_after inside the loop)
OWNERS = ("ann", "bob", "cyd")
# A token's view of the manager (issue 30, finding 3): two of the owners, and a bound of its
# own below max_sessions; its spawns evict only what it sees.
TEAM = Tenant("team", sees=lambda owner: owner in ("ann", "bob"), max_sessions=3)
TENANTS = {"everyone": EVERYONE, "team": TEAM}
BURST = 10  # concurrent spawns for one owner, the first step of every example

# ------------------------------------------------------------------------------ the menu


@attrs.frozen
class Program:
    command: str
    args: tuple[str, ...]
    exit_code: int | None = None  # exits by itself with this code; None: runs until killed
    lines: tuple[str, ...] | None = None  # its whole clean output, once it has exited
    typed: str = ""  # written right after the spawn
    reply: str | None = None  # how to ask it to print "got TOKEN" ({} is the token)


# The classic daemon(3) double fork: the middle process calls setsid, forks and dies at once.
DAEMON = """import os, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
time.sleep(100)
"""

PROGRAMS: dict[str, Program] = {
    "exits-at-once": Program("sh", ("-c", "exit 3"), exit_code=3, lines=()),
    "exits-after-output": Program(
        "sh",
        ("-c", "echo out-1; echo out-2; echo out-3"),
        exit_code=0,
        lines=("out-1", "out-2", "out-3"),
    ),
    "ignores-sigterm": Program(
        "sh", ("-c", "trap '' HUP TERM; echo ready; while :; do sleep 1; done")
    ),
    "forks-grandchildren": Program("sh", ("-c", "sleep 100 & sleep 100 & echo started; wait")),
    "job-control-shell": Program(
        "bash",
        ("--norc", "--noprofile", "-i"),
        typed="sleep 100 | cat | cat &\n",
        reply="echo got {}\n",
    ),
    "floods": Program(
        "sh", ("-c", "yes 0123456789abcdef | head -c 2000000; echo; echo flood-done; sleep 100")
    ),
    "reads-stdin": Program(
        "sh", ("-c", 'while read line; do echo "got $line"; done'), reply="{}\n"
    ),
    # One escapes its session but keeps its parent; one double-forks away (setsid -f) and is
    # reparented to the manager (the subreaper), where only its tag says whose it is.
    "escapes-with-setsid": Program(
        "sh", ("-c", "setsid sleep 101 & setsid -f sleep 102; echo started; sleep 100")
    ),
    "daemonizes": Program(
        "sh", ("-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(DAEMON)}; sleep 100")
    ),
    "leaves-a-stubborn-orphan": Program(
        "sh",
        ("-c", "trap '' HUP TERM; sleep 100 & echo bye"),
        exit_code=0,
        lines=("bye",),
    ),
}
PROGRAM_NAMES = sorted(PROGRAMS)

FORWARD = {
    "running": {"running", "exited", "killing", "killed"},
    "killing": {"killing", "killed"},
    "exited": {"exited"},
    "killed": {"killed"},
}


# ------------------------------------------------------------------------------ trio as a guest


class GuestLoop:
    """One trio run in guest mode on this thread; `run` executes one async step in it."""

    def __init__(self) -> None:
        self._callbacks: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._result: list[outcome.Outcome[None]] = []
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self._callbacks.put,
            done_callback=self._result.append,
            host_uses_signal_set_wakeup_fd=False,
        )
        self._pump(lambda: self._nursery is not None, 10)

    @property
    def nursery(self) -> trio.Nursery:
        assert self._nursery is not None
        return self._nursery

    @property
    def finished(self) -> bool:
        return bool(self._result)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _pump(self, done: Callable[[], bool], wall_seconds: float) -> None:
        deadline = time.monotonic() + wall_seconds
        while not done():
            if self._result:
                self._result[0].unwrap()
                raise RuntimeError("the trio run ended while a step was still running")
            try:
                callback = self._callbacks.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"trio did not finish a step in {wall_seconds} s") from None
            callback()

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float = STEP_TIMEOUT) -> T:
        box: list[outcome.Outcome[T]] = []

        async def bounded() -> T:
            with trio.fail_after(timeout):
                return await fn(*args)

        async def step() -> None:
            box.append(await outcome.acapture(bounded))

        assert self._token is not None
        self._token.run_sync_soon(self.nursery.start_soon, step)
        self._pump(lambda: bool(box), timeout + 5)
        return box[0].unwrap()

    def close(self) -> None:
        """Stop the run (cancelling whatever is left) and wait until it has returned."""
        if not self._result and self._token is not None and self._stop is not None:
            self._token.run_sync_soon(self._stop.set)
            self._pump(lambda: bool(self._result), 30)
        self._result[0].unwrap()


# ------------------------------------------------------------------------------ quota accounting


def quota_usage(manager: Manager) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Per owner: (sessions registered + reservations held, sessions holding processes or a
    PTY + reservations held). The first is what the manager counts; the second is what the
    quota is for. A runner that is neither registered nor removed is a spawn in progress,
    already counted by its reservation."""
    pending = manager._admission.pending
    registered = collections.Counter(s.owner for s in manager._sessions.values())
    holding = collections.Counter(
        s.owner
        for s in manager._runners.running
        if not s.finished and (manager._sessions.get(s.id) is s or s.lifecycle.removed)
    )
    return registered + pending, holding + pending


class QuotaWatch(trio.abc.Instrument):
    """Checks the quotas after every task step of the whole run."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.manager: Manager | None = None
        self.violations: list[str] = []

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.manager is None or len(self.violations) >= 5:
            return
        registered, holding = quota_usage(self.manager)
        for kind, counts in (("registered+reserved", registered), ("holding+reserved", holding)):
            if counts.total() > self.limits.max_sessions:
                self.violations.append(
                    f"{kind}: {dict(counts)} > max_sessions, after a step of {task.name}"
                )
            self.violations += [
                f"{kind}: owner {owner} has {count} > max_sessions_per_owner, "
                f"after a step of {task.name}"
                for owner, count in counts.items()
                if count > self.limits.max_sessions_per_owner
            ]


# ------------------------------------------------------------------------------ the model


@attrs.define
class Tracked:
    """What the model knows about one session of the current manager."""

    id: str
    owner: str
    program: str
    timeout: float | None
    notify: bool
    pid: int
    created_at: float
    session: Any  # the manager's Session object (None if it was gone before we looked)
    status: str = "running"
    byte_count: int = 0
    line_count: int = 0

    @property
    def finished(self) -> bool:
        """Teardown complete: from now on nothing of the session may remain."""
        return self.session is not None and bool(self.session.finished)


class ManagerModel(RuleBasedStateMachine):
    sessions = Bundle("sessions")

    def __init__(self) -> None:
        super().__init__()
        self.failed = False
        self.me = os.getpid()
        self.fds_before = leaks.open_fds()
        self.processes_before = set(leaks.descendants([self.me]))
        self.owner_of: dict[str, str] = {}  # every id ever handed out, in any manager
        self.counter = 0
        self.loop = GuestLoop()
        self.run(self._open)

    # -------------------------------------------------------------- plumbing

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        try:
            return self.loop.run(fn, *args)
        except BaseException:
            self.failed = True
            raise

    async def _open(self) -> None:
        self.tracked: dict[str, Tracked] = {}  # registered, in registry order
        self.gone: dict[str, Tracked] = {}  # removed from this manager
        self.deleted: set[str] = set()
        self.events: list[ExitEvent] = []
        self.late_events: list[ExitEvent] = []
        self.spawns_since_open = 0  # counts rule calls, so preconditions stay deterministic
        self.watch = QuotaWatch(LIMITS)
        self.tasks_before = sorted(leaks.trio_tasks())
        self.fds_open = leaks.open_fds()
        self.host_done = trio.Event()
        self.closed_at = -1.0
        manager, scope = await self.loop.nursery.start(self._host)
        self.manager: Manager = manager
        self.scope: trio.CancelScope = scope

    async def _host(self, task_status: trio.TaskStatus[tuple[Manager, trio.CancelScope]]) -> None:
        watch = self.watch
        try:
            with trio.CancelScope() as scope:
                async with trio_pty.open_manager(LIMITS, on_exit=self._on_exit) as manager:
                    watch.manager = manager
                    trio.lowlevel.add_instrument(watch)
                    task_status.started((manager, scope))
                    await trio.sleep_forever()
        finally:
            self.closed_at = trio.current_time()
            if watch.manager is not None:
                trio.lowlevel.remove_instrument(watch)
            self.host_done.set()

    async def _on_exit(self, event: ExitEvent) -> None:
        (self.late_events if event.owner in self.deleted else self.events).append(event)

    def token(self) -> str:
        self.counter += 1
        return f"w{self.counter}"

    async def type_first_input(self, session_id: str, owner: str, program: Program) -> None:
        if program.typed:
            await self.manager.write(session_id, program.typed, owner=owner)

    def never_spawned(self, owner: str) -> str:
        """An id for a refused spawn. Every spawn adds exactly one id to the bundle, so the
        data hypothesis draws does not depend on timing (replay must draw the same); this one
        names no session, so using it must give SessionNotFound."""
        session_id = f"pty_never{self.token()}"
        self.owner_of[session_id] = owner
        return session_id

    def lookup(self, session_id: str) -> tuple[Tracked | None, str]:
        return self.tracked.get(session_id), self.owner_of[session_id]

    def track(
        self, info: SessionInfo, program: str, timeout: float | None, notify: bool
    ) -> Tracked:
        self.owner_of[info.id] = info.owner
        return Tracked(
            id=info.id,
            owner=info.owner,
            program=program,
            timeout=timeout,
            notify=notify,
            pid=info.pid,
            created_at=info.created_at,
            session=self.manager._sessions.get(info.id),
        )

    def observe(self, tracked: Tracked, info: SessionInfo) -> None:
        """Fold one observation of a session into the model, checking it may follow."""
        where = f"{tracked.id} ({tracked.program})"
        assert info.status in FORWARD[tracked.status], f"{where}: {tracked.status} -> {info.status}"
        assert info.byte_count >= tracked.byte_count, f"{where}: byte_count went back"
        assert info.line_count >= tracked.line_count, f"{where}: line_count went back"
        assert (info.owner, info.pid) == (tracked.owner, tracked.pid), where
        assert info.error is None, f"{where}: {info.error}"
        program = PROGRAMS[tracked.program]
        if info.status == "exited":
            assert program.exit_code is not None, f"{where}: exited by itself"
            assert (info.exit_code, info.exit_signal) == (program.exit_code, None), info
            assert not info.timed_out, info
        if info.status == "killed":
            assert (info.exit_code is None) != (info.exit_signal is None), info
        if info.timed_out:
            assert tracked.timeout is not None and info.status in ("killing", "killed"), info
        tracked.status = info.status
        tracked.byte_count, tracked.line_count = info.byte_count, info.line_count

    def forget(self, session_id: str) -> None:
        self.gone[session_id] = self.tracked.pop(session_id)

    def assert_nothing_left_of(self, session_id: str) -> None:
        left = tagged_processes(self.manager, session_id)
        assert left == [], f"{session_id}: processes left after teardown: {left}"

    # -------------------------------------------------------------- spawning

    def predict_spawn(self, owner: str, tenant: Tenant = EVERYONE) -> tuple[str, list[str]]:
        """("deleted", []), ("refused", live ids of the owner) or ("ok", evicted ids): the
        manager's reservation rule, applied to the statuses observed just now; `tenant`
        evicts only sessions of owners it sees, and holds those to its own bound."""
        if owner in self.deleted:
            return "deleted", []
        sessions = list(self.tracked.values())
        visible = [t for t in sessions if tenant.sees(t.owner)]
        owned = [t for t in sessions if t.owner == owner]
        live = [t.id for t in owned if t.status == "running"]
        evicted: list[str] = []

        def oldest_ended(candidates: list[Tracked]) -> Tracked | None:
            # Ended AND torn down: a session still dying holds processes, so it counts.
            ended = [t for t in candidates if t.finished and t.id not in evicted]
            return min(ended, key=lambda t: t.created_at) if ended else None

        # Refused at first, a spawn waits for an ended session still being torn down (if
        # any) and tries once more: its outcome then depends on that wait ("waits").
        dying = any(t.status != "running" and not t.finished for t in visible)
        refused = ("waits", live) if dying else ("refused", live)
        if len(owned) >= LIMITS.max_sessions_per_owner:
            victim = oldest_ended(owned)
            if victim is None:
                return refused
            evicted.append(victim.id)
        if tenant.max_sessions is not None:
            held = [t for t in visible if t.id not in evicted]
            if len(held) >= tenant.max_sessions:
                victim = oldest_ended(owned) or oldest_ended(visible)
                if victim is None:
                    return refused
                evicted.append(victim.id)
        if len(sessions) - len(evicted) >= LIMITS.max_sessions:
            victim = oldest_ended(owned) or oldest_ended(visible)
            if victim is None:
                return refused
            evicted.append(victim.id)
        return "ok", evicted

    def refresh(self) -> None:
        """Observe every session now (no checkpoint follows before the caller acts)."""
        for info in self.manager.list_all():
            self.observe(self.tracked[info.id], info)

    @rule(
        target=sessions,
        owner=st.sampled_from(OWNERS),
        program=st.sampled_from(PROGRAM_NAMES),
        timeout=st.sampled_from([None, None, None, 0.3]),
        notify=st.booleans(),
        tenant=st.sampled_from(sorted(TENANTS)),
    )
    def spawn(
        self, owner: str, program: str, timeout: float | None, notify: bool, tenant: str
    ) -> str:
        self.spawns_since_open += 1
        return self.run(self._spawn, owner, program, timeout, notify, TENANTS[tenant])

    async def _spawn(
        self, owner: str, name: str, timeout: float | None, notify: bool, tenant: Tenant
    ) -> str:
        program = PROGRAMS[name]
        if not tenant.sees(owner):
            tenant = EVERYONE  # a token's scope refuses that spawn before the manager
        self.refresh()
        verdict, ids = self.predict_spawn(owner, tenant)
        note(f"spawn {name} for {owner} ({tenant.name}): the model expects {verdict} {ids}")
        try:
            info = await self.manager.spawn(
                program.command,
                program.args,
                owner=owner,
                description=name,
                timeout=timeout,
                notify_on_exit=notify,
                tenant=tenant,
            )
        except errors.OwnerDeleted:
            assert verdict == "deleted"
            return self.never_spawned(owner)
        except errors.LimitExceeded as refusal:
            assert verdict in ("refused", "waits"), f"refused, but the model expected {verdict}"
            if verdict == "refused":
                assert sorted(refusal.live_ids) == sorted(ids)
            else:  # re-observed after the wait: the live sessions of this owner now
                self.refresh()
                running = [t.id for t in self.tracked.values() if t.owner == owner]
                assert set(refusal.live_ids) <= set(running), (refusal.live_ids, running)
            return self.never_spawned(owner)
        assert verdict in ("ok", "waits"), f"spawned, but the model expected {verdict} {ids}"
        if verdict == "waits":  # whatever the retry evicted is gone from the manager now
            present = {session.id for session in self.manager.list_all()}
            ids = [session_id for session_id in self.tracked if session_id not in present]
        for session_id in ids:
            self.forget(session_id)
        self.tracked[info.id] = self.track(info, name, timeout, notify)
        await self.type_first_input(info.id, owner, program)
        return info.id

    @initialize(owner=st.sampled_from(OWNERS))
    def burst_for_one_owner(self, owner: str) -> None:
        """A fixed first step of every example: BURST concurrent spawns for one owner. The
        manager has room for more than the owner's quota, so only the reservations of the
        spawns in flight (none registered yet) can hold the owner to its quota: exactly
        that many start. They are then killed and removed, so the example starts empty."""
        self.run(self._burst_for_one_owner, owner)

    async def _burst_for_one_owner(self, owner: str) -> None:
        started: list[str] = []
        refused: list[errors.LimitExceeded] = []

        async def one() -> None:
            try:
                info = await self.manager.spawn("cat", owner=owner, description="burst")
            except errors.LimitExceeded as refusal:
                refused.append(refusal)
            else:
                started.append(info.id)

        async with trio.open_nursery() as nursery:
            for _ in range(BURST):
                nursery.start_soon(one)
        assert len(started) == LIMITS.max_sessions_per_owner, started
        assert len(refused) == BURST - LIMITS.max_sessions_per_owner
        assert self.watch.violations == []
        for session_id in started:
            await self.manager.kill(session_id, owner=owner, cleanup=True)
        assert self.manager.list_all() == []

    @rule(
        target=sessions,
        requests=st.lists(
            st.tuples(st.sampled_from(OWNERS), st.sampled_from(PROGRAM_NAMES)),
            min_size=2,
            max_size=5,
        ),
    )
    def spawn_burst(self, requests: list[tuple[str, str]]) -> object:
        self.spawns_since_open += 1
        return multiple(*self.run(self._spawn_burst, requests))

    async def _spawn_burst(self, requests: Sequence[tuple[str, str]]) -> list[str]:
        """Concurrent spawns: the quota watch checks every task step; afterwards only what
        can be known without the interleaving is checked."""
        manager = self.manager
        self.refresh()
        started: dict[str, Tracked] = {}
        refusals: list[tuple[str, errors.PtyError]] = []
        ids = [self.never_spawned(owner) for owner, _ in requests]

        async def one(index: int, owner: str, name: str) -> None:
            program = PROGRAMS[name]
            try:
                info = await manager.spawn(
                    program.command, program.args, owner=owner, description=name
                )
            except (errors.LimitExceeded, errors.OwnerDeleted) as refusal:
                refusals.append((owner, refusal))
                return
            ids[index] = info.id
            started[info.id] = self.track(info, name, None, False)
            # A later spawn of the burst may evict it once it has ended.
            with contextlib.suppress(errors.NotRunning, errors.SessionNotFound):
                await self.type_first_input(info.id, owner, program)

        async with trio.open_nursery() as nursery:
            for index, (owner, name) in enumerate(requests):
                nursery.start_soon(one, index, owner, name)
        known = {**self.tracked, **started}
        now = [info.id for info in manager.list_all()]
        assert set(now) <= set(known), "a session the burst did not start appeared"
        for session_id in set(known) - set(now):
            tracked = known[session_id]
            assert tracked.session is None or tracked.finished, (
                f"session {session_id} was evicted before its teardown finished"
            )
        for owner, refusal in refusals:
            if isinstance(refusal, errors.OwnerDeleted):
                assert owner in self.deleted
            else:
                assert isinstance(refusal, errors.LimitExceeded)
                assert all(known[i].owner == owner for i in refusal.live_ids), refusal
        for tracked in started.values():
            assert tracked.owner not in self.deleted
        self.gone.update({i: t for i, t in known.items() if i not in now})
        self.tracked = {i: known[i] for i in now}
        return ids

    # -------------------------------------------------------------- input and output

    @rule(session=sessions)
    def write(self, session: str) -> None:
        self.run(self._write, session)

    async def _write(self, session_id: str) -> None:
        tracked, owner = self.lookup(session_id)
        token = self.token()
        if tracked is None:
            with pytest.raises(errors.SessionNotFound):
                await self.manager.write(session_id, token, owner=owner)
            return
        program = PROGRAMS[tracked.program]
        text = (program.reply or "{}\n").format(token)
        wait = Wait(pattern=f"^got {token}$", timeout_ms=3000) if program.reply else None
        before = self.manager.get(session_id, owner=owner).status
        try:
            result = await self.manager.write(session_id, text, owner=owner, wait=wait)
        except errors.NotRunning:
            assert self.manager.get(session_id, owner=owner).status != "running"
            return
        assert before == "running", f"a write to a {before} session went in"
        assert result.bytes_written == len(text.encode())
        if result.output is not None and result.output.reason != "matched":
            status = self.manager.get(session_id, owner=owner).status
            assert status != "running", f"{program} never answered {token}: {result.output}"

    @rule(
        session=sessions,
        start=st.sampled_from(["zero", "middle", "end"]),
        limit=st.sampled_from([1, 3, 500]),
        pattern=st.sampled_from([None, None, "^[0-9a-f]+$", "^(got|out)"]),
    )
    def read(self, session: str, start: str, limit: int, pattern: str | None) -> None:
        self.run(self._read, session, start, limit, pattern)

    async def _read(self, session_id: str, start: str, limit: int, pattern: str | None) -> None:
        tracked, owner = self.lookup(session_id)
        if tracked is None:
            with pytest.raises(errors.SessionNotFound):
                await self.manager.read(session_id, owner=owner)
            return
        info = self.manager.get(session_id, owner=owner)
        self.observe(tracked, info)
        offset = {"zero": 0, "middle": info.line_count // 2, "end": info.line_count}[start]
        page = await self.manager.read(
            session_id, owner=owner, offset=offset, limit=limit, pattern=pattern
        )
        numbers = [line.number for line in page.lines]
        assert len(numbers) <= limit and numbers == sorted(set(numbers)), numbers
        assert all(n >= max(offset, page.first_line) for n in numbers), (offset, page)
        assert page.total_lines >= info.line_count
        assert all(len(line.text) <= LIMITS.max_line_length for line in page.lines)
        if pattern is None:
            assert numbers == list(
                range(max(offset, page.first_line), len(numbers) + max(offset, page.first_line))
            )
            assert page.missed_lines == max(0, page.first_line - offset)
        program = PROGRAMS[tracked.program]
        if info.status == "exited" and program.lines is not None and pattern is None:
            whole = await self.manager.read(session_id, owner=owner, offset=0, limit=500)
            assert [line.text for line in whole.lines] == list(program.lines), whole

    @rule(session=sessions, kind=st.sampled_from(["idle", "pattern", "exit"]))
    def wait(self, session: str, kind: str) -> None:
        self.run(self._wait, session, kind)

    async def _wait(self, session_id: str, kind: str) -> None:
        tracked, owner = self.lookup(session_id)
        spec = {
            "idle": Wait(idle_ms=50, timeout_ms=300),
            "pattern": Wait(pattern="never-printed", timeout_ms=200),
            "exit": Wait(exit=True, timeout_ms=300),
        }[kind]
        if tracked is None:
            with pytest.raises(errors.SessionNotFound):
                await self.manager.read(session_id, owner=owner, wait=spec)
            return
        before = self.manager.get(session_id, owner=owner)
        start = trio.current_time()
        page = await self.manager.read(session_id, owner=owner, wait=spec)
        elapsed = trio.current_time() - start
        assert spec.timeout_ms is not None
        assert elapsed <= spec.timeout_ms / 1000 + WAIT_SLACK, elapsed
        after = self.manager.get(session_id, owner=owner)
        assert page.reason in {"idle": {"idle", "exited", "timeout"}}.get(
            kind, {"exited", "timeout"}
        ), page.reason
        if before.status == "exited":
            assert page.reason == "exited" or (kind == "idle" and page.reason == "idle")
        if page.reason == "exited":
            assert after.status != "running"
        if page.reason == "idle":
            assert after.byte_count > 0
        if before.status == "exited":
            with trio.fail_after(1):
                ending = await self.manager.wait_exit(session_id, owner=owner)
            assert (ending.exit_code, ending.exit_signal) == (before.exit_code, before.exit_signal)

    @rule(
        session=sessions,
        start=st.sampled_from(["snapshot", "zero", "end"]),
        chunks=st.integers(1, 3),
        driver=st.booleans(),
    )
    def attach(self, session: str, start: str, chunks: int, driver: bool) -> None:
        self.run(self._attach, session, start, chunks, driver)

    async def _attach(self, session_id: str, start: str, chunks: int, driver: bool) -> None:
        tracked, owner = self.lookup(session_id)
        manager = self.manager
        if tracked is None:
            with pytest.raises(errors.SessionNotFound):
                async with manager.attach(session_id, owner=owner):
                    pass
            return
        info = manager.get(session_id, owner=owner)
        offset = {"snapshot": None, "zero": 0, "end": info.byte_count}[start]
        finished = tracked.finished
        got = []
        async with manager.attach(session_id, owner=owner, offset=offset, driver=driver) as stream:
            if finished:
                # Everything retained, then the end: the iteration must stop by itself.
                with trio.fail_after(2):
                    got = [chunk async for chunk in stream]
            else:
                with trio.move_on_after(0.3):
                    async for chunk in stream:
                        got.append(chunk)
                        if len(got) >= chunks:
                            break
        for previous, chunk in itertools.pairwise(got):
            assert chunk.gap or chunk.offset == previous.offset + len(previous.data), got
        if got and offset is not None and not got[0].gap:
            assert got[0].offset == offset
        for chunk in got:
            raw = await manager.read_raw(
                session_id, owner=owner, offset=chunk.offset, limit=len(chunk.data)
            )
            if not raw.gap:
                assert raw.data == chunk.data
        if finished and got and not got[0].gap:
            assert (
                got[-1].offset + len(got[-1].data)
                == manager.get(session_id, owner=owner).byte_count
            )

    @rule(session=sessions, rows=st.integers(2, 200), cols=st.integers(2, 300))
    def resize(self, session: str, rows: int, cols: int) -> None:
        self.run(self._resize, session, rows, cols)

    async def _resize(self, session_id: str, rows: int, cols: int) -> None:
        tracked, owner = self.lookup(session_id)
        if tracked is None:
            with pytest.raises(errors.SessionNotFound):
                await self.manager.resize(session_id, owner=owner, rows=rows, cols=cols)
            return
        if self.manager.get(session_id, owner=owner).status != "running":
            with pytest.raises(errors.NotRunning):
                await self.manager.resize(session_id, owner=owner, rows=rows, cols=cols)
            return
        info = await self.manager.resize(session_id, owner=owner, rows=rows, cols=cols)
        assert (info.rows, info.cols) == (rows, cols)

    @rule(session=sessions, intruder=st.sampled_from(OWNERS))
    def intrude(self, session: str, intruder: str) -> None:
        self.run(self._intrude, session, intruder)

    async def _intrude(self, session_id: str, intruder: str) -> None:
        """Another owner's session is reported exactly like a missing one, by every call."""
        tracked, owner = self.lookup(session_id)
        if intruder == owner:
            return
        manager = self.manager
        before = tracked.status if tracked is not None else None
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: manager.read(session_id, owner=intruder),
            lambda: manager.read_raw(session_id, owner=intruder),
            lambda: manager.write(session_id, "x\n", owner=intruder),
            lambda: manager.resize(session_id, owner=intruder, rows=5, cols=5),
            lambda: manager.kill(session_id, owner=intruder, cleanup=True),
            lambda: manager.wait_exit(session_id, owner=intruder),
        ]
        for call in calls:
            with pytest.raises(errors.SessionNotFound) as caught:
                await call()
            assert str(caught.value) == f"PTY session not found: {session_id}"
        with pytest.raises(errors.SessionNotFound):
            manager.get(session_id, owner=intruder)
        with pytest.raises(errors.SessionNotFound):
            async with manager.attach(session_id, owner=intruder):
                pass
        assert session_id not in [info.id for info in manager.list(intruder)]
        if tracked is not None and before == "running" and tracked.timeout is None:
            assert manager.get(session_id, owner=owner).status in ("running", "exited")

    # -------------------------------------------------------------- endings

    @rule(session=sessions, cleanup=st.booleans())
    def kill(self, session: str, cleanup: bool) -> None:
        self.run(self._kill, session, cleanup)

    async def _kill(self, session_id: str, cleanup: bool) -> None:
        tracked, owner = self.lookup(session_id)
        if tracked is None:
            with pytest.raises(errors.SessionNotFound):
                await self.manager.kill(session_id, owner=owner, cleanup=cleanup)
            return
        before = self.manager.get(session_id, owner=owner).status
        start = trio.current_time()
        info = await self.manager.kill(session_id, owner=owner, cleanup=cleanup)
        elapsed = trio.current_time() - start
        MEASURED["kill"].append(elapsed)
        event(f"kill of {tracked.program}: {'> grace' if elapsed > GRACE else '<= grace'}")
        assert elapsed <= GRACE + TEARDOWN_MARGIN, f"kill of {tracked.program} took {elapsed:.3f} s"
        expected = "killed" if before in ("running", "killing") else before
        assert info.status == expected, (before, info)
        self.observe(tracked, info)
        assert tracked.finished
        self.assert_nothing_left_of(session_id)
        if cleanup:
            self.forget(session_id)
            with pytest.raises(errors.SessionNotFound):
                self.manager.get(session_id, owner=owner)

    @precondition(lambda self: self.spawns_since_open > 0)
    @rule(owner=st.sampled_from(OWNERS))
    def delete_owner(self, owner: str) -> None:
        self.run(self._delete_owner, owner)

    async def _delete_owner(self, owner: str) -> None:
        mine = [t for t in self.tracked.values() if t.owner == owner]
        start = trio.current_time()
        removed = await self.manager.delete_owner(owner)
        elapsed = trio.current_time() - start
        MEASURED["delete_owner"].append(elapsed)
        assert elapsed <= GRACE + TEARDOWN_MARGIN, f"delete_owner took {elapsed:.3f} s"
        assert removed == len(mine)
        self.deleted.add(owner)
        for tracked in mine:
            assert tracked.finished
            self.assert_nothing_left_of(tracked.id)
            self.forget(tracked.id)
        assert self.manager.list(owner) == []

    @rule(seconds=st.sampled_from([0.05, 0.3]))
    def let_time_pass(self, seconds: float) -> None:
        self.run(trio.sleep, seconds)

    @precondition(lambda self: self.spawns_since_open > 0)  # else it is a no-op, and common
    @rule()
    def cancel_everything(self) -> None:
        self.run(self._cancel_everything, True)
        self.run(self._open)

    async def _cancel_everything(self, check: bool) -> None:
        """Cancel the scope around the manager block; with `check`, prove nothing remains."""
        start = trio.current_time()
        self.scope.cancel()
        await self.host_done.wait()
        elapsed = self.closed_at - start
        if not check:
            return
        MEASURED["cancel-everything"].append(elapsed)
        note(f"cancel-everything took {elapsed:.3f} s")
        assert elapsed <= GRACE + TEARDOWN_MARGIN, f"cancel-everything took {elapsed:.3f} s"
        left = [
            view
            for pid, view in leaks.descendants([self.me]).items()
            if pid not in self.processes_before
        ]
        survivors = tagged_by_session(self.manager)
        assert not left and not survivors, f"left after cancel-everything: {left} {survivors}"
        assert leaks.open_fds() == self.fds_open
        assert sorted(leaks.trio_tasks()) == self.tasks_before
        assert self.watch.violations == []
        for tracked in [*self.tracked.values(), *self.gone.values()]:
            assert tracked.session is None or tracked.finished, tracked.id
            if tracked.session is not None:
                info = tracked.session.info()
                self.observe(tracked, info)
                assert info.status in ("exited", "killed"), info

    # -------------------------------------------------------------- invariants

    @invariant()
    def agrees_with_the_model(self) -> None:
        self.run(self._check)

    async def _check(self) -> None:
        manager = self.manager
        infos = manager.list_all()
        assert [i.id for i in infos] == list(self.tracked), "the registry disagrees with the model"
        for info in infos:
            self.observe(self.tracked[info.id], info)
        for owner in OWNERS:
            mine = manager.list(owner)
            assert [i.id for i in mine] == [t.id for t in self.tracked.values() if t.owner == owner]
            assert all(i.owner == owner for i in mine)
        assert manager._admission.pending.total() == 0, (
            f"reservations leaked: {manager._admission.pending}"
        )
        assert self.watch.violations == []
        tags = tagged_by_session(manager)
        for tracked in [*self.tracked.values(), *self.gone.values()]:
            if tracked.finished:
                assert not tags.get(tracked.id), f"{tracked.id} finished, left {tags[tracked.id]}"
        seen: set[str] = set()
        for ending in self.events:
            assert ending.id not in seen, f"two exit events for {ending.id}"
            seen.add(ending.id)
            source = self.tracked.get(ending.id) or self.gone.get(ending.id)
            assert source is not None and source.notify and ending.owner == source.owner
            program = PROGRAMS[source.program]
            if not ending.timed_out:
                assert (ending.exit_code, ending.exit_signal) == (program.exit_code, None), ending
        assert self.late_events == [], "exit events delivered for a deleted owner"

    def teardown(self) -> None:
        try:
            if not self.loop.finished:
                self.run(self._cancel_everything, not self.failed)
        finally:
            self.loop.close()
        if not self.failed:
            assert leaks.open_fds() == self.fds_before
            left = set(leaks.descendants([self.me])) - self.processes_before
            assert left == set(), f"processes left after the example: {left}"


MODEL_SETTINGS = settings(
    max_examples=MODEL_EXAMPLES,
    stateful_step_count=MODEL_STEPS,
    deadline=None,
    # No target phase (each of its hill-climbing steps runs real processes) and no explain
    # phase (a failure's steps already say what happened).
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_manager_model() -> None:
    MEASURED.clear()
    run_state_machine_as_test(ManagerModel, settings=MODEL_SETTINGS)
    if os.environ.get("TRIO_PTY_MODEL_REPORT"):
        for what, values in sorted(MEASURED.items()):
            ordered = sorted(values)
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
            print(
                f"\n{what}: n={len(ordered)} median={ordered[len(ordered) // 2]:.3f} s "
                f"p99={p99:.3f} s max={ordered[-1]:.3f} s (grace {GRACE} s)"
            )


async def test_sessions_being_torn_down_count_against_the_quota() -> None:
    """One owner, a quota of one: while its session is being killed (a SIGTERM-ignorer in
    its grace, after its timeout), a new spawn must not make it two sessions holding
    processes. Refusing the spawn (or making it wait) are both fine."""
    limits = Limits(max_sessions=2, max_sessions_per_owner=1, terminate_grace=1.0)
    script = "trap '' HUP TERM; echo ready; exec sleep 100"
    with trio.fail_after(20):
        async with trio_pty.open_manager(limits) as manager:
            for index in range(3):
                try:
                    info = await manager.spawn(
                        "sh", ["-c", script], owner="o", description=str(index), timeout=0.3
                    )
                except errors.LimitExceeded:
                    break
                await wait_for_text(manager, info.id, "ready", owner="o")
                await wait_for_status(manager, info.id, "killing", owner="o")
                holding = tagged_by_session(manager)
                assert len(holding) <= limits.max_sessions_per_owner, holding
