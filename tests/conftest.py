"""Shared fixtures: the leak checks every test runs under, and a manager factory."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, settings

from tests import leaks
from trio_pty.manager import Manager

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every trio test the task-leak check (sync tests cannot use async fixtures)."""
    for item in items:
        function = getattr(item, "function", None)
        if function is not None and inspect.iscoroutinefunction(function):
            item.fixturenames.insert(0, "no_task_leaks")  # type: ignore[attr-defined]


@pytest.fixture(autouse=True, scope="session")
def record_our_managers() -> Iterator[None]:
    """Remember every manager this process opens, so leak checks look only at our own."""
    original = Manager.__init__

    def recording(self: Manager, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        leaks.OUR_MANAGERS.add(self.id)

    Manager.__init__ = recording  # type: ignore[method-assign]
    yield
    Manager.__init__ = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def no_process_or_fd_leaks() -> Iterator[None]:
    """Fail a test that leaves a process or an fd behind (the leftovers are then killed)."""
    me = os.getpid()
    processes_before = set(leaks.descendants([me]))
    fds_before = leaks.open_fds()
    yield
    leftovers = [v for pid, v in leaks.descendants([me]).items() if pid not in processes_before]
    fds_after = leaks.open_fds()
    new_fds = {fd: target for fd, target in fds_after.items() if fd not in fds_before}
    leaks.kill_leftovers(leftovers)
    problems = []
    if leftovers:
        problems.append(f"processes left behind: {leftovers}")
    if new_fds:
        problems.append(f"file descriptors left open: {new_fds}")
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture
async def no_task_leaks() -> object:
    before = sorted(leaks.trio_tasks())
    yield
    await trio.testing.wait_all_tasks_blocked()
    after = sorted(leaks.trio_tasks())
    assert after == before, f"trio tasks left running: {set(after) - set(before)}"
