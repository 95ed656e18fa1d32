"""Flood pauses on real PTYs: a session whose output floods is read in pauses of
`Limits.flood_read_delay`, every byte arrives in order and is counted at the exit, and the
first output after a quiet spell is read at once."""

from __future__ import annotations

import os
import resource
import time
from typing import Any

import pytest
import trio

import trio_pty
from trio_pty import ExitEvent, Limits, Wait
from trio_pty.posix import timer

from .helpers import poll_until

SEQ_LINES = 100_000
SEQ_OUTPUT = b"".join(f"{number}\r\n".encode() for number in range(1, SEQ_LINES + 1))


class ReaderWatch(trio.abc.Instrument):
    """Looks at the session readers after each of their steps: how many steps ended with
    the reader pausing between reads (its own `pausing` local, the behaviour under test)."""

    def __init__(self) -> None:
        self.steps = 0
        self.paused = 0
        self.pausing = False
        self.untimed = 0  # steps that ended pausing without a pause timer (none to be had)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name != "trio_pty.reader":
            return
        frame: Any = getattr(task.coro, "cr_frame", None)
        if frame is None:  # the reader has ended
            return
        self.steps += 1
        self.pausing = bool(frame.f_locals.get("pausing"))
        self.paused += self.pausing
        self.untimed += self.pausing and frame.f_locals.get("pause") is None


async def _flood(limits: Limits) -> tuple[ReaderWatch, int, bytes]:
    """`seq` floods the PTY and exits: what the reader did, the byte count when the exit
    was announced, and every byte read."""
    at_exit: list[int] = []

    async def on_exit(event: ExitEvent) -> None:
        at_exit.append(manager.get(event.id).byte_count)

    watch = ReaderWatch()
    with trio.fail_after(60):
        async with trio_pty.open_manager(limits, on_exit=on_exit) as manager:
            trio.lowlevel.add_instrument(watch)
            try:
                info = await manager.spawn(
                    "seq", ["1", str(SEQ_LINES)], description="flood", notify_on_exit=True
                )
                await manager.wait_exit(info.id)
                await poll_until(lambda: len(at_exit) == 1)
            finally:
                trio.lowlevel.remove_instrument(watch)
            received = bytearray()
            while len(received) < len(SEQ_OUTPUT):
                chunk = await manager.read_raw(info.id, offset=len(received))
                assert not chunk.gap and chunk.data
                received += chunk.data
            assert manager.get(info.id).byte_count == len(received)
    return watch, at_exit[0], bytes(received)


async def test_a_flood_of_text_is_read_in_pauses_whole_and_in_order() -> None:
    watch, at_exit, received = await _flood(Limits(flood_read_delay=0.001))
    assert watch.paused > 0, "the reader never paused during a flood of text"
    assert at_exit == len(SEQ_OUTPUT), "the exit was announced before the flood was drained"
    assert received == SEQ_OUTPUT


async def test_without_a_delay_the_reader_never_pauses() -> None:
    watch, at_exit, received = await _flood(Limits(flood_read_delay=0))
    assert watch.steps > 0 and watch.paused == 0
    assert at_exit == len(SEQ_OUTPUT)
    assert received == SEQ_OUTPUT


async def test_the_first_output_after_a_flood_is_read_at_once() -> None:
    """With pauses of a second, a flood ends in pauses; once its output has stopped the
    reader waits to be woken again, so the echo of a line typed then arrives at once, not
    after a pause.

    The flood goes on until the reader is seen pausing: a flood is passes that follow each
    other within _BURST_GAP, and on a loaded machine a short one (a fixed number of lines)
    can be read in passes further apart than that, which is no flood at all."""
    delay = 1.0
    # `yes` is killed mid-line: the first echo ends that line.
    script = "yes flood & read go; kill $!; wait; echo; echo flood over; read line; echo got $line"
    with trio.fail_after(60):
        async with trio_pty.open_manager(Limits(flood_read_delay=delay)) as manager:
            watch = ReaderWatch()
            trio.lowlevel.add_instrument(watch)
            try:
                info = await manager.spawn("sh", ["-c", script], description="f")
                await poll_until(lambda: watch.paused > 0, timeout=30)
                await manager.write(info.id, "\n")  # the flood stops
                page = await manager.read(
                    info.id, wait=Wait(pattern="^flood over$", timeout_ms=20_000)
                )
                assert page.reason == "matched"
                # A pause that finds nothing ends the flood; the reader then waits for the
                # tty (a step that ends not pausing ends in that wait).
                await poll_until(lambda: not watch.pausing, timeout=5 * delay)
                paused_before = watch.paused
                start = time.monotonic()
                await manager.write(info.id, "hi\n")
                page = await manager.read(info.id, wait=Wait(pattern="^got hi$", timeout_ms=5_000))
                elapsed = time.monotonic() - start
                assert page.reason == "matched"
                assert watch.paused == paused_before, "the reader paused for an echo"
                assert elapsed < delay, f"the echo took {elapsed:.3f} s"
            finally:
                trio.lowlevel.remove_instrument(watch)


async def test_commands_sent_back_to_back_are_no_flood() -> None:
    """A shell's commands sent one after another (a few hundred bytes of echo, marks and
    prompt each, read within the burst gap of each other) never add up to a flood: input
    ends one, so no prompt waits for a pause (it did after ~30 commands)."""
    with trio.fail_after(30):
        async with trio_pty.open_manager(Limits(flood_read_delay=0.001)) as manager:
            info = await manager.spawn_shell(description="chat", shell="bash", rc=False)
            watch = ReaderWatch()
            trio.lowlevel.add_instrument(watch)
            try:
                for _ in range(200):  # about 50 KB in all
                    result = await manager.run(info.id, "true")
                    assert (result.reason, result.exit_code) == ("exited", 0)
            finally:
                trio.lowlevel.remove_instrument(watch)
            assert manager.get(info.id).byte_count > 4 * 8192  # a flood four times over
            assert watch.steps > 0 and watch.paused == 0


async def test_out_of_descriptors_a_flood_is_still_read_whole() -> None:
    """The pause timer is a descriptor. With none to be had (EMFILE: the soft limit lowered
    to the lowest free descriptor while the flood runs), the reader pauses without it and
    every byte still arrives."""
    limits = Limits(flood_read_delay=0.001, terminate_grace=0.3)
    with trio.fail_after(60):
        async with trio_pty.open_manager(limits) as manager:
            info = await manager.spawn(
                "sh", ["-c", f"read go; seq 1 {SEQ_LINES}; read done"], description="flood"
            )
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            lowest_free = os.open(os.devnull, os.O_RDONLY)
            os.close(lowest_free)
            watch = ReaderWatch()
            trio.lowlevel.add_instrument(watch)
            resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
            try:
                with pytest.raises(OSError):  # the limit holds
                    os.close(os.open(os.devnull, os.O_RDONLY))
                await manager.write(info.id, "\n")
                page = await manager.read(
                    info.id, wait=Wait(pattern=f"^{SEQ_LINES}$", timeout_ms=30_000)
                )
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                trio.lowlevel.remove_instrument(watch)
            assert page.reason == "matched"
            assert watch.untimed > 0, "the reader never paused without its timer"
            received = bytearray()
            while chunk := (await manager.read_raw(info.id, offset=len(received))).data:
                received += chunk
            assert SEQ_OUTPUT in received
            await manager.write(info.id, "\n")
            await manager.wait_exit(info.id)


@pytest.mark.parametrize("value", [-0.001, float("nan")])
def test_the_delay_must_not_be_negative(value: float) -> None:
    with pytest.raises(ValueError, match="flood_read_delay"):
        Limits(flood_read_delay=value)


def test_the_delay_defaults_to_a_millisecond_and_zero_turns_it_off() -> None:
    assert Limits().flood_read_delay == 0.001
    assert Limits(flood_read_delay=0).flood_read_delay == 0


async def test_the_pause_timer_fires_once_per_arming() -> None:
    pause = timer.OneShot(0.01)
    try:
        with trio.fail_after(5):
            for _ in range(3):
                started = trio.current_time()
                pause.arm()
                await trio.lowlevel.wait_readable(pause.fd)
                assert trio.current_time() - started >= 0.009
                pause.clear()
                with pytest.raises(BlockingIOError):
                    os.read(pause.fd, 8)  # consumed: not readable until armed again
    finally:
        trio.lowlevel.notify_closing(pause.fd)
        pause.close()
    assert pause.fd == -1
