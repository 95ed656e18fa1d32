"""lifecycle.Latch: a set-once flag with trio.Event's waiting semantics, its Event made only
for a waiter (idle sessions hold several latches nobody waits on)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_pty.lifecycle import Latch


async def test_a_latch_wakes_every_waiter_once_set() -> None:
    latch = Latch()
    woke: list[int] = []

    async def waiter(number: int) -> None:
        await latch.wait()
        woke.append(number)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for number in range(3):
                nursery.start_soon(waiter, number)
            await trio.testing.wait_all_tasks_blocked()
            assert not latch.is_set() and woke == []
            latch.set()
    assert latch.is_set() and sorted(woke) == [0, 1, 2]


async def test_waiting_on_a_set_latch_is_a_checkpoint() -> None:
    latch = Latch()
    latch.set()
    latch.set()  # setting twice is harmless
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await latch.wait()
    await latch.wait()


async def test_a_cancelled_waiter_leaves_the_latch_usable() -> None:
    latch = Latch()
    with trio.move_on_after(0.01):
        await latch.wait()
    assert not latch.is_set()
    latch.set()
    with trio.fail_after(5):
        await latch.wait()
