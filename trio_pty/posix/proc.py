"""Reading /proc, and signalling and reaping processes without ever hitting the wrong one.

Standard library only, on purpose: the keeper (`posix/keeper.py`) runs this module in its own
small process without the rest of the package, trio or attrs (~20 ms to start, ~10 MB).

Processes are identified by (pid, start time), never by pid alone: with `pid_max` 32768 a
pid is recycled within minutes on a busy machine, but a recycled pid has a later start time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

from . import libc

TAG_SESSION: Final = "TRIO_PTY_SESSION"
TAG_MANAGER: Final = "TRIO_PTY_MANAGER"
TAG_KEEPER: Final = "TRIO_PTY_KEEPER"
"""In the keeper's own environment: the id of the manager it guards (how tests find one)."""

OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})

_PF_KTHREAD: Final = 0x00200000
_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_GET_CHILD_SUBREAPER: Final = 37


class ProcEntry(NamedTuple):
    """One line of /proc/PID/stat, the fields we need."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_time: int
    """Clock ticks after boot: with the pid, it names one process for good."""
    tpgid: int
    """The foreground group of the process's controlling tty (-1 without one)."""
    kernel: bool
    """A kernel thread: never ours, and its environment reads empty."""

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X")

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start_time


def read_stat(pid: int) -> ProcEntry | None:
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
        tpgid=int(fields[5]),
        kernel=bool(int(fields[6]) & _PF_KTHREAD),
    )


def pids() -> Iterator[int]:
    """Every pid in /proc at the moment the listing is read."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def own_children() -> list[int]:
    """Children of this process (of every thread), living or zombie: a few small reads,
    so a process that lives for milliseconds can be looked at the moment it is listed."""
    found: list[int] = []
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in threads:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as handle:
                found.extend(int(pid) for pid in handle.read().split())
        except OSError:
            continue
    return found


def names_below(pid: int, *, most: int = 256) -> set[str]:
    """The names (`comm`) of `pid` and its descendants, at most `most` processes looked at;
    a process that ends meanwhile is skipped. For hints (a pager runs), not for teardown."""
    names: set[str] = set()
    todo = [pid]
    for _ in range(most):
        if not todo:
            break
        current = todo.pop()
        try:
            with open(f"/proc/{current}/comm", "rb") as handle:
                name = handle.read().strip().decode("utf-8", "replace")
            with open(f"/proc/{current}/task/{current}/children", "rb") as handle:
                todo.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
        names.add(name)
    return names


def real_uid(pid: int) -> int | None:
    """The process's real user id (from `status`: the owner of /proc/PID is root for a
    process that made itself non-dumpable); None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def environ_tags(pid: int) -> dict[str, str] | None:
    """The TRIO_PTY_* variables of the process's initial environment; None when it cannot be
    read or reads empty (a zombie, a kernel thread, a process in the middle of an exec)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return None
    if not environ:
        return None
    found: dict[str, str] = {}
    for item in environ.split(b"\0"):
        if item.startswith(b"TRIO_PTY_"):
            name, _, value = item.partition(b"=")
            found[name.decode("ascii", "replace")] = value.decode("utf-8", "replace")
    return found


def read_tags(pid: int) -> tuple[str, str] | None:
    """(manager id, session id) from the process's initial environment, if it carries them."""
    found = environ_tags(pid)
    if found is not None and TAG_MANAGER in found and TAG_SESSION in found:
        return found[TAG_MANAGER], found[TAG_SESSION]
    return None


_UNTAGGED: Final = ("", "")
TagCache = dict[tuple[int, int], tuple[str, str]]


def cached_tags(entry: ProcEntry, cache: TagCache) -> tuple[str, str] | None:
    """(manager id, session id) of a process, remembered by (pid, start time). A process's
    initial environment never changes, except that it reads empty while the process execs:
    an empty read is never remembered."""
    if entry.kernel:
        return None
    tags = cache.get(entry.key)
    if tags is None:
        found = environ_tags(entry.pid)
        if found is None:
            return None
        manager, session = found.get(TAG_MANAGER), found.get(TAG_SESSION)
        tags = (manager, session) if manager and session else _UNTAGGED
        cache[entry.key] = tags
    return None if tags == _UNTAGGED else tags


class Snapshot:
    """One scan of /proc with the indexes teardown needs, built once and shared.

    `tag_cache` outlives the snapshot (see `cached_tags`).
    """

    def __init__(self, entries: dict[int, ProcEntry], tag_cache: TagCache) -> None:
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
        # When the scan started and finished (on the clock of whoever took it).
        self.taken = self.done = float("-inf")
        self._tagged: dict[tuple[str, str], list[int]] | None = None

    def tags(self, entry: ProcEntry) -> tuple[str, str] | None:
        """(manager id, session id) of a process, through the cache."""
        return cached_tags(entry, self._tag_cache)

    def tagged(self, manager_id: str, session_id: str) -> list[int]:
        """Living children of ours that carry this session's tag (adopted escapees)."""
        if self._tagged is None:
            self._tagged = defaultdict(list)
            for pid in self.children.get(self.own_pid, ()):
                entry = self.entries[pid]
                tags = None if entry.dead else self.tags(entry)
                if tags is not None:
                    self._tagged[tags].append(pid)
        return self._tagged.get((manager_id, session_id), [])

    def with_tags_of(self, manager_id: str, *, orphans_only: bool = False) -> list[ProcEntry]:
        """Living processes carrying this manager's tag, wherever they are now. With
        `orphans_only`, only those reparented to PID 1 or to us (cheap: few processes)."""
        found = []
        for entry in self.entries.values():
            if entry.dead or entry.pid == self.own_pid:
                continue
            if orphans_only and entry.ppid not in (1, self.own_pid):
                continue
            tags = self.tags(entry)
            if tags is not None and tags[0] == manager_id:
                found.append(entry)
        return found

    def members(
        self, *, leader: int | None, groups: Iterable[int], manager_id: str, session_id: str
    ) -> dict[int, ProcEntry]:
        """Every process of one session, living or dead, never ourselves or our group.
        `leader` is the leader's pid, None when that pid now names another process."""
        seeds: set[int] = set()
        if leader is not None:
            seeds.update(self.by_sid.get(leader, ()), self.by_pgid.get(leader, ()))
        for pgid in groups:
            seeds.update(self.by_pgid.get(pgid, ()))
        seeds.update(self.tagged(manager_id, session_id))
        return self.descendants(seeds)

    def descendants(self, seeds: Iterable[int]) -> dict[int, ProcEntry]:
        """The seeds and everything below them in the parent chain, living or dead; never
        ourselves, our group, or PID 1."""
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


def scan(tag_cache: TagCache) -> Snapshot:
    """A snapshot of every process. Our children are also read on their own, before and
    after the listing: one that hops to a new pid every few milliseconds (fork, then the
    parent exits) is usually dead by the time a full listing gets to its stat line, and its
    successor is not in the listing; our children's list is read in microseconds, so a
    hopper is seen, and its environment read, while it lives (in one read out of ten or
    so it is between two generations)."""
    entries: dict[int, ProcEntry] = {}
    _read_children(entries, tag_cache)
    for pid in pids():
        if pid not in entries:  # our children were read a moment ago
            entry = read_stat(pid)
            if entry is not None:
                entries[pid] = entry
    _read_children(entries, tag_cache)
    return Snapshot(entries, tag_cache)


def _read_children(entries: dict[int, ProcEntry], tag_cache: TagCache) -> None:
    """Read the children not read yet (a stat line each, and the tags of living ones),
    newest first: the kernel lists a process's children in the order they were forked or
    adopted, so a hopper's living generation comes last, after every zombie its earlier
    generations left us. Read in that order, a pile of a few hundred zombies (a hopper
    leaves one every few milliseconds, and they are reaped only at a scan) took long
    enough on a loaded machine for the living one to hop away before its turn: scan after
    scan saw only zombies, the teardown found nothing alive, and the hopper outlived it."""
    for pid in reversed(own_children()):
        if pid in entries:
            continue
        entry = read_stat(pid)
        if entry is not None:
            entries[pid] = entry
            if not entry.dead:
                cached_tags(entry, tag_cache)


def signal_process(entry: ProcEntry, sig: int) -> None:
    """Signal one process through a pidfd, unless its pid now names another process."""
    if entry.pid <= 1 or entry.pid == os.getpid():
        return
    try:
        pidfd = os.pidfd_open(entry.pid)
    except OSError:
        return  # already gone
    try:
        current = read_stat(entry.pid)
        if current is not None and current.start_time == entry.start_time:
            signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def signal_group(pgid: int, sig: int) -> None:
    """Signal a process group the caller knows cannot have been recycled. Never 0, 1, -1 or
    our own group."""
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


def zombie_child() -> bool:
    """Whether a child of this process has exited and is not yet reaped. Collects nothing
    (WNOWAIT), costs one system call: a /proc scan of a busy machine costs milliseconds."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # no child at all
        return False


def set_child_subreaper(enabled: bool) -> bool:
    """Make this process the reaper of its orphaned descendants; return the previous state.

    Orphans otherwise go to PID 1, which in containers reaps late (1.1-2 s measured) or never,
    and a process group is only gone when every member has been reaped.
    """
    previous = libc.prctl_read_int(_PR_GET_CHILD_SUBREAPER)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enabled))
    return bool(previous)
