"""Leak accounting shared by every test: processes, file descriptors, PTY masters, tasks.

A test leaks when, after it, this process (or a server subprocess it names) has a descendant
it did not have before, a process anywhere carries a trio-pty manager tag or is the keeper of
one of our managers, an fd is open that was not, or a trio task runs that did not.

Processes are found by reading /proc here, not through the library's own process table
(`trio_pty.posix.proc`, `reap`): a leak detector that shared the code it checks would miss
exactly the processes that code misses. Only the environment variable names are shared:
they are the contract that says which processes are ours.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

import attrs
import trio

TAG_MANAGER = "TRIO_PTY_MANAGER"
TAG_SESSION = "TRIO_PTY_SESSION"
TAG_KEEPER = "TRIO_PTY_KEEPER"
_PF_KTHREAD = 0x00200000


@attrs.frozen
class ProcessView:
    pid: int
    state: str
    cmdline: str


@attrs.frozen
class Stat:
    """The fields of /proc/PID/stat the leak checks need."""

    pid: int
    ppid: int
    sid: int
    state: str
    start_time: int
    kernel: bool

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X")

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start_time


class ProcessLike(Protocol):
    """What `keeper_of` looks at: a `Stat` here, or the library's own entry in its tests."""

    @property
    def pid(self) -> int: ...
    @property
    def sid(self) -> int: ...
    @property
    def dead(self) -> bool: ...
    @property
    def kernel(self) -> bool: ...
    @property
    def key(self) -> tuple[int, int]: ...


def read_stat(pid: int) -> Stat | None:
    """The process's stat line, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: the fields start after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return Stat(
        pid=pid,
        ppid=int(fields[1]),
        sid=int(fields[3]),
        state=fields[0].decode("ascii", "replace"),
        start_time=int(fields[19]),
        kernel=bool(int(fields[6]) & _PF_KTHREAD),
    )


def _process_table() -> dict[int, Stat]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := read_stat(int(name))) is not None:
            table[stat.pid] = stat
    return table


def _environ(pid: int) -> dict[str, str] | None:
    """The TRIO_PTY_* variables of the process's initial environment; None when unreadable
    or empty (a zombie, a kernel thread, an exec in progress)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    if not raw:
        return None
    found = {}
    for item in raw.split(b"\0"):
        if item.startswith(b"TRIO_PTY_"):
            name, _, value = item.partition(b"=")
            found[name.decode("ascii", "replace")] = value.decode("utf-8", "replace")
    return found


# A process's initial environment never changes (it reads empty only during an exec, and
# that is not remembered): (pid, start time) -> its TRIO_PTY_* variables.
_TAGS: dict[tuple[int, int], dict[str, str]] = {}


def _tags(entry: ProcessLike) -> dict[str, str] | None:
    if entry.dead or entry.kernel:
        return None
    if entry.key not in _TAGS:
        found = _environ(entry.pid)
        if found is None:
            return None  # unreadable for now: ask again next time
        _TAGS[entry.key] = found
    return _TAGS[entry.key]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"


# Ids of the managers this test process created (recorded by conftest): only their tagged
# processes are ours to account for; another test run on the machine has its own.
OUR_MANAGERS: set[str] = set()


def keeper_of(entry: ProcessLike) -> str | None:
    """The id of the manager whose keeper this process is, if it is one. Keepers lead their
    own session, so only session leaders are looked at."""
    if entry.sid != entry.pid:
        return None
    tags = _tags(entry)
    return None if tags is None else tags.get(TAG_KEEPER)


def descendants(roots: Iterable[int], *, keepers: bool = True) -> dict[int, ProcessView]:
    """Every living or zombie descendant of `roots`, plus anything tagged by one of our
    managers wherever it was reparented, and our managers' keepers wherever they are.
    `keepers=False` leaves keepers out (while their managers are open, they belong)."""
    table = _process_table()
    live = {stat.key for stat in table.values()}
    for key in [key for key in _TAGS if key not in live]:
        del _TAGS[key]
    children: dict[int, list[int]] = defaultdict(list)
    for stat in table.values():
        children[stat.ppid].append(stat.pid)
    found: dict[int, Stat] = {}
    stack = [child for root in roots for child in children.get(root, ())]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found[pid] = table[pid]
            stack.extend(children.get(pid, ()))
    own = os.getpid()
    for stat in table.values():
        if stat.pid in found or stat.pid == own:
            continue
        tags = _tags(stat)
        if tags is None:
            continue
        session_process = TAG_SESSION in tags and tags.get(TAG_MANAGER) in OUR_MANAGERS
        if session_process or (stat.sid == stat.pid and tags.get(TAG_KEEPER) in OUR_MANAGERS):
            found[stat.pid] = stat
    if not keepers:
        found = {pid: stat for pid, stat in found.items() if keeper_of(stat) is None}
    return {pid: ProcessView(pid, stat.state, _cmdline(pid)) for pid, stat in found.items()}


def open_fds() -> dict[int, str]:
    """This process's open descriptors and what they point at."""
    result = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            result[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
    return result


def pty_masters() -> list[int]:
    return [fd for fd, target in open_fds().items() if target == "/dev/ptmx"]


def trio_tasks() -> list[str]:
    """Names of every task in the current trio run."""
    names: list[str] = []
    root = trio.lowlevel.current_root_task()
    assert root is not None, "only inside trio.run"
    stack = [root]
    while stack:
        task = stack.pop()
        names.append(task.name)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return names


def kill_leftovers(leftovers: Iterable[ProcessView]) -> None:
    """Clean up after a failed test, so one leak does not fail the tests after it."""
    for view in leftovers:
        with contextlib.suppress(OSError):
            os.kill(view.pid, 9)
    for view in leftovers:
        with contextlib.suppress(OSError):
            os.waitpid(view.pid, os.WNOHANG)


async def kill_descendants(root: int, *, timeout: float = 5) -> None:
    """After a test that may have leaked on purpose: end every descendant of `root`,
    including any forked meanwhile, within `timeout`."""
    with trio.move_on_after(timeout):
        while leftovers := descendants([root]):
            kill_leftovers(leftovers.values())
            await trio.sleep(0.01)
