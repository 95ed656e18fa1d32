"""Lines as the terminal left them, on real programs: readline editing and Ctrl-R, a 20 MB
progress line, waits that skip their own echo, tails and read cursors."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
import trio

import trio_pty
from trio_pty import Limits, Wait

from .helpers import wait_for_status

LIMITS = Limits(terminate_grace=0.3)
SHELL_ENV = {"PS1": "qa$ ", "HISTFILE": "/dev/null"}


async def shell(manager: trio_pty.Manager) -> str:
    info = await manager.spawn(
        "bash", ["--norc", "--noprofile"], description="shell", env=SHELL_ENV
    )
    await manager.read(info.id, wait=Wait(pattern=r"^qa\$ $", timeout_ms=5000))
    return info.id


async def texts(manager: trio_pty.Manager, session_id: str) -> list[str]:
    return [line.text for line in (await manager.read(session_id)).lines]


async def test_readline_editing_and_ctrl_r_read_as_the_screen_showed_them() -> None:
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            session_id = await shell(manager)
            # Type "echo helo world", move left 7 times, type "l", Enter.
            typed = "echo helo world" + "\x1b[D" * 7 + "l\r"
            result = await manager.write(
                session_id, typed, wait=Wait(pattern="^qa\\$ $", timeout_ms=5000)
            )
            assert result.output is not None
            assert [line.text for line in result.output.lines][:2] == [
                "qa$ echo hello world",
                "hello world",
            ]
            await manager.write(
                session_id, "echo first-cmd\r", wait=Wait(pattern="^first-cmd$", timeout_ms=5000)
            )
            await manager.write(
                session_id, "echo second\r", wait=Wait(pattern="^second$", timeout_ms=5000)
            )
            # Ctrl-R only once readline reads again (the new prompt is on the screen): typed
            # while bash runs the command, the terminal is in cooked mode and echoes it as ^R.
            await manager.screen(session_id, wait=Wait(pattern="^qa\\$ $", timeout_ms=5000))
            # Ctrl-R, search "fir", Enter: runs "echo first-cmd" again.
            await manager.write(session_id, "\x12fir")
            await manager.screen(
                session_id, wait=Wait(pattern="i-search.`fir': echo first-cmd", timeout_ms=5000)
            )
            await manager.write(session_id, "\r")
            await manager.read(session_id, wait=Wait(pattern="^qa\\$ $", idle_ms=300))
            lines = await texts(manager, session_id)
            assert lines[-3:] == ["qa$ echo first-cmd", "first-cmd", "qa$ "]
            assert not any("reverse-i-search" in line for line in lines)
            await manager.write(session_id, "exit\r")
            await wait_for_status(manager, session_id, "exited")


async def test_a_20_mb_progress_line_keeps_its_latest_state() -> None:
    steps = 400_000
    bar = "#" * 20
    program = (
        "import sys, time\n"
        f"for i in range({steps}):\n"
        f"    sys.stdout.write(f'\\rdownloading {{i % 100:3d}}% step {{i:6d}} [{bar}]')\n"
        "sys.stdout.flush()\n"
        "time.sleep(30)\n"
    )
    with trio.fail_after(30):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(sys.executable, ["-c", program], description="progress")
            last = f"downloading {(steps - 1) % 100:3d}% step {steps - 1:6d} [{bar}]"
            page = await manager.read(
                info.id, wait=Wait(pattern=re.escape(last), timeout_ms=25_000)
            )
            assert page.reason == "matched"
            assert manager.get(info.id).byte_count > 20_000_000
            assert [line.text for line in page.lines] == [last]
            assert (await manager.read(info.id, tail=3)).lines == page.lines
            assert (await manager.screen(info.id)).lines[0] == last
            await manager.kill(info.id)


async def test_a_wait_attached_to_a_write_skips_the_echo() -> None:
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            session_id = await shell(manager)
            started = trio.current_time()
            result = await manager.write(
                session_id, "sleep 1; echo DONE\n", wait=Wait(pattern="DONE", timeout_ms=5000)
            )
            assert trio.current_time() - started >= 0.9
            assert result.output is not None and result.output.reason == "matched"
            assert [line.text for line in result.output.lines][:2] == [
                "qa$ sleep 1; echo DONE",
                "DONE",
            ]
            # The echo of a command ends on its own line; what follows is output. (Waiting
            # for the prompt first: a command typed ahead is echoed twice, see output/echo.)
            await manager.read(session_id, wait=Wait(pattern=r"^qa\$ $", timeout_ms=5000))
            result = await manager.write(
                session_id, "read x; echo got-$x\n", wait=Wait(pattern="x", timeout_ms=300)
            )
            assert result.output is not None and result.output.reason == "timeout"
            result = await manager.write(session_id, "y\n", wait=Wait(pattern="^got-y$"))
            assert result.output is not None and result.output.reason == "matched"
            await manager.write(session_id, "exit\n")
            await wait_for_status(manager, session_id, "exited")


async def test_tails_and_read_cursors() -> None:
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            session_id = await shell(manager)
            await manager.write(
                session_id, "seq 1 3000\n", wait=Wait(pattern="^qa\\$ $", timeout_ms=5000)
            )
            tail = await manager.read(session_id, tail=3)
            assert [line.text for line in tail.lines] == ["2999", "3000", "qa$ "]
            assert tail.lines[-1].number == 3001 and tail.next_offset == 3001
            # The owner's cursor moved with that read: what follows is the prompt again.
            after_tail = await manager.read(session_id, since="last")
            assert [line.text for line in after_tail.lines] == []  # nothing new was written
            # A connection's own cursor starts at the oldest line and moves page by page.
            first = await manager.read(session_id, since="last", reader="conn-1", limit=2)
            assert [line.text for line in first.lines] == ["qa$ seq 1 3000", "1"]
            following = await manager.read(session_id, since="last", reader="conn-1", limit=2)
            assert [line.text for line in following.lines] == ["2", "3"]
            other = await manager.read(session_id, since="last", reader="conn-2", limit=1)
            assert [line.text for line in other.lines] == ["qa$ seq 1 3000"]
            rest = await manager.read(session_id, since="last", reader="conn-1", limit=2000)
            assert rest.lines[0].text == "4" and rest.has_more
            rest = await manager.read(session_id, since="last", reader="conn-1", limit=2000)
            assert rest.lines[-1].text == "qa$ " and not rest.has_more
            nothing = await manager.read(session_id, since="last", reader="conn-1")
            assert nothing.lines == [] and nothing.missed_lines == 0
            # Wait for the prompt, not for "new": the prompt comes in a later chunk.
            await manager.write(session_id, "echo new\n", wait=Wait(pattern=r"^qa\$ $"))
            new = await manager.read(session_id, since="last")
            assert [line.text for line in new.lines] == ["qa$ echo new", "new", "qa$ "]
            await manager.write(session_id, "exit\n")
            await wait_for_status(manager, session_id, "exited")


async def test_a_cursor_reports_lines_that_rotated_away() -> None:
    limits = Limits(terminate_grace=0.3, buffer_size=4096)
    with trio.fail_after(20):
        async with trio_pty.open_manager(limits) as manager:
            session_id = await shell(manager)
            await manager.read(session_id, since="last")
            await manager.write(
                session_id, "seq 1 5000\n", wait=Wait(pattern="^qa\\$ $", timeout_ms=5000)
            )
            page = await manager.read(session_id, since="last", limit=2000)
            assert page.missed_lines > 4000
            assert page.lines[-1].text == "qa$ "
            await manager.write(session_id, "exit\n")
            await wait_for_status(manager, session_id, "exited")


async def test_invalid_read_combinations_are_refused() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", "echo x"], description="x")
            await wait_for_status(manager, info.id, "exited")
            cases: list[dict[str, Any]] = [
                {"tail": 3, "offset": 2},
                {"tail": 3, "since": "last"},
                {"tail": 3, "pattern": "x"},
                {"since": "first"},
                {"tail": 0},
                {"since": "last", "reader": ""},
            ]
            for kwargs in cases:
                try:
                    await manager.read(info.id, **kwargs)
                except trio_pty.InvalidInput:
                    continue
                raise AssertionError(f"accepted {kwargs}")


TOKENS = " ".join(f"token{i:02d}" for i in range(1, 41))  # 327 characters: wraps at 200


@pytest.mark.parametrize("cols", [20, 80, 200])
@pytest.mark.parametrize("program", ["bash", "python"])
async def test_a_command_edited_across_the_window_edge_reads_as_one_line(
    program: str, cols: int
) -> None:
    # Issue 32: readline moves down with a line feed (`_rl_move_vert`). After Ctrl-A and
    # Ctrl-E on a command that wraps, and more typing, the command is one line.
    if program == "bash":
        argv = ["bash", "--norc", "--noprofile"]
        prompt, command, shown = r"^qa\$ $", f"echo {TOKENS}", "qa$ "
    else:
        argv = [sys.executable, "-i", "-q"]
        prompt, command, shown = r"^>>> $", f"print('{TOKENS}", ">>> "
    ending = " TAIL" if program == "bash" else " TAIL')"
    with trio.fail_after(30):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(
                argv[0], argv[1:], description="edit", env=SHELL_ENV, cols=cols, rows=24
            )
            await manager.read(info.id, wait=Wait(pattern=prompt, timeout_ms=5000))
            # Typed in pieces, each once its echo is on the screen (readline redraws).
            await manager.write(info.id, command)
            await manager.screen(info.id, wait=Wait(pattern="token40", timeout_ms=5000))
            await manager.write(info.id, "\x01")  # Ctrl-A: to the start (moves up)
            await manager.screen(info.id, wait=Wait(pattern="token40", idle_ms=200))
            await manager.write(info.id, "\x05")  # Ctrl-E: to the end (line feeds down)
            await manager.screen(info.id, wait=Wait(pattern="token40", idle_ms=200))
            await manager.write(info.id, ending + "\r")
            await manager.read(info.id, wait=Wait(pattern=f"^{TOKENS} TAIL$", timeout_ms=5000))
            await manager.read(info.id, wait=Wait(pattern=prompt, idle_ms=300))
            lines = await texts(manager, info.id)
            expected = [shown + command + ending, f"{TOKENS} TAIL", shown]
            assert lines[-3:] == expected, "\n".join(lines)
            await manager.write(info.id, "exit\r" if program == "bash" else "\x04")
            await wait_for_status(manager, info.id, "exited")
