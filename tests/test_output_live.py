"""The output model on real PTYs: clean lines, absolute numbering, waits, attach, resize,
terminal query answers, raw replay."""

from __future__ import annotations

import hashlib
import signal
import time

import pytest
import trio

import trio_pty
from trio_pty import Limits, Wait, errors

from .helpers import poll_until, tagged_processes, wait_for_status, wait_for_text

LIMITS = Limits(terminate_grace=0.3)


async def test_escapes_carriage_returns_and_colours_read_clean() -> None:
    script = r"printf 'a\r\nb\033[31mred\033[0m\n10%%\r100%%\n'"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="clean")
            await wait_for_status(manager, info.id, "exited")
            page = await manager.read(info.id)
            assert [line.text for line in page.lines] == ["a", "bred", "100%"]
            assert [line.number for line in page.lines] == [0, 1, 2]


async def test_character_split_across_writes_decodes_whole() -> None:
    script = r"printf '\342\202'; sleep 0.1; printf '\254 euro\n'"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="utf8")
            await wait_for_status(manager, info.id, "exited")
            assert [line.text for line in (await manager.read(info.id)).lines] == ["€ euro"]


async def test_three_megabytes_keep_absolute_numbering() -> None:
    with trio.fail_after(30):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("seq", ["0", "499999"], description="3 MB")
            await wait_for_status(manager, info.id, "exited", timeout=25)
            final = manager.get(info.id)
            assert final.byte_count > 3_000_000 and final.line_count == 500_000
            page = await manager.read(info.id, offset=0, limit=3)
            assert page.first_line > 0 and page.missed_lines == page.first_line
            assert [(line.number, line.text) for line in page.lines] == [
                (page.first_line + i, str(page.first_line + i)) for i in range(3)
            ]
            tail = await manager.read(info.id, offset=499_998)
            assert [(line.number, line.text) for line in tail.lines] == [
                (499_998, "499998"),
                (499_999, "499999"),
            ]
            assert not tail.has_more and tail.total_lines == 500_000
            found = await manager.read(info.id, pattern=r"^49999[0-9]$", limit=20)
            assert [line.number for line in found.lines] == list(range(499_990, 500_000))


async def test_wait_for_a_pattern_printed_after_a_second() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(
                "sh",
                ["-c", "echo start; sleep 1; echo 'server listening'; sleep 100"],
                description="late",
            )
            start = trio.current_time()
            page = await manager.read(info.id, wait=Wait(pattern="listening", timeout_ms=5000))
            elapsed = trio.current_time() - start
            assert page.reason == "matched" and 0.9 <= elapsed < 1.8, elapsed
            assert [line.text for line in page.lines] == ["start", "server listening"]


async def test_wait_reasons_idle_exited_timeout() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            quiet = await manager.spawn("sh", ["-c", "echo a; sleep 100"], description="idle")
            page = await manager.read(quiet.id, wait=Wait(idle_ms=200, timeout_ms=5000))
            assert page.reason == "idle" and [line.text for line in page.lines] == ["a"]

            silent = await manager.spawn("sleep", ["100"], description="silent")
            start = trio.current_time()
            page = await manager.read(silent.id, wait=Wait(idle_ms=50, timeout_ms=300))
            # Silence with no output at all is not idleness: it times out.
            assert page.reason == "timeout" and trio.current_time() - start >= 0.3

            ending = await manager.spawn("sh", ["-c", "sleep 0.2; echo bye"], description="x")
            page = await manager.read(ending.id, wait=Wait(pattern="never", timeout_ms=5000))
            assert page.reason == "exited" and page.lines[-1].text == "bye"
            with pytest.raises(errors.InvalidInput, match="wait"):
                await manager.read(ending.id, wait=Wait())


async def test_cancelling_a_wait_ends_it_at_once() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sleep", ["100"], description="wait")
            with trio.move_on_after(0.1) as scope:
                await manager.read(info.id, wait=Wait(pattern="x", timeout_ms=20_000))
            late = trio.current_time() - scope.deadline
            assert scope.cancelled_caught and late < 0.3, late
            # Nothing is left parked on the session: the task-leak check would say so.


async def test_terminal_queries_are_answered_while_no_driver_is_attached() -> None:
    program = (
        "import os, sys, termios, tty\n"
        "tty.setraw(0)\n"
        "os.write(1, b'\\x1b[6n\\x1b[c')\n"
        "reply = b''\n"
        "while reply.count(b'R') < 1 or not reply.endswith(b'c'):\n"
        "    reply += os.read(0, 100)\n"
        "os.write(1, b'\\r\\nreply ' + reply.replace(b'\\x1b', b'ESC') + b'\\r\\n')\n"
    )
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("python3", ["-c", program], description="query")
            text = await wait_for_text(manager, info.id, "reply ")
            assert "ESC[1;1R" in text and "ESC[?" in text


async def test_resize_delivers_sigwinch() -> None:
    script = "trap 'stty size' WINCH; echo ready; while :; do sleep 0.05; done"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="winch")
            await wait_for_text(manager, info.id, "ready")
            resized = await manager.resize(info.id, rows=40, cols=120)
            assert (resized.rows, resized.cols) == (40, 120)
            await wait_for_text(manager, info.id, "40 120")
            with pytest.raises(errors.InvalidInput, match="rows"):
                await manager.resize(info.id, rows=0, cols=10)


async def test_slow_and_fast_attachments_both_see_every_byte() -> None:
    script = "for i in $(seq 1 3000); do echo line $i; done; sleep 100"
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="attach")
            digests: dict[str, bytes] = {}

            async def consume(name: str, delay: float) -> None:
                received = bytearray()
                async with manager.attach(info.id) as stream:
                    expected = 0
                    async for chunk in stream:
                        assert chunk.offset == expected and not chunk.gap
                        received += chunk.data
                        expected = chunk.offset + len(chunk.data)
                        if b"line 3000" in received:
                            break
                        await trio.sleep(delay)
                digests[name] = bytes(received)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume, "fast", 0)
                nursery.start_soon(consume, "slow", 0.02)
            raw = await manager.read_raw(info.id, offset=0)
            end = raw.data.index(b"line 3000") + len(b"line 3000")
            for received in digests.values():
                assert received[:end] == raw.data[:end]


async def test_attach_resumes_from_an_offset_without_loss_or_repeat() -> None:
    script = "i=0; while [ $i -lt 400 ]; do echo tick $i; i=$((i+1)); sleep 0.002; done"
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="resume")
            received = bytearray()
            async with manager.attach(info.id) as stream:
                async for chunk in stream:
                    received += chunk.data
                    if len(received) > 500:
                        break
            resume_at = len(received)  # a client that reconnects knows its offset
            async with manager.attach(info.id, offset=resume_at) as stream:
                async for chunk in stream:
                    assert chunk.offset == len(received) and not chunk.gap
                    received += chunk.data
            await wait_for_status(manager, info.id, "exited")
            everything = (await manager.read_raw(info.id, offset=0)).data
            assert hashlib.sha256(received).digest() == hashlib.sha256(everything).digest()


async def test_attach_after_rotation_reports_a_gap_and_starts_at_a_line() -> None:
    limits = Limits(terminate_grace=0.3, buffer_size=10_000)
    with trio.fail_after(10):
        async with trio_pty.open_manager(limits) as manager:
            info = await manager.spawn("seq", ["1", "20000"], description="rotate")
            await wait_for_status(manager, info.id, "exited")
            async with manager.attach(info.id, offset=5) as stream:
                first = await stream.__anext__()
            assert first.gap and first.offset > 5
            assert first.data.split(b"\r\n")[0].isdigit()  # a whole line, not a fragment
            raw = await manager.read_raw(info.id, offset=0)
            assert raw.gap and raw.offset > 0


async def test_attachments_end_when_the_session_is_removed() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", "echo hi; sleep 100"], description="end")
            chunks = []

            async def watch() -> None:
                async with manager.attach(info.id) as stream:
                    async for chunk in stream:
                        chunks.append(chunk)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                await wait_for_text(manager, info.id, "hi")
                await manager.kill(info.id, cleanup=True)
            assert chunks and chunks[0].data.startswith(b"hi")


async def test_ctrl_c_through_escapes_interrupts_the_foreground_job() -> None:
    script = "trap 'echo interrupted' INT; echo ready; sleep 100; echo after"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("bash", ["-c", script], description="ctrl-c")
            await wait_for_text(manager, info.id, "ready")
            # A ^C between "ready" and the fork of `sleep` would only run the trap, and
            # the sleep would then run its 100 s: wait until the foreground job exists.
            await poll_until(lambda: len(tagged_processes(manager, info.id)) >= 2)
            await manager.write(info.id, "\\x03", escapes=True)
            text = await wait_for_text(manager, info.id, "after")
            assert "interrupted" in text
            await wait_for_status(manager, info.id, "exited")
            assert manager.get(info.id).exit_signal != signal.SIGINT


class LongestStep(trio.abc.Instrument):
    """The most CPU time (of this thread) one task step took: how long a task held the
    event loop. CPU time, not the clock: on a loaded machine the clock also counts the time
    other processes had the core."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.total = 0.0
        # The step that installs the instrument ends without having begun under it.
        self._began = time.thread_time()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        step = time.thread_time() - self._began
        self.longest = max(self.longest, step)
        self.total += step


async def test_a_slow_pattern_never_stalls_other_tasks() -> None:
    """RE2 is linear but a DFA-hostile pattern runs at ~150 ms/MB: the search goes in
    slices with checkpoints in between and stops after max_search_ms with has_more. The
    whole scan (1 MB, 16 slices of 64 KiB, 10 to 17 ms each) takes ~150 ms; with a budget
    of 20 ms it must take several reads, each returning with has_more, and no task step
    may hold the loop for more than a few slices."""
    program = (
        "import random\n"
        "random.seed(7)\n"
        "for _ in range(13000):\n"
        "    print(''.join(random.choice('ab') for _ in range(79)))\n"
    )
    limits = Limits(terminate_grace=0.3, max_search_ms=20, search_slice_bytes=65536)
    with trio.fail_after(30):
        async with trio_pty.open_manager(limits) as manager:
            info = await manager.spawn("python3", ["-c", program], description="a/b")
            await wait_for_status(manager, info.id, "exited", timeout=20)
            steps = LongestStep()
            trio.lowlevel.add_instrument(steps)
            try:
                offset, calls = 0, 0
                while True:
                    began = time.thread_time()
                    page = await manager.read(info.id, offset=offset, pattern="a[ab]{20}c")
                    assert time.thread_time() - began < 0.6
                    assert page.lines == []
                    calls += 1
                    if not page.has_more:
                        break
                    offset = page.next_offset
                # Ends the step this loop is in, so that reads that never let another task
                # run are measured too (as one step holding all their work: before each
                # read checkpointed after its last slice, 14 reads ran as one 0.35 s step).
                await trio.lowlevel.checkpoint()
            finally:
                trio.lowlevel.remove_instrument(steps)
            # No step holds more than a fraction of the work: a ratio in the same run, as
            # CPU time itself grows when other processes share the cores.
            assert steps.longest < 0.4 * steps.total, (steps.longest, steps.total)
            assert offset <= page.total_lines
            # The budget stopped the scan: one read that went through it all would say 1.
            assert calls >= 2, calls
