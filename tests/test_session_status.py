"""The session status table: what may happen in which status, and nothing else (pure)."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_pty import Limits
from trio_pty.lifecycle import TRANSITIONS, Change, IllegalTransition, next_status
from trio_pty.model import Status
from trio_pty.posix import reap
from trio_pty.session import Session
from trio_pty.spawning import SpawnOptions

STATUSES: tuple[Status, ...] = get_args(Status)
CHANGES: tuple[Change, ...] = get_args(Change)


@given(st.lists(st.sampled_from(CHANGES), max_size=12))
def test_statuses_only_move_forward_and_each_ending_happens_once(changes: list[Change]) -> None:
    """From `running`, any sequence of changes, each applied if the table allows it: the
    status never goes back, an exit and the end of the teardown each happen at most once,
    `killed` needs a kill and the end of the teardown, an exited session stays exited, and a
    session killed while running is never reported `exited` (its leader dies of the kill)."""
    status: Status = "running"
    applied: list[Change] = []
    for change in changes:
        try:
            following = next_status(status, change)
        except IllegalTransition:
            assert (
                (change == "exit" and "exit" in applied)
                or (change == "torn_down" and "torn_down" in applied)
                or (change == "torn_down" and status == "running")
            ), (status, change, applied)
            continue
        if status != "running":
            assert following != "running", (status, change)
        if status == "exited":
            assert following == "exited", (status, change)
        if status == "killed":
            assert following == "killed", (status, change)
        if following == "killed" and status != "killed":
            assert "kill" in applied and change == "torn_down", applied
        applied.append(change)
        status = following
        if applied[0] == "kill":
            assert status in ("killing", "killed"), applied
    if "torn_down" in applied:
        assert status in ("exited", "killed")


def test_every_status_is_reachable_and_running_only_at_the_start() -> None:
    assert set(TRANSITIONS.values()) == set(STATUSES) - {"running"}
    assert {status for status, _ in TRANSITIONS} == set(STATUSES)


def test_illegal_changes_raise() -> None:
    for status, change in [("exited", "exit"), ("killed", "torn_down"), ("running", "torn_down")]:
        with pytest.raises(IllegalTransition, match=f"{change!r} is not allowed in"):
            next_status(status, change)  # type: ignore[arg-type]


def test_a_session_status_cannot_be_set_directly() -> None:
    """Only the table changes it (Lifecycle.change)."""
    session = Session(
        session_id="pty_test",
        options=SpawnOptions(owner="o", command="true", description=""),
        workdir="/",
        limits=Limits(),
        manager_id="m",
        table=reap.ProcessTable(),
    )
    assert session.status == "running"
    with pytest.raises(AttributeError):
        session.status = "killed"  # type: ignore[misc]
