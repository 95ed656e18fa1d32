"""A session's lifecycle: its status and the table it changes by, and every latch, flag and
wake-up that its tasks, its waiters and its attachments meet at.

`Session` runs the task tree; this object is what those tasks tell each other. Nothing here
touches a process or a file descriptor, so it is tested on its own (tests/test_session_status.py
drives it with hypothesis). One per session, with slots: hundreds of idle sessions each hold
one, and its parking lots and events are made only for a task that has to wait.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Literal

import trio

from .model import Status

Change = Literal["kill", "exit", "torn_down"]
"""What can happen to a session: a kill (kill(), the timeout, a shutdown, or a teardown that
finds it running), the leader's exit (recorded once its output is drained), the end of the
teardown (nothing of it left)."""

TRANSITIONS: Final[Mapping[tuple[Status, Change], Status]] = {
    ("running", "kill"): "killing",
    ("running", "exit"): "exited",
    ("killing", "kill"): "killing",
    ("killing", "exit"): "killing",  # the leader died of the kill
    ("killing", "torn_down"): "killed",
    ("exited", "kill"): "exited",  # killing an exited session ends what it left behind
    ("exited", "torn_down"): "exited",
    ("killed", "kill"): "killed",
    ("killed", "exit"): "killed",  # the exit watcher can finish after the teardown
}
"""Every legal status change. Anything else (a second exit, a second end of teardown, an
end of teardown that no kill or exit began) is a bug, and raises IllegalTransition."""


class IllegalTransition(AssertionError):
    """A status change that TRANSITIONS does not allow."""


def next_status(status: Status, change: Change) -> Status:
    following = TRANSITIONS.get((status, change))
    if following is None:
        raise IllegalTransition(f"{change!r} is not allowed in status {status!r}")
    return following


class Latch:
    """A flag that is set once and can be waited for, like trio.Event, whose Event (an
    object and a set of waiters, ~270 bytes) is made only when a task has to wait: most of
    a session's latches are never waited on, and hundreds of idle sessions pay for each."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: trio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Until set; a checkpoint even when it already is (as trio.Event.wait)."""
        if self._event is None:
            if self._set:
                await trio.lowlevel.checkpoint()
                return
            self._event = trio.Event()
        await self._event.wait()


async def wait_idle(
    timeout: float,
    idle_since: Callable[[], float | None],
    detached: trio.lowlevel.ParkingLot,
) -> None:
    """Return once the session has been idle for `timeout` seconds: `idle_since()` is when
    it last had output, input or a client detaching (None while a client is attached), and
    `detached` is unparked when a client detaches.

    The deadline is re-read when it comes, never pushed by each chunk of output: the reader
    (the hot path) only stores the time of its wake-up, as it did before, and this task wakes
    at most once per `timeout` while the session is busy. Pure timing logic over those two
    inputs, so it is tested with trio's autojump clock (tests/test_session_idle.py)."""
    while True:
        since = idle_since()
        if since is None:
            await detached.park()
            continue
        deadline = since + timeout
        if trio.current_time() >= deadline:
            return
        await trio.sleep_until(deadline)


class Lifecycle:
    """Status, latches and wake-ups of one session.

    The latches only ever go from unset to set: `drained` (the reader met EIO: every slave
    end is closed), `exit_recorded` (once, after the drain), `complete` (no more output can
    come: the exit is recorded, the session is finished, or it was removed), `finished`
    (teardown done, master closed). Waiters for output park on one lot and are woken per
    reader pass; waiters for a shell's marks on another, woken only when a prompt is shown
    or a command submitted (a command's output would wake them for nothing).
    """

    __slots__ = (
        "_attached",
        "_complete",
        "_detached_lot",
        "_drained",
        "_drivers",
        "_exit_recorded",
        "_finished",
        "_last_detach_at",
        "_notification",
        "_notified",
        "_on_change",
        "_output_lot",
        "_own_scope",
        "_prompt_lot",
        "_removed",
        "_shut_down",
        "_shutdown_moment",
        "_status",
        "_stop",
        "_stop_at",
        "_under_manager",
        "last_input_at",
        "last_output_at",
    )

    def __init__(
        self,
        *,
        on_change: Callable[[], None] | None,
        shutdown_moment: Callable[[], float],
        watch_detaching: bool,
    ) -> None:
        """`on_change` is called after every status change; `shutdown_moment` is when the
        manager began shutting down (see `note_cancellation`); `watch_detaching` makes the
        lot an idle timeout waits on for a client to detach."""
        self._status: Status = "running"
        self._on_change = on_change
        self._shutdown_moment = shutdown_moment
        self._stop = trio.Event()
        self._stop_at: float | None = None
        self._drained, self._exit_recorded = Latch(), Latch()
        self._complete, self._finished = Latch(), Latch()
        self._removed = self._shut_down = self._notified = self._under_manager = False
        self._notification: Latch | None = None  # made when an exit notification starts
        self._own_scope: trio.CancelScope | None = None  # see note_cancellation
        self._output_lot: trio.lowlevel.ParkingLot | None = None  # see next_output
        self._prompt_lot: trio.lowlevel.ParkingLot | None = None  # see next_prompt
        self._detached_lot = trio.lowlevel.ParkingLot() if watch_detaching else None
        self._attached = 0  # attachments (clients streaming its output): it is not idle
        self._drivers = 0  # attachments that answer terminal queries themselves
        # Read by the reader and the waits; written only here.
        self.last_output_at = self.last_input_at = self._last_detach_at = 0.0

    # ----------------------------------------------------------------- status

    @property
    def status(self) -> Status:
        return self._status

    def change(self, change: Change) -> None:
        """The only way the status changes: through TRANSITIONS."""
        self._status = next_status(self._status, change)
        if self._on_change is not None:
            self._on_change()

    # ----------------------------------------------------------------- stopping

    def request_stop(self) -> None:
        """Wake the runner to tear down (a kill fixes `stop_at` first; an exit leaves it to
        the teardown)."""
        self._stop.set()

    @property
    def stop_at(self) -> float | None:
        """When the stop was asked for: every grace and deadline counts from then."""
        return self._stop_at

    def stop_at_or(self, moment: float) -> float:
        """`stop_at`, fixed to `moment` if nothing fixed it yet."""
        if self._stop_at is None:
            self._stop_at = moment
        return self._stop_at

    def wait_stop(self) -> Awaitable[None]:
        """Until a stop is requested. The Event's own wait, not a coroutine around it: the
        runner waits here for the session's whole life, and a coroutine of ours would cost
        every idle session ~190 bytes."""
        return self._stop.wait()

    def tasks_started(self, scope: trio.CancelScope, *, under_manager: bool) -> None:
        """The session's tasks run under `scope`; `under_manager`: its runner was moved to
        the manager's nursery (a cancelled spawn's runner stays where it was)."""
        self._own_scope = scope
        self._under_manager = under_manager

    def note_cancellation(self) -> None:
        """One of the session's long-lived tasks was cancelled. By none of the session's
        own scopes, it means the manager is going down: fix the moment every grace counts
        from (the first task of any session to see it does). The task leaving `open_manager`
        would only get to do it after every task the cancellation woke has run: hundreds of
        ms at N = 1,024. All three long-lived tasks of a session (run, reader, exit watcher)
        note it, as whichever of them runs first sees its session's scopes uncancelled (one
        ending with Cancelled cancels its nursery). Called from their `except Cancelled`
        rather than through a wrapper coroutine: a wrapper per task cost every idle session
        ~1 KiB."""
        outside = self._own_scope is None or not self._own_scope.cancel_called
        if self._under_manager and self._stop_at is None and outside:
            # This session's grace counts from that moment too, not from when its teardown
            # gets to start (the manager's `shut_down` may come after it: up to 1.1 s later
            # at N = 1,024, with SIGKILL as late).
            self._stop_at = self._shutdown_moment()

    def shut_down(self) -> None:
        """The manager is closing (an exit notification cut off then is not a warning)."""
        self._shut_down = True

    @property
    def shutting_down(self) -> bool:
        return self._shut_down

    # ----------------------------------------------------------------- the ends

    def output_drained(self) -> None:
        """The reader met EIO: every slave end is closed, the output so far is all."""
        self._drained.set()
        self.wake_readers()

    async def wait_drained(self) -> None:
        await self._drained.wait()

    def record_exit(self) -> bool:
        """The leader's exit is recorded (after the drain): no more output can come. False
        if it already was."""
        if self._exit_recorded.is_set():
            return False
        self._exit_recorded.set()
        self._complete.set()
        self.wake_readers()
        return True

    async def wait_exit_recorded(self) -> None:
        await self._exit_recorded.wait()

    def finish(self) -> None:
        """Teardown is complete: no process left, master fd closed."""
        self._finished.set()
        self._complete.set()
        self.wake_readers()

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    async def wait_finished(self) -> None:
        await self._finished.wait()

    def remove(self) -> None:
        """The manager forgot the session: end every wait and attachment on it."""
        self._removed = True
        self._complete.set()
        self.wake_readers()

    @property
    def removed(self) -> bool:
        return self._removed

    @property
    def complete(self) -> bool:
        """No more output can come: the exit is recorded, the session is finished, or it
        was removed."""
        return self._complete.is_set()

    async def wait_complete(self) -> None:
        await self._complete.wait()

    # ----------------------------------------------------------------- the exit notification

    def notification_started(self) -> None:
        self._notification = Latch()

    @property
    def notifying(self) -> bool:
        """An exit notification was started (it may be over)."""
        return self._notification is not None

    def claim_notification(self) -> bool:
        """True once: the ExitEvent is delivered at most once."""
        first = not self._notified
        self._notified = True
        return first

    def notification_done(self) -> None:
        if self._notification is not None:
            self._notification.set()

    async def wait_notification(self) -> None:
        if self._notification is not None:
            await self._notification.wait()

    # ----------------------------------------------------------------- wake-ups

    def output_arrived(self, *, prompted: bool) -> None:
        """The reader stored output (the hot path: per pass, not per chunk); `prompted`:
        a shell prompt was shown or a typed command started in it."""
        self.last_output_at = trio.current_time()
        lot = self._output_lot
        if lot:  # None until someone waited for output
            lot.unpark_all()
        if prompted and self._prompt_lot:
            self._prompt_lot.unpark_all()

    async def next_output(self) -> None:
        """Until the reader's next pass, or the end (see `wake_readers`). The lot is made
        for the first waiter: an idle session that nobody reads holds none."""
        if self._output_lot is None:
            self._output_lot = trio.lowlevel.ParkingLot()
        await self._output_lot.park()

    async def next_prompt(self) -> None:
        """Until a prompt is shown, a command submitted, or the end."""
        if self._prompt_lot is None:
            self._prompt_lot = trio.lowlevel.ParkingLot()
        await self._prompt_lot.park()

    def command_submitted(self) -> None:
        """A shell was given a command: a wait for its prompt now finds it busy (no output
        says so before the next prompt)."""
        if self._prompt_lot:
            self._prompt_lot.unpark_all()

    def wake_readers(self) -> None:
        """Wake every waiter: for output, and for marks (the output is complete, or the
        session was removed)."""
        for lot in (self._output_lot, self._prompt_lot):
            if lot:  # None until someone waited
                lot.unpark_all()

    # ----------------------------------------------------------------- attachments and idleness

    def attached(self, *, driver: bool, active: bool = True) -> None:
        """An attachment opened; an `active` one keeps the session from being idle (a
        read-only token's is not active: watching is not using)."""
        self._attached += active
        self._drivers += driver

    def detached(self, *, driver: bool, active: bool = True) -> None:
        """An attachment closed: idleness counts from now (from an active one only), and its
        waits end."""
        self._attached -= active
        self._drivers -= driver
        if active:
            self._last_detach_at = trio.current_time()
            if self._detached_lot is not None:
                self._detached_lot.unpark_all()
        self.wake_readers()

    @property
    def driven(self) -> bool:
        """A driver is attached: it answers terminal queries, so the session does not."""
        return self._drivers > 0

    def input_sent(self) -> None:
        self.last_input_at = trio.current_time()

    def idle_since(self) -> float | None:
        """The last output, input or detaching; None while a client is attached."""
        if self._attached:
            return None
        return max(self.last_output_at, self.last_input_at, self._last_detach_at)

    def until_idle(self, timeout: float) -> Awaitable[None]:
        """Until idle for `timeout` seconds; needs `watch_detaching`. `wait_idle` itself,
        not a coroutine around it (see `wait_stop`)."""
        assert self._detached_lot is not None
        return wait_idle(timeout, self.idle_since, self._detached_lot)
