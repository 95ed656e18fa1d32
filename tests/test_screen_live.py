"""Screen snapshots of real programs: vim, top, less, wide characters, the window title."""

from __future__ import annotations

import pathlib

import trio

import trio_pty
from trio_pty import Limits, Wait
from trio_pty.model import Screen

from .helpers import poll_until, wait_for_status

LIMITS = Limits(terminate_grace=0.3)


async def test_vim_shows_its_screen_and_leaves_the_shell_screen_behind(
    tmp_path: pathlib.Path,
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("existing line 1\nexisting line 2\n")
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS, root=str(tmp_path)) as manager:
            info = await manager.spawn(
                "bash", ["--norc", "--noprofile"], description="vim", env={"PS1": "qa$ "}
            )
            await manager.screen(info.id, wait=Wait(pattern=r"^qa\$", timeout_ms=5000))
            await manager.write(info.id, "vim -u NONE notes.txt\n")
            screen = await manager.screen(
                info.id, wait=Wait(pattern="^existing line 2$", timeout_ms=5000)
            )
            assert screen.reason == "matched" and screen.alternate
            assert screen.lines[:2] == ["existing line 1", "existing line 2"]
            assert screen.lines[2:23] == ["~"] * 21  # one row each, not glued together
            assert screen.lines[23] == '"notes.txt" 2 lines, 32 bytes'
            assert (screen.rows, screen.cols, screen.cursor) == (24, 80, (0, 0))
            raw = await manager.read_raw(info.id)
            assert b"\x1b[>4;2m" in raw.data  # the sequence that crashed pyte
            await manager.write(info.id, "GoXX")
            screen = await manager.screen(info.id, wait=Wait(pattern="^XX$", timeout_ms=5000))
            assert screen.lines[:4] == ["existing line 1", "existing line 2", "XX", "~"]
            assert screen.cursor == (2, 2)
            await manager.write(info.id, "\x1b:q!\r")
            screen = await manager.screen(info.id, wait=Wait(pattern=r"qa\$ $", timeout_ms=5000))
            assert not screen.alternate
            assert screen.lines[0] == "qa$ vim -u NONE notes.txt"
            assert screen.lines[1] == "qa$"
            # The line log says a full-screen program ran instead of mixing its screen in.
            lines = [line.text for line in (await manager.read(info.id)).lines]
            assert lines[0] == "qa$ vim -u NONE notes.txt"
            assert lines[1].startswith("[full-screen program ran here (output bytes ")
            assert lines[2:] == ["qa$ "]
            await manager.write(info.id, "exit\n")
            await wait_for_status(manager, info.id, "exited")


def _whole_top_frame(screen: Screen) -> bool:
    lines = screen.lines
    return (
        len(lines) == 24
        and lines[0].startswith("top - ")
        and lines[1].startswith("Tasks:")
        and lines[2].startswith("%Cpu(s):")
        and "PID" in lines[6]
        and "COMMAND" in lines[6]
        and sum(line.count("top - ") for line in lines) == 1
    )


async def test_top_frames_are_not_glued_together() -> None:
    with trio.fail_after(40):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("top", ["-d", "0.1"], description="top")
            first = await manager.screen(info.id, wait=Wait(pattern="^top - ", timeout_ms=15_000))
            assert first.reason == "matched"
            # Later frames redraw only what changed: wait for two of them. A frame may be
            # half drawn when the screen is looked at, so look until it shows a whole one
            # (a glued screen never does).

            async def whole_frame() -> Screen:
                with trio.move_on_after(10):
                    while not _whole_top_frame(screen := await manager.screen(info.id)):  # noqa: ASYNC110
                        await trio.sleep(0.01)
                return screen

            offset = first.offset
            for _ in range(2):
                await poll_until(
                    lambda seen=offset: manager.get(info.id).byte_count > seen,  # type: ignore[misc]
                    timeout=15,
                )
                screen = await whole_frame()
                offset = manager.get(info.id).byte_count
            assert screen.lines[0].startswith("top - ")
            assert screen.lines[1].startswith("Tasks:")
            assert screen.lines[2].startswith("%Cpu(s):")
            assert "PID" in screen.lines[6] and "COMMAND" in screen.lines[6]
            assert sum(line.count("top - ") for line in screen.lines) == 1
            assert len(screen.lines) == 24
            await manager.write(info.id, "q")
            await wait_for_status(manager, info.id, "exited")


async def test_less_pages(tmp_path: pathlib.Path) -> None:
    numbered = tmp_path / "numbered.txt"
    numbered.write_text("".join(f"line {n}\n" for n in range(1, 101)))
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("less", [str(numbered)], description="less")
            screen = await manager.screen(info.id, wait=Wait(pattern="^line 23$", timeout_ms=5000))
            assert screen.lines[:23] == [f"line {n}" for n in range(1, 24)]
            assert screen.alternate
            await manager.write(info.id, " ")
            screen = await manager.screen(info.id, wait=Wait(pattern="^line 46$", timeout_ms=5000))
            assert screen.lines[:23] == [f"line {n}" for n in range(24, 47)]
            await manager.write(info.id, "q")
            await wait_for_status(manager, info.id, "exited")
            assert not (await manager.screen(info.id)).alternate


async def test_wide_characters_emoji_and_the_title() -> None:
    script = r"printf '\033]2;build: 3/7\007日本語 ok\n👍 ✓ e\314\201 👨\342\200\215👩\n'"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="wide")
            await wait_for_status(manager, info.id, "exited")
            screen = await manager.screen(info.id)
            assert screen.lines[0] == "日本語 ok"
            # e + U+0301 reads composed (NFC), as the screen feeds it to avt (issue 32)
            assert screen.lines[1].startswith("👍 ✓ \u00e9 👨\u200d👩")
            assert screen.title == "build: 3/7"
            assert manager.get(info.id).terminal_title == "build: 3/7"
            assert screen.cursor == (2, 0)


async def test_screen_waits_end_by_timeout_idle_or_exit_and_follow_resizes() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", "echo ready; sleep 30"], description="w")
            screen = await manager.screen(info.id, wait=Wait(pattern="ready", timeout_ms=5000))
            assert screen.reason == "matched"
            started = trio.current_time()
            screen = await manager.screen(info.id, wait=Wait(pattern="never", timeout_ms=200))
            assert screen.reason == "timeout" and trio.current_time() - started >= 0.2
            screen = await manager.screen(info.id, wait=Wait(idle_ms=100, timeout_ms=5000))
            assert screen.reason == "idle"
            await manager.resize(info.id, rows=10, cols=40)
            screen = await manager.screen(info.id)
            assert (screen.rows, screen.cols, len(screen.lines)) == (10, 40, 10)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(manager.kill, info.id)
                screen = await manager.screen(info.id, wait=Wait(exit=True, timeout_ms=5000))
            assert screen.reason == "exited"
