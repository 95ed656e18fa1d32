"""Find every process a session started, signal them, and wait until they are gone.

"A session's processes" are: everything in the leader's session (sid) and process group, the
tty's foreground group, every descendant of those found through the /proc parent chain, and
every child of ours (we are a child subreaper) whose environment carries the session's tag:
a descendant that called setsid and double-forked away lands on us, and the tag says whose it
is. Processes are signalled through pidfds after checking their start time, so a recycled pid
is never signalled (pid_max is 32768 on many machines).

Zombies are dead: they count as gone. Those that are our children are reaped here, but only
when they are certainly adopted (see `Snapshot.certainly_adopted`), so the exit status of a
child that trio or the embedding program waits on is never stolen; and not while they pin a
group of ours (see `ProcessTable`).
"""

from __future__ import annotations

import collections
import math
import os
import signal
import time
from collections.abc import Callable, Iterable
from typing import Final

import attrs
import trio

from . import schedule
from .child import Child
from .proc import (
    OUT_OF_RESOURCES,
    ProcEntry,
    Snapshot,
    TagCache,
    read_stat,
    reap,
    scan,
    signal_group,
    signal_process,
)

_OWNER_MEMORY: Final = 1.0
"""How long (seconds) an id unused in every scan keeps its owner: a hopper's group can look
unused to a scan that missed its one living process, while an id is reused only after the
pid allocator has wrapped around pid_max (tens of thousands of forks later)."""

Tags = tuple[str, str]

_HELD: collections.Counter[tuple[int, int]] = collections.Counter()
"""Zombies held as pins by any table of this process: children, the subreaper and reaping
are per process, and a manager must not reap the pin of another manager's group."""


class ProcessTable:
    """Shares /proc scans, and what they taught, between concurrent teardowns.

    A scan of ~1000 processes costs ~10-20 ms, so 256 teardowns must not scan 256 times per
    round. Callers say how recent a snapshot they need (`not_before`, on `clock`); any
    snapshot taken since then is shared. And scans are throttled by their own cost (at most
    a third of the time goes to scanning): teardown only needs each round's snapshot to be
    newer than the last, so a throttled answer delays it a little but never misleads it.

    The table also remembers every process any teardown identified as a session's (but not
    a leader): if one becomes our zombie, even after its death erased what made it a member
    (environment, parent), it is ours to reap.

    **Pins.** A process that ignores SIGTERM, calls setsid, then forks and lets the parent
    exit every few milliseconds changes pid faster than a scan can follow: a listing holds
    the pid that is about to exit, never its successor. Its process group can be signalled
    as a whole, though (a group signal reaches every member at once, and a fork in progress
    cannot slip past it), but only while the group id cannot have been recycled. A group id
    stays taken for as long as any process of the group exists, zombies included, and each
    pid it hops away from becomes our zombie (we are the subreaper). So an adopted zombie in
    a group or session seen holding a tagged process of ours is kept unreaped: it *pins*
    that id, which makes `killpg` on it exact. A pin is released (and its zombie reaped) once
    two scans in a row show nothing else in its group or session; until then the group is
    `active`, and a teardown of its session does not finish.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._taken = -math.inf
        self._ready_again = -math.inf
        self._snapshot: Snapshot | None = None
        self._reaped: Snapshot | None = None
        self._tag_cache: TagCache = {}
        self._members: set[tuple[int, int]] = set()
        self._member_sids: set[int] = set()
        self.leaders: set[int] = set()
        """Pids of session leaders being torn down: trio's children, never reaped here."""
        self._owners: dict[int, tuple[Tags, float]] = {}
        """Group and session ids -> the session a process of ours seen in them belongs to,
        and when an id was last seen in use."""
        self._pins: dict[int, tuple[int, int]] = {}
        """Group and session ids -> (pid, start time) of the zombie of ours holding them."""
        self._quiet_since: dict[int, float] = {}
        """Pinned ids whose last scan showed nothing but pins -> when that scan finished."""
        self._pinned_by_owner: dict[Tags, list[int]] | None = None
        """`pinned_groups` for every session at once, rebuilt after pins or their owners
        changed: each of N teardowns asks every round, and a scan of all the pins for each
        made a round cost N x pins."""
        self.rounds = Rounds()
        """Runs the rounds of every teardown that shares this table (see `Rounds`)."""

    def snapshot(self, *, not_before: float | None = None, throttle: bool = True) -> Snapshot:
        """A snapshot taken at or after `not_before`, or else (with `throttle`) the newest
        the throttle allows; without `not_before`, always a new one."""
        fresh_enough = not_before is not None and schedule.snapshot_will_do(
            self._taken,
            now=self._clock(),
            not_before=not_before,
            throttle=throttle,
            ready=self._ready_again,
        )
        if self._snapshot is not None and fresh_enough:
            return self._snapshot
        taken = self._clock()
        snapshot = scan(self._tag_cache)
        entries = snapshot.entries.values()
        live = {e.key for e in entries}
        self._tag_cache = {k: v for k, v in self._tag_cache.items() if k in live}
        snapshot._tag_cache = self._tag_cache
        self._members &= live
        self._member_sids &= snapshot.by_sid.keys()
        self._learn_owners(snapshot)
        done = self._clock()
        snapshot.taken, snapshot.done = taken, done
        self._snapshot = snapshot
        self._taken, self._ready_again = taken, schedule.ready_again(taken, done)
        return snapshot

    def _learn_owners(self, snapshot: Snapshot) -> None:
        """Which session each group and session id belongs to, from the living processes
        whose tags are known; forget ids that nothing has used for a while (see
        _OWNER_MEMORY)."""
        now = self._clock()
        owners = {}
        for ident, (tags, seen) in self._owners.items():
            if ident in snapshot.by_pgid or ident in snapshot.by_sid or ident in self._pins:
                owners[ident] = (tags, now)
            elif now - seen < _OWNER_MEMORY:
                owners[ident] = (tags, seen)
        self._owners = owners
        self._pinned_by_owner = None
        for key, found in self._tag_cache.items():
            # A zombie's tags are known if it was seen alive: its ids are still the ones
            # it lived in.
            entry = snapshot.entries.get(key[0])
            if found[0] and entry is not None and entry.start_time == key[1]:
                self._own(entry, found)

    def _own(self, entry: ProcEntry, tags: Tags) -> None:
        now = self._clock()
        for ident in (entry.pgid, entry.sid):
            if ident in self._pins and self._owners.get(ident, (None,))[0] != tags:
                self._pinned_by_owner = None
            self._owners[ident] = (tags, now)

    def note_members(self, entries: Iterable[ProcEntry], tags: Tags | None = None) -> None:
        """Remember processes identified as a session's (never pass a leader), their
        session ids, and (with the session's `tags`) that their groups are the session's:
        a member found as a descendant says so as surely as its tags would."""
        for entry in entries:
            self._members.add(entry.key)
            self._member_sids.add(entry.sid)
            if tags is not None and not entry.dead:
                self._own(entry, tags)

    def is_member(self, entry: ProcEntry) -> bool:
        """Known as a session's process, or the leader of a session that holds one: the
        daemon(3) idiom's middle process calls setsid, forks and dies before any scan sees
        it, but its child (tagged, and in its session) is seen, and sessions are inherited,
        so the middle process descends from ours too."""
        return entry.pid not in self.leaders and (
            entry.key in self._members
            or (entry.sid == entry.pid and entry.pid in self._member_sids)
        )

    def pinned_groups(self, tags: Tags) -> list[int]:
        """The pinned ids that belong to this session: safe to signal as groups."""
        if self._pinned_by_owner is None:
            self._pinned_by_owner = collections.defaultdict(list)
            for ident in self._pins:
                if ident in self._owners:
                    self._pinned_by_owner[self._owners[ident][0]].append(ident)
        return list(self._pinned_by_owner.get(tags, ()))

    def active(self, ids: Iterable[int]) -> bool:
        """True while one of these pinned ids showed anything but pins in the last scan."""
        return any(i in self._pins and i not in self._quiet_since for i in ids)

    def reap_orphans(self, snapshot: Snapshot) -> None:
        """Reap our dead children that were certainly adopted or known session members,
        except those that pin an id (see the class docstring); release quiet pins. Once per
        snapshot, however many teardowns share it."""
        if snapshot is self._reaped:
            return
        self._reaped = snapshot
        own = {snapshot.own_pgid, snapshot.own_sid}
        # A pin whose zombie someone else reaped holds nothing any more.
        for ident, key in list(self._pins.items()):
            entry = snapshot.entries.get(key[0])
            if entry is None or entry.key != key:
                self._drop(ident, key)
        held = set(self._pins.values())
        for pid in snapshot.children.get(snapshot.own_pid, ()):
            entry = snapshot.entries[pid]
            if not entry.dead or entry.key in held:
                continue
            if not (snapshot.certainly_adopted(entry) or self.is_member(entry)):
                continue
            free = {
                i
                for i in (entry.pgid, entry.sid)
                if i > 1 and i not in own and i not in self._pins and i in self._owners
            }
            for ident in free:  # (a zombie another manager holds can pin for us too)
                self._pins[ident] = entry.key
                self._pinned_by_owner = None
                held.add(entry.key)
                _HELD[entry.key] += 1
            if not free and entry.key not in _HELD:
                reap(pid)
        for ident, key in list(self._pins.items()):
            around = (*snapshot.by_pgid.get(ident, ()), *snapshot.by_sid.get(ident, ()))
            if any(snapshot.entries[pid].key not in _HELD for pid in around):
                self._quiet_since.pop(ident, None)
            elif ident not in self._quiet_since:
                self._quiet_since[ident] = snapshot.done
            elif snapshot.taken >= self._quiet_since[ident]:
                self._release(ident, key)

    def release_pins(self) -> None:
        """Reap every zombie held as a pin: when the manager closes, after every teardown."""
        for ident, key in list(self._pins.items()):
            self._release(ident, key)

    def _release(self, ident: int, key: tuple[int, int]) -> None:
        self._drop(ident, key)
        if key not in _HELD:
            reap(key[0])

    def _drop(self, ident: int, key: tuple[int, int]) -> None:
        del self._pins[ident]
        self._pinned_by_owner = None
        self._quiet_since.pop(ident, None)
        _HELD[key] -= 1
        if _HELD[key] <= 0:
            del _HELD[key]

    def reap_member(self, pid: int, start_time: int) -> None:
        """Reap one known member if it is now our zombie (checked by start time first) and
        pins nothing."""
        try:
            entry = read_stat(pid)
        except OSError:
            return
        if (
            entry is not None
            and entry.start_time == start_time
            and entry.dead
            and entry.ppid == os.getpid()
            and self.is_member(entry)
            and entry.key not in _HELD
        ):
            reap(pid)


@attrs.frozen
class TeardownReport:
    signalled: int
    killed: int
    survivors: list[int]
    blind: bool = False
    """The last look at /proc failed (out of descriptors): survivors are unknown."""
    unconfirmed: list[int] = attrs.field(factory=list)
    """Groups of the session still busy at the deadline: something may live in them."""
    others: int = 0
    """Processes besides the leader that the scans found (a command's background jobs and
    what they started): ended by this teardown, or already dying when it looked."""


Finder = Callable[[Snapshot], dict[int, ProcEntry]]

_FIRST_SCAN_MAX_AGE: Final = 0.05
"""The first round takes any snapshot this recent: later rounds catch the rest."""


class Teardown:
    """The way out of one session (or of the manager's escapees): the manager's driver of
    the teardown's `schedule.Schedule`, in its named steps.

    `hang_up` (SIGHUP to the leader and the tty's foreground group, as a terminal closing
    does: a shell then exits at once with its own status), then rounds of `scan` (the living
    members, in a snapshot shared with every concurrent teardown), the schedule's confirm,
    `signal` (what the schedule orders, to the survivors and the safe groups) and wait (the
    next shared tick, or the leader's exit: `Rounds` runs the round once `wake_at` has
    come), until the schedule confirms the end or `deadline` passes.
    """

    def __init__(
        self,
        find: Finder,
        table: ProcessTable,
        *,
        kill_at: float,
        deadline: float,
        leader: Child | None = None,
        groups: Callable[[], Iterable[int]] = tuple,
        hang_up: Callable[[], Iterable[int]] = tuple,
        tags: Tags | None = None,
    ) -> None:
        """`groups` names the process groups that are safe to signal right now (groups
        catch members forked after the last scan); `hang_up` the groups that get SIGHUP
        first (the leader gets it too); `leader` is the child we hold, reaped by its
        `Child`; `tags` the session's, under which its members' groups are remembered."""
        self._find = find
        self._table = table
        self._schedule = schedule.Schedule(kill_at=kill_at)
        self._deadline = deadline
        self._leader = leader
        self._groups = groups
        self._hang_up_groups = hang_up
        self._tags = tags
        self._started = False
        self._seen: set[tuple[int, int]] = set()
        self._signalled: dict[tuple[int, int], int] = {}
        self._killed = 0
        self._survivors: dict[int, ProcEntry] | None = {}
        self._scan_times = -math.inf, -math.inf
        """When the last snapshot's listing started and when it finished."""
        self._done = False
        self._error: Exception | None = None
        if leader is not None:
            table.leaders.add(leader.pid)

    @property
    def started(self) -> bool:
        return self._started

    @property
    def wake_at(self) -> float:
        """When this teardown's next round is due (trio time)."""
        return self._schedule.wake_at

    async def run(self) -> TeardownReport:
        assert not self._started, "a Teardown runs once"
        self._started = True
        with trio.move_on_at(self._deadline):
            async with trio.open_nursery() as nursery:
                if self._leader is not None:
                    nursery.start_soon(self._watch_leader, self._leader)
                self.hang_up()
                self._schedule.fresh_since = trio.current_time() - _FIRST_SCAN_MAX_AGE
                self._done = self._round()
                if not self._done:
                    await self._table.rounds.until_done(self)
                nursery.cancel_scope.cancel()
        if self._error is not None:
            raise self._error
        survivors = self._survivors
        # A last pass for members that became our zombies since the last scan.
        for pid, start_time in self._seen:
            self._table.reap_member(pid, start_time)
        if self._leader is not None and self._leader.returncode is not None:
            self._table.leaders.discard(self._leader.pid)
        groups = list(self._groups())
        return TeardownReport(
            signalled=len(self._signalled),
            killed=self._killed,
            survivors=sorted(survivors or {}),
            blind=survivors is None,
            unconfirmed=sorted(i for i in groups if self._table.active([i])),
            others=len(self._seen),
        )

    def step(self) -> None:
        """One round, run by `Rounds` once `wake_at` has come. A failure ends this teardown
        only (`run` raises it in the session's own task), never the one that happens to
        drive."""
        try:
            self._done = self._round()
        except Exception as exc:
            self._error, self._done = exc, True

    @property
    def done(self) -> bool:
        return self._done

    def _round(self) -> bool:
        """Scan, confirm, signal, plan the wait; True once the end is confirmed."""
        plan = self._schedule
        self._survivors = survivors = self.scan(plan.fresh_since)
        if plan.confirm(self._findings(survivors)):
            return True
        orders = plan.signal(trio.current_time())
        if orders.escalated:
            self._killed = len(survivors or {})
        if orders.signal is not None:
            self.signal(survivors or {}, orders.signal)
        plan.wait(trio.current_time())
        return False

    def hang_up(self) -> None:
        """SIGHUP (and SIGCONT) to the leader and SIGHUP to the groups given for it, then
        SIGTERM and SIGCONT to the safe groups at once, before the first scan: with
        hundreds of sessions stopping together, a flooding program otherwise keeps a core
        busy until its teardown gets round to it. Once; `run` does it if nobody did."""
        if not self._schedule.hang_up():
            return
        if self._leader_running():
            assert self._leader is not None
            self._leader.send_signal(signal.SIGHUP)
            self._leader.send_signal(signal.SIGCONT)
        for pgid in self._hang_up_groups():
            signal_group(pgid, signal.SIGHUP)
        for pgid in self._groups():
            signal_group(pgid, signal.SIGTERM)
            signal_group(pgid, signal.SIGCONT)

    def scan(self, not_before: float) -> dict[int, ProcEntry] | None:
        """The living members in a snapshot taken since `not_before`; None when /proc
        cannot be read (out of descriptors): then only the groups can be signalled."""
        try:
            snapshot = self._table.snapshot(
                not_before=not_before, throttle=self._schedule.throttled
            )
            members = self._find(snapshot)
        except OSError as exc:
            if exc.errno not in OUT_OF_RESOURCES:
                raise
            return None
        # Any member but the leader can only become our child by adoption.
        leader = self._leader.pid if self._leader is not None else None
        others = [e for e in members.values() if e.pid != leader]
        self._table.note_members(others, self._tags)
        self._seen.update(e.key for e in others)
        self._table.reap_orphans(snapshot)
        self._scan_times = snapshot.taken, snapshot.done
        return {pid: e for pid, e in members.items() if not e.dead}

    def _findings(self, survivors: dict[int, ProcEntry] | None) -> schedule.Scan:
        """What the last scan showed, for the schedule: the leader we hold counts as alive
        until it is reaped; a pinned group of the session still busy keeps it going."""
        if survivors is None:
            return schedule.Scan(-math.inf, -math.inf, alive=self._leader_running(), blind=True)
        alive = bool(survivors) or self._leader_running()  # (a waitpid: only when needed)
        busy = not alive and self._table.active(self._groups())
        return schedule.Scan(*self._scan_times, alive=alive, busy=busy)

    def signal(self, survivors: dict[int, ProcEntry], sig: int) -> None:
        """`sig` to the survivors and the safe groups (with SIGCONT after SIGTERM), and to
        anything new in later rounds. A process a group signal reaches gets no signal of its
        own (one syscall for the whole group)."""
        reached = set(self._groups())
        for pgid in reached:
            signal_group(pgid, sig)
            if sig == signal.SIGTERM:
                signal_group(pgid, signal.SIGCONT)
        for entry in survivors.values():
            if entry.pgid in reached or self._signalled.get(entry.key) == sig:
                continue
            self._signalled[entry.key] = sig
            signal_process(entry, sig)
            if sig == signal.SIGTERM:
                signal_process(entry, signal.SIGCONT)

    def _leader_running(self) -> bool:
        return self._leader is not None and self._leader.returncode is None

    async def _watch_leader(self, process: Child) -> None:
        """The leader exited: look again soon (see `Schedule.look_soon`)."""
        await process.wait()
        if self._schedule.look_soon(trio.current_time()):
            self._table.rounds.poke()


class Rounds:
    """Drives the rounds of every teardown sharing a process table, from one task.

    Each teardown used to run its own rounds: at every shared tick, every one of N tasks
    woke up (and made its cancel scopes and events), and the SIGKILL at the end of the
    grace went out session by session as their tasks got their turn. Now the task of one
    teardown (the *driver*) sleeps until the earliest teardown is due, then runs the round
    of every teardown that is due, one after another on one snapshot; the other teardowns'
    tasks sleep until theirs is done. When the driver's own teardown is done (or its
    deadline cancels it), it hands the driving to a teardown still waiting. Each teardown
    keeps its own deadline, phase, ticks and report: a lone `kill` runs exactly as before.
    """

    def __init__(self) -> None:
        self._waiting: dict[Teardown, trio.Event] = {}
        """Teardowns not done yet -> set when done (and gone from here) or when they must
        drive. Done ones leave at once, so a hand-over never looks past them."""
        self._driver: Teardown | None = None
        self._poked = trio.Event()

    def poke(self) -> None:
        """A teardown is due sooner than the driver planned (it joined, or its leader
        exited)."""
        self._poked.set()

    async def until_done(self, teardown: Teardown) -> None:
        """Return once `teardown` is done, driving the rounds when nobody else does."""
        self._waiting[teardown] = event = trio.Event()
        self.poke()
        try:
            while not teardown.done:
                if self._driver is None:
                    await self._drive(teardown)
                else:
                    await event.wait()
                    if not teardown.done:  # told to drive
                        self._waiting[teardown] = event = trio.Event()
        finally:
            self._waiting.pop(teardown, None)
            if self._driver is None:
                self._hand_over()

    async def _drive(self, own: Teardown) -> None:
        self._driver = own
        try:
            while not own.done:
                await self._round()
        finally:
            self._driver = None

    def _hand_over(self) -> None:
        """Nobody drives (the driver is done, or was cut off by its deadline, as may be one
        told to take over): wake a teardown still waiting for its end to drive."""
        for event in self._waiting.values():
            event.set()
            return

    async def _round(self) -> None:
        """Sleep until the earliest teardown is due (or a poke), then step every due one."""
        self._poked = trio.Event()
        with trio.move_on_at(min((t.wake_at for t in self._waiting), default=math.inf)):
            await self._poked.wait()
        now = trio.current_time()
        for teardown, event in list(self._waiting.items()):
            if teardown.wake_at <= now:
                teardown.step()
                if teardown.done:
                    del self._waiting[teardown]
                    event.set()
