"""Scenario 2: spawn latency of `sh -c 'echo ready'`, to the first byte and to reaped.

Variants, interleaved: trio-pty, the floor (bare os.openpty + trio.lowlevel.open_process, no
controlling tty), the floor with a controlling tty through util-linux `setsid -c` (the
usual way with subprocess; trio-pty's own posix_spawn start needs no extra exec),
ptyprocess and pexpect. Then all of them
again while this process holds 512 MB of touched buffers (fork copies page tables; vfork,
which CPython's subprocess uses when it can, does not).
"""

from __future__ import annotations

import errno
import gc
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pexpect  # type: ignore[import-untyped]
import trio
from ptyprocess import PtyProcess  # type: ignore[import-untyped]

import trio_pty
from trio_pty import ExitEvent, Limits

from . import procs, stats
from .harness import Context, Result

NAME = "spawn"
TITLE = "Spawn latency"
COMMAND = ["sh", "-c", "echo ready"]
BALLAST_BYTES = 512 * 2**20

METHOD = """\
One sample spawns `sh -c 'echo ready'` under a new PTY and measures, from just before the
PTY is opened: **first byte** (the parent has the first output byte in hand) and **reaped**
(all output read, the child's exit status collected). Variants run interleaved in rotating
order, many samples each:

- *floor*: `os.openpty()` + `trio.lowlevel.open_process` with the slave as stdio, no
  controlling tty (vfork + exec); wait_readable + `os.read` until EIO, then `wait()`.
- *floor + ctty*: the same, exec'ing through util-linux `setsid -c` to get a controlling tty
  (what subprocess needs for one, and what trio-pty did before it started children with
  glibc's `posix_spawn`, which takes the tty in the child itself).
- *trio-pty*: `manager.spawn(...)` (validation, policy, environment, workdir handle, the
  session's task tree), first byte through `manager.attach`, reaped when the exit callback
  fires (the library reports an exit only after the leader is reaped and the output drained);
  the session is then removed, outside the clock.
- *trio-pty + bwrap*: the same through a second manager whose sessions run in
  `BubblewrapSandbox()` (read-only root, PID, IPC and network namespaces; a `sh` waiting for
  bwrap), when bwrap is installed: the difference of the medians is the sandbox's cost.
- *ptyprocess*: `PtyProcess.spawn` (fork via `pty.fork`), blocking `read`, `wait()`.
- *pexpect*: `pexpect.spawn`, `read_nonblocking(1)`, `expect(EOF)`, `wait()`.

The whole set runs again while the process holds a 512 MB bytearray with every page touched,
to show which spawn paths copy page tables (fork) and which do not (vfork). "Flat" means the
median with the ballast is at most 1.25x the median without it.
"""


def _params(ctx: Context) -> dict[str, Any]:
    return {
        "rounds": ctx.pick(quick=15, full=100),
        "rounds_ballast": ctx.pick(quick=8, full=40),
        "ballast_mb": BALLAST_BYTES // 2**20,
        "flat_ratio": 1.25,
    }


def _env() -> dict[str, str]:
    return {**os.environ, "TERM": "xterm-256color"}


async def _drain_and_wait(master: int, process: trio.Process, started: float) -> dict[str, float]:
    first = None
    while True:
        await trio.lowlevel.wait_readable(master)
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            continue
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            data = b""
        if first is None:
            first = time.perf_counter() - started
        if not data:
            break
    await process.wait()
    return {"first_byte": first or 0.0, "reaped": time.perf_counter() - started}


async def floor(*, ctty: bool) -> dict[str, float]:
    started = time.perf_counter()
    master, slave = os.openpty()
    try:
        os.set_blocking(master, False)
        argv = [shutil.which("setsid") or "setsid", "-c", "--", *COMMAND] if ctty else COMMAND
        try:
            process = await trio.lowlevel.open_process(
                argv, stdin=slave, stdout=slave, stderr=slave, env=_env()
            )
        finally:
            os.close(slave)
        try:
            return await _drain_and_wait(master, process, started)
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
    finally:
        trio.lowlevel.notify_closing(master)
        os.close(master)


class TrioPty:
    """One manager for the whole scenario, as a server would have."""

    def __init__(self, manager: trio_pty.Manager) -> None:
        self.manager = manager
        self.exits: dict[str, trio.Event] = {}
        self.exit_times: dict[str, float] = {}

    async def on_exit(self, event: ExitEvent) -> None:
        """The manager's exit callback: the exit may be reported before spawn() returns."""
        self.exit_times[event.id] = time.perf_counter()
        self.exits.setdefault(event.id, trio.Event()).set()

    async def sample(self) -> dict[str, float]:
        manager = self.manager
        started = time.perf_counter()
        info = await manager.spawn(
            COMMAND[0], COMMAND[1:], description="spawn latency", notify_on_exit=True
        )
        exited = self.exits.setdefault(info.id, trio.Event())
        try:
            async with manager.attach(info.id) as attachment:
                async for _chunk in attachment:
                    break
            first = time.perf_counter() - started
            await exited.wait()
            reaped = self.exit_times[info.id] - started
            await manager.wait_exit(info.id)
            finished = time.perf_counter() - started
        finally:
            self.exits.pop(info.id, None)
            self.exit_times.pop(info.id, None)
            with trio.CancelScope(shield=True):
                await manager.kill(info.id, cleanup=True)
        return {"first_byte": first, "reaped": reaped, "finished": finished}


async def ptyprocess_sample() -> dict[str, float]:
    started = time.perf_counter()
    process = PtyProcess.spawn(COMMAND, env=_env())
    process.delayafterclose = 0
    try:
        first = None
        while True:
            try:
                process.read(65536)
            except EOFError:
                break
            if first is None:
                first = time.perf_counter() - started
        process.wait()
        reaped = time.perf_counter() - started
    finally:
        process.close(force=True)
    return {"first_byte": first or 0.0, "reaped": reaped}


async def pexpect_sample() -> dict[str, float]:
    started = time.perf_counter()
    child = pexpect.spawn(COMMAND[0], COMMAND[1:], env=_env(), timeout=10)
    child.delayafterclose = 0
    child.ptyproc.delayafterclose = 0
    try:
        child.read_nonblocking(1, timeout=10)
        first = time.perf_counter() - started
        child.expect(pexpect.EOF)
        child.wait()
        reaped = time.perf_counter() - started
    finally:
        child.close(force=True)
    return {"first_byte": first, "reaped": reaped}


SANDBOXED = "trio-pty + bwrap"


async def _measure(
    ctx: Context, label: str, trio_pty_variant: TrioPty, sandboxed: TrioPty | None, rounds: int
) -> dict[str, list[dict[str, float]]]:
    variants: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
        "floor": lambda: floor(ctty=False),
        "floor + ctty": lambda: floor(ctty=True),
        "trio-pty": trio_pty_variant.sample,
        "ptyprocess": ptyprocess_sample,
        "pexpect": pexpect_sample,
    }
    if sandboxed is not None:
        variants[SANDBOXED] = sandboxed.sample
    for variant in variants.values():  # warm up every code path once, unmeasured
        await variant()
    return await stats.interleave(variants, rounds, progress=ctx.progress, label=label)


async def _main(ctx: Context, result: Result) -> None:
    variant = TrioPty(None)  # type: ignore[arg-type]
    sandboxed = TrioPty(None)  # type: ignore[arg-type]
    sandbox = trio_pty.BubblewrapSandbox() if shutil.which("bwrap") else None
    if sandbox is None:
        result.notes.append("bwrap is not installed: the sandboxed variant was not measured.")
    async with (
        trio_pty.open_manager(Limits(), on_exit=variant.on_exit) as manager,
        trio_pty.open_manager(Limits(), on_exit=sandboxed.on_exit, sandbox=sandbox) as boxed,
    ):
        variant.manager = manager
        sandboxed.manager = boxed
        with_box = sandboxed if sandbox is not None else None
        plain = await _measure(ctx, "", variant, with_box, result.params["rounds"])
        ballast = bytearray(BALLAST_BYTES)
        ballast[:: os.sysconf("SC_PAGE_SIZE")] = b"\x01" * (
            BALLAST_BYTES // os.sysconf("SC_PAGE_SIZE")
        )
        try:
            held = await _measure(
                ctx, "512 MB held: ", variant, with_box, result.params["rounds_ballast"]
            )
        finally:
            del ballast
            gc.collect()
    result.data["samples"] = {"plain": plain, "ballast": held}
    _summarize(result, plain, held)


def _summarize(
    result: Result,
    plain: dict[str, list[dict[str, float]]],
    held: dict[str, list[dict[str, float]]],
) -> None:
    tables = {}
    for label, samples in (("", plain), ("512 MB held: ", held)):
        for figure in ("first_byte", "reaped"):
            tables[label + figure] = result.table(
                f"{label}{figure.replace('_', ' ')}",
                "ms",
                {name: [v * 1000 for v in stats.column(s, figure)] for name, s in samples.items()},
                baseline="floor",
            )
    first = tables["first_byte"]
    reaped = tables["reaped"]
    ours_first = first["trio-pty"]["median"]
    floor_first = first["floor"]["median"]
    ratio_first = stats.ratio(ours_first, floor_first)
    ratio_reaped = stats.ratio(reaped["trio-pty"]["median"], reaped["floor"]["median"])
    result.goal(
        "At most 1.7x the floor (trio-pty has a controlling tty, the floor does not)",
        f"first byte {ours_first:.2f} ms vs floor {floor_first:.2f} ms "
        f"({ratio_first:.2f}x); reaped {ratio_reaped:.2f}x",
        ratio_first <= 1.7 and ratio_reaped <= 1.7,
        key="spawn_floor",
        subject=f"{ours_first:.2f} ms",
        baseline=f"floor {floor_first:.2f} ms",
        ratio=ratio_first,
    )
    peer = first["ptyprocess"]["median"]
    result.goal(
        "Faster than ptyprocess",
        f"first byte {ours_first:.2f} ms vs ptyprocess {peer:.2f} ms; reaped "
        f"{reaped['trio-pty']['median']:.2f} vs {reaped['ptyprocess']['median']:.2f}"
        " ms",
        ours_first < peer and reaped["trio-pty"]["median"] < reaped["ptyprocess"]["median"],
        key="spawn_peer",
        subject=f"{ours_first:.2f} ms",
        baseline=f"ptyprocess {peer:.2f} ms",
        ratio=stats.ratio(ours_first, peer),
    )
    if SANDBOXED in first:
        added = {
            figure: tables[figure][SANDBOXED]["median"] - tables[figure]["trio-pty"]["median"]
            for figure in ("first_byte", "reaped")
        }
        result.data["sandbox_added_ms"] = added
        result.notes.append(
            f"The bubblewrap sandbox adds {added['first_byte']:.2f} ms to the median first "
            f"byte and {added['reaped']:.2f} ms to the median reaped time ("
            "its namespaces and mounts, one sh, one bwrap and one env exec)."
        )
    flat = result.params["flat_ratio"]
    growth = {
        name: stats.ratio(tables["512 MB held: first_byte"][name]["median"], first[name]["median"])
        for name in first
    }
    result.data["ballast_growth"] = growth
    result.goal(
        f"Flat when the process holds 512 MB (first byte at most {flat}x its own median)",
        ", ".join(f"{name} {value:.2f}x" for name, value in growth.items()),
        growth["trio-pty"] <= flat,
        key="spawn_flat",
        subject=f"{growth['trio-pty']:.2f}x",
        baseline=f"ptyprocess {growth['ptyprocess']:.2f}x",
        ratio=growth["trio-pty"],
    )


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    fds_before = procs.fd_set()
    trio.run(_main, ctx, result)
    left = procs.new_fds(fds_before)
    result.check("spawn: every descriptor closed", not left, str(left))
    return result
