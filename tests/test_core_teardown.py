"""Strict, bounded teardown: every process a PTY started is gone, every fd closed, within a
bound, on every path (kill, exit, owner deleted, manager exit or cancellation)."""

from __future__ import annotations

import trio

import trio_pty
from trio_pty import Limits

from .helpers import (
    alive,
    numbers_in,
    own_fd_count,
    poll_until,
    tagged_processes,
    wait_for_text,
)

GRACE = 0.5
LIMITS = Limits(terminate_grace=GRACE, max_sessions=64, max_sessions_per_owner=64)

IGNORES_TERM = "trap '' TERM; echo ready; while :; do sleep 1; done"


async def test_kill_of_a_term_ignoring_child_takes_about_the_grace() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", IGNORES_TERM], description="stubborn")
            await wait_for_text(manager, info.id, "ready")
            start = trio.current_time()
            final = await manager.kill(info.id)
            elapsed = trio.current_time() - start
            assert GRACE <= elapsed <= GRACE + 1, elapsed
            assert final.status == "killed" and final.exit_signal == 9
            assert tagged_processes(manager, info.id) == []


async def test_background_sleeps_are_not_left_behind() -> None:
    script = "sleep 100 & sleep 100 & echo started; wait"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="sleeps")
            await wait_for_text(manager, info.id, "started")
            assert len(tagged_processes(manager, info.id)) == 3
            await manager.kill(info.id)
            assert tagged_processes(manager, info.id) == []


async def test_interactive_bash_with_background_pipeline_leaves_nothing() -> None:
    with trio.fail_after(15):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("bash", ["--norc", "--noprofile", "-i"], description="sh")
            await manager.write(info.id, "sleep 100 | cat | cat &\n")
            await manager.write(info.id, "sleep 200 | cat\n")  # the foreground job
            await poll_until(lambda: len(tagged_processes(manager, info.id)) >= 6)
            await manager.kill(info.id)
            assert tagged_processes(manager, info.id) == []


async def test_descendant_that_calls_setsid_is_still_killed() -> None:
    # One escapes its session but keeps its parent; one double-forks away (setsid -f) and
    # is reparented to the manager, the subreaper.
    script = "setsid sleep 101 & setsid -f sleep 102; echo started; sleep 1000"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="escape")
            await wait_for_text(manager, info.id, "started")
            await poll_until(lambda: len(tagged_processes(manager, info.id)) >= 4)
            escaped = tagged_processes(manager, info.id)
            await manager.kill(info.id)
            assert [pid for pid in escaped if alive(pid)] == []


async def test_leftovers_are_reaped_when_the_leader_exits() -> None:
    script = "sh -c \"trap '' HUP TERM; sleep 100\" & echo bye"
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("sh", ["-c", script], description="orphan")
            await wait_for_text(manager, info.id, "bye")
            await poll_until(
                lambda: (
                    not tagged_processes(manager, info.id)
                    and manager.get(info.id).status == "exited"
                ),
                timeout=GRACE + 2,
            )
            assert manager.get(info.id).exit_code == 0


async def test_manager_cancellation_with_mixed_sessions_is_bounded() -> None:
    programs = [
        ("sleep", ["100"]),
        ("sh", ["-c", IGNORES_TERM]),
        ("sh", ["-c", "sleep 100 & sleep 100 & echo ready; wait"]),
        ("sh", ["-c", "setsid -f sh -c \"trap '' TERM; sleep 100\"; echo ready; sleep 100"]),
        ("sh", ["-c", "echo ready; yes"]),
        ("bash", ["--norc", "--noprofile", "-i"]),
        ("sh", ["-c", "trap 'echo bye' TERM; echo ready; sleep 100 & wait"]),
        ("sh", ["-c", "echo ready; kill -STOP $$"]),
    ]
    tags: list[int] = []
    with trio.fail_after(20):
        with trio.CancelScope() as scope:
            async with trio_pty.open_manager(LIMITS) as manager:
                for index in range(16):
                    command, args = programs[index % len(programs)]
                    await manager.spawn(command, args, description=f"mixed {index}")
                await trio.sleep(0.5)
                tags = tagged_processes(manager)
                assert len(tags) >= 16
                start = trio.current_time()
                scope.cancel()
        elapsed = trio.current_time() - start
    assert elapsed <= GRACE + 1, elapsed
    assert [pid for pid in tags if alive(pid)] == []


async def test_manager_exit_tears_down_sessions_concurrently() -> None:
    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            for index in range(16):
                await manager.spawn("sh", ["-c", IGNORES_TERM], description=f"s{index}")
            start = trio.current_time()
        elapsed = trio.current_time() - start
    # 16 sessions that ignore SIGTERM: about one grace, not sixteen.
    assert GRACE <= elapsed <= GRACE + 1, elapsed


async def test_stopped_child_is_torn_down() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(
                "sh", ["-c", "echo ready; kill -STOP $$; echo resumed"], description="stop"
            )
            await wait_for_text(manager, info.id, "ready")
            start = trio.current_time()
            await manager.kill(info.id)
            assert trio.current_time() - start < GRACE  # SIGCONT let it act on SIGTERM


async def test_fd_count_returns_to_baseline_after_200_cycles() -> None:
    with trio.fail_after(120):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn("true", description="warm-up")
            await manager.kill(info.id, cleanup=True)
            baseline = own_fd_count()
            for index in range(200):
                info = await manager.spawn("sleep", ["100"], description=f"cycle {index}")
                await manager.kill(info.id, cleanup=True)
            assert own_fd_count() == baseline
            assert manager.list() == []


async def test_pids_reported_belong_to_the_session() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            info = await manager.spawn(
                "sh", ["-c", "sleep 100 & echo child $!; wait"], description="pids"
            )
            text = await wait_for_text(manager, info.id, "child")
            (child,) = numbers_in(text)
            assert sorted(tagged_processes(manager, info.id)) == sorted([info.pid, child])
