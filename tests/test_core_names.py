"""Session names (`spawn(name=...)`): validated, unique among an owner's running sessions even
when spawns race for one, given up when the session ends; evicted ids are reported so."""

from __future__ import annotations

import pytest
import trio

import trio_pty
from trio_pty import Limits, errors

from .helpers import wait_for_status

LIMITS = Limits(terminate_grace=0.3, max_sessions=8, max_sessions_per_owner=3)


async def test_racing_spawns_get_a_name_once() -> None:
    started: list[str] = []
    refused: list[errors.InvalidInput] = []

    async def one() -> None:
        try:
            info = await manager.spawn("sleep", ["100"], owner="o", description="d", name="build")
            started.append(info.id)
        except errors.InvalidInput as exc:
            refused.append(exc)

    with trio.fail_after(20):
        async with trio_pty.open_manager(LIMITS) as manager:
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(one)
            assert len(started) == 1 and len(refused) == 2
            assert all(exc.field == "name" and started[0] in exc.message for exc in refused)
            assert [s.name for s in manager.list("o")] == ["build"]
            # Another owner may use it; the ended session gives it up.
            other = await manager.spawn("true", owner="p", description="d", name="build")
            assert other.name == "build"
            await manager.kill(started[0], owner="o")
            again = await manager.spawn("sleep", ["100"], owner="o", description="d", name="build")
            assert again.name == "build"


@pytest.mark.parametrize("name", ["", "pty_1", "a b", "-a", "x" * 65, "é"])
async def test_a_bad_name_is_refused(name: str) -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            with pytest.raises(errors.InvalidInput) as refused:
                await manager.spawn("true", owner="o", description="d", name=name)
            assert refused.value.field == "name"
            assert manager.list("o") == []


async def test_an_evicted_id_is_reported_as_evicted_to_its_owner_only() -> None:
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            first = await manager.spawn("true", owner="o", description="1")
            await wait_for_status(manager, first.id, "exited", owner="o")
            for index in range(3):
                await manager.spawn("sleep", ["100"], owner="o", description=str(index))
            with pytest.raises(errors.SessionNotFound) as evicted:
                manager.get(first.id, owner="o")
            assert evicted.value.details() == {"id": first.id, "evicted": True}
            with pytest.raises(errors.SessionNotFound) as unknown:
                manager.get(first.id, owner="p")
            assert unknown.value.details() == {"id": first.id}
