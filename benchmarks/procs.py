"""Process and file-descriptor accounting for the benchmarks.

Every process a benchmark starts carries `TAG` in its environment (children inherit it), so
a leftover can be found wherever it went, even after a double fork. Processes are killed by
pid only, after checking the pid still names the process we recorded (its start time), and
only processes carrying our tag: never a group we did not create, never by name.

This module reads /proc directly instead of using the library's own process table: the
benchmarks must be able to catch the library missing something.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterable, Mapping

import attrs

TAG = "PTYBENCH_RUN"

_PR_GET_CHILD_SUBREAPER = 37


@attrs.frozen
class Stat:
    pid: int
    ppid: int
    state: str
    start_time: int

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X")


def read_stat(pid: int) -> Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return Stat(pid, int(fields[1]), fields[0].decode("ascii", "replace"), int(fields[19]))


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def _tag_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return None
    marker = TAG.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(marker):
            return item[len(marker) :].decode("utf-8", "replace")
    return None


def tagged(value: str, *, prefix: bool = False) -> dict[int, Stat]:
    """Living processes (not ourselves) whose environment has TAG=value (or starts so)."""
    found: dict[int, Stat] = {}
    own = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == own:
            continue
        tag = _tag_of(int(name))
        if tag is None or not (tag.startswith(value) if prefix else tag == value):
            continue
        stat = read_stat(int(name))
        if stat is not None and not stat.dead:
            found[stat.pid] = stat
    return found


def fd_set() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def new_fds(before: set[int]) -> dict[int, str]:
    """Descriptors open now that were not open in `before` (what they point at)."""
    found = {}
    for fd in fd_set() - before:
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


def subreaper_enabled() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    value = ctypes.c_int(0)
    if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_GET_CHILD_SUBREAPER) failed")
    return bool(value.value)


def kill(processes: Iterable[Stat]) -> None:
    """SIGKILL each recorded process through a pidfd, unless its pid was recycled."""
    for recorded in processes:
        try:
            pidfd = os.pidfd_open(recorded.pid)
        except OSError:
            continue
        try:
            current = read_stat(recorded.pid)
            if current is not None and current.start_time == recorded.start_time:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(pidfd)


def kill_and_wait(processes: Mapping[int, Stat], timeout: float = 5.0) -> list[int]:
    """Kill, reap the ones that are our children, and wait (bounded) until all are gone.
    Returns the pids still present at the end."""
    kill(processes.values())
    deadline = time.monotonic() + timeout
    remaining = dict(processes)
    while remaining and time.monotonic() < deadline:
        for pid, recorded in list(remaining.items()):
            current = read_stat(pid)
            if current is None or current.start_time != recorded.start_time:
                del remaining[pid]
            elif current.dead and current.ppid == os.getpid():
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        time.sleep(0.01)
    return sorted(remaining)


@attrs.define
class GoneReport:
    """How the processes of one teardown went away, in seconds from `t0`."""

    recorded: int
    present_at_start: int = 0
    """Recorded processes still present (alive or zombie) at the first check."""
    alive_at_start: int = 0
    dead_s: float | None = None
    """When every process was dead (a zombie or gone)."""
    gone_s: float | None = None
    """When every process was reaped and no tagged process was alive: confirmed gone."""
    last_gone_s: float | None = None
    """When the last process that did go away was seen gone (within the bound)."""
    late: int = 0
    """Processes found only by the final scan (born after the recording)."""
    leftovers: list[dict[str, object]] = attrs.Factory(list)
    """Processes still present when the bound ran out."""
    fds_left: dict[int, str] = attrs.Factory(dict)
    remaining: dict[int, Stat] = attrs.Factory(dict)
    """The leftovers as recorded (to kill them safely)."""

    def as_json(self) -> dict[str, object]:
        fields = attrs.asdict(self, filter=lambda a, _: a.name != "remaining")
        fields["fds_left"] = {str(fd): target for fd, target in self.fds_left.items()}
        return fields


def confirm_gone(
    recorded: Mapping[int, Stat],
    tag: str,
    *,
    t0: float,
    bound: float,
    fds_before: set[int],
    interval: float = 0.002,
) -> GoneReport:
    """Poll /proc until every recorded process is gone (not even a zombie), no process with
    `tag` is alive, and no descriptor opened since `fds_before` remains; or `bound` seconds
    after `t0` pass. Times are the start of the pass that saw the condition, so they are at
    most one pass late (a pass is a few stat reads, then `interval` of sleep)."""
    report = GoneReport(recorded=len(recorded))
    pending = dict(recorded)
    known = dict(recorded)
    first = True
    while True:
        now = time.perf_counter()
        still: dict[int, Stat] = {}
        all_dead = True
        for pid, entry in pending.items():
            current = read_stat(pid)
            if current is None or current.start_time != entry.start_time:
                report.last_gone_s = now - t0
                continue
            still[pid] = entry
            all_dead = all_dead and current.dead
        if first:
            first = False
            report.present_at_start = len(still)
            report.alive_at_start = sum(
                1 for pid in still if (s := read_stat(pid)) is not None and not s.dead
            )
        pending = still
        if all_dead and report.dead_s is None:
            report.dead_s = now - t0
        if not pending:
            late = {pid: s for pid, s in tagged(tag).items() if pid not in known}
            if not late and not new_fds(fds_before):
                report.gone_s = now - t0
                break
            report.late += len(late)
            pending.update(late)
            known.update(late)
            if late:
                report.dead_s = None
        if now - t0 > bound:
            break
        time.sleep(interval)
    for pid in sorted(pending):
        current = read_stat(pid)
        if current is not None and current.start_time == pending[pid].start_time:
            report.remaining[pid] = pending[pid]
            report.leftovers.append(
                {"pid": pid, "state": current.state, "ppid": current.ppid, "cmd": cmdline(pid)}
            )
    report.fds_left = new_fds(fds_before)
    return report
