"""The crash guard: what ends a manager's sessions when the manager's process cannot.

A manager tears its sessions down itself when it closes, is cancelled, or its process gets
SIGTERM in `trio-pty serve`. When the process dies without running that code (SIGKILL, the
OOM killer, `os._exit`, a segfault, Python's default action on SIGTERM in an embedding
program), two things take over:

- **The keeper**: one small process per manager (this module, run by `python -S` without
  the rest of the package: ~20 ms to start, ~10 MB), in its own session so that signals
  meant for the manager's terminal or process group do not reach it. The manager tells it
  over a pipe which sessions start and end; once a normal close has torn every session
  down, the manager ends the keeper (it is the manager's child) before it ever acts. When
  the manager's process is gone instead (its pidfd becomes readable, or the pipe reaches
  EOF), the keeper runs the teardown from the outside (`tear_down`) and exits once
  everything is gone.
- **The state directory** (`open_manager(state_dir=...)`, `trio-pty serve --state-dir`):
  the manager records each live session in a file there and removes it at the end of the
  session's teardown. A manager started on the same directory tears down whatever a dead
  predecessor (and its keeper, if that was killed too) left running, before it returns.

From the outside nothing is a child of ours, so nothing is held unreaped: whose a process is
comes from its tags (`TRIO_PTY_MANAGER`, inherited through every fork and exec that keeps
the environment), from the recorded leaders (pid *and* start time: a recycled pid has a
later start time), their sessions, foreground groups and descendants; a process found
only by its tag counts only under our own uid (anyone can set a variable). Individual
processes are signalled through pidfds after a start-time check; a process group only when
nothing else alive shares it, right after a fresh look at a living member of ours in it (a
group id is reused only once the group is empty and the pid allocator has wrapped around
`pid_max`, which takes far longer than the microseconds in between). Between rounds the
keeper watches for new pids (`_Watch`): a pid hopper's generation lives a few milliseconds,
which full scans miss. The state records go only after a confirmed end.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, NamedTuple

from . import hardening, proc, schedule

_MANAGER_FILE: Final = "manager.json"
_UID: Final = os.getuid()
_SESSION_SUFFIX: Final = ".session.json"

# The keeper's whole program: its module, imported from the source root (argv[1]) by an
# interpreter isolated from the environment, the user's site and site-packages (`-I -S`).
# The package root is light (lazy exports), so this imports the standard library only.
_LAUNCH: Final = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from trio_pty.posix.keeper import main; sys.exit(main(sys.argv[2:]))"
)


class Leader(NamedTuple):
    """A session as the keeper and the state directory know it: its leader's pid and start
    time, which name it until it is reaped. (Its group and session ids are not recorded:
    both equal the pid, as the leader calls setsid() before its exec.)"""

    session: str
    owner: str
    pid: int
    start_time: int

    def to_json(self) -> dict[str, object]:
        return self._asdict()

    @classmethod
    def from_json(cls, value: object) -> Leader:
        """Other keys are ignored (older records also held `pgid` and `sid`)."""
        if not isinstance(value, dict):
            raise ValueError("a session record is an object")
        session, owner = value.get("session"), value.get("owner")
        pid, start_time = value.get("pid"), value.get("start_time")
        if not (isinstance(session, str) and isinstance(owner, str)):
            raise ValueError("session and owner must be strings")
        for number in (pid, start_time):
            if not isinstance(number, int) or isinstance(number, bool) or number <= 1:
                raise ValueError("pid and start_time must be integers above 1")
        return cls(session, owner, pid, start_time)  # type: ignore[arg-type]


def leader_of(session: str, owner: str, pid: int) -> Leader | None:
    """The record of a session whose leader was just started (and is not reaped yet, so
    its pid still names it); None if it cannot be read."""
    entry = proc.read_stat(pid)
    if entry is None:
        return None
    return Leader(session, owner, pid, entry.start_time)


# ------------------------------------------------------------------------ teardown from outside


class Outcome(NamedTuple):
    processes: int
    """Distinct processes found alive at some point."""
    survivors: list[int]
    """Still alive at the deadline."""
    confirmed: bool = False
    """Two scans confirmed the end (within the deadline): only then may the records that
    name these sessions go. A teardown cut off by its deadline found "nothing alive" in at
    most one scan, which a pid hopper slips through."""


WATCH_INTERVAL: Final = 0.0005
"""Between rounds, the keeper lists /proc this often (~0.5 ms for 200 processes) and looks
at the pids that are new since its last listing: a hopper's generation lives a few
milliseconds, which a full scan (a stat read per process) rarely catches alive."""


WATCH_LEAST: Final = 3


def tear_down(
    manager_ids: Iterable[str],
    leaders: Iterable[Leader],
    *,
    grace: float,
    close_timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Hang up, SIGTERM (+SIGCONT), wait `grace`, SIGKILL, until nothing of these managers
    is alive in two scans (the second listed after the first finished), or `close_timeout`
    has passed: the manager's own `schedule.Schedule`, driven by an outsider (nothing is our
    child), with the same rounds: scan, confirm, signal, wait. While it waits, it watches
    for new tagged processes (see `_Watch`): what it sees keeps the teardown from
    confirming, and after the grace is killed at once."""
    start = clock()
    deadline = start + close_timeout
    plan = schedule.Schedule(kill_at=start + grace)
    finder = _Finder(frozenset(manager_ids), list(leaders))
    scans = _Scans(finder, clock)
    watch = _Watch(finder, clock, sleep)
    signalled: dict[tuple[int, int], int] = {}
    confirmed = False
    while True:
        alive = scans.alive(plan)
        seen = watch.take()
        if plan.confirm(scans.findings(alive, seen=bool(seen))):
            confirmed = True
            break
        alive = {**seen, **alive}
        scans.found.update(e.key for e in seen.values())
        orders = plan.signal(clock())
        if orders.hang_up:
            scans.hang_up()
        if orders.signal is not None:
            assert scans.snapshot is not None
            _send(alive, orders.signal, signalled, finder.safe_groups(scans.snapshot, alive))
        now = clock()
        if now >= deadline:
            break
        watch.until(min(plan.wait(now), deadline), kill=plan.phase == signal.SIGKILL)
    survivors = {**alive, **watch.take()}
    return Outcome(len(scans.found), sorted(survivors), confirmed and not survivors)


class _Watch:
    """New processes of these managers, seen between rounds: each listing of /proc is
    compared with the last, and only the new pids are read (a stat line, then the tags), so
    a generation that lives ~2 ms is looked at while it lives. After the grace, one is
    killed at once through its pidfd (a hopper that is killed before it forks is over)."""

    def __init__(
        self, finder: _Finder, clock: Callable[[], float], sleep: Callable[[float], None]
    ) -> None:
        self._finder = finder
        self._clock = clock
        self._sleep = sleep
        self._listed: set[int] = set(proc.pids())
        self._cache: proc.TagCache = {}
        self._seen: dict[int, proc.ProcEntry] = {}

    def until(self, wake_at: float, *, kill: bool) -> None:
        """Watch until `wake_at`, and for `WATCH_LEAST` listings in any case: a round's
        full scan can take longer than a tick, and a watch skipped after it would let two
        scans confirm the end while a generation lived between them unseen."""
        listings = 0
        while listings < WATCH_LEAST or self._clock() < wake_at:
            for entry in self._poll():
                self._seen[entry.pid] = entry
                if kill:
                    proc.signal_process(entry, signal.SIGKILL)
            listings += 1
            now = self._clock()
            self._sleep(WATCH_INTERVAL if now >= wake_at else min(WATCH_INTERVAL, wake_at - now))

    def take(self) -> dict[int, proc.ProcEntry]:
        """The processes seen since the last call (alive when seen)."""
        seen, self._seen = self._seen, {}
        return seen

    def _poll(self) -> list[proc.ProcEntry]:
        listed = set(proc.pids())
        new, self._listed = listed - self._listed, listed
        found = []
        for pid in new:
            entry = proc.read_stat(pid)
            if entry is not None and not entry.dead and self._finder.tagged(entry, self._cache):
                found.append(entry)
        for key in [key for key in self._cache if key[0] not in listed]:
            del self._cache[key]
        return found


class _Scans:
    """The keeper's snapshots, taken as the schedule asks: a new one unless the last will do
    (`schedule.snapshot_will_do`: the round at the end of the grace takes the newest there
    is, and during the grace scans are spaced by their own cost)."""

    def __init__(self, finder: _Finder, clock: Callable[[], float]) -> None:
        self._finder = finder
        self._clock = clock
        self._cache: proc.TagCache = {}
        self._ready = -float("inf")
        self.snapshot: proc.Snapshot | None = None
        self.found: set[tuple[int, int]] = set()
        """Distinct processes seen alive."""

    def alive(self, plan: schedule.Schedule) -> dict[int, proc.ProcEntry]:
        """The living members in a snapshot fresh enough for this round."""
        snapshot = self.snapshot
        if snapshot is None or not schedule.snapshot_will_do(
            snapshot.taken,
            now=self._clock(),
            not_before=plan.fresh_since,
            throttle=plan.throttled,
            ready=self._ready,
        ):
            snapshot = self.snapshot = self._scan()
        alive = {p: e for p, e in self._finder.members(snapshot).items() if not e.dead}
        self.found.update(e.key for e in alive.values())
        return alive

    def findings(self, alive: Mapping[int, proc.ProcEntry], *, seen: bool) -> schedule.Scan:
        """`seen`: the watch saw one alive since the last round, which the scan missed."""
        assert self.snapshot is not None
        return schedule.Scan(self.snapshot.taken, self.snapshot.done, alive=bool(alive) or seen)

    def hang_up(self) -> None:
        assert self.snapshot is not None
        self._finder.hang_up(self.snapshot)

    def _scan(self) -> proc.Snapshot:
        taken = self._clock()
        snapshot = proc.scan(self._cache)
        snapshot.taken, snapshot.done = taken, self._clock()
        self._ready = schedule.ready_again(snapshot.taken, snapshot.done)
        live = {e.key for e in snapshot.entries.values()}
        for key in [key for key in self._cache if key not in live]:
            del self._cache[key]  # in place: the snapshot reads and fills this very cache
        return snapshot


class _Finder:
    """Which processes are ours, seen from outside."""

    def __init__(self, manager_ids: frozenset[str], leaders: list[Leader]) -> None:
        self._manager_ids = manager_ids
        self._leaders = leaders

    def _live_leaders(self, snapshot: proc.Snapshot) -> list[proc.ProcEntry]:
        """The recorded leaders whose pid still names them (a zombie counts: it holds its
        session and group ids)."""
        found = []
        for leader in self._leaders:
            entry = snapshot.entries.get(leader.pid)
            if entry is not None and entry.start_time == leader.start_time:
                found.append(entry)
        return found

    def members(self, snapshot: proc.Snapshot) -> dict[int, proc.ProcEntry]:
        seeds: set[int] = set()
        for leader in self._live_leaders(snapshot):
            seeds.add(leader.pid)
            seeds.update(snapshot.by_sid.get(leader.pid, ()))
            seeds.update(snapshot.by_pgid.get(leader.pid, ()))
        for manager_id in self._manager_ids:
            seeds.update(
                e.pid for e in snapshot.with_tags_of(manager_id) if proc.real_uid(e.pid) == _UID
            )
        return snapshot.descendants(seeds)

    def tagged(self, entry: proc.ProcEntry, cache: proc.TagCache) -> bool:
        """Carries the tag of one of these managers, and runs as our user: a tag is only an
        environment variable, which any local user can set (the manager's id is in the
        keeper's world-readable argv), and a root keeper must not end another user's
        processes (or their groups) because they claim to be ours."""
        tags = proc.cached_tags(entry, cache)
        return (
            tags is not None and tags[0] in self._manager_ids and proc.real_uid(entry.pid) == _UID
        )

    def safe_groups(self, snapshot: proc.Snapshot, alive: Mapping[int, proc.ProcEntry]) -> set[int]:
        """The groups of `alive` that hold nothing else alive in the snapshot: only those are
        signalled as groups (see `_send`). A group another process shares (it joined from
        within its session, or a setuid program a member started kept it) gets no group
        signal; its members of ours get theirs one by one."""
        safe = set()
        for pgid in {e.pgid for e in alive.values()}:
            living = [p for p in snapshot.by_pgid.get(pgid, ()) if not snapshot.entries[p].dead]
            if all(p in alive for p in living):
                safe.add(pgid)
        return safe

    def hang_up(self, snapshot: proc.Snapshot) -> None:
        """SIGHUP and SIGCONT to each living leader, SIGHUP to its tty's foreground group
        (which lives in the leader's session, so it is ours while the leader lives)."""
        for leader in self._live_leaders(snapshot):
            if leader.dead:
                continue
            proc.signal_process(leader, signal.SIGHUP)
            proc.signal_process(leader, signal.SIGCONT)
            current = proc.read_stat(leader.pid)
            if current is not None and current.key == leader.key and current.tpgid > 1:
                proc.signal_group(current.tpgid, signal.SIGHUP)


def _send(
    alive: Mapping[int, proc.ProcEntry],
    sig: int,
    signalled: dict[tuple[int, int], int],
    safe_groups: set[int],
) -> None:
    """Signal each safe group (see `_Finder.safe_groups`) of a living member once, right
    after a fresh look at that member; then each member its group signal may have missed,
    through a pidfd."""
    reached: set[int] = set()
    for entry in alive.values():
        if entry.pgid in reached or entry.pgid not in safe_groups:
            continue
        current = proc.read_stat(entry.pid)
        if current is None or current.key != entry.key or current.dead:
            continue
        if current.pgid != entry.pgid:
            continue  # it moved since the scan: its new group was never checked
        reached.add(current.pgid)
        proc.signal_group(current.pgid, sig)
        if sig == signal.SIGTERM:
            proc.signal_group(current.pgid, signal.SIGCONT)
    for entry in alive.values():
        if entry.pgid in reached or signalled.get(entry.key) == sig:
            continue
        signalled[entry.key] = sig
        proc.signal_process(entry, sig)
        if sig == signal.SIGTERM:
            proc.signal_process(entry, signal.SIGCONT)


# ------------------------------------------------------------------------ the state directory


def boot_id() -> str:
    """Changes at every boot: pids and start times of another boot mean nothing."""
    with open("/proc/sys/kernel/random/boot_id") as handle:
        return handle.read().strip()


class StateDir:
    """A manager's records in a state directory: `DIR/<manager id>/manager.json` and one
    `<session id>.session.json` per live session.

    Records survive the manager's process (they are plain files; no fsync: after a crash
    of the machine nothing they name is running any more, and the boot id says so). The
    directory must be ours and not writable by anyone else: a record makes the next manager
    end the processes it names.
    """

    def __init__(self, root: str, manager_id: str) -> None:
        self.root = root
        self.path = os.path.join(root, manager_id)
        prepare(root)
        os.mkdir(self.path, 0o700)
        me = proc.read_stat(os.getpid())
        _write_json(
            os.path.join(self.path, _MANAGER_FILE),
            {
                "manager": manager_id,
                "pid": os.getpid(),
                "start_time": me.start_time if me is not None else 0,
                "boot_id": boot_id(),
            },
        )

    def record(self, leader: Leader) -> None:
        _write_json(os.path.join(self.path, leader.session + _SESSION_SUFFIX), leader.to_json())

    def forget(self, session_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.path, session_id + _SESSION_SUFFIX))

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def prepare(root: str) -> None:
    """Create the state directory (private) if needed, and check it is private."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    check_private(root)


def check_private(path: str) -> None:
    """Refuse a directory that another user owns or may write to."""
    info = os.stat(path, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"state directory {path} is not a directory")
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise PermissionError(
            f"state directory {path} must belong to uid {os.getuid()} and not be writable "
            "by group or others"
        )


class Predecessors(NamedTuple):
    managers: int
    sessions: int
    outcome: Outcome


def reap_predecessors(root: str, *, grace: float, close_timeout: float) -> Predecessors:
    """End what dead managers recorded in `root` left running, then remove their records
    if two scans confirmed the end (else they stay, for the next manager to try again).
    A manager whose process still runs (same pid and start time) is left alone; records of
    another boot are removed without ending anything."""
    prepare(root)
    current_boot = boot_id()
    dead: list[str] = []
    stale: list[str] = []
    manager_ids: list[str] = []
    leaders: list[Leader] = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        record = _read_json(os.path.join(path, _MANAGER_FILE))
        if not isinstance(record, dict):
            continue  # being written, or not ours: leave it
        if record.get("boot_id") != current_boot:
            stale.append(path)
            continue
        pid, start_time = record.get("pid"), record.get("start_time")
        entry = proc.read_stat(pid) if isinstance(pid, int) and pid > 1 else None
        if entry is not None and entry.start_time == start_time and not entry.dead:
            continue  # a live manager
        dead.append(path)
        manager_ids.append(str(record.get("manager", name)))
        for file in os.listdir(path):
            if file.endswith(_SESSION_SUFFIX):
                with contextlib.suppress(ValueError):
                    leaders.append(Leader.from_json(_read_json(os.path.join(path, file))))
    outcome = Outcome(0, [], confirmed=True)
    if manager_ids:
        outcome = tear_down(manager_ids, leaders, grace=grace, close_timeout=close_timeout)
    # Records of dead managers go only once their end is confirmed (else the next manager
    # on the directory tries again); those of another boot name nothing that runs.
    for path in stale + (dead if outcome.confirmed else []):
        shutil.rmtree(path, ignore_errors=True)
    return Predecessors(len(manager_ids), len(leaders), outcome)


def _write_json(path: str, value: object) -> None:
    """Whole or not at all: a reader never sees half a record."""
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", opener=lambda p, f: os.open(p, f, 0o600)) as handle:
        json.dump(value, handle)
    os.replace(temporary, path)


def _read_json(path: str) -> object:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------ the manager's end


def command(
    manager_id: str,
    *,
    grace: float,
    close_timeout: float,
    state_dir: str | None,
    log_json: bool = False,
) -> list[str]:
    """The keeper's command line: the same interpreter, without site-packages. `log_json`:
    it writes its log lines to the stderr it shares with the manager as JSON objects, in the
    shape of `trio_pty.logs.JsonFormatter`, instead of text."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    me = proc.read_stat(os.getpid())
    args = [
        manager_id,
        str(os.getpid()),
        str(me.start_time if me is not None else 0),
        repr(grace),
        repr(close_timeout),
        "json" if log_json else "text",
        *([state_dir] if state_dir is not None else []),
    ]
    return [sys.executable, "-I", "-S", "-c", _LAUNCH, package_root, *args]


def environment(manager_id: str) -> dict[str, str]:
    """The keeper's whole environment: its tag, nothing the sessions carry."""
    return {proc.TAG_KEEPER: manager_id}


class Link:
    """The manager's end of the pipe: one JSON line per session started or ended. Writes
    never block the event loop: what the pipe cannot take now waits in `_backlog` for the
    next write (the keeper reads at once unless it is stopped)."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._backlog = b""
        self.broken = False

    def started(self, leader: Leader) -> None:
        self._send(json.dumps({"started": leader.to_json()}).encode() + b"\n")

    def ended(self, session_id: str) -> None:
        self._send(json.dumps({"ended": session_id}).encode() + b"\n")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _send(self, line: bytes) -> None:
        if self.broken or self._fd < 0:
            return
        data = self._backlog + line
        try:
            written = os.write(self._fd, data)
        except BlockingIOError:
            written = 0
        except OSError:  # the keeper is gone (EPIPE): the manager starts another
            self.broken = True
            return
        self._backlog = data[written:]


# ------------------------------------------------------------------------ the keeper process


def main(argv: Sequence[str]) -> int:
    """`python -I -S -c LAUNCH ROOT MANAGER_ID PID START_TIME GRACE CLOSE_TIMEOUT
    text|json [STATE]`, with the pipe from the manager as stdin."""
    global _log_json
    _log_json = argv[5] == "json"
    try:
        # Its environment is only its tag, but its memory and fds are no session's business.
        hardening.harden_process()
    except OSError as exc:
        _log("error", f"could not make the keeper non-dumpable: {exc}")
    manager_id, pid, start_time = argv[0], int(argv[1]), int(argv[2])
    grace, close_timeout = float(argv[3]), float(argv[4])
    state_dir = argv[6] if len(argv) > 6 else None
    leaders: dict[str, Leader] = {}
    _follow(pid, start_time, leaders)
    _log(
        "warning",
        f"manager {manager_id} (pid {pid}) died; tearing down {len(leaders)} sessions",
        event="keeper_teardown",
        manager=manager_id,
        sessions=len(leaders),
    )
    began = time.monotonic()
    outcome = tear_down([manager_id], leaders.values(), grace=grace, close_timeout=close_timeout)
    if state_dir is not None and outcome.confirmed:
        # Only a confirmed end lets the records go: otherwise the next manager on the
        # state directory ends what this teardown could not.
        shutil.rmtree(os.path.join(state_dir, manager_id), ignore_errors=True)
    took = time.monotonic() - began
    unconfirmed = "" if outcome.confirmed else "; the end is not confirmed, records kept"
    _log(
        "info" if outcome.confirmed else "error",
        f"manager {manager_id}: {outcome.processes} processes ended in {took:.2f} s"
        + (f"; still alive: {outcome.survivors}" if outcome.survivors else "")
        + unconfirmed,
        event="keeper_done",
        manager=manager_id,
        processes=outcome.processes,
        teardown_s=round(took, 3),
        survivors=list(outcome.survivors),
        confirmed=outcome.confirmed,
    )
    return 0 if outcome.confirmed else 1


def _follow(pid: int, start_time: int, leaders: dict[str, Leader]) -> None:
    """Follow the manager's messages until its process is gone. (A normal close never gets
    here: the manager ends its keeper once every session is gone.)"""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        _read_the_rest(b"", leaders)
        return
    entry = proc.read_stat(pid)
    if entry is None or entry.start_time != start_time or entry.dead:
        # Gone before we looked (a manager can start sessions and die while its keeper is
        # still starting): what it wrote is still in the pipe.
        _read_the_rest(b"", leaders)
        return
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    pending = b""
    while True:
        events = dict(poller.poll())
        if 0 in events:
            data = os.read(0, 65536)
            if not data:
                return  # EOF: the manager's process is gone, or exec'd something else
            lines = (pending + data).split(b"\n")
            pending = lines.pop()
            for line in lines:
                _apply(line, leaders)
        elif pidfd in events:
            _read_the_rest(pending, leaders)  # dead; what it wrote before is in the pipe
            return


def _read_the_rest(pending: bytes, leaders: dict[str, Leader]) -> None:
    """Apply what is left in the pipe of a manager that is gone, without waiting for more."""
    os.set_blocking(0, False)
    with contextlib.suppress(BlockingIOError):
        while data := os.read(0, 65536):
            pending += data
    for line in pending.split(b"\n"):
        _apply(line, leaders)


def _apply(line: bytes, leaders: dict[str, Leader]) -> None:
    if not line:
        return
    try:
        message = json.loads(line)
        if "started" in message:
            leader = Leader.from_json(message["started"])
            leaders[leader.session] = leader
        elif "ended" in message:
            leaders.pop(str(message["ended"]), None)
    except (ValueError, TypeError):
        _log("error", f"ignored a malformed message: {line[:200]!r}")


_log_json = False
"""Set once by `main`: the manager's log is JSON lines, so the keeper's lines are too."""


def _log(level: str, message: str, *, event: str | None = None, **fields: object) -> None:
    if _log_json:
        entry = {"ts": round(time.time(), 6), "level": level, "logger": "trio_pty.keeper"}
        entry |= {"event": event, "msg": message, "keeper_pid": os.getpid(), **fields}
        line = json.dumps(entry, default=str, separators=(",", ":"))
    else:
        line = f"trio-pty keeper[{os.getpid()}]: {message}"
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)
