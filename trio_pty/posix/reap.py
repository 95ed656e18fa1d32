"""Find every process a session started, signal them, and wait until they are gone.

"A session's processes" are: everything in the leader's session (sid) and process group, the
tty's foreground group, every descendant of those found through the /proc parent chain, and
every child of ours (we are a child subreaper) whose environment carries the session's tag:
a descendant that called setsid and double-forked away lands on us, and the tag says whose it
is. Processes are signalled through pidfds after checking their start time, so a recycled pid
is never signalled (pid_max is 32768 on many machines).

Zombies are dead: they count as gone. Those that are our children are reaped here, but only
when they are certainly adopted (see `_certainly_adopted`), so the exit status of a child that
trio or the embedding program waits on is never stolen.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import math
import os
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Final

import attrs
import trio

_SCAN_DUTY: Final = 2  # after a scan, wait twice its cost before the next one

TAG_SESSION: Final = "TRIO_PTY_SESSION"
TAG_MANAGER: Final = "TRIO_PTY_MANAGER"

_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_GET_CHILD_SUBREAPER: Final = 37
_libc = ctypes.CDLL(None, use_errno=True)


def set_child_subreaper(enabled: bool) -> bool:
    """Make this process the reaper of its orphaned descendants; return the previous state.

    Orphans otherwise go to PID 1, which in containers reaps late (1.1-2 s measured) or never,
    and a process group is only gone when every member has been reaped.
    """
    previous = ctypes.c_int(0)
    if _libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_GET_CHILD_SUBREAPER) failed")
    if _libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    return bool(previous.value)


@attrs.frozen(slots=True)
class ProcEntry:
    """One line of /proc/PID/stat, the fields we need."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_time: int

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X")


OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def _read_stat(pid: int) -> ProcEntry | None:
    """The process's stat line, or None when it is gone. Running out of descriptors raises:
    a process we could not look at is not a process that is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in OUT_OF_RESOURCES:
            raise
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # comm may contain spaces and parentheses: split after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return ProcEntry(
        pid=pid,
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        sid=int(fields[3]),
        state=fields[0].decode("ascii", "replace"),
        start_time=int(fields[19]),
    )


def read_tags(pid: int) -> tuple[str, str] | None:
    """(manager id, session id) from the process's initial environment, if it carries them."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return None
    found: dict[str, str] = {}
    for item in environ.split(b"\0"):
        if item.startswith(b"TRIO_PTY_"):
            name, _, value = item.partition(b"=")
            found[name.decode("ascii", "replace")] = value.decode("utf-8", "replace")
    if TAG_MANAGER in found and TAG_SESSION in found:
        return found[TAG_MANAGER], found[TAG_SESSION]
    return None


class Snapshot:
    """One scan of /proc with the indexes teardown needs, built once and shared."""

    def __init__(self, entries: dict[int, ProcEntry], tag_cache: dict[tuple[int, int], object]):
        self.entries = entries
        self.own_pid = os.getpid()
        self.own_pgid = os.getpgrp()
        self.own_sid = os.getsid(0)
        self.by_sid: dict[int, list[int]] = defaultdict(list)
        self.by_pgid: dict[int, list[int]] = defaultdict(list)
        self.children: dict[int, list[int]] = defaultdict(list)
        for entry in entries.values():
            self.by_sid[entry.sid].append(entry.pid)
            self.by_pgid[entry.pgid].append(entry.pid)
            self.children[entry.ppid].append(entry.pid)
        self._tag_cache = tag_cache
        # When the scan started and finished (on the table's clock).
        self.taken = self.done = -math.inf
        self._tagged: dict[tuple[str, str], list[int]] | None = None

    def tagged(self, manager_id: str, session_id: str) -> list[int]:
        """Living children of ours that carry this session's tag (adopted escapees)."""
        if self._tagged is None:
            self._tagged = defaultdict(list)
            for pid in self.children.get(self.own_pid, ()):
                entry = self.entries[pid]
                tags = None if entry.dead else self._tags(entry)
                if isinstance(tags, tuple):
                    self._tagged[tags].append(pid)
        return self._tagged.get((manager_id, session_id), [])

    def _tags(self, entry: ProcEntry) -> object:
        """Cached by (pid, start time), but only when found: /proc/PID/environ reads empty
        while a process execs, and exec keeps the pid and the start time."""
        key = (entry.pid, entry.start_time)
        tags = self._tag_cache.get(key)
        if tags is None:
            tags = read_tags(entry.pid)
            if tags is not None:
                self._tag_cache[key] = tags
        return tags

    def with_tags_of(self, manager_id: str, *, orphans_only: bool = False) -> list[ProcEntry]:
        """Living processes carrying this manager's tag, wherever they are now. With
        `orphans_only`, only those reparented to PID 1 or to us (cheap: few processes)."""
        found = []
        for entry in self.entries.values():
            if entry.dead or entry.pid == self.own_pid:
                continue
            if orphans_only and entry.ppid not in (1, self.own_pid):
                continue
            tags = self._tags(entry)
            if isinstance(tags, tuple) and tags[0] == manager_id:
                found.append(entry)
        return found

    def members(
        self, *, leader: int, groups: Iterable[int], manager_id: str, session_id: str
    ) -> dict[int, ProcEntry]:
        """Every process of one session, living or dead, never ourselves or our group."""
        seeds: set[int] = set(self.by_sid.get(leader, ()))
        for pgid in (leader, *groups):
            seeds.update(self.by_pgid.get(pgid, ()))
        seeds.update(self.tagged(manager_id, session_id))
        found: dict[int, ProcEntry] = {}
        stack = list(seeds)
        while stack:
            pid = stack.pop()
            if pid in found or pid not in self.entries:
                continue
            entry = self.entries[pid]
            if pid <= 1 or pid == self.own_pid or entry.pgid == self.own_pgid:
                continue
            found[pid] = entry
            stack.extend(self.children.get(pid, ()))
        return found

    def certainly_adopted(self, entry: ProcEntry) -> bool:
        """True when `entry` is our child but was not forked by us.

        A child we forked can only have our session id or (after setsid) its own pid as
        session id; anything else was reparented to us as subreaper, so nobody in this
        process is waiting for its exit status.
        """
        return entry.ppid == self.own_pid and entry.sid not in (self.own_sid, entry.pid)


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
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._taken = -math.inf
        self._ready_again = -math.inf
        self._snapshot: Snapshot | None = None
        self._reaped: Snapshot | None = None
        self._tag_cache: dict[tuple[int, int], object] = {}
        self._members: set[tuple[int, int]] = set()
        self._member_sids: set[int] = set()

    def snapshot(self, *, not_before: float | None = None, throttle: bool = True) -> Snapshot:
        """A snapshot taken at or after `not_before`, or else (with `throttle`) the newest
        the throttle allows; without `not_before`, always a new one."""
        fresh_enough = not_before is not None and (
            self._taken >= not_before or (throttle and self._clock() < self._ready_again)
        )
        if self._snapshot is not None and fresh_enough:
            return self._snapshot
        taken = self._clock()
        entries: dict[int, ProcEntry] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                entry = _read_stat(int(name))
                if entry is not None:
                    entries[entry.pid] = entry
        live = {(e.pid, e.start_time) for e in entries.values()}
        self._tag_cache = {k: v for k, v in self._tag_cache.items() if k in live}
        self._members &= live
        self._member_sids &= {e.sid for e in entries.values()}
        self._snapshot = Snapshot(entries, self._tag_cache)
        done = self._clock()
        self._snapshot.taken, self._snapshot.done = taken, done
        self._taken, self._ready_again = taken, done + _SCAN_DUTY * (done - taken)
        return self._snapshot

    def note_members(self, entries: Iterable[ProcEntry]) -> None:
        """Remember processes identified as a session's (never pass a leader), and their
        session ids."""
        for entry in entries:
            self._members.add((entry.pid, entry.start_time))
            self._member_sids.add(entry.sid)

    def is_member(self, entry: ProcEntry) -> bool:
        """Known as a session's process, or the leader of a session that holds one: the
        daemon(3) idiom's middle process calls setsid, forks and dies before any scan sees
        it, but its child (tagged, and in its session) is seen, and sessions are inherited,
        so the middle process descends from ours too."""
        return (entry.pid, entry.start_time) in self._members or (
            entry.sid == entry.pid and entry.pid in self._member_sids
        )

    def reap_orphans(self, snapshot: Snapshot) -> None:
        """Reap our dead children that were certainly adopted or known session members;
        once per snapshot, however many teardowns share it."""
        if snapshot is self._reaped:
            return
        self._reaped = snapshot
        for pid in snapshot.children.get(snapshot.own_pid, ()):
            entry = snapshot.entries[pid]
            if entry.dead and (snapshot.certainly_adopted(entry) or self.is_member(entry)):
                reap(pid)

    def reap_member(self, pid: int, start_time: int) -> None:
        """Reap one known member if it is now our zombie (checked by start time first)."""
        try:
            entry = _read_stat(pid)
        except OSError:
            return
        if (
            entry is not None
            and entry.start_time == start_time
            and entry.dead
            and entry.ppid == os.getpid()
            and self.is_member(entry)
        ):
            reap(pid)


def signal_process(entry: ProcEntry, sig: int) -> None:
    """Signal one process through a pidfd, unless its pid now names another process."""
    if entry.pid <= 1 or entry.pid == os.getpid():
        return
    try:
        pidfd = os.pidfd_open(entry.pid)
    except OSError:
        return  # already gone
    try:
        current = _read_stat(entry.pid)
        if current is not None and current.start_time == entry.start_time:
            signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def signal_group(pgid: int, sig: int) -> None:
    """Signal a process group we created. Never 0, 1, -1 or our own group."""
    if pgid <= 1 or pgid == os.getpgrp():
        return
    with contextlib.suppress(OSError):
        os.killpg(pgid, sig)


def reap(pid: int) -> bool:
    """Collect the exit status of one adopted child; True when it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


@attrs.frozen
class TeardownReport:
    signalled: int
    killed: int
    survivors: list[int]
    blind: bool = False
    """The last look at /proc failed (out of descriptors): survivors are unknown."""


Finder = Callable[[Snapshot], dict[int, ProcEntry]]

_FIRST_TICK: Final = 0.001
_LAST_TICK: Final = 0.064
_FIRST_SCAN_MAX_AGE: Final = 0.05


def _grid(interval: float) -> float:
    return (trio.current_time() // interval + 1) * interval


async def _next_tick(interval: float, wake: trio.Event) -> float:
    """Sleep to the next multiple of `interval` in trio time, and return that tick: a
    snapshot taken at or after it is fresh enough. Ticks are shared by every teardown, so
    those woken together share one scan. When `wake` fires (the leader exited) look again
    at the next millisecond tick rather than at once, for the same reason."""
    tick = _grid(interval)
    with trio.move_on_at(tick):
        await wake.wait()
        tick = _grid(_FIRST_TICK)
        await trio.sleep_until(tick)
    return tick


async def terminate(
    find: Finder,
    table: ProcessTable,
    *,
    kill_at: float,
    deadline: float,
    leader: trio.Process | None = None,
    groups: Callable[[], Iterable[int]] = tuple,
) -> TeardownReport:
    """SIGTERM (+SIGCONT) -> until `kill_at` -> SIGKILL -> until nothing `find` reports is
    alive and the leader and adopted zombies are reaped, or `deadline` passes.

    The times are absolute so that teardowns asked for at the same moment (a manager
    shutting down) send SIGKILL at the same moment, however long it took to start them all.

    `groups` names process groups that are safe to signal right now (groups catch members
    forked after the last scan); `leader` is the trio Process we hold, reaped by trio.
    """
    seen: set[tuple[int, int]] = set()
    signalled: dict[tuple[int, int], int] = {}
    last_taken = last_done = -math.inf
    leader_gone = trio.Event()
    killed = 0

    def alive_members(not_before: float) -> dict[int, ProcEntry] | None:
        """The living members in a snapshot taken since `not_before`; None when /proc
        cannot be read (out of descriptors): then only the groups can be signalled."""
        # Once SIGKILL is out, every round must see a new scan (deaths are quick).
        throttle = current == signal.SIGTERM
        try:
            snapshot = table.snapshot(not_before=not_before, throttle=throttle)
            members = find(snapshot)
        except OSError as exc:
            if exc.errno not in OUT_OF_RESOURCES:
                raise
            return None
        # Any member but the leader can only become our child by adoption.
        others = [e for e in members.values() if leader is None or e.pid != leader.pid]
        table.note_members(others)
        seen.update((e.pid, e.start_time) for e in others)
        table.reap_orphans(snapshot)
        nonlocal last_taken, last_done
        last_taken, last_done = snapshot.taken, snapshot.done
        return {pid: e for pid, e in members.items() if not e.dead}

    def leader_running() -> bool:
        return leader is not None and leader.returncode is None

    def send(members: dict[int, ProcEntry], sig: int) -> None:
        reached = set(groups())
        for pgid in reached:
            signal_group(pgid, sig)
            if sig == signal.SIGTERM:
                signal_group(pgid, signal.SIGCONT)
        for entry in members.values():
            if entry.pgid in reached:
                continue  # the group signal reached it (one syscall for the whole group)
            key = (entry.pid, entry.start_time)
            if signalled.get(key) != sig:
                signalled[key] = sig
                signal_process(entry, sig)
                if sig == signal.SIGTERM:
                    signal_process(entry, signal.SIGCONT)

    async def watch_leader(process: trio.Process) -> None:
        await process.wait()
        leader_gone.set()

    survivors: dict[int, ProcEntry] | None = {}
    current = signal.SIGTERM
    with trio.move_on_at(deadline):
        async with trio.open_nursery() as nursery:
            if leader is not None:
                nursery.start_soon(watch_leader, leader)
            # Any scan from the last moments will do to start: later rounds catch the rest.
            survivors = alive_members(trio.current_time() - _FIRST_SCAN_MAX_AGE)
            interval = _FIRST_TICK
            quiet_since: float | None = None  # when a scan first showed nothing alive
            while True:
                if survivors == {} and not leader_running():
                    # Nothing alive. One snapshot is not atomic, though: a child forked just
                    # before its parent died can be missing from a listing read before the
                    # fork, while the parent's death shows in a stat line read later. So it
                    # takes a second scan whose listing started after the first had finished
                    # (at a later tick, shared with every teardown waiting at that tick).
                    if quiet_since is not None and last_taken >= quiet_since:
                        break
                    if quiet_since is None:
                        quiet_since = last_done
                    interval = _FIRST_TICK
                else:
                    quiet_since = None
                    if survivors is None and current == signal.SIGKILL and not leader_running():
                        # Blind (no descriptor to read /proc with): the groups have had
                        # SIGKILL and the leader is reaped; waiting would not show us more.
                        break
                    if current == signal.SIGTERM and trio.current_time() >= kill_at:
                        current, interval = signal.SIGKILL, _FIRST_TICK
                        killed = len(survivors or {})
                    send(survivors or {}, current)
                wake = trio.Event() if leader_gone.is_set() else leader_gone
                fresh_since = trio.current_time()  # if the grace ends first: a newer scan
                with trio.move_on_at(kill_at if current == signal.SIGTERM else math.inf):
                    fresh_since = await _next_tick(interval, wake)
                interval = min(interval * 2, _LAST_TICK)
                survivors = alive_members(fresh_since)
            nursery.cancel_scope.cancel()
    # A last pass for members that became our zombies since the last scan.
    for pid, start_time in seen:
        table.reap_member(pid, start_time)
    return TeardownReport(
        signalled=len(signalled),
        killed=killed,
        survivors=sorted(survivors or {}),
        blind=survivors is None,
    )
