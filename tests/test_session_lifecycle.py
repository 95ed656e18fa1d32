"""The session lifecycle on its own (pure: no process, no fd): random sequences of what can
happen to a session never reach an illegal state, each latch is set once and stays set, and
every end wakes the tasks that wait for output."""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Awaitable, Callable
from typing import get_args

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import trio_pty
from trio_pty.lifecycle import TRANSITIONS, Change, IllegalTransition, Lifecycle, next_status
from trio_pty.model import Status

STATUSES: tuple[Status, ...] = get_args(Status)
CHANGES: tuple[Change, ...] = get_args(Change)

EVENTS = (
    *CHANGES,
    "request_stop",
    "fix_stop",
    "drained",
    "exit_recorded",
    "finish",
    "remove",
    "attach",
    "attach_driver",
    "detach",
    "notification_started",
    "notification_done",
    "claim_notification",
    "output",
    "prompt",
    "input",
    "command_submitted",
)


def make(*, watch_detaching: bool = True, changes: list[Status] | None = None) -> Lifecycle:
    seen = changes if changes is not None else []
    lifecycle: Lifecycle

    def on_change() -> None:
        seen.append(lifecycle.status)

    lifecycle = Lifecycle(
        on_change=on_change, shutdown_moment=trio.current_time, watch_detaching=watch_detaching
    )
    return lifecycle


class Model:
    """What the lifecycle must show after each event (the reference, kept by hand)."""

    def __init__(self) -> None:
        self.status: Status = "running"
        self.exit_recorded = self.finished = self.removed = self.claimed = False
        self.attachments: list[bool] = []  # driver or not, per open attachment
        self.stop_at: float | None = None
        self.changes: list[Status] = []


def apply(lifecycle: Lifecycle, model: Model, event: str, moment: float) -> None:
    """One event on the lifecycle, and what it must do to the model."""
    if event in CHANGES:
        change: Change = event
        legal = (model.status, change) in TRANSITIONS
        try:
            lifecycle.change(change)
        except IllegalTransition:
            assert not legal
        else:
            assert legal
            model.status = TRANSITIONS[model.status, change]
            model.changes.append(model.status)
    elif event == "fix_stop":
        fixed = lifecycle.stop_at_or(moment)
        model.stop_at = moment if model.stop_at is None else model.stop_at
        assert fixed == model.stop_at
    elif event == "exit_recorded":
        assert lifecycle.record_exit() is not model.exit_recorded, "recorded twice"
        model.exit_recorded = True
    elif event == "claim_notification":
        assert lifecycle.claim_notification() is not model.claimed, "delivered twice"
        model.claimed = True
    elif event in ("attach", "attach_driver"):
        lifecycle.attached(driver=event == "attach_driver")
        model.attachments.append(event == "attach_driver")
    elif event == "detach":
        if model.attachments:
            lifecycle.detached(driver=model.attachments.pop())
    else:
        simple: dict[str, Callable[[], None]] = {
            "request_stop": lifecycle.request_stop,
            "drained": lifecycle.output_drained,
            "finish": lifecycle.finish,
            "remove": lifecycle.remove,
            "notification_started": lifecycle.notification_started,
            "notification_done": lifecycle.notification_done,
            "output": lambda: lifecycle.output_arrived(prompted=False),
            "prompt": lambda: lifecycle.output_arrived(prompted=True),
            "input": lifecycle.input_sent,
            "command_submitted": lifecycle.command_submitted,
        }
        simple[event]()
        model.finished |= event == "finish"
        model.removed |= event == "remove"


def check(lifecycle: Lifecycle, model: Model, seen: list[Status]) -> None:
    assert lifecycle.status == model.status and lifecycle.status in STATUSES
    assert seen == model.changes  # on_change after every change, and only then
    assert lifecycle.finished is model.finished
    assert lifecycle.removed is model.removed
    assert lifecycle.complete is (model.exit_recorded or model.finished or model.removed)
    assert lifecycle.stop_at == model.stop_at
    assert lifecycle.driven is any(model.attachments)
    assert (lifecycle.idle_since() is None) is bool(model.attachments)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(EVENTS), max_size=40))
def test_random_sequences_never_reach_an_illegal_state(events: list[str]) -> None:
    """Whatever happens in whatever order: the status moves only through the table (an
    illegal change raises and changes nothing), the latches only go from unset to set
    (`complete` exactly when the exit is recorded, the session finished or removed), the
    exit is recorded and the notification claimed once, `stop_at` is fixed by the first
    request, and attachments make the session driven and not idle while they last."""

    async def main() -> None:
        seen: list[Status] = []
        lifecycle = make(changes=seen)
        model = Model()
        for step, event in enumerate(events):
            apply(lifecycle, model, event, moment=float(step))
            check(lifecycle, model, seen)

    trio.run(main)


@given(st.lists(st.sampled_from(CHANGES), max_size=12))
def test_a_status_never_goes_back_to_running(changes: list[Change]) -> None:
    status: Status = "running"
    for change in changes:
        try:
            following = next_status(status, change)
        except IllegalTransition:
            continue
        assert following != "running"
        status = following


Waker = Callable[[Lifecycle], None]


def record_exit(lifecycle: Lifecycle) -> None:
    assert lifecycle.record_exit()


ENDS: dict[str, Waker] = {
    "drained": Lifecycle.output_drained,
    "exit recorded": record_exit,
    "finished": Lifecycle.finish,
    "removed": Lifecycle.remove,
}


async def woken(lifecycle: Lifecycle, wait: Callable[[], Awaitable[None]], wake: Waker) -> bool:
    """Whether `wake` wakes a task blocked in `wait`."""
    done = False

    async def waiter() -> None:
        nonlocal done
        await wait()
        done = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        wake(lifecycle)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return done


@pytest.mark.parametrize("end", [*ENDS, "detached", "output"])
async def test_output_waiters_wake_at_each_pass_and_at_every_end(end: str) -> None:
    lifecycle = make()
    lifecycle.attached(driver=False)
    wakers: dict[str, Waker] = {
        **ENDS,
        "detached": lambda lifecycle: lifecycle.detached(driver=False),
        "output": lambda lifecycle: lifecycle.output_arrived(prompted=False),
    }
    with trio.fail_after(5):
        assert await woken(lifecycle, lifecycle.next_output, wakers[end])


@pytest.mark.parametrize(
    ("wake", "expected"),
    [
        ("plain output", False),
        ("a prompt", True),
        ("a command submitted", True),
        *((end, True) for end in ENDS),
    ],
)
async def test_prompt_waiters_wake_for_marks_and_ends_not_for_every_chunk(
    wake: str, expected: bool
) -> None:
    wakers: dict[str, Waker] = {
        **ENDS,
        "plain output": lambda lifecycle: lifecycle.output_arrived(prompted=False),
        "a prompt": lambda lifecycle: lifecycle.output_arrived(prompted=True),
        "a command submitted": Lifecycle.command_submitted,
    }
    lifecycle = make()
    with trio.fail_after(5):
        assert await woken(lifecycle, lifecycle.next_prompt, wakers[wake]) is expected


async def test_the_latches_wake_their_waiters() -> None:
    lifecycle = make()
    with trio.fail_after(5):
        assert await woken(lifecycle, lifecycle.wait_stop, Lifecycle.request_stop)
        assert await woken(lifecycle, lifecycle.wait_drained, Lifecycle.output_drained)
        assert await woken(lifecycle, lifecycle.wait_exit_recorded, record_exit)
        assert await woken(lifecycle, lifecycle.wait_finished, Lifecycle.finish)
        other = make()
        assert await woken(other, other.wait_complete, Lifecycle.remove)
        # No notification started: nothing to wait for.
        await lifecycle.wait_notification()
        lifecycle.notification_started()
        assert await woken(lifecycle, lifecycle.wait_notification, Lifecycle.notification_done)


async def test_idle_counts_from_the_last_output_input_or_detach(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lifecycle = make()
    lifecycle.input_sent()
    await trio.sleep(5)
    lifecycle.output_arrived(prompted=False)
    assert lifecycle.idle_since() == trio.current_time()
    lifecycle.attached(driver=True)
    assert lifecycle.idle_since() is None and lifecycle.driven
    await trio.sleep(5)
    lifecycle.detached(driver=True)
    assert lifecycle.idle_since() == trio.current_time() and not lifecycle.driven
    start = trio.current_time()
    await lifecycle.until_idle(30)
    assert trio.current_time() - start == pytest.approx(30)


async def test_a_cancellation_from_outside_fixes_the_managers_moment_once() -> None:
    """Under the manager, a cancellation that none of the session's own scopes made is the
    manager going down: the stop counts from the manager's moment. A cancelled spawn (not
    moved under the manager) or the session's own cancel leaves it to the teardown."""
    moments = iter([10.0, 20.0])
    lifecycle = Lifecycle(
        on_change=None, shutdown_moment=lambda: next(moments), watch_detaching=False
    )
    own = trio.CancelScope()
    lifecycle.tasks_started(own, under_manager=False)
    lifecycle.note_cancellation()
    assert lifecycle.stop_at is None
    lifecycle.tasks_started(own, under_manager=True)
    own.cancel()
    lifecycle.note_cancellation()
    assert lifecycle.stop_at is None
    lifecycle.tasks_started(trio.CancelScope(), under_manager=True)
    lifecycle.note_cancellation()
    lifecycle.note_cancellation()
    assert lifecycle.stop_at == 10.0
    assert lifecycle.stop_at_or(30.0) == 10.0


# --------------------------------------------------------------------------------------------
# The arrow rule

SPLIT = ("lifecycle", "reader", "waits", "teardown", "attachment")
"""The modules split from session.py: at its level, under it."""


def _imports(path: pathlib.Path, package: str) -> set[str]:
    """The absolute names of the modules `path` (in `package`) imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            stem = ".".join(base) if node.level else ""
            module = ".".join(part for part in (stem, node.module or "") if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_the_lower_layers_never_import_the_session_or_its_parts() -> None:
    root = pathlib.Path(trio_pty.__file__).parent
    above = {f"trio_pty.{name}" for name in (*SPLIT, "session", "manager")}
    for layer in ("output", "policy", "posix", "shell"):
        for path in (root / layer).glob("*.py"):
            assert not _imports(path, f"trio_pty.{layer}") & above, path
    for name in SPLIT:
        imported = _imports(root / f"{name}.py", "trio_pty")
        assert not imported & {"trio_pty.session", "trio_pty.manager"}, name
        assert "trio_pty.lifecycle" in imported or name in ("lifecycle", "teardown"), name
