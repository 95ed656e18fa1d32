"""Scenario 6: memory: RSS per idle session over 100 sessions, and per full buffer.

Every sample runs in a fresh Python process (`python -m benchmarks.memory VARIANT`): in a
process that has already allocated and freed, new sessions reuse freed memory and look free.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from . import stats
from .harness import REPO, Context, Result

NAME = "memory"
TITLE = "Memory"
IDLE_SESSIONS = 100
FULL_SESSIONS = 10
FULL_BYTES = 1_500_000
LINE = "INFO  worker-3 GET /api/v1/items/12345 status=200 took=12ms"

METHOD = f"""\
Each sample is a fresh Python process, so that memory freed by an earlier sample cannot be
reused and hide the cost. It imports everything, warms up (two sessions spawned and left
running: removing them would scan /proc, whose size follows the machine's process count, and
leave freed memory behind), runs `gc.collect()`, reads its RSS with psutil, then:

- *idle*: spawns {IDLE_SESSIONS} sessions of `sleep 1000` (no output), lets them settle,
  collects, reads RSS again: (after - before) / {IDLE_SESSIONS}.
- *floor*: the same with bare `os.openpty` + `trio.lowlevel.open_process` and one task per
  PTY waiting for output: what any trio program holding 100 PTYs pays.
- *full buffer*: {FULL_SESSIONS} sessions each print {FULL_BYTES / 1e6:g} MB of log lines
  (more than the 1 MB ring) and exit; RSS per session after they ended, then again after every
  line has been read once (the clean-text cache, bounded at twice the ring).
"""


def _params(ctx: Context) -> dict[str, Any]:
    return {"rounds": ctx.pick(quick=2, full=5), "idle_goal_kib": 16}


# ----------------------------------------------------------------------------- one sample


def _rss() -> int:
    import psutil  # type: ignore[import-untyped]

    gc.collect()
    return int(psutil.Process().memory_info().rss)


async def _idle_trio_pty() -> dict[str, float]:
    import trio

    import trio_pty

    limits = trio_pty.Limits(
        max_sessions=IDLE_SESSIONS + 8, max_sessions_per_owner=IDLE_SESSIONS + 8
    )
    async with trio_pty.open_manager(limits) as manager:
        # Warm up with two sessions left running: a kill's teardown scans /proc, and the
        # scan of a busy machine (thousands of processes when other work runs) would leave
        # freed memory that the sessions below reuse, hiding their cost.
        for _ in range(2):
            await manager.spawn("sleep", ["1000"], description="warm-up")
        await trio.sleep(0.1)
        before = _rss()
        for _ in range(IDLE_SESSIONS):
            await manager.spawn("sleep", ["1000"], description="idle")
        await trio.sleep(0.3)
        after = _rss()
    return {"per_session": (after - before) / IDLE_SESSIONS, "before": before, "after": after}


async def _idle_floor() -> dict[str, float]:
    import trio

    masters: list[int] = []
    processes: list[trio.Process] = []

    async def wait_output(master: int) -> None:
        await trio.lowlevel.wait_readable(master)

    async def start(nursery: trio.Nursery) -> None:
        master, slave = os.openpty()
        os.set_blocking(master, False)
        masters.append(master)
        try:
            processes.append(
                await trio.lowlevel.open_process(
                    ["sleep", "1000"], stdin=slave, stdout=slave, stderr=slave
                )
            )
        finally:
            os.close(slave)
        nursery.start_soon(wait_output, master)

    try:
        async with trio.open_nursery() as nursery:
            await start(nursery)  # warm up
            before = _rss()
            for _ in range(IDLE_SESSIONS):
                await start(nursery)
            await trio.sleep(0.3)
            after = _rss()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            for process in processes:
                process.kill()
                await process.wait()
            for master in masters:
                os.close(master)
    return {"per_session": (after - before) / IDLE_SESSIONS, "before": before, "after": after}


async def _full_buffers() -> dict[str, float]:
    import trio_pty

    script = f"yes '{LINE}' | head -c {FULL_BYTES}"
    limits = trio_pty.Limits(
        max_sessions=FULL_SESSIONS + 4, max_sessions_per_owner=FULL_SESSIONS + 4
    )
    async with trio_pty.open_manager(limits) as manager:
        for _ in range(2):  # warm up, reading included
            info = await manager.spawn("sh", ["-c", "seq 1000"], description="warm-up")
            await manager.wait_exit(info.id)
            await manager.read(info.id, offset=0, limit=2000)
            await manager.kill(info.id, cleanup=True)
        before = _rss()
        ids = []
        for _ in range(FULL_SESSIONS):
            info = await manager.spawn("sh", ["-c", script], description="full")
            await manager.wait_exit(info.id)
            ids.append(info.id)
        filled = _rss()
        for session_id in ids:
            offset = 0
            while True:
                page = await manager.read(session_id, offset=offset, limit=2000)
                if not page.has_more:
                    break
                offset = page.next_offset
        read = _rss()
        sizes = [manager.get(i).byte_count for i in ids]
    return {
        "per_buffer": (filled - before) / FULL_SESSIONS,
        "per_buffer_read": (read - before) / FULL_SESSIONS,
        "byte_count": min(sizes),
    }


def sample(variant: str) -> dict[str, float]:
    import trio

    function = {"trio-pty": _idle_trio_pty, "floor": _idle_floor, "full": _full_buffers}[variant]
    return trio.run(function)


# ----------------------------------------------------------------------------- scenario


def _in_fresh_process(variant: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", variant],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory sample {variant} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    variants: dict[str, Callable[[], dict[str, float]]] = {
        name: functools.partial(_in_fresh_process, name) for name in ("trio-pty", "floor", "full")
    }
    samples = stats.interleave_sync(
        variants,
        result.params["rounds"],
        progress=ctx.progress,
    )
    result.data["samples"] = samples
    kib = 1024
    idle = result.table(
        f"RSS per idle session, {IDLE_SESSIONS} sessions",
        "KiB",
        {name: [s["per_session"] / kib for s in samples[name]] for name in ("trio-pty", "floor")},
        baseline="floor",
    )
    result.table(
        f"RSS per ended session with a full 1 MB buffer, {FULL_SESSIONS} sessions",
        "KiB",
        {
            "after output": [s["per_buffer"] / kib for s in samples["full"]],
            "after reading every line": [s["per_buffer_read"] / kib for s in samples["full"]],
        },
    )
    ours = idle["trio-pty"]["median"]
    floor = idle["floor"]["median"]
    goal = result.params["idle_goal_kib"]
    result.goal(
        f"At most {goal} KiB per idle session beyond its buffered output",
        f"{ours:.1f} KiB per idle session (floor {floor:.1f} KiB, a bare PTY + process + task)",
        ours <= goal,
        key="memory",
        subject=f"{ours:.1f} KiB",
        baseline=f"floor {floor:.1f} KiB",
        ratio=stats.ratio(ours, floor),
    )
    return result


if __name__ == "__main__":
    started = time.perf_counter()
    print(json.dumps(sample(sys.argv[1])))


def profile(ctx: Context, n: int, out: str) -> None:
    """`python -m benchmarks --profile memory`: what N idle sessions hold (`--sessions`,
    default 256), by tracemalloc in this process: the Python allocations that grew while they
    were spawned, per session, grouped by the line that made them (what the RSS figure of
    the scenario is made of, less the allocator's own slack). Writes the listing to `out`."""
    import tracemalloc

    import trio

    import trio_pty

    async def main() -> list[tracemalloc.StatisticDiff]:
        limits = trio_pty.Limits(max_sessions=n + 8, max_sessions_per_owner=n + 8)
        async with trio_pty.open_manager(limits) as manager:
            for _ in range(2):  # warm up
                info = await manager.spawn("sleep", ["1000"], description="warm-up")
                await manager.kill(info.id, cleanup=True)
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            for _ in range(n):
                await manager.spawn("sleep", ["1000"], description="idle")
            await trio.sleep(0.3)
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            return after.compare_to(before, "lineno")

    diffs = trio.run(main)
    total = sum(diff.size_diff for diff in diffs) / n
    lines = [f"{n} idle sessions: {total:.0f} bytes of Python allocations per session"]
    for diff in diffs:
        if diff.size_diff / n >= 32:
            where = diff.traceback[0]
            lines.append(
                f"{diff.size_diff / n:7.0f} B {diff.count_diff / n:5.1f} blocks  "
                f"{where.filename}:{where.lineno}"
            )
    with open(out, "w") as listing:
        listing.write("\n".join(lines) + "\n")
    print("\n".join(lines[:45]))
    print(f"listing written to {out}")
