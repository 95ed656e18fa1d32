"""Scenario 1, the headline: teardown stress.

N sessions of a mixed workload, then the root is cancelled; the clock runs until every
process the workload started is confirmed gone (reaped: not even a zombie left in /proc) and
every descriptor is closed. The same workload is torn down the naive way in the same run.
"""

from __future__ import annotations

import cProfile
import errno
import gc
import itertools
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import trio
import trio.lowlevel

import trio_pty
from trio_pty import Limits, Wait
from trio_pty.posix import proc

from . import procs, stats
from .harness import REPO, Context, Result

NAME = "teardown"
TITLE = "Teardown stress"

# The mixed workload: one session of each kind in turn.
KINDS: dict[str, tuple[str, list[str]]] = {
    # Exits on SIGTERM.
    "term": ("sh", ["-c", "echo ready; sleep 1000"]),
    # Ignores SIGHUP and SIGTERM (so do the sleeps it keeps forking): only SIGKILL ends it.
    "ignore": ("sh", ["-c", "trap '' HUP TERM; echo ready; while :; do sleep 1; done"]),
    # Forks grandchildren in its own process group.
    "grandchildren": ("sh", ["-c", "sleep 1000 & sleep 1000 & echo ready; wait"]),
    # Job-control shell (ignores SIGTERM) with a background pipeline in its own group.
    "jobshell": ("bash", ["--norc", "--noprofile", "-i"]),
    # Double-forks a daemon into its own session (reparented to the reaper).
    "daemon": ("sh", ["-c", "setsid -f sleep 1000; echo ready; sleep 1000"]),
    # Floods output.
    "flood": ("sh", ["-c", "echo ready; exec yes"]),
}
JOBSHELL_LINE = "sleep 1000 | cat | cat & echo rea''dy\n"  # the echo of the line is not "ready"
READY_TIMEOUT = 30.0
SPAWN_CONCURRENCY = 16

METHOD = """\
Each run starts N sessions, cycling through six kinds: a child that exits on SIGTERM
(`sh -c 'echo ready; sleep 1000'`), one that ignores SIGHUP and SIGTERM and keeps forking
`sleep 1` children that ignore them too, one that forks two grandchildren, an interactive
`bash` (which ignores SIGTERM, and exits on the hangup) running the background pipeline
`sleep 1000 | cat | cat &` in its own process group, one that double-forks a daemon into
its own session (`setsid -f sleep 1000`), and one that floods output (`yes`). The flooding
sessions are started last; every session is set up (its `ready` seen) before the clock
starts. Every process carries a per-run tag in its environment, so the benchmark finds them
wherever they go (its own /proc scan, not the library's).

The clock starts when the root is cancelled (trio-pty: the cancel scope around
`open_manager`) and stops at the first check that finds every process recorded before the
start gone from /proc (not even a zombie), no tagged process alive (catching any born during
the teardown) and no descriptor open that was not open before the run. Checks are a stat read
per remaining process, 2 ms apart, so the figure is at most a few ms late.

The crash case, interleaved with them: the same workload under a manager in a child Python
process (a trio program embedding `open_manager`), which the benchmark SIGKILLs: no code of
the manager runs, and its keeper (posix/keeper.py) tears everything down from outside. The
clock starts just before the SIGKILL and stops as above. This process is then a child
subreaper that reaps at once (as a container's init or systemd does), so "gone" measures
the keeper, not how late PID 1 reaps orphans; checks start at 90% of the grace, so that the
checking does not compete with the keeper for the CPU before anything can be gone. The
keeper's own exit is timed too.

The naive way, run interleaved with it on the same workload: a PTY, `setsid -c` for the
controlling tty, and a reader task per session; at the start, the readers
are cancelled, every leader gets SIGTERM, then SIGKILL if still there after the same grace,
is waited for, and its master is closed. Everything else is left to the kernel (SIGHUP to the
foreground group when the leader dies) and to PID 1 (reaping orphans). Its time is when the
last process that went away was seen gone; processes still alive at the bound
(grace + a few seconds) are counted as left behind, then killed by the benchmark.
"""


def _params(ctx: Context) -> dict[str, Any]:
    return {
        "sizes": ctx.pick(quick=[16, 48], full=[16, 64, 256, 1024]),
        # The crash case and the naive way run up to here: at 1,024 sessions each run takes
        # ~25 s to set up, and the goals there are about trio-pty's own scaling.
        "compare_up_to": 256,
        "rounds": ctx.pick(quick=1, full=3),
        "grace": ctx.pick(quick=0.25, full=Limits().terminate_grace),
        "naive_bound_past_grace": ctx.pick(quick=2.5, full=4.0),
        "trio_pty_bound_past_grace": 10.0,
        "kill_time_rounds": ctx.pick(quick=2, full=7),
    }


def _limits(n: int, grace: float) -> Limits:
    """Room for N sessions, and for spawning 1,024 of them on a busy machine."""
    return Limits(
        max_sessions=n,
        max_sessions_per_owner=n,
        terminate_grace=grace,
        spawn_timeout=READY_TIMEOUT,
    )


def _kinds(n: int) -> list[str]:
    """N kinds cycling through the workload, the flooding ones last."""
    names = list(KINDS)
    chosen = [names[i % len(names)] for i in range(n)]
    return sorted(chosen, key=lambda kind: kind == "flood")


def _env(tag: str) -> dict[str, str]:
    return {procs.TAG: tag, "HISTFILE": "/dev/null"}


# --------------------------------------------------------------------------- trio-pty


async def _spawn_trio_pty(manager: trio_pty.Manager, kind: str, env: dict[str, str]) -> None:
    command, args = KINDS[kind]
    if kind == "jobshell":
        info = await manager.spawn(command, args, description=kind, env=env)
        wait = Wait(pattern="^ready$", timeout_ms=int(READY_TIMEOUT * 1000))
        result = await manager.write(info.id, JOBSHELL_LINE, wait=wait)
        reason = result.output.reason if result.output else None
    else:
        wait = Wait(pattern="ready", timeout_ms=int(READY_TIMEOUT * 1000))
        info = await manager.spawn(command, args, description=kind, env=env, ready=wait)
        reason = info.ready.reason if info.ready else None
    if reason != "matched":
        raise RuntimeError(f"{kind} session did not get ready ({reason})")


async def _spawn_all(spawn_one: Any, kinds: Sequence[str]) -> None:
    limiter = trio.CapacityLimiter(SPAWN_CONCURRENCY)

    async def one(kind: str) -> None:
        async with limiter:
            await spawn_one(kind)

    # Everything but the floods first, so the floods do not slow the setup down for long.
    for batch in ([k for k in kinds if k != "flood"], [k for k in kinds if k == "flood"]):
        async with trio.open_nursery() as nursery:
            for kind in batch:
                nursery.start_soon(one, kind)


@contextmanager
def _gc_timer(collections: list[tuple[float, float, int]]) -> Iterator[None]:
    """Record every garbage collection while inside: (start on the perf_counter clock,
    duration in s, generation)."""
    started: list[float] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            begun = started.pop()
            collections.append((begun, time.perf_counter() - begun, info["generation"]))

    gc.callbacks.append(callback)
    try:
        yield
    finally:
        gc.callbacks.remove(callback)


PROFILE_BEFORE_KILL = 0.010


async def _enable_at(profiler: cProfile.Profile, when: float) -> None:
    with trio.CancelScope(shield=True):
        await trio.sleep(max(0.0, when - time.perf_counter()))
    profiler.enable()


async def run_trio_pty(
    n: int, grace: float, bound: float, tag: str, *, profiler: cProfile.Profile | None = None
) -> dict[str, Any]:
    """One teardown of N sessions; with `profiler`, that runs from 10 ms before the grace
    ends until open_manager returned."""
    limits = _limits(n, grace)
    env = _env(tag)
    fds_before = procs.fd_set()
    setup_started = time.perf_counter()
    t0 = 0.0
    recorded: dict[int, procs.Stat] = {}
    collections: list[tuple[float, float, int]] = []
    with trio.CancelScope() as root, _gc_timer(collections):
        async with trio.open_nursery() as helpers, trio_pty.open_manager(limits) as manager:
            await _spawn_all(lambda kind: _spawn_trio_pty(manager, kind, env), _kinds(n))
            setup_s = time.perf_counter() - setup_started
            recorded = procs.tagged(tag)
            collections.clear()
            t0 = time.perf_counter()
            if profiler is not None:
                # The part the goal is about: from just before the grace ends.
                helpers.start_soon(_enable_at, profiler, t0 + grace - PROFILE_BEFORE_KILL)
            root.cancel()
            await trio.lowlevel.checkpoint()  # raises Cancelled: the manager tears everything down
    exit_s = time.perf_counter() - t0
    if profiler is not None:
        profiler.disable()
    report = procs.confirm_gone(recorded, tag, t0=t0, bound=grace + bound, fds_before=fds_before)
    left_behind = procs.kill_and_wait(report.remaining)
    return {
        "variant": "trio-pty",
        "n": n,
        "setup_s": setup_s,
        "exit_s": exit_s,
        # Garbage collections during the teardown, and those past the grace (their time
        # is in the figure the goal is about).
        "gc_s": sum(duration for _, duration, _ in collections),
        "gc_count": len(collections),
        "gc_past_grace_s": sum(d for begun, d, _ in collections if begun + d > t0 + grace),
        "gc_max_s": max((d for _, d, _ in collections), default=0.0),
        **report.as_json(),
        "still_present_after_cleanup": left_behind,
    }


def profile(ctx: Context, n: int, out: str) -> None:
    """`python -m benchmarks --profile teardown`: one trio-pty teardown of N sessions (full
    mode's grace) under cProfile, from 10 ms before the grace ends (the time the goal is
    about) until open_manager returned; prints where
    the time went and writes the raw profile to `out` (for snakeviz or pstats)."""
    profiler = cProfile.Profile()
    grace = Limits().terminate_grace
    tag = f"{ctx.tag}/teardown/profile/{n}"
    try:
        run = trio.run(
            lambda: run_trio_pty(
                n, grace, _params(ctx)["trio_pty_bound_past_grace"], tag, profiler=profiler
            )
        )
    finally:
        procs.kill_and_wait(procs.tagged(tag))
    profiler.dump_stats(out)
    print(
        f"N = {n}: {run['recorded']} processes, all gone {run['gone_s']:.3f} s after the cancel "
        f"(+{(run['gone_s'] - grace) * 1000:.0f} ms past the {grace:g} s grace), open_manager "
        f"returned after {run['exit_s']:.3f} s; {run['gc_count']} garbage collections "
        f"took {run['gc_s'] * 1000:.1f} ms in all (the longest {run['gc_max_s'] * 1000:.1f} "
        f"ms), {run['gc_past_grace_s'] * 1000:.1f} ms past the grace; profile written to {out}"
    )
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)


# --------------------------------------------------------------------------- crash

CRASH_CHILD = """\
import sys
import trio
from benchmarks.teardown import crash_child
trio.run(crash_child, int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
"""


async def crash_child(n: int, grace: float, tag: str) -> None:
    """The manager's process in the crash case: set up the workload, say so, wait to die."""
    limits = _limits(n, grace)
    async with trio_pty.open_manager(limits) as manager:
        await _spawn_all(lambda kind: _spawn_trio_pty(manager, kind, _env(tag)), _kinds(n))
        print(manager.id, flush=True)
        await trio.sleep_forever()


@contextmanager
def _reaping_subreaper() -> Iterator[None]:
    """Make this process the child subreaper and reap every child the moment it exits (the
    manager's process, then its orphans and its keeper), like a container's init."""
    stop = threading.Event()

    def reap() -> None:
        while not stop.is_set():
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                stop.wait(0.001)

    previous = proc.set_child_subreaper(True)
    reaper = threading.Thread(target=reap, name="bench-reaper", daemon=True)
    reaper.start()
    try:
        yield
    finally:
        stop.set()
        # Wake the reaper if it waits for a child: one short-lived child of our own.
        subprocess.run(["true"], check=False)
        reaper.join(5)
        proc.set_child_subreaper(previous)


def _keeper_of(manager_id: str) -> proc.ProcEntry | None:
    for entry in proc.scan({}).entries.values():
        tags = proc.environ_tags(entry.pid) if entry.sid == entry.pid else None
        if tags and tags.get(proc.TAG_KEEPER) == manager_id and not entry.dead:
            return entry
    return None


async def run_crash(n: int, grace: float, bound: float, tag: str) -> dict[str, Any]:
    setup_started = time.perf_counter()
    with _reaping_subreaper():
        # Not trio's open_process: the reaper thread reaps it, not trio.
        child = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, "-c", CRASH_CHILD, str(n), repr(grace), tag],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the keeper's log lines would mix with the progress
            stdin=subprocess.DEVNULL,
        )
        assert child.stdout is not None
        try:
            with trio.fail_after(READY_TIMEOUT * 2):
                line = await trio.to_thread.run_sync(child.stdout.readline)
            manager_id = line.decode().strip()
            if not manager_id:
                raise RuntimeError("the manager's process ended before its workload was set up")
            setup_s = time.perf_counter() - setup_started
            keeper = _keeper_of(manager_id)
            recorded = procs.tagged(tag)
            t0 = time.perf_counter()
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.stdout.close()
        await trio.sleep(0.9 * grace)  # nothing can be gone before the grace: do not compete
        report = await trio.to_thread.run_sync(
            lambda: procs.confirm_gone(
                recorded, tag, t0=t0, bound=grace + bound, fds_before=procs.fd_set()
            )
        )
        keeper_exit_s = None
        if keeper is not None:
            with trio.move_on_after(10):
                # Another process: nothing to wait on but its /proc entry.
                while (current := proc.read_stat(keeper.pid)) is not None and (  # noqa: ASYNC110
                    current.key == keeper.key
                ):
                    await trio.sleep(0.002)
            if proc.read_stat(keeper.pid) is None:
                keeper_exit_s = time.perf_counter() - t0
    left_behind = procs.kill_and_wait(report.remaining)
    return {
        "variant": "crash",
        "n": n,
        "setup_s": setup_s,
        "exit_s": None,
        "keeper_found": keeper is not None,
        "keeper_exit_s": keeper_exit_s,
        **report.as_json(),
        "still_present_after_cleanup": left_behind,
    }


# --------------------------------------------------------------------------- kill time

INTERACTIVE: dict[str, tuple[str, list[str], str]] = {
    "bash": ("bash", ["--norc", "--noprofile", "-i"], r"[$#] ?$"),
    "python REPL": ("python3", ["-q"], r"^>>> ?$"),
    # vim draws on the alternate screen, which the lines show as one marker line (its "~"
    # rows are never lines): ready once that marker is there.
    "vim": ("vim", ["-u", "NONE", "-N", "-n"], r"^\[full-screen program running since"),
}


async def kill_times(rounds: int, tag: str) -> dict[str, Any]:
    """`manager.kill` of an interactive program at its prompt, default grace: how long, and
    how it ended."""
    found: dict[str, Any] = {}
    async with trio_pty.open_manager(Limits()) as manager:
        for name, (command, args, prompt) in INTERACTIVE.items():
            if shutil.which(command) is None:
                continue
            times, endings = [], set()
            for _ in range(rounds):
                ready = Wait(pattern=prompt, timeout_ms=int(READY_TIMEOUT * 1000))
                info = await manager.spawn(
                    command, args, description=name, env=_env(tag), ready=ready
                )
                if info.ready is None or info.ready.reason != "matched":
                    raise RuntimeError(f"{name} showed no prompt within {READY_TIMEOUT:g} s")
                await trio.sleep(0.1)  # settled at its prompt
                started = time.perf_counter()
                final = await manager.kill(info.id, cleanup=True)
                times.append(time.perf_counter() - started)
                endings.add(
                    f"exit_signal {final.exit_signal}"
                    if final.exit_signal
                    else f"exit_code {final.exit_code}"
                )
            found[name] = {"times": times, "endings": sorted(endings)}
    return found


# --------------------------------------------------------------------------- naive


@attrs.define
class _NaiveSession:
    master: int
    process: trio.Process
    ready: trio.Event = attrs.Factory(trio.Event)


async def _naive_reader(session: _NaiveSession) -> None:
    tail = b""
    while True:
        try:
            await trio.lowlevel.wait_readable(session.master)
        except trio.ClosedResourceError:
            return
        try:
            data = os.read(session.master, 65536)
        except BlockingIOError:
            continue
        except OSError as exc:
            if exc.errno == errno.EIO:
                return
            raise
        if not data:
            return
        if not session.ready.is_set():
            seen = tail + data
            if b"ready" in seen:
                session.ready.set()
            tail = seen[-8:]


async def _spawn_naive(
    kind: str, env: dict[str, str], sessions: list[_NaiveSession], readers: trio.Nursery
) -> None:
    command, args = KINDS[kind]
    master, slave = os.openpty()
    try:
        os.set_blocking(master, False)
        setsid = shutil.which("setsid") or "setsid"
        process = await trio.lowlevel.open_process(
            [setsid, "-c", "--", command, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**os.environ, "TERM": "xterm-256color", **env},
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    session = _NaiveSession(master, process)
    sessions.append(session)
    readers.start_soon(_naive_reader, session)
    if kind == "jobshell":
        os.write(master, JOBSHELL_LINE.encode())
    with trio.fail_after(READY_TIMEOUT):
        await session.ready.wait()


async def _naive_stop(session: _NaiveSession, grace: float) -> None:
    """SIGTERM to the leader, SIGKILL after the grace, wait for it, close the master."""
    process = session.process
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    _close(session)


def _close(session: _NaiveSession) -> None:
    if session.master >= 0:
        master, session.master = session.master, -1
        trio.lowlevel.notify_closing(master)
        os.close(master)


async def run_naive(n: int, grace: float, bound: float, tag: str) -> dict[str, Any]:
    if procs.subreaper_enabled():
        raise RuntimeError("naive run with this process as child subreaper: not naive")
    env = _env(tag)
    fds_before = procs.fd_set()
    sessions: list[_NaiveSession] = []
    setup_started = time.perf_counter()
    try:
        async with trio.open_nursery() as readers:
            await _spawn_all(lambda kind: _spawn_naive(kind, env, sessions, readers), _kinds(n))
            setup_s = time.perf_counter() - setup_started
            recorded = procs.tagged(tag)
            t0 = time.perf_counter()
            readers.cancel_scope.cancel()
        async with trio.open_nursery() as stoppers:
            for session in sessions:
                stoppers.start_soon(_naive_stop, session, grace)
        exit_s = time.perf_counter() - t0
    finally:
        with trio.CancelScope(shield=True):
            for session in sessions:  # only on error: a clean run has stopped them all
                if session.process.returncode is None:
                    session.process.kill()
                    await session.process.wait()
                _close(session)
    report = procs.confirm_gone(recorded, tag, t0=t0, bound=grace + bound, fds_before=fds_before)
    left_behind = procs.kill_and_wait(report.remaining)
    return {
        "variant": "naive",
        "n": n,
        "setup_s": setup_s,
        "exit_s": exit_s,
        **report.as_json(),
        "still_present_after_cleanup": left_behind,
    }


# --------------------------------------------------------------------------- scenario


async def _main(ctx: Context, result: Result) -> None:
    params = result.params
    grace = params["grace"]
    runs: list[dict[str, Any]] = []
    for n in params["sizes"]:
        for number in range(params["rounds"]):
            # Interleaved, the order rotating from round to round.
            variants = ["trio-pty", "crash", "naive"] if n <= params["compare_up_to"] else []
            variants = variants or ["trio-pty"]
            order = variants[number % len(variants) :] + variants[: number % len(variants)]
            for variant in order:
                ctx.progress(f"N={n} round {number + 1}/{params['rounds']} {variant}")
                tag = f"{ctx.tag}/teardown/{variant}/{n}/{number}"
                try:
                    if variant == "trio-pty":
                        bound = params["trio_pty_bound_past_grace"]
                        run = await run_trio_pty(n, grace, bound, tag)
                    elif variant == "crash":
                        bound = params["trio_pty_bound_past_grace"]
                        run = await run_crash(n, grace, bound, tag)
                    else:
                        run = await run_naive(n, grace, params["naive_bound_past_grace"], tag)
                finally:
                    # Only an interrupted run leaves anything (a clean one was confirmed
                    # empty): kill it by pid before anything else happens.
                    procs.kill_and_wait(procs.tagged(tag))
                run["round"] = number
                runs.append(run)
    result.data["runs"] = runs
    ctx.progress("kill time of interactive programs")
    tag = f"{ctx.tag}/teardown/kill-time"
    try:
        result.data["kill_time"] = await kill_times(params["kill_time_rounds"], tag)
    finally:
        procs.kill_and_wait(procs.tagged(tag))
    _summarize(result, runs)


def _summarize(result: Result, runs: list[dict[str, Any]]) -> None:
    grace = result.params["grace"]
    sizes = result.params["sizes"]
    by_n: dict[str, Any] = {}
    for n in sizes:
        ours = [r for r in runs if r["n"] == n and r["variant"] == "trio-pty"]
        crash = [r for r in runs if r["n"] == n and r["variant"] == "crash"]
        naive = [r for r in runs if r["n"] == n and r["variant"] == "naive"]
        ours_gone = [r["gone_s"] for r in ours if r["gone_s"] is not None]
        crash_gone = [r["gone_s"] for r in crash if r["gone_s"] is not None]
        naive_gone = [r["last_gone_s"] for r in naive if r["last_gone_s"] is not None]
        summaries = result.table(
            f"N = {n}: all gone, from the cancel (crash: from the SIGKILL)",
            "s",
            {"trio-pty": ours_gone, "crash": crash_gone, "naive": naive_gone},
            baseline="naive",
        )
        result.table(
            f"N = {n}: crash case, the keeper exited, from the SIGKILL",
            "s",
            {"crash": [r["keeper_exit_s"] for r in crash if r["keeper_exit_s"] is not None]},
        )
        result.table(
            f"N = {n}: teardown call returned, from the cancel",
            "s",
            {"trio-pty": [r["exit_s"] for r in ours], "naive": [r["exit_s"] for r in naive]},
        )
        result.table(
            f"N = {n}: processes in the workload",
            "count",
            {
                "trio-pty": [r["recorded"] for r in ours],
                "crash": [r["recorded"] for r in crash],
                "naive": [r["recorded"] for r in naive],
            },
        )
        result.table(
            f"N = {n}: processes left running at the bound",
            "count",
            {
                "trio-pty": [len(r["leftovers"]) for r in ours],
                "crash": [len(r["leftovers"]) for r in crash],
                "naive": [len(r["leftovers"]) for r in naive],
            },
        )
        by_n[str(n)] = {
            "trio_pty": summaries["trio-pty"],
            "crash": summaries["crash"],
            "crash_leftovers": [len(r["leftovers"]) for r in crash],
            "naive": summaries["naive"],
            "trio_pty_leftovers": [len(r["leftovers"]) for r in ours],
            "trio_pty_present_at_exit": [r["present_at_start"] for r in ours],
            "naive_left_behind": [len(r["leftovers"]) for r in naive],
            "processes": [r["recorded"] for r in ours],
            "setup_s": [r["setup_s"] for r in ours],
        }
        for r in crash:
            result.check(
                f"crash teardown N={n} round {r['round'] + 1}: nothing left, keeper gone",
                r["gone_s"] is not None
                and not r["leftovers"]
                and r["keeper_found"]
                and r["keeper_exit_s"] is not None,
                f"{r['recorded']} processes; left at the bound: {len(r['leftovers'])} "
                f"{r['leftovers'][:5]}; keeper found: {r['keeper_found']}, exited after "
                f"{r['keeper_exit_s']} s",
            )
        for r in ours:
            incomplete = r["gone_s"] is None
            result.check(
                f"trio-pty teardown N={n} round {r['round'] + 1}: nothing left",
                not incomplete
                and not r["leftovers"]
                and r["present_at_start"] == 0
                and not r["fds_left"],
                f"{r['recorded']} processes; present when the manager returned: "
                f"{r['present_at_start']}; left at the bound: {len(r['leftovers'])} "
                f"{r['leftovers'][:5]}; fds left: {r['fds_left']}",
            )
    result.data["by_n"] = by_n
    result.data["grace"] = grace
    compared = [n for n in sizes if n <= result.params["compare_up_to"]]
    largest = max(compared)
    ours = by_n[str(largest)]["trio_pty"]
    naive = by_n[str(largest)]["naive"]
    bound = grace + 0.050
    at_goal_size = largest >= 256
    result.goal(
        "N = 256: all gone within terminate_grace + 50 ms",
        f"N = {largest}: median {ours['median']:.3f} s (max {ours['max']:.3f} s), "
        f"grace {grace:g} s, so +{(ours['median'] - grace) * 1000:.0f} ms past the grace; "
        f"naive: {naive['median']:.3f} s, leaving "
        f"{max(by_n[str(largest)]['naive_left_behind'])} processes running",
        (ours["median"] <= bound) if at_goal_size else None,
        key="teardown",
        subject=f"{ours['median']:.3f} s",
        baseline=f"naive {naive['median']:.3f} s",
        ratio=ours["median"] / naive["median"] if naive["median"] else None,
    )
    _summarize_scaling(result, by_n, sizes, grace)
    crash_at = by_n[str(largest)]["crash"]
    crash_bound = grace + 0.100
    crash_runs = [r for r in runs if r["variant"] == "crash"]
    crash_clean = sum(1 for r in crash_runs if r["gone_s"] is not None and not r["leftovers"])
    result.goal(
        "Crash (the manager's process SIGKILLed), N = 256: all gone within terminate_grace "
        "+ 100 ms, 0 left in every run",
        f"N = {largest}: median {crash_at['median']:.3f} s (max {crash_at['max']:.3f} s) from "
        f"the SIGKILL, so +{(crash_at['median'] - grace) * 1000:.0f} ms past the grace "
        f"(the normal teardown: {ours['median']:.3f} s); {crash_clean}/{len(crash_runs)} "
        "crash runs left nothing",
        (crash_at["median"] <= crash_bound and crash_clean == len(crash_runs))
        if at_goal_size
        else None,
        key="crash",
        subject=f"{crash_at['median']:.3f} s",
        baseline=f"normal teardown {ours['median']:.3f} s",
        ratio=crash_at["median"] / ours["median"] if ours["median"] else None,
    )
    _summarize_kill_time(result)
    ours_runs = [r for r in runs if r["variant"] == "trio-pty"]
    clean = sum(
        1 for r in ours_runs if r["gone_s"] is not None and not r["leftovers"] and not r["fds_left"]
    )
    present = sum(r["present_at_start"] for r in ours_runs)
    result.goal(
        "Zero leftovers in every run",
        f"{clean}/{len(ours_runs)} runs clean; {present} processes still present when "
        "open_manager returned (all runs together)",
        clean == len(ours_runs) and present == 0,
        key="leftovers",
        subject=f"{len(ours_runs) - clean} runs with leftovers",
    )
    naive_past = [
        (r["last_gone_s"] - grace) * 1000
        for r in runs
        if r["variant"] == "naive" and r["last_gone_s"]
    ]
    if naive_past:
        result.notes.append(
            f"The naive way's processes that did go away were all reaped {min(naive_past):.0f} to "
            f"{max(naive_past):.0f} ms after the grace. That depends on when PID 1 gets round to "
            "reaping orphans, not on the naive code: here (PID 1 is the container's init) orphans "
            "were seen reaped in bursts about 2 s apart, so with a 2 s grace the SIGKILLed ones "
            "can land right on a burst, and with a short grace (quick mode) they wait for the "
            "next one."
        )
    naive_runs = [r for r in runs if r["variant"] == "naive"]
    left = [len(r["leftovers"]) for r in naive_runs]
    result.notes.append(
        f"The naive way left {min(left)}-{max(left)} processes running per run (daemons in "
        "their own session and background jobs of the job-control shells), which the "
        "benchmark then killed; its time counts only the processes that did go away."
    )


def _summarize_scaling(
    result: Result, by_n: dict[str, Any], sizes: Sequence[int], grace: float
) -> None:
    """Time past the grace against N, per session, and the marginal cost of each added
    session (the slope between two sizes): flat means no superlinear term."""
    past = {n: (by_n[str(n)]["trio_pty"]["median"] - grace) * 1000 for n in sizes}
    slopes = {
        n: (past[n] - past[previous]) / (n - previous) for previous, n in itertools.pairwise(sizes)
    }
    result.data["past_grace_ms"] = past
    result.data["marginal_ms_per_session"] = slopes
    rows = ["    N   past grace   per session   marginal (from the previous N)"]
    for n in sizes:
        slope = f"{slopes[n]:.3f} ms" if n in slopes else "-"
        rows.append(f"{n:5d}   {past[n]:7.0f} ms   {past[n] / n:8.3f} ms   {slope:>12}")
    result.notes.append(
        "trio-pty's time past the grace against N (medians; the marginal cost is the slope "
        "between this N and the previous one):\n\n```\n" + "\n".join(rows) + "\n```"
    )
    if 1024 not in past:
        return
    result.goal(
        "N = 1,024: all gone within terminate_grace + 150 ms",
        f"+{past[1024]:.0f} ms past the grace (max "
        f"+{(by_n['1024']['trio_pty']['max'] - grace) * 1000:.0f} ms)",
        past[1024] <= 150,
        key="teardown_1024",
        subject=f"+{past[1024]:.0f} ms",
    )
    if 256 in slopes:
        # Each session past 256 may cost at most 1.5x what one past 64 cost (noise room).
        ratio = stats.ratio(slopes[1024], max(slopes[256], 0.01))
        result.goal(
            "Cost per session past the grace flat in N (the slope from 256 to 1,024 at most "
            "1.5x the slope from 64 to 256)",
            f"{slopes[1024]:.3f} ms per added session from 256 to 1,024, "
            f"{slopes[256]:.3f} ms from 64 to 256 ({ratio:.2f}x)",
            ratio <= 1.5,
            key="teardown_slope",
            subject=f"{slopes[1024]:.3f} ms/session",
            baseline=f"{slopes[256]:.3f} ms/session",
            ratio=ratio,
        )


def _summarize_kill_time(result: Result) -> None:
    found = result.data.get("kill_time", {})
    if not found:
        return
    result.table(
        "kill time of an interactive program at its prompt (manager.kill, grace 2 s)",
        "s",
        {name: entry["times"] for name, entry in found.items()},
    )
    endings = "; ".join(f"{name}: {', '.join(entry['endings'])}" for name, entry in found.items())
    result.notes.append(
        "Interactive programs killed at their prompt end as a terminal hanging up makes them "
        f"end ({endings}): exit_signal 1 is the program's own death by SIGHUP, after its "
        "cleanup (bash saves its history); before the hangup came first, bash ignored SIGTERM "
        "and waited for SIGKILL at the end of the grace (2008 ms, exit_signal 9)."
    )
    medians = {name: statistics.median(entry["times"]) for name, entry in found.items()}
    result.data["kill_time_medians"] = medians


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    trio.run(_main, ctx, result)
    return result
