"""Leak accounting shared by every test: processes, file descriptors, PTY masters, tasks.

A test leaks when, after it, this process (or a server subprocess it names) has a descendant
it did not have before, a process anywhere carries a trio-pty manager tag or is the keeper of
one of our managers, an fd is open that was not, or a trio task runs that did not.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

import attrs
import trio

from trio_pty.posix import proc, reap


@attrs.frozen
class ProcessView:
    pid: int
    state: str
    cmdline: str


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"


# Ids of the managers this test process created (recorded by conftest): only their tagged
# processes are ours to account for; another test run on the machine has its own.
OUR_MANAGERS: set[str] = set()


_KEEPER_CACHE: dict[tuple[int, int], str | None] = {}


def keeper_of(entry: proc.ProcEntry) -> str | None:
    """The id of the manager whose keeper this process is, if it is one. Keepers lead their
    own session, so only session leaders are looked at (and remembered)."""
    if entry.sid != entry.pid or entry.dead or entry.kernel:
        return None
    if entry.key not in _KEEPER_CACHE:
        tags = proc.environ_tags(entry.pid)
        if tags is None:
            return None  # unreadable for now (an exec in progress): ask again next time
        _KEEPER_CACHE[entry.key] = tags.get(proc.TAG_KEEPER)
    return _KEEPER_CACHE[entry.key]


def descendants(roots: Iterable[int], *, keepers: bool = True) -> dict[int, ProcessView]:
    """Every living or zombie descendant of `roots`, plus anything tagged by one of our
    managers wherever it was reparented, and our managers' keepers wherever they are.
    `keepers=False` leaves keepers out (while their managers are open, they belong)."""
    snapshot = reap.ProcessTable().snapshot()
    found: dict[int, ProcessView] = {}
    stack = [child for root in roots for child in snapshot.children.get(root, ())]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        entry = snapshot.entries[pid]
        found[pid] = ProcessView(pid, entry.state, _cmdline(pid))
        stack.extend(snapshot.children.get(pid, ()))
    for manager_id in OUR_MANAGERS:
        for entry in snapshot.with_tags_of(manager_id):
            found.setdefault(entry.pid, ProcessView(entry.pid, entry.state, _cmdline(entry.pid)))
    for entry in snapshot.entries.values():
        if entry.pid not in found and keeper_of(entry) in OUR_MANAGERS:
            found[entry.pid] = ProcessView(entry.pid, entry.state, _cmdline(entry.pid))
    if not keepers:
        found = {
            pid: view
            for pid, view in found.items()
            if pid not in snapshot.entries or keeper_of(snapshot.entries[pid]) is None
        }
    return found


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
