"""One PTY = one trio task tree: reader, exit watcher, timeout and notifier, then teardown.

The runner task lives in the manager's root nursery. Every way a session ends (exit, kill,
timeout, owner deleted, manager cancelled) goes through the same teardown in `_finish`:
shielded, bounded by `close_timeout`, ending with the master fd closed. On a kill or a
natural exit the reader keeps draining while the processes die, so nothing they print on the
way out is lost; on cancellation of the whole manager nobody can read any more, so the reader
stops at once.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, Literal

import attrs
import trio

from .errors import NotRunning, WriteTimeout
from .limits import Limits
from .model import (
    EndReason,
    ExitEvent,
    OutputChunk,
    ReadPage,
    Screen,
    SessionInfo,
    Status,
    Wait,
    WaitReason,
)
from .output.buffer import OutputBuffer
from .output.echo import after_echo
from .output.search import CompiledPattern
from .output.stubber import QueryResponder
from .posix import proc, reap, spawn, timer
from .posix.child import Child
from .shell.history import ShellTracker

log = logging.getLogger("trio_pty")

ExitCallback = Callable[[ExitEvent], Awaitable[None]]

_READ_SIZE: Final = 65_536
_READS_PER_WAKEUP: Final = 64  # then yield, so one flooding session cannot starve the rest
_WRITE_CHUNK: Final = 16_384
_SAFE_START_SCAN: Final = 65_536
_EIO_POLL: Final = 0.05  # how often a master whose slave ends are all closed is retried
_SCREEN_RECHECK: Final = 0.005  # a screen wait looks again at most this often under a flood
_BUSY_POLL: Final = 0.001  # how often a leader that is running is looked at again
# Flood reading (see _read_output).
_BURST_GAP: Final = 0.002  # passes closer than this belong to one burst
_FLOOD_BYTES: Final = 8192  # a burst that has read this much is a flood
_TTY_READ: Final = 4095  # the most the tty hands out per read (n_tty's 4 KiB buffer, less 1)
# A pause holds back a writer faster than this (bytes/s: the tty holds ~20 KB, so a flood of
# zeros fills it in ~0.1 ms; newline-dense text, which the tty itself limits to ~10-20 MB/s,
# does not); after two pauses in a row that found one, the flood is read without pauses
# until its output stops for _QUIET_GAP.
_FAST_WRITER: Final = 40e6
_FAST_PAUSES: Final = 2
_QUIET_GAP: Final = 0.05
_LONG_AGO: Final = -math.inf  # shared: a float per idle session is 24 bytes

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


def _close(pause: timer.OneShot) -> None:
    """Close a pause's timer (trio may have it registered: tell it first)."""
    trio.lowlevel.notify_closing(pause.fd)
    pause.close()


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


class IllegalTransition(AssertionError):
    """A status change that TRANSITIONS does not allow."""


def next_status(status: Status, change: Change) -> Status:
    following = TRANSITIONS.get((status, change))
    if following is None:
        raise IllegalTransition(f"{change!r} is not allowed in status {status!r}")
    return following


class Session:
    """State and task tree of one PTY session. Created and driven by the Manager."""

    # Slots: hundreds of sessions live at once, and a __dict__ would be a third of an idle
    # session's own footprint.
    __slots__ = (
        "_attached",
        "_complete",
        "_detached_lot",
        "_drivers",
        "_eof",
        "_exit_recorded",
        "_finished",
        "_last_detach_at",
        "_last_input_at",
        "_last_output_at",
        "_limits",
        "_manager_id",
        "_master",
        "_notified",
        "_notify_done",
        "_notifying",
        "_on_change",
        "_output_lot",
        "_own_scope",
        "_process",
        "_prompt_lot",
        "_removed",
        "_responder",
        "_shut_down",
        "_shutdown_moment",
        "_status",
        "_stop",
        "_stop_at",
        "_table",
        "_under_manager",
        "_way_out",
        "_write_lock",
        "args",
        "cols",
        "command",
        "created_at",
        "description",
        "error",
        "exit_code",
        "exit_signal",
        "id",
        "idle_timeout",
        "notify_on_exit",
        "others_ended",
        "output",
        "owner",
        "pid",
        "reason",
        "rows",
        "shell",
        "teardown_s",
        "timed_out",
        "timeout",
        "title",
        "workdir",
    )

    def __init__(
        self,
        *,
        session_id: str,
        owner: str,
        command: str,
        args: Sequence[str],
        workdir: str,
        title: str | None,
        description: str,
        notify_on_exit: bool,
        timeout: float | None,
        rows: int,
        cols: int,
        limits: Limits,
        manager_id: str,
        table: reap.ProcessTable,
        idle_timeout: float | None = None,
        on_change: Callable[[], None] | None = None,
        shutdown_moment: Callable[[], float] = trio.current_time,
    ) -> None:
        """`shutdown_moment` is when the manager began shutting down (the first call fixes
        it): a session whose task is cancelled from outside counts its grace from there."""
        self.id = session_id
        self.owner = owner
        self.command = command
        self.args = list(args)
        self.workdir = workdir
        self.title = title
        self.description = description
        self.notify_on_exit = notify_on_exit
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.rows = rows
        self.cols = cols
        self.created_at = time.time()
        self._status: Status = "running"
        self.pid = 0
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.timed_out = False
        self.reason: EndReason | None = None
        # Seconds from the kill to nothing of the session left; None when it ended by itself.
        self.teardown_s: float | None = None
        # Processes besides the leader that the teardown found and ended (None: not yet).
        self.others_ended: int | None = None
        self.error: str | None = None
        self.output = OutputBuffer(
            limits.buffer_size,
            max_line_length=limits.max_line_length,
            max_escape_length=limits.max_escape_length,
        )
        self.output.note_size(rows, cols)
        self._limits = limits
        self._manager_id = manager_id
        self._table = table
        self._shutdown_moment = shutdown_moment
        self._responder = QueryResponder()
        self._drivers = 0
        self._attached = 0  # attachments (clients streaming its output): it is not idle
        # Only an idle timeout waits for a client to detach.
        self._detached_lot = trio.lowlevel.ParkingLot() if idle_timeout is not None else None
        self._on_change = on_change
        self._master = -1
        self._process: Child | None = None
        self._write_lock: trio.Lock | None = None  # made by the first write
        self._stop = trio.Event()
        self._eof = Latch()
        self._exit_recorded = Latch()
        self._finished = Latch()
        self._complete = Latch()  # see output_complete
        self._output_lot: trio.lowlevel.ParkingLot | None = None  # see _output_waiters
        self._prompt_lot: trio.lowlevel.ParkingLot | None = None  # see wait_until
        self._last_output_at = 0.0
        self._last_input_at = 0.0  # and the start (set in run)
        self._last_detach_at = 0.0
        self._notified = False
        self._way_out: reap.Teardown | None = None
        self._removed = False
        self._stop_at: float | None = None
        self._notifying: trio.CancelScope | None = None
        self._notify_done: Latch | None = None  # made when an exit notification starts
        self._shut_down = False
        self._under_manager = False  # see run
        self._own_scope: trio.CancelScope | None = None  # see _note_cancellation
        # A shell session's commands and prompts (spawn_shell sets it before the reader runs).
        self.shell: ShellTracker | None = None

    # ----------------------------------------------------------------- public state

    @property
    def finished(self) -> bool:
        """True once teardown is complete: no process left, master fd closed."""
        return self._finished.is_set()

    @property
    def status(self) -> Status:
        return self._status

    def _change(self, change: Change) -> None:
        """The only way the status changes: through TRANSITIONS."""
        self._status = next_status(self._status, change)
        if self._on_change is not None:
            self._on_change()

    @property
    def ended(self) -> bool:
        return self.status != "running"

    def info(self) -> SessionInfo:
        return SessionInfo(
            id=self.id,
            owner=self.owner,
            command=self.command,
            args=list(self.args),
            workdir=self.workdir,
            title=self.title,
            description=self.description,
            status=self.status,
            pid=self.pid,
            exit_code=self.exit_code,
            exit_signal=self.exit_signal,
            timed_out=self.timed_out,
            created_at=self.created_at,
            line_count=self.output.total_lines,
            byte_count=self.output.end_offset,
            rows=self.rows,
            cols=self.cols,
            notify_on_exit=self.notify_on_exit,
            timeout=self.timeout,
            error=self.error,
            shell=self.shell.name if self.shell is not None else None,
            at_prompt=self.shell is not None and self.shell.at_prompt,
            terminal_title=self.output.terminal_title,
            idle_timeout=self.idle_timeout,
            reason=self.reason,
        )

    # ----------------------------------------------------------------- the task tree

    async def run(
        self,
        *,
        env: dict[str, str],
        cwd_fd: int,
        argv: Sequence[str],
        on_started: Callable[[], None],
        on_exit: ExitCallback | None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Spawn the child, run the task tree until the session ends, then tear down."""
        starting_in = trio.lowlevel.current_task().parent_nursery
        self._master, slave = spawn.open_pty(self.rows, self.cols)
        self._last_input_at = trio.current_time()  # idle counts from the start
        try:
            try:
                self._process = spawn.start_child(
                    self.command, argv, slave=slave, env=env, cwd_fd=cwd_fd
                )
            finally:
                os.close(slave)
                env.clear()  # this frame lives as long as the session: keep it small
            del env, argv  # the same
            self.pid = self._process.pid
            on_started()
            del on_started  # this frame lives as long as the session: keep it small
            # One nursery (each costs an idle session ~1 KiB): the exit notification runs in
            # it too, and is waited for before the rest is cancelled.
            async with trio.open_nursery() as tasks:
                self._own_scope = tasks.cancel_scope
                # Constant task names: trio would format a new string per task.
                tasks.start_soon(self._read_output, name="trio_pty.reader")
                tasks.start_soon(self._watch_exit, tasks, on_exit, name="trio_pty.exit_watcher")
                if self.timeout is not None:
                    tasks.start_soon(self._expire, self.timeout, name="trio_pty.timeout")
                if self.idle_timeout is not None:
                    tasks.start_soon(
                        self._expire_idle, self.idle_timeout, name="trio_pty.idle_timeout"
                    )
                task_status.started()
                # Moved to the manager's nursery, unless the spawn was cancelled before
                # it reported started (trio then leaves the task where it was, under the
                # spawn's cancelled scope): that cancellation is not a shutdown.
                self._under_manager = trio.lowlevel.current_task().parent_nursery is not starting_in
                try:
                    await self._stop.wait()
                except trio.Cancelled:
                    self._note_cancellation()
                    raise
                if self._notify_done is not None:
                    # The exit notification was started in the same step that woke us, and
                    # trio runs the tasks of a batch in either order: let it go first, so
                    # the teardown's first /proc scan (~1 ms) does not delay the exit event.
                    await trio.lowlevel.cancel_shielded_checkpoint()
                await self._teardown()
                # Everything is gone, so the slave is closed: the reader reaches EIO soon.
                with trio.move_on_after(self._limits.exit_drain_timeout):
                    await self._eof.wait()
                if self._notify_done is not None:
                    await self._notify_done.wait()  # bounded by notification_timeout
                tasks.cancel_scope.cancel()
            if self.timed_out and on_exit is not None:
                await self._notify(on_exit)
        finally:
            with trio.CancelScope(shield=True):
                await self._teardown()
                self._close_master()
                self._finished.set()
                self._complete.set()
                self._wake_readers()

    def _note_cancellation(self) -> None:
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

    def removed(self) -> None:
        """The manager forgot this session: end every wait and attachment on it."""
        self._removed = True
        self._complete.set()
        self._wake_readers()

    def shut_down(self, at: float) -> None:
        """The manager is closing: tear down (counting the grace from `at`, the same moment
        for every session) and cut off an exit notification in progress."""
        self._shut_down = True
        self.request_stop(kill=True, at=at)
        if self._notifying is not None:
            self._notifying.cancel()

    def request_stop(self, *, kill: bool, at: float | None = None) -> None:
        """Start the teardown (kill=True marks the session as being killed). `at` is when
        it was asked for: the grace and the deadline count from then."""
        if self._stop_at is None:
            self._stop_at = trio.current_time() if at is None else at
        if kill:
            self._change("kill")
            if self._process is not None:
                # Hang up at once, before the teardown's first scan (see Teardown.hang_up).
                self._way_out_of(self._process).hang_up()
        self._stop.set()

    async def kill(self) -> None:
        """Kill the session and wait until nothing of it remains (bounded by close_timeout)."""
        self.request_stop(kill=True)
        await self._finished.wait()

    async def _read_output(self) -> None:
        """The hot path: per chunk only store it (and let the stubber look); per pass,
        note the time and wake whoever waits for output.

        Floods are read in pauses: once passes have followed each other within _BURST_GAP
        and read _FLOOD_BYTES together, the reader sleeps `flood_read_delay` before the next
        pass instead of waiting to be woken, and ends each pass at the first read the tty did
        not fill. The tty hands newline-dense text out a few hundred bytes at a time, as the
        writer produces it, so a reader that comes back at once pays a wake-up and a read for
        every few hundred bytes; after a pause its reads come back full. The first output
        after a quiet spell is read at once (echo, prompts and shell marks are not delayed),
        a pause that finds nothing ends the flood, and so does input (what follows it
        answers it). A writer that a pause would hold back
        (_FAST_WRITER) is read without pauses.

        EIO means every slave end is closed: the output so far is complete (the exit
        watcher's drain waits for that). But a process of the session can reopen its
        terminal (`/dev/tty`), and the master stays "readable" (hung up) meanwhile, so from
        then on the master is polled every _EIO_POLL seconds instead of waited on.
        """
        master = self._master
        delay = self._limits.flood_read_delay
        burst = 0  # bytes read by passes that followed each other closely
        last = _LONG_AGO  # when the last pass that read something ended
        pausing = False
        fast = 0  # pauses in a row that found a writer faster than _FAST_WRITER
        pause: timer.OneShot | None = None  # while pausing (see posix.timer for why)
        try:
            while True:
                if pause is not None:
                    pause.arm()
                    await trio.lowlevel.wait_readable(pause.fd)
                    pause.clear()
                elif pausing:
                    await trio.sleep(delay)  # no timerfd to be had (out of descriptors)
                else:
                    await trio.lowlevel.wait_readable(master)
                # Not when the manager is being cancelled: with dozens of floods saturating
                # the loop, their readers' passes would otherwise run ahead of the shutdown
                # that is about to end them. (A cached flag: current_effective_deadline
                # walks every enclosing scope, ~6 µs per pass.)
                await trio.lowlevel.checkpoint_if_cancelled()
                got = self._read_available(master, pausing)
                while got < 0:
                    self._eof.set()
                    self._wake_readers()
                    await trio.sleep(_EIO_POLL)
                    got = self._read_available(master, False)
                if not got:
                    burst, pausing, fast = 0, False, 0
                    if pause is not None:
                        _close(pause)
                        pause = None
                    continue
                now = trio.current_time()
                if not pausing and now - last > _BURST_GAP:
                    burst = 0
                    if now - last > _QUIET_GAP:
                        fast = 0
                if pausing:
                    fast = fast + 1 if got > _FAST_WRITER * (now - last) else 0
                if self._last_input_at > last:
                    # Input went in since the last pass: this output answers it. Without
                    # this, a shell's commands sent back to back (a few hundred bytes each,
                    # passes under _BURST_GAP apart) added up to a flood, and from then on
                    # each prompt waited for a pause (1 ms, on a 0.25 ms round trip).
                    burst = 0
                burst += got
                last = now
                pausing = delay > 0 and burst >= _FLOOD_BYTES and fast < _FAST_PAUSES
                if pausing and pause is None:
                    with contextlib.suppress(OSError):
                        pause = timer.OneShot(delay)
                elif not pausing and pause is not None:
                    _close(pause)
                    pause = None
        except trio.Cancelled:
            self._note_cancellation()
            raise
        finally:
            if pause is not None:
                _close(pause)

    def _read_available(self, master: int, until_short: bool) -> int:
        """Read what is there, in a bounded number of chunks: the bytes read, or -1 on EIO
        with nothing read. `until_short`: stop after a read that the tty did not fill (it
        is drained; one more read would only fail with EAGAIN)."""
        output = self.output
        shell = self.shell
        got = 0
        prompted = False
        for _ in range(_READS_PER_WAKEUP):
            try:
                data = os.read(master, _READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                data = b""
            if not data:
                if got:
                    break  # report what we have; the next round sees the EIO again
                return -1
            got += len(data)
            start = output.append(data)
            if shell is not None and shell.feed(data, start):  # one bytes.find per chunk
                prompted = True
            if not self._drivers:
                reply = self._responder.feed(data, self.rows, self.cols)
                if reply:
                    self._write_nowait(reply)
            if until_short and len(data) < _TTY_READ:
                break
        if got:
            self._last_output_at = trio.current_time()
            lot = self._output_lot
            if lot:  # None until someone waited for output
                lot.unpark_all()
            if prompted and self._prompt_lot:
                self._prompt_lot.unpark_all()
        return got

    def command_submitted(self) -> None:
        """`run` gave the shell a command: a `wait_until` for the prompt in another call
        of `run` now finds it busy (no output says so before the next prompt)."""
        if self._prompt_lot:
            self._prompt_lot.unpark_all()

    def _wake_readers(self) -> None:
        """Wake every waiter: for output, and for marks (the output is complete, or the
        session was removed)."""
        for lot in (self._output_lot, self._prompt_lot):
            if lot:  # None until someone waited
                lot.unpark_all()

    def _output_waiters(self) -> trio.lowlevel.ParkingLot:
        """Where tasks wait for output (made for the first one: an idle session that
        nobody reads holds none)."""
        if self._output_lot is None:
            self._output_lot = trio.lowlevel.ParkingLot()
        return self._output_lot

    async def _watch_exit(self, nursery: trio.Nursery, on_exit: ExitCallback | None) -> None:
        assert self._process is not None
        try:
            returncode = await self._process.wait()
            # Output is complete only when the reader has seen EIO: everything the child
            # wrote before exiting is then in the buffer. A grandchild may hold the slave
            # open; the drain window bounds that wait.
            with trio.move_on_after(self._limits.exit_drain_timeout):
                await self._eof.wait()
        except trio.Cancelled:
            self._note_cancellation()
            raise
        self._record_exit(returncode)
        self._change("exit")
        self._stop.set()
        if self.status == "exited" and on_exit is not None:
            self._notify_done = Latch()
            nursery.start_soon(self._notify, on_exit)

    async def _expire(self, seconds: float) -> None:
        await trio.sleep(seconds)
        self._time_out("timeout")

    async def _expire_idle(self, seconds: float) -> None:
        assert self._detached_lot is not None
        await wait_idle(seconds, self._idle_since, self._detached_lot)
        self._time_out("idle_timeout")

    def _idle_since(self) -> float | None:
        if self._attached:
            return None
        return max(self._last_output_at, self._last_input_at, self._last_detach_at)

    def _time_out(self, reason: EndReason) -> None:
        """One of the session's timers ran out: kill it, saying why."""
        if self.status == "running":
            self.timed_out = True
            self.reason = reason
            self.request_stop(kill=True)

    async def _notify(self, on_exit: ExitCallback) -> None:
        """Deliver the ExitEvent once, bounded; a failing callback never hurts the session.
        The runner waits for it (`_notify_done`) before it cancels the session's tasks."""
        try:
            await self._deliver(on_exit)
        finally:
            if self._notify_done is not None:
                self._notify_done.set()

    async def _deliver(self, on_exit: ExitCallback) -> None:
        if self._notified or not self.notify_on_exit:
            return
        self._notified = True
        event = self.exit_event()
        with trio.move_on_after(self._limits.notification_timeout) as scope:
            self._notifying = scope
            try:
                await on_exit(event)
            except Exception:
                log.exception("exit callback failed for session %s", self.id)
        self._notifying = None
        if scope.cancelled_caught and not self._shut_down:
            log.warning(
                "exit callback for session %s did not return within %g s; cut off",
                self.id,
                self._limits.notification_timeout,
            )

    def exit_event(self) -> ExitEvent:
        return ExitEvent(
            id=self.id,
            owner=self.owner,
            description=self.description[:100],
            exit_code=self.exit_code,
            exit_signal=self.exit_signal,
            timeout_seconds=self.timeout,
            timed_out=self.timed_out,
            output_lines=self.output.total_lines,
            last_line=self.output.last_nonblank_line()[:200],
            reason=self.reason,
        )

    def _record_exit(self, returncode: int) -> None:
        if self._exit_recorded.is_set():
            return
        if returncode < 0:
            self.exit_signal = -returncode
        else:
            self.exit_code = returncode
        self._exit_recorded.set()
        self._complete.set()
        if self.shell is not None:
            self.shell.session_ended(self.exit_code)
        self._wake_readers()

    # ----------------------------------------------------------------- teardown

    def _way_out_of(self, process: Child) -> reap.Teardown:
        """The session's Teardown, made once (by a kill request, or by the teardown)."""
        if self._way_out is None:
            if self._stop_at is None:
                self._stop_at = trio.current_time()
            self._way_out = reap.Teardown(
                self._find_processes,
                self._table,
                kill_at=self._stop_at + self._limits.terminate_grace,
                deadline=self._stop_at + self._limits.close_timeout,
                leader=process,
                groups=self._signalable_groups,
                hang_up=self._foreground,
                tags=(self._manager_id, self.id),
            )
        return self._way_out

    async def _teardown(self) -> None:
        """Hang up -> SIGTERM -> grace -> SIGKILL -> reaped, shielded and bounded; once."""
        process = self._process
        if process is None or (self._way_out is not None and self._way_out.started):
            return
        killed = self.status in ("running", "killing")  # not a program that ended by itself
        if self.status == "running":
            self._change("kill")
        teardown = self._way_out_of(process)
        with trio.CancelScope(shield=True):
            try:
                report = await teardown.run()
            except Exception:
                # A bug in teardown must not leave the session running: kill what we
                # certainly own (the leader's group while the leader is unreaped).
                for pgid in self._signalable_groups():
                    proc.signal_group(pgid, signal.SIGKILL)
                raise
        returncode = process.returncode
        if returncode is not None:
            self._record_exit(returncode)
        self.others_ended = report.others
        if report.blind:
            self.error = (
                "could not read /proc to confirm that the session's processes are gone "
                "(out of file descriptors); its process groups were signalled"
            )
            log.error("session %s: %s", self.id, self.error)
        elif report.survivors:
            self.error = (
                f"processes still alive after close_timeout "
                f"({self._limits.close_timeout:g} s): {report.survivors}"
            )
            log.error("session %s: %s", self.id, self.error)
        elif report.unconfirmed:
            self.error = (
                f"could not confirm within close_timeout ({self._limits.close_timeout:g} s) "
                f"that process groups {report.unconfirmed} are empty"
            )
            log.error("session %s: %s", self.id, self.error)
        if killed and self._stop_at is not None:
            self.teardown_s = trio.current_time() - self._stop_at
        self._change("torn_down")

    def _find_processes(self, snapshot: proc.Snapshot) -> dict[int, proc.ProcEntry]:
        # The leader's pid names its group and session for as long as they have members,
        # reaped or not; a process with that pid after the reap is another one (a recycled
        # pid, leading a group of its own), and nothing of ours is in its group then.
        process = self._process
        reaped = process is None or process.returncode is not None
        recycled = reaped and self.pid in snapshot.entries
        return snapshot.members(
            leader=None if recycled else self.pid,
            groups=self._signalable_groups(),
            manager_id=self._manager_id,
            session_id=self.id,
        )

    def _signalable_groups(self) -> list[int]:
        """Groups that cannot have been recycled: the leader's while it is unreaped, the
        tty's current foreground group, and the groups pinned by a zombie of ours."""
        groups = self._foreground()
        process = self._process
        if process is not None and process.returncode is None:
            # Unreaped, so its pid (= its group id since setsid) cannot have been recycled.
            groups.append(self.pid)
        groups.extend(self._table.pinned_groups((self._manager_id, self.id)))
        return groups

    def _foreground(self) -> list[int]:
        """The tty's foreground group, what a hangup signals besides the leader."""
        if self._master >= 0:
            foreground = spawn.foreground_group(self._master)
            if foreground is not None:
                return [foreground]
        return []

    def _close_master(self) -> None:
        if self._master >= 0:
            master, self._master = self._master, -1
            trio.lowlevel.notify_closing(master)
            os.close(master)

    # ----------------------------------------------------------------- waiting

    @property
    def output_complete(self) -> bool:
        """No more output can come: the exit is recorded (after the drain), the session is
        torn down, or it was removed."""
        return self._complete.is_set()

    async def wait_finished(self) -> None:
        """Until teardown is complete: no process left, master fd closed."""
        await self._finished.wait()

    async def wait_complete(self) -> None:
        """Until no more output can come (see `output_complete`). Not woken by each chunk
        of output (a flood would wake it thousands of times a second for nothing)."""
        await self._complete.wait()

    async def wait(
        self,
        spec: Wait,
        *,
        pattern: CompiledPattern | None,
        start_line: int,
        has_output: Callable[[], bool],
        first_line_prefix: str | None = None,
        prompts_seen: int | None = None,
        echo: Sequence[str] = (),
    ) -> WaitReason:
        """Block until `pattern` matches a line at or after `start_line`, the output has been
        quiet for idle_ms (once `has_output()`), the shell has shown more than `prompts_seen`
        prompts, the output is complete, or the timeout.

        Waiters park on the session's lot and wake on new output: no polling. With
        `first_line_prefix`, the first line only matches in the text after that prefix
        (what it held before a write), so send-and-wait never matches a stale prompt. With
        `echo` (what each line of a write echoes as, see `output.echo`), the lines from
        `start_line` on match only in the text after their echo, so a wait never matches
        the command it was sent with.
        """
        limits = self._limits
        timeout_ms = spec.timeout_ms if spec.timeout_ms is not None else limits.default_wait_ms
        idle = spec.idle_ms / 1000 if spec.idle_ms is not None else None
        line = start_line
        echoed = 0  # echo lines done with
        with trio.move_on_after(timeout_ms / 1000):
            while True:
                if prompts_seen is not None and self._prompts() > prompts_seen:
                    return "prompt"
                if pattern is not None:
                    searching = True
                    if echoed < len(echo):
                        matched, echoed = self._match_echo(
                            pattern, start_line, first_line_prefix or "", echo, echoed
                        )
                        if matched:
                            return "matched"
                        line = max(line, start_line + echoed)
                        searching = echoed == len(echo)
                    elif first_line_prefix is not None and not echo:
                        if self._matches_after_prefix(pattern, start_line, first_line_prefix):
                            return "matched"
                        line = max(line, start_line + 1)
                    if searching:
                        found, line = self.output.search_from(
                            pattern, line, max_scan_bytes=limits.search_slice_bytes
                        )
                        if found is not None:
                            return "matched"
                        if line < self.output.complete_lines:
                            await trio.lowlevel.checkpoint()  # a slice done: let others run
                            continue
                if self.output_complete:
                    return "exited"
                wake_at = math.inf
                if idle is not None and has_output():
                    wake_at = self._last_output_at + idle
                    if trio.current_time() >= wake_at:
                        return "idle"
                with trio.move_on_at(wake_at):
                    await self._output_waiters().park()
        return "timeout"

    def _prompts(self) -> int:
        return self.shell.prompts if self.shell is not None else 0

    async def wait_until(self, condition: Callable[[], bool]) -> bool:
        """Until `condition()` about the shell's prompt and command (`at_prompt`,
        `running`, `prompts`) holds, or no more output can come (then False). Unbounded:
        the caller bounds it. Always a checkpoint.

        Checked when a prompt was shown or a typed command started (`ShellTracker.feed`),
        not at every chunk: a command's echo, its C and D marks and its output would each
        wake the caller (a scheduler round each, ~15 µs) only to find its condition false."""
        if condition() or self.output_complete:
            await trio.lowlevel.checkpoint()
            return condition()
        if self._prompt_lot is None:
            self._prompt_lot = trio.lowlevel.ParkingLot()
        while True:
            await self._prompt_lot.park()
            if condition():
                return True
            if self.output_complete:
                return False

    def _match_echo(
        self, pattern: CompiledPattern, start_line: int, prefix: str, echo: Sequence[str], done: int
    ) -> tuple[bool, int]:
        """Check the lines a write's echo lands on (`output.echo`), from `done` on: (matched,
        how many are done with). A line still receiving its echo waits; a complete one is
        checked once."""
        complete = self.output.complete_lines
        while done < len(echo):
            number = start_line + done
            lines = self.output.read(number, 1).lines
            finished = number < complete
            if not lines or lines[0].number != number:  # hidden, gone, or not there yet
                if not finished:
                    return False, done
                done += 1
                continue
            rest = after_echo(lines[0].text, prefix if done == 0 else "", echo[done])
            if rest is not None and pattern.search(rest) is not None:
                return True, done
            if not finished:
                return False, done
            done += 1
        return False, done

    async def search(self, offset: int, limit: int, pattern: CompiledPattern) -> ReadPage:
        """Up to `limit` lines matching `pattern` at or after line `offset`.

        The scan goes in slices of search_slice_bytes with a checkpoint between them, so a
        slow (DFA-hostile) pattern never holds up the reader or other clients, and stops
        after max_search_ms with what it found (`has_more`, `next_offset` say where to go on).
        """
        limits = self._limits
        slice_bytes = limits.search_slice_bytes
        deadline = trio.current_time() + limits.max_search_ms / 1000
        page = self.output.read(offset, limit, pattern, max_scan_bytes=slice_bytes)
        lines, missed = list(page.lines), page.missed_lines
        while True:
            # After every slice, the last one too: a caller reading page after page (the
            # budget ends each read after a slice or two) would otherwise never let another
            # task run between them.
            await trio.lowlevel.checkpoint()
            if not (page.has_more and len(lines) < limit and trio.current_time() < deadline):
                break
            page = self.output.read(
                page.next_offset, limit - len(lines), pattern, max_scan_bytes=slice_bytes
            )
            lines += page.lines
            missed += page.missed_lines
        return attrs.evolve(page, lines=lines, missed_lines=missed)

    async def wait_screen(
        self, spec: Wait, *, pattern: CompiledPattern | None, snapshot: Callable[[], Screen]
    ) -> Screen:
        """Take snapshots until a screen line matches `pattern`, the output has been quiet
        for idle_ms, the output is complete, or the timeout; the last one says why.

        It looks again when output arrives, at most every _SCREEN_RECHECK seconds: under a
        flood a snapshot per reader wake-up would cost more than the flood."""
        limits = self._limits
        timeout_ms = spec.timeout_ms if spec.timeout_ms is not None else limits.default_wait_ms
        idle = spec.idle_ms / 1000 if spec.idle_ms is not None else None
        with trio.move_on_after(timeout_ms / 1000):
            while True:
                screen = snapshot()
                checked_at = trio.current_time()
                if pattern is not None and any(pattern.search(line) for line in screen.lines):
                    return attrs.evolve(screen, reason="matched")
                if self.output_complete:
                    return attrs.evolve(screen, reason="exited")
                wake_at = math.inf
                if idle is not None and self.output.end_offset:
                    wake_at = self._last_output_at + idle
                    if checked_at >= wake_at:
                        return attrs.evolve(screen, reason="idle")
                with trio.move_on_at(wake_at):
                    while self.output.end_offset == screen.offset and not self.output_complete:
                        await self._output_waiters().park()
                    await trio.sleep_until(checked_at + _SCREEN_RECHECK)
        return attrs.evolve(snapshot(), reason="timeout")

    def _matches_after_prefix(self, pattern: CompiledPattern, line: int, prefix: str) -> bool:
        lines = self.output.read(line, 1).lines
        if not lines or lines[0].number != line:
            return False
        text = lines[0].text
        rest = text[len(prefix) :] if text.startswith(prefix) else text
        return pattern.search(rest) is not None

    def attach(self, offset: int | None, *, driver: bool) -> Attachment:
        return Attachment(self, offset, driver=driver)

    # ----------------------------------------------------------------- input

    def _check_running(self) -> None:
        if self.status != "running" or self._master < 0:
            raise NotRunning(
                self.id,
                status=self.status,
                exit_code=self.exit_code,
                exit_signal=self.exit_signal,
            )

    async def write(
        self, data: bytes, *, settle: bool = False, checkpoint: bool = True
    ) -> tuple[int, int]:
        """Write all of `data` in arrival order, or raise WriteTimeout after io_timeout.
        With `settle`, first wait until the leader waits (`until_leader_waits`).

        Returns (output offset when the write began, bytes written): the output that follows
        the write starts at that offset.

        A shell's command round trip waits on these keys, so when the lock is free and the
        kernel takes them at once they go out before any scheduler round (no timer either);
        the checkpoint comes after, while the program works on them. `checkpoint=False`
        leaves it out, for a caller whose next step is a checkpoint anyway (`run` waits for
        the shell's answer): it is a scheduler round of ours on a 2-core machine where the
        shell is working.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        lock = self._write_lock
        if lock is None:
            lock = self._write_lock = trio.Lock()
        if lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            if settle:
                await self.until_leader_waits()
            self._check_running()
            start = self.output.end_offset
            written = 0
            if len(data) <= _WRITE_CHUNK:
                # Full (BlockingIOError) or ending (EIO): _write_rest meets it again.
                with contextlib.suppress(OSError):
                    written = os.write(self._master, data)
            if written < len(data):
                written = await self._write_rest(data, written)
            else:
                self._last_input_at = trio.current_time()
        finally:
            lock.release()
        if checkpoint:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return start, written

    async def _write_rest(self, data: bytes, written: int) -> int:
        """Write data[written:] as the program reads it, within io_timeout; all of data's
        length, or WriteTimeout (or the session's end) is raised."""
        with trio.move_on_after(self._limits.io_timeout) as timer:
            while written < len(data) and self._master >= 0:
                try:
                    written += os.write(self._master, data[written : written + _WRITE_CHUNK])
                except BlockingIOError:
                    try:
                        await trio.lowlevel.wait_writable(self._master)
                    except trio.ClosedResourceError:
                        break
                except OSError as exc:
                    if exc.errno != errno.EIO:
                        raise
                    break  # the slave side is gone: the session is ending
        self._last_input_at = trio.current_time()
        if written == len(data):
            return written
        if not timer.cancelled_caught:
            # The session ended under us; report how, once the exit is recorded.
            with trio.move_on_after(self._limits.exit_drain_timeout):
                await self._exit_recorded.wait()
            self._check_running()
        raise WriteTimeout(
            self.id,
            bytes_written=written,
            total_bytes=len(data),
            timeout=self._limits.io_timeout,
        )

    def _write_nowait(self, data: bytes) -> None:
        """Best-effort reply to a terminal query (a real terminal answers at any moment,
        even in the middle of a paste); dropped only if the input queue is full."""
        if self._master >= 0:
            try:
                os.write(self._master, data)
            except OSError:
                log.debug("session %s: query reply dropped", self.id)

    def resize(self, rows: int, cols: int) -> None:
        self._check_running()
        spawn.set_window_size(self._master, rows, cols)
        self.rows, self.cols = rows, cols
        self.output.note_size(rows, cols)

    async def until_leader_waits(self) -> None:
        """Until the leader is blocked in a system call rather than running, at most
        io_timeout. A shell's line editor waiting for a key is blocked; bash's readline,
        given SIGINT while it runs (drawing its prompt, a moment after the prompt's marks
        arrive), handles it only halfway: it drops the line but draws no new prompt and
        drops the next key typed (docs/shell.md). Usually it is blocked already; no
        event says when it blocks, so a running one is looked at every millisecond."""
        with trio.move_on_after(self._limits.io_timeout):
            while True:
                entry = proc.read_stat(self.pid)
                if entry is None or entry.state != "R":
                    return
                await trio.sleep(_BUSY_POLL)

    def signal_foreground(self, sig: int) -> list[int]:
        """Send `sig` to the processes of the terminal's foreground group (whom Ctrl-C
        reaches: a shell's running command, not the shell); the pids signalled.

        The group is the tty's, but its number may outlive its last member and be reused
        elsewhere, so the processes are taken from /proc, only those of this session, and
        each is signalled through a pidfd after checking its start time.
        """
        self._check_running()
        group = spawn.foreground_group(self._master)
        if group is None:
            return []
        snapshot = self._table.snapshot()
        members = [snapshot.entries[pid] for pid in snapshot.by_pgid.get(group, ())]
        targets = [entry for entry in members if entry.sid == self.pid and not entry.dead]
        for entry in targets:
            proc.signal_process(entry, sig)
        return sorted(entry.pid for entry in targets)


class Attachment:
    """A cursor over one session's raw output: the retained snapshot (or exactly the bytes
    after `offset`), then live output, in order, none twice, none missing.

    It pulls from the ring, so a slow consumer never blocks the reader, never makes memory
    grow and never stalls another consumer; one that falls more than the ring behind gets a
    chunk flagged `gap` and resumes at the oldest retained line. A `driver` is a client that
    answers terminal queries itself, so the session stops answering them while it is there.
    """

    def __init__(self, session: Session, offset: int | None, *, driver: bool) -> None:
        self._session = session
        self._driver = driver
        self._closed = False
        self._gap = False
        output = session.output
        if offset is None or offset < output.start_offset or offset > output.end_offset:
            self._gap = offset is not None
            self._cursor = self._safe_start()
        else:
            self._cursor = offset
        session._attached += 1
        if driver:
            session._drivers += 1

    @property
    def cursor(self) -> int:
        """The offset of the next byte this attachment will deliver."""
        return self._cursor

    def _safe_start(self) -> int:
        """The oldest retained byte, moved to a line start once output has rotated, so a
        replay never begins inside an escape sequence or a UTF-8 character."""
        output = self._session.output
        start = output.start_offset
        if start == 0:
            return 0
        head, _, _ = output.bytes_since(start, _SAFE_START_SCAN)
        newline = head.find(b"\n")
        return start + newline + 1 if newline >= 0 else start

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            session = self._session
            if self._driver:
                session._drivers -= 1
            session._attached -= 1
            session._last_detach_at = trio.current_time()
            if session._detached_lot is not None:
                session._detached_lot.unpark_all()
            session._wake_readers()

    def __aiter__(self) -> Attachment:
        return self

    async def __anext__(self) -> OutputChunk:
        session = self._session
        output = session.output
        chunk_bytes = session._limits.attach_chunk_bytes
        while not self._closed and not session._removed:
            if self._cursor < output.start_offset:
                self._gap = True
                self._cursor = self._safe_start()
            data, next_offset, _ = output.bytes_since(self._cursor, chunk_bytes)
            if data:
                chunk = OutputChunk(offset=self._cursor, data=data, gap=self._gap)
                self._cursor, self._gap = next_offset, False
                return chunk
            if session.finished:
                break
            await session._output_waiters().park()
        raise StopAsyncIteration
