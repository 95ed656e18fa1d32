"""Idle sessions (issue 19): a session with no output, no input and no attached client for
`idle_timeout` seconds is torn down, and says so (`timed_out`, `reason`).

The timing logic (`lifecycle.wait_idle`) runs on trio's autojump clock with a pretend session;
real children cannot follow a mock clock, so the rest runs real programs on real time with
short bounds.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_pty
from trio_pty import Limits, errors
from trio_pty.lifecycle import wait_idle
from trio_pty.model import ExitEvent

from .helpers import poll_until, wait_for_status

FAST = Limits(terminate_grace=0.3)


# --------------------------------------------------------------------------------------------
# The decision, on the autojump clock


class Pretend:
    """What `wait_idle` reads of a session: its last activity, and attached clients."""

    def __init__(self) -> None:
        self.last = trio.current_time()
        self.attached = 0
        self.detached = trio.lowlevel.ParkingLot()

    def since(self) -> float | None:
        return None if self.attached else self.last

    def touch(self) -> None:
        self.last = trio.current_time()

    def detach(self) -> None:
        self.attached -= 1
        self.touch()
        self.detached.unpark_all()


async def idle_after(pretend: Pretend, timeout: float) -> float:
    start = trio.current_time()
    await wait_idle(timeout, pretend.since, pretend.detached)
    return trio.current_time() - start


@pytest.mark.parametrize("timeout", [0.5, 60.0, 3600.0])
async def test_a_quiet_session_is_idle_after_exactly_the_timeout(
    autojump_clock: trio.testing.MockClock, timeout: float
) -> None:
    assert await idle_after(Pretend(), timeout) == pytest.approx(timeout)


async def test_activity_moves_the_deadline(autojump_clock: trio.testing.MockClock) -> None:
    pretend = Pretend()

    async def busy() -> None:
        for _ in range(5):  # output or input every 40 s, then silence
            await trio.sleep(40)
            pretend.touch()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy)
        took = await idle_after(pretend, 60)
    assert took == pytest.approx(5 * 40 + 60)


async def test_an_attached_client_keeps_it_and_the_detach_restarts_the_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pretend = Pretend()
    pretend.attached = 2

    async def clients() -> None:
        await trio.sleep(1000)  # far past the timeout: attached, so not idle
        pretend.detach()
        await trio.sleep(30)
        pretend.detach()  # the last one leaves at 1030

    async with trio.open_nursery() as nursery:
        nursery.start_soon(clients)
        took = await idle_after(pretend, 60)
    assert took == pytest.approx(1030 + 60)


async def test_an_attach_during_the_wait_is_seen_when_the_deadline_comes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pretend = Pretend()

    async def client() -> None:
        await trio.sleep(10)
        pretend.attached = 1  # attaches at 10 (nothing wakes the watcher: it looks at 60)
        await trio.sleep(500)
        pretend.detach()  # leaves at 510

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        took = await idle_after(pretend, 60)
    assert took == pytest.approx(510 + 60)


# --------------------------------------------------------------------------------------------
# Real sessions


async def test_a_silent_session_is_torn_down_and_says_why() -> None:
    events: list[ExitEvent] = []

    async def on_exit(event: ExitEvent) -> None:
        events.append(event)

    limits = Limits(terminate_grace=0.3, idle_timeout=0.4)
    with trio.fail_after(10):
        async with trio_pty.open_manager(limits, on_exit=on_exit) as manager:
            started = trio.current_time()
            info = await manager.spawn("cat", description="silent", notify_on_exit=True)
            assert info.idle_timeout == 0.4 and info.reason is None
            await wait_for_status(manager, info.id, "killed")
            took = trio.current_time() - started
            final = manager.get(info.id)
            assert (final.timed_out, final.reason) == (True, "idle_timeout")
            assert final.error is None
            await poll_until(lambda: bool(events))
    assert 0.4 <= took < 0.4 + 2.0, took
    [event] = events
    assert (event.id, event.timed_out, event.reason) == (info.id, True, "idle_timeout")


async def test_input_and_output_keep_a_session_alive() -> None:
    limits = Limits(terminate_grace=0.3)
    with trio.fail_after(15):
        async with trio_pty.open_manager(limits) as manager:
            typed = await manager.spawn("cat", description="typed into", idle_timeout=0.5)
            # Prints every 0.1 s for 1.5 s, then is silent: output alone keeps it.
            printing = await manager.spawn(
                "sh",
                ["-c", "for i in $(seq 15); do echo $i; sleep 0.1; done; exec cat"],
                description="printing",
                idle_timeout=0.5,
            )
            for _ in range(10):  # 1.5 s of typing, three times the idle timeout
                await manager.write(typed.id, "x")
                await trio.sleep(0.15)
            assert manager.get(typed.id).status == "running"
            assert manager.get(printing.id).status == "running"
            await wait_for_status(manager, typed.id, "killed")
            await wait_for_status(manager, printing.id, "killed")
            for session_id in (typed.id, printing.id):
                assert manager.get(session_id).reason == "idle_timeout"


async def test_an_attached_client_keeps_a_session_alive() -> None:
    with trio.fail_after(15):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("cat", description="watched", idle_timeout=0.3)
            async with manager.attach(info.id):
                await trio.sleep(1.2)  # four idle timeouts, without a byte either way
                assert manager.get(info.id).status == "running"
            detached = trio.current_time()
            await wait_for_status(manager, info.id, "killed")
            assert trio.current_time() - detached >= 0.3
            assert manager.get(info.id).reason == "idle_timeout"


async def test_the_timeout_says_timeout_and_a_shell_takes_an_idle_timeout() -> None:
    with trio.fail_after(15):
        async with trio_pty.open_manager(FAST) as manager:
            info = await manager.spawn("cat", description="timed", timeout=0.3)
            await wait_for_status(manager, info.id, "killed")
            final = manager.get(info.id)
            assert (final.timed_out, final.reason) == (True, "timeout")
            shell = await manager.spawn_shell(description="sh", rc=False, idle_timeout=0.5)
            assert shell.idle_timeout == 0.5
            await wait_for_status(manager, shell.id, "killed")
            assert manager.get(shell.id).reason == "idle_timeout"


async def test_a_program_that_ends_by_itself_has_no_reason() -> None:
    limits = Limits(terminate_grace=0.3, idle_timeout=30.0)
    with trio.fail_after(10):
        async with trio_pty.open_manager(limits) as manager:
            info = await manager.spawn("true", description="quick")
            assert info.idle_timeout == 30.0  # the default of the manager
            await wait_for_status(manager, info.id, "exited")
            final = manager.get(info.id)
            assert (final.timed_out, final.reason, final.exit_code) == (False, None, 0)


@pytest.mark.parametrize("value", [0, -1, 3601, float("nan"), True, "1"])
async def test_idle_timeout_is_checked(value: object) -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(FAST) as manager:
            with pytest.raises(errors.InvalidInput) as caught:
                await manager.spawn("cat", description="x", idle_timeout=value)  # type: ignore[arg-type]
            assert caught.value.field == "idle_timeout"
            assert manager.list_all() == []


def test_the_limit_is_off_by_default_and_must_be_positive() -> None:
    assert Limits().idle_timeout is None
    assert Limits(idle_timeout=1.5).idle_timeout == 1.5
    with pytest.raises(ValueError, match="idle_timeout"):
        Limits(idle_timeout=0)
