"""Running hypothesis against a live trio loop (from a worker thread), and the in-process
server under fuzz."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests.fuzz.config import BASHRC, FUZZ_LIMITS, FUZZ_SESSION, FUZZ_SHELL, RULES, TOKEN
from tests.fuzz.messages import Batch
from tests.fuzz.methods import FAKE_SESSION
from tests.fuzz.strategies import Vocabulary, batches, strings
from tests.fuzz.target import FuzzTarget
from tests.rpc_support import serving
from trio_pty.manager import Manager
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.server.server import RpcServer


def drive(target: FuzzTarget, strategy: st.SearchStrategy[Batch], max_examples: int) -> None:
    """Run hypothesis in this (worker) thread; each example runs in the trio loop."""

    @settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(strategy)
    def fuzz(batch: Batch) -> None:
        for frame in batch.frames:
            note(frame.describe())  # (hypothesis keeps its notes per thread)
        note(f"then: {batch.tail[0]} {batch.tail[1]!r}"[:300])
        trio.from_thread.run(target.example, batch)

    fuzz()


async def fuzz_through(target: FuzzTarget, count: int) -> None:
    """`count` examples through `target`, its clients dropped after, then one round trip of
    the guard: the bystander still works."""
    try:
        await trio.to_thread.run_sync(drive, target, batches(vocabulary()), count)
    finally:
        await target.drop()
    await target.guard.round_trip()


@asynccontextmanager
async def in_process_server(root: Path) -> AsyncIterator[tuple[Manager, RpcServer]]:
    (root / "sub").mkdir(exist_ok=True)
    environ = {**os.environ, "HOME": str(fuzz_home(root))}
    options = {"root": str(root), "authorizer": RulesAuthorizer(RULES), "environ": environ}
    async with serving(FUZZ_LIMITS, TOKEN, manager_options=options) as server:
        yield server.manager, server


def fuzz_home(root: Path) -> Path:
    """The HOME of the fuzzed server's sessions, with BASHRC."""
    home = root / "home"
    home.mkdir(exist_ok=True)
    (home / ".bashrc").write_text(BASHRC)
    return home


def vocabulary() -> Vocabulary:
    known = st.sampled_from([FUZZ_SESSION, FUZZ_SESSION, FUZZ_SHELL, FUZZ_SHELL, FAKE_SESSION])
    return Vocabulary(sane=known, wild=st.one_of(known, strings))


def server_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("trio_pty")
    ]


async def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    with trio.move_on_after(timeout):
        while not condition():  # noqa: ASYNC110 - an observation, nothing to wait on
            await trio.sleep(0.01)
        return
    raise AssertionError(f"timed out waiting for {what}")
