"""The session life cycle with real children under real PTYs: spawn, output, exit, kill,
timeout, exit events."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator

import pytest
import trio

import trio_pty
from trio_pty import Limits, errors
from trio_pty.model import ExitEvent

from . import leaks
from .helpers import (
    alive,
    numbers_in,
    poll_until,
    process_state,
    wait_for_status,
    wait_for_text,
)

FAST = Limits(terminate_grace=0.3)


async def test_output_and_exit_code_are_recorded() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("sh", ["-c", "echo hello; exit 3"], description="demo")
            assert info.status == "running" and info.pid > 0 and info.id.startswith("pty_")
            await wait_for_status(manager, info.id, "exited")
            final = manager.get(info.id)
            assert (final.exit_code, final.exit_signal) == (3, None)
            page = await manager.read(info.id)
            assert [line.text for line in page.lines] == ["hello"]
            assert final.line_count == 1 and final.byte_count == len(b"hello\r\n")


async def test_exit_signal_is_recorded() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("sh", ["-c", "kill -SEGV $$"], description="crash")
            await wait_for_status(manager, info.id, "exited")
            final = manager.get(info.id)
            assert (final.exit_code, final.exit_signal) == (None, signal.SIGSEGV)


async def test_child_is_session_leader_with_the_pty_as_controlling_tty() -> None:
    script = 'echo "pid=$$ sid=$(ps -o sid= -p $$) pgid=$(ps -o pgid= -p $$) tty=$(tty)"'
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("sh", ["-c", script + "; sleep 100"], description="id")
            text = await wait_for_text(manager, info.id, "tty=")
            pid, sid, pgid = numbers_in(text.replace("=", " "))[:3]
            assert pid == sid == pgid == info.pid, text
            assert "tty=/dev/pts/" in text
            assert os.getsid(info.pid) == info.pid


async def test_master_is_not_leaked_into_the_child() -> None:
    script = "for f in /proc/$$/fd/*; do readlink $f; done; echo done"
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("sh", ["-c", script], description="fds")
            text = await wait_for_text(manager, info.id, "done")
            targets = text.split()[:-1]
            assert targets and all(t.startswith("/dev/pts/") for t in targets), targets


async def test_window_size_is_set() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn(
                "sh", ["-c", "stty size"], description="size", rows=33, cols=101
            )
            await wait_for_text(manager, info.id, "33 101")


async def test_environment_is_filtered_and_tagged() -> None:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/tmp",
        "GITHUB_TOKEN": "x",
        "MY_SECRET": "x",
        "AWS_REGION": "x",
        "KEEP_ME": "kept",
    }
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST, environ=environ) as manager:
            info = await manager.spawn(
                "sh", ["-c", "env; echo END"], description="env", env={"EXTRA": "1"}
            )
            text = await wait_for_text(manager, info.id, "END")
            names = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}
            assert {"KEEP_ME", "EXTRA", "TERM", "LANG", "TRIO_PTY_SESSION"} <= names
            assert not names & {"GITHUB_TOKEN", "MY_SECRET", "AWS_REGION"}
            assert "TERM=xterm-256color" in text and f"TRIO_PTY_SESSION={info.id}" in text


async def test_fixed_environment_mode() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST, env_mode="fixed") as manager:
            info = await manager.spawn("sh", ["-c", "env; echo END"], description="env")
            text = await wait_for_text(manager, info.id, "END")
            names = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}
            names -= {"PWD", "SHLVL", "_", "TRIO_PTY_SESSION", "TRIO_PTY_MANAGER"}
            assert names <= {"HOME", "LANG", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("definitely-not-a-command-xyz", "not found"),
        ("/etc/passwd", "permission denied"),
        ("/tmp", "directory"),
    ],
)
async def test_spawn_failure_leaves_nothing(command: str, reason: str) -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            with pytest.raises(errors.SpawnFailed, match=reason):
                await manager.spawn(command, description="bad")
            assert manager.list() == []
            # The reservation was returned: the owner can still spawn its full quota.
            for _ in range(FAST.max_sessions_per_owner):
                await manager.spawn("sleep", ["100"], description="fill")


async def test_bad_workdir_is_invalid_input() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            with pytest.raises(errors.InvalidInput, match="workdir"):
                await manager.spawn("true", description="x", workdir="/no/such/dir")


async def test_timeout_kills_and_reports() -> None:
    events: list[ExitEvent] = []

    async def on_exit(event: ExitEvent) -> None:
        events.append(event)

    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST, on_exit=on_exit) as manager:
            # The baseline, on this machine as loaded as it is now: a twin spawned and killed.
            start = trio.current_time()
            twin = await manager.spawn("sleep", ["100"], description="twin")
            await manager.kill(twin.id, cleanup=True)
            baseline = trio.current_time() - start
            start = trio.current_time()
            info = await manager.spawn(
                "sleep", ["100"], description="slow", timeout=0.3, notify_on_exit=True
            )
            await wait_for_status(manager, info.id, "killed")
            elapsed = trio.current_time() - start
            assert 0.3 <= elapsed < 0.3 + 2 * baseline + 0.5, (elapsed, baseline)
            final = manager.get(info.id)
            assert final.timed_out and final.exit_signal == signal.SIGHUP
            await poll_until(lambda: len(events) == 1)
            assert events[0].timed_out and events[0].timeout_seconds == 0.3


async def test_kill_keeps_output_and_cleanup_removes() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("sh", ["-c", "echo before; sleep 100"], description="k")
            await wait_for_text(manager, info.id, "before")
            killed = await manager.kill(info.id)
            assert killed.status == "killed" and killed.exit_signal == signal.SIGHUP
            assert not alive(info.pid)
            assert "before" in [line.text for line in (await manager.read(info.id)).lines]
            await manager.kill(info.id, cleanup=True)
            with pytest.raises(errors.SessionNotFound, match=f"PTY session not found: {info.id}"):
                await manager.read(info.id)


async def test_output_printed_while_dying_is_kept() -> None:
    script = "trap 'echo goodbye; exit 0' HUP TERM; echo ready; while :; do sleep 0.05; done"
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("sh", ["-c", script], description="trap")
            await wait_for_text(manager, info.id, "ready")
            await manager.kill(info.id)
            lines = [line.text for line in (await manager.read(info.id)).lines]
            assert lines[-1] == "goodbye"


async def test_write_reaches_the_child() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("cat", description="echo")
            result = await manager.write(info.id, "hello cat\n")
            assert result.bytes_written == len("hello cat\n")
            text = await wait_for_text(manager, info.id, "hello cat\nhello cat")
            assert text.count("hello cat") == 2  # the tty echo and cat's copy


async def test_write_to_ended_session_is_not_running() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("sh", ["-c", "exit 7"], description="x")
            await wait_for_status(manager, info.id, "exited")
            with pytest.raises(errors.NotRunning, match="exited with code 7"):
                await manager.write(info.id, "x")


async def test_exit_events_exactly_once_and_only_when_asked() -> None:
    events: list[ExitEvent] = []

    async def on_exit(event: ExitEvent) -> None:
        events.append(event)

    description = "d" * 150
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST, on_exit=on_exit) as manager:
            loud = await manager.spawn(
                "sh",
                ["-c", "echo one; echo; echo 'last words'; echo '   '; exit 4"],
                description=description,
                notify_on_exit=True,
            )
            quiet = await manager.spawn("sh", ["-c", "exit 0"], description="q")
            killed = await manager.spawn("sleep", ["100"], description="k", notify_on_exit=True)
            await wait_for_status(manager, loud.id, "exited")
            await wait_for_status(manager, quiet.id, "exited")
            await manager.kill(killed.id)
            await poll_until(lambda: len(events) >= 1)
            # Every session has ended (the kill returned once nothing of it remained): a
            # second event, or one for another session, would be on its way in a task now.
            await trio.testing.wait_all_tasks_blocked()
        assert len(events) == 1
        event = events[0]
        assert event.id == loud.id and event.exit_code == 4 and event.type == "pty.exited"
        assert event.description == "d" * 100
        assert event.last_line == "last words"
        assert event.output_lines == 4


async def test_failing_or_hanging_exit_callback_is_cut_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    async def on_exit(event: ExitEvent) -> None:
        calls.append(event.description)
        if event.description == "raise":
            raise RuntimeError("callback bug")
        await trio.sleep_forever()

    limits = Limits(terminate_grace=0.3, notification_timeout=0.3)
    with trio.fail_after(10):
        async with trio_pty.open_manager(limits, on_exit=on_exit) as manager:
            for description in ("raise", "hang"):
                await manager.spawn("true", description=description, notify_on_exit=True)
            await poll_until(lambda: len(calls) == 2)
            # The hanging one is cut off after notification_timeout, and says so.
            await poll_until(lambda: "cut off" in caplog.text)
            # The manager still works.
            info = await manager.spawn("sh", ["-c", "echo alive"], description="after")
            await wait_for_text(manager, info.id, "alive")
    assert "callback bug" in caplog.text and "cut off" in caplog.text


class ExitWatch(trio.abc.Instrument):
    """Is a session that says `exited` missing output? Checked after every task step (right
    after the step that records an exit, before the reader can run again) and in the exit
    callback, rather than by a later poll. Every session is expected to write `size` bytes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.manager: trio_pty.Manager | None = None
        self.short: dict[str, int] = {}
        self.in_callback: dict[str, int] = {}
        self.events: list[ExitEvent] = []

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        for info in self.manager.list_all() if self.manager is not None else ():
            if info.status == "exited" and info.byte_count != self.size:
                self.short.setdefault(info.id, info.byte_count)

    async def on_exit(self, event: ExitEvent) -> None:
        assert self.manager is not None
        count = self.manager.get(event.id).byte_count
        if count != self.size:
            self.in_callback[event.id] = count
        self.events.append(event)

    @contextlib.asynccontextmanager
    async def watching(self, limits: Limits) -> AsyncIterator[trio_pty.Manager]:
        async with trio_pty.open_manager(limits, on_exit=self.on_exit) as manager:
            self.manager = manager
            trio.lowlevel.add_instrument(self)
            try:
                yield manager
            finally:
                trio.lowlevel.remove_instrument(self)
        assert self.short == {}, f"exit recorded with output still unread: {self.short}"
        assert self.in_callback == {}, (
            f"exit announced with output still unread: {self.in_callback}"
        )


async def test_the_exit_is_recorded_only_after_the_output_is_drained() -> None:
    """Eight floods at once keep the readers behind, so the kernel still holds some of a
    session's output when its program exits."""
    size, floods, rounds = 256 * 1024, 8, 4
    watch = ExitWatch(size)
    with trio.fail_after(60):
        async with watch.watching(Limits(max_sessions=64, max_sessions_per_owner=64)) as manager:
            for _ in range(rounds):
                # head writes its bytes and exits at once: nothing between its last
                # write and its exit gives the reader time to catch up.
                ids = [
                    (
                        await manager.spawn(
                            "head",
                            ["-c", str(size), "/dev/zero"],
                            description="f",
                            notify_on_exit=True,
                        )
                    ).id
                    for _ in range(floods)
                ]
                for session_id in ids:
                    await manager.wait_exit(session_id)
                await poll_until(lambda: len(watch.events) == floods)
                watch.events.clear()
                for session_id in ids:
                    await manager.kill(session_id, cleanup=True)


def continue_and_hold_until_exited(pid: int, timeout: float) -> None:
    """Resume the stopped `pid` and hold the whole trio loop (no task runs) until it has
    exited, without reaping it."""
    os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline, f"{pid} did not exit in {timeout} s"
        time.sleep(0.001)


async def test_an_exit_that_wakes_with_its_output_waits_for_the_reader() -> None:
    """The other test's race, forced: the loop is held while the program writes and exits,
    so its exit and its output wake the exit watcher and the reader in one batch of tasks.
    Trio runs a batch in either order (half the time reversed), so in a dozen trials the
    watcher runs first in some: it must wait for the reader then, not record the exit."""
    size = 4096  # fits in the kernel unread (17 KiB here)
    script = f"kill -STOP $$; exec head -c {size} /dev/zero"
    with trio.fail_after(30):
        async with ExitWatch(size).watching(FAST) as manager:
            for _ in range(12):
                info = await manager.spawn(
                    "sh", ["-c", script], description="burst", notify_on_exit=True
                )
                pid = info.pid
                await poll_until(lambda: process_state(pid) == "T")  # noqa: B023
                continue_and_hold_until_exited(pid, timeout=5)
                await manager.wait_exit(info.id)
                assert manager.get(info.id).byte_count == size
                await manager.kill(info.id, cleanup=True)


# Runs in a child Python process, which ignores SIGINT and SIGHUP and blocks SIGUSR1 the way a
# server started by `nohup` or as a script's background job does.
SIGNALS_SCRIPT = """
import signal, trio, trio_pty
from trio_pty import Wait

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])

async def main():
    async with trio_pty.open_manager() as manager:
        info = await manager.spawn(
            "grep", ["-E", "^Sig(Ign|Blk)", "/proc/self/status"], description="signals"
        )
        page = await manager.read(info.id, wait=Wait(exit=True, timeout_ms=10000))
        for line in page.lines:
            print(line.text)

trio.run(main)
"""


async def test_children_start_with_default_signal_handling() -> None:
    """Ignored and blocked signals survive exec: without a reset, a shell in the PTY of a
    server started by `nohup` would ignore Ctrl-C (and could not even trap it)."""
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-c", SIGNALS_SCRIPT],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    masks = {
        name: value.strip()
        for name, value in (line.split(":") for line in done.stdout.decode().splitlines())
    }
    assert masks == {"SigIgn": "0000000000000000", "SigBlk": "0000000000000000"}


class StepCounter(trio.abc.Instrument):
    """Counts the steps of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task, self.steps = task, 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def test_wait_exit_is_not_woken_by_each_chunk_of_output() -> None:
    """A task waiting for the end of a flood runs a bounded number of steps, however many
    chunks the reader stores (it used to wake with every one of them)."""
    size = 4_000_000
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("head", ["-c", str(size), "/dev/zero"], description="f")
            counter: StepCounter | None = None

            async def waiter(task_status: trio.TaskStatus[None]) -> None:
                nonlocal counter
                counter = StepCounter(trio.lowlevel.current_task())
                trio.lowlevel.add_instrument(counter)
                task_status.started()
                await manager.wait_exit(info.id)

            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(waiter)
            finally:
                assert counter is not None
                trio.lowlevel.remove_instrument(counter)
            assert manager.get(info.id).byte_count == size
            # 4 MB arrive in at least ~1,000 reads of at most 4 KiB; the waiter steps once to
            # start, once to park and once when the exit is recorded.
            assert counter.steps <= 5, counter.steps


def _read_calls() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("syscr:"))


async def test_an_idle_manager_does_not_scan_proc() -> None:
    """The orphan reaper scans /proc (every process of the machine, milliseconds each time)
    only when a child of ours is a zombie: 20 ticks of an idle manager with a running
    session read next to nothing (each scan read hundreds of /proc files before)."""
    with trio.fail_after(10):
        async with trio_pty.open_manager(Limits(orphan_reap_interval=0.02)) as manager:
            info = await manager.spawn("sleep", ["100"], description="idle")
            # The spawn's own children are gone and reaped, and the keeper has started:
            # every child of ours sleeps (a zombie would make the next tick scan).
            me = os.getpid()
            await poll_until(
                lambda: {view.state for view in leaks.descendants([me]).values()} == {"S"}
            )
            await trio.testing.wait_all_tasks_blocked()
            before = _read_calls()
            await trio.sleep(0.4)  # the window: 20 ticks of the orphan reaper
            reads = _read_calls() - before
            await manager.kill(info.id, cleanup=True)
    assert reads < 20, reads


async def test_read_compact_is_the_same_page_as_read_in_every_mode() -> None:
    """`read` and `read_compact` carry out one plan: the same lines, numbers, offsets and
    reason, whichever way the page is made (offset, tail, search, since, with a wait)."""
    with trio.fail_after(15):
        async with trio_pty.open_manager(FAST) as manager:
            script = "for i in $(seq 1 40); do echo line $i; done; echo odd 7"
            info = await manager.spawn("sh", ["-c", script], description="pages")
            await manager.wait_exit(info.id)
            ways: list[dict[str, object]] = [
                {"offset": 5, "limit": 7},
                {"tail": 4},
                {"pattern": "odd|line 3", "limit": 3},
                {"since": "last", "reader": "r", "limit": 10},
                {"offset": 0, "wait": trio_pty.Wait(exit=True), "limit": 2},
            ]
            for way in ways:
                page = await manager.read(info.id, **way)  # type: ignore[arg-type]
                if way.get("since"):
                    way = {**way, "reader": "another"}  # a cursor of its own, from the start
                compact = await manager.read_compact(info.id, **way)  # type: ignore[arg-type]
                assert compact.page() == page, way
                assert page.lines, way
            searched = await manager.read(info.id, pattern="odd|line 3", limit=3)
            assert [line.text for line in searched.lines] == ["line 3", "line 30", "line 31"]
