"""One PTY = one trio task tree: reader, exit watcher, timeout and notifier, then teardown.

The runner task lives in the manager's root nursery. Every way a session ends (exit, kill,
timeout, owner deleted, manager cancelled) goes through the same teardown at the end of
`run`: shielded, bounded by `close_timeout`, ending with the master fd closed. On a kill or a
natural exit the reader keeps draining while the processes die, so nothing they print on the
way out is lost; on cancellation of the whole manager nobody can read any more, so the reader
stops at once.

What the tasks tell each other (status, latches, wake-ups) is the session's `Lifecycle`
(lifecycle.py); waiting on its output is waits.py; the way its processes are ended is
teardown.py; a client streaming its output is an `Attachment` (attachment.py).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

import trio

from . import reader, teardown, waits
from .attachment import Attachment
from .errors import NotRunning, WriteTimeout
from .lifecycle import Lifecycle
from .limits import Limits
from .model import EndReason, ExitEvent, SessionInfo, Status
from .output.buffer import OutputBuffer
from .output.stubber import QueryResponder
from .posix import proc, reap, spawn
from .posix.child import Child
from .shell.history import ShellTracker
from .teardown import SessionTeardown

if TYPE_CHECKING:  # spawning.py sits above this module: for annotations only
    from .spawning import SpawnOptions

log = logging.getLogger("trio_pty")

ExitCallback = Callable[[ExitEvent], Awaitable[None]]

_WRITE_CHUNK: Final = 16_384
_BUSY_POLL: Final = 0.001  # how often a leader that is running is looked at again


class Session:
    """State and task tree of one PTY session. Created and driven by the Manager."""

    # Slots: hundreds of sessions live at once, and a __dict__ would be a third of an idle
    # session's own footprint.
    __slots__ = (
        "_ending",
        "_manager_id",
        "_master",
        "_notifying",
        "_process",
        "_responder",
        "_table",
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
        "lifecycle",
        "limits",
        "name",
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
        options: SpawnOptions,
        workdir: str,
        limits: Limits,
        manager_id: str,
        table: reap.ProcessTable,
        on_change: Callable[[], None] | None = None,
        shutdown_moment: Callable[[], float] = trio.current_time,
    ) -> None:
        """`options` are checked (`SpawnOptions.checked`), `workdir` is where the session
        runs. `shutdown_moment` is when the manager began shutting down (the first call
        fixes it): a session whose task is cancelled from outside counts its grace from
        there."""
        self.id = session_id
        self.owner = options.owner
        self.command = options.command
        self.args = list(options.args)
        self.workdir = workdir
        self.title = options.title
        self.name = options.name
        self.description = options.description
        self.notify_on_exit = options.notify_on_exit
        self.timeout = options.timeout
        self.idle_timeout = options.idle_timeout
        self.rows = options.rows
        self.cols = options.cols
        self.created_at = time.time()
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
        self.output.note_size(self.rows, self.cols)
        self.limits = limits
        self._manager_id = manager_id
        self._table = table
        self._responder = QueryResponder()
        self.lifecycle = Lifecycle(
            on_change=on_change,
            shutdown_moment=shutdown_moment,
            watch_detaching=self.idle_timeout is not None,  # only an idle timeout waits for it
        )
        self._master = -1
        self._process: Child | None = None
        self._write_lock: trio.Lock | None = None  # made by the first write
        self._ending: SessionTeardown | None = None  # made by a kill request or the teardown
        self._notifying: trio.CancelScope | None = None  # an exit notification's bound
        # A shell session's commands and prompts (spawn_shell sets it before the reader runs).
        self.shell: ShellTracker | None = None

    # ----------------------------------------------------------------- public state

    @property
    def finished(self) -> bool:
        """True once teardown is complete: no process left, master fd closed."""
        return self.lifecycle.finished

    @property
    def status(self) -> Status:
        return self.lifecycle.status

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
            name=self.name,
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
        lifecycle = self.lifecycle
        self._master, slave = spawn.open_pty(self.rows, self.cols)
        lifecycle.input_sent()  # idle counts from the start
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
                master, delay = self._master, self.limits.flood_read_delay
                # Constant task names: trio would format a new string per task.
                tasks.start_soon(reader.read_output, self, master, delay, name="trio_pty.reader")
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
                moved = trio.lowlevel.current_task().parent_nursery is not starting_in
                lifecycle.tasks_started(tasks.cancel_scope, under_manager=moved)
                try:
                    await lifecycle.wait_stop()  # here: a helper's frame would cost memory
                except trio.Cancelled:
                    lifecycle.note_cancellation()
                    raise
                await self._end(tasks.cancel_scope)
            if self.timed_out and on_exit is not None:
                await self._notify(on_exit)
        finally:
            with trio.CancelScope(shield=True):
                await self._teardown()
                self._close_master()
                lifecycle.finish()

    async def _end(self, tasks: trio.CancelScope) -> None:
        """A stop was asked for (the child exited, `kill`, a timeout): tear down while the
        reader drains, let the exit notification finish, then end the session's tasks."""
        lifecycle = self.lifecycle
        if lifecycle.notifying:
            # The exit notification was started in the same step that woke us, and
            # trio runs the tasks of a batch in either order: let it go first, so
            # the teardown's first /proc scan (~1 ms) does not delay the exit event.
            await trio.lowlevel.cancel_shielded_checkpoint()
        await self._teardown()
        # Everything is gone, so the slave is closed: the reader reaches EIO soon.
        with trio.move_on_after(self.limits.exit_drain_timeout):
            await lifecycle.wait_drained()
        await lifecycle.wait_notification()  # bounded by notification_timeout
        tasks.cancel()

    def removed(self) -> None:
        """The manager forgot this session: end every wait and attachment on it."""
        self.lifecycle.remove()

    def shut_down(self, at: float) -> None:
        """The manager is closing: tear down (counting the grace from `at`, the same moment
        for every session) and cut off an exit notification in progress."""
        self.lifecycle.shut_down()
        self.request_stop(kill=True, at=at)
        if self._notifying is not None:
            self._notifying.cancel()

    def request_stop(self, *, kill: bool, at: float | None = None) -> None:
        """Start the teardown (kill=True marks the session as being killed). `at` is when
        it was asked for: the grace and the deadline count from then."""
        lifecycle = self.lifecycle
        lifecycle.stop_at_or(trio.current_time() if at is None else at)
        if kill:
            lifecycle.change("kill")
            if self._process is not None:
                # Hang up at once, before the teardown's first scan (see Teardown.hang_up).
                self._ending_of(self._process).hang_up()
        lifecycle.request_stop()

    async def kill(self) -> None:
        """Kill the session and wait until nothing of it remains (bounded by close_timeout)."""
        self.request_stop(kill=True)
        await self.lifecycle.wait_finished()

    def command_submitted(self) -> None:
        """`run` gave the shell a command: a `wait_until` for the prompt in another call
        of `run` now finds it busy (no output says so before the next prompt)."""
        self.lifecycle.command_submitted()

    async def _watch_exit(self, nursery: trio.Nursery, on_exit: ExitCallback | None) -> None:
        assert self._process is not None
        lifecycle = self.lifecycle
        try:
            returncode = await self._process.wait()
            # Output is complete only when the reader has seen EIO: everything the child
            # wrote before exiting is then in the buffer. A grandchild may hold the slave
            # open; the drain window bounds that wait.
            with trio.move_on_after(self.limits.exit_drain_timeout):
                await lifecycle.wait_drained()
        except trio.Cancelled:
            lifecycle.note_cancellation()
            raise
        self._record_exit(returncode)
        lifecycle.change("exit")
        lifecycle.request_stop()
        if self.status == "exited" and on_exit is not None:
            lifecycle.notification_started()
            nursery.start_soon(self._notify, on_exit)

    async def _expire(self, seconds: float) -> None:
        await trio.sleep(seconds)
        self._time_out("timeout")

    async def _expire_idle(self, seconds: float) -> None:
        await self.lifecycle.until_idle(seconds)
        self._time_out("idle_timeout")

    def _time_out(self, reason: EndReason) -> None:
        """One of the session's timers ran out: kill it, saying why."""
        if self.status == "running":
            self.timed_out = True
            self.reason = reason
            self.request_stop(kill=True)

    async def _notify(self, on_exit: ExitCallback) -> None:
        """Deliver the ExitEvent once, bounded; a failing callback never hurts the session.
        The runner waits for it (`Lifecycle.wait_notification`) before it cancels the
        session's tasks."""
        try:
            await self._deliver(on_exit)
        finally:
            self.lifecycle.notification_done()

    async def _deliver(self, on_exit: ExitCallback) -> None:
        if not self.notify_on_exit or not self.lifecycle.claim_notification():
            return
        event = self.exit_event()
        with trio.move_on_after(self.limits.notification_timeout) as scope:
            self._notifying = scope
            try:
                await on_exit(event)
            except Exception:
                log.exception("exit callback failed for session %s", self.id)
        self._notifying = None
        if scope.cancelled_caught and not self.lifecycle.shutting_down:
            log.warning(
                "exit callback for session %s did not return within %g s; cut off",
                self.id,
                self.limits.notification_timeout,
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
        if not self.lifecycle.record_exit():
            return
        if returncode < 0:
            self.exit_signal = -returncode
        else:
            self.exit_code = returncode
        if self.shell is not None:
            self.shell.session_ended(self.exit_code)

    # ----------------------------------------------------------------- teardown

    def _ending_of(self, process: Child) -> SessionTeardown:
        """The session's teardown (teardown.py), made once (by a kill request, or by the
        teardown)."""
        if self._ending is None:
            stop_at = self.lifecycle.stop_at_or(trio.current_time())
            self._ending = SessionTeardown(
                process,
                foreground=self._foreground_group,
                table=self._table,
                tags=(self._manager_id, self.id),
                kill_at=stop_at + self.limits.terminate_grace,
                deadline=stop_at + self.limits.close_timeout,
            )
        return self._ending

    async def _teardown(self) -> None:
        """Hang up -> SIGTERM -> grace -> SIGKILL -> reaped, shielded and bounded; once."""
        process = self._process
        if process is None or (self._ending is not None and self._ending.started):
            return
        lifecycle = self.lifecycle
        killed = self.status in ("running", "killing")  # not a program that ended by itself
        if self.status == "running":
            lifecycle.change("kill")
        report = await self._ending_of(process).run()
        if process.returncode is not None:
            self._record_exit(process.returncode)
        self.others_ended = report.others
        error = teardown.failure(report, self.limits.close_timeout)
        if error is not None:
            self.error = error
            log.error("session %s: %s", self.id, error)
        if killed and lifecycle.stop_at is not None:
            self.teardown_s = trio.current_time() - lifecycle.stop_at
        lifecycle.change("torn_down")

    def _foreground_group(self) -> int | None:
        """The tty's foreground group, while the master is open."""
        return spawn.foreground_group(self._master) if self._master >= 0 else None

    def _close_master(self) -> None:
        if self._master >= 0:
            master, self._master = self._master, -1
            trio.lowlevel.notify_closing(master)
            os.close(master)

    # ----------------------------------------------------------------- waiting

    # Functions over a session (waits.py), bound here as its methods.
    wait = waits.wait
    wait_until = waits.wait_until
    search = waits.search
    wait_screen = waits.wait_screen

    @property
    def output_complete(self) -> bool:
        """No more output can come: the exit is recorded (after the drain), the session is
        torn down, or it was removed."""
        return self.lifecycle.complete

    async def wait_finished(self) -> None:
        """Until teardown is complete: no process left, master fd closed."""
        await self.lifecycle.wait_finished()

    async def wait_complete(self) -> None:
        """Until no more output can come (see `output_complete`). Not woken by each chunk
        of output (a flood would wake it thousands of times a second for nothing)."""
        await self.lifecycle.wait_complete()

    def attach(self, offset: int | None, *, driver: bool, active: bool = True) -> Attachment:
        return Attachment(
            self.output,
            self.lifecycle,
            offset,
            driver=driver,
            chunk_bytes=self.limits.attach_chunk_bytes,
            active=active,
        )

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
                self.lifecycle.input_sent()
        finally:
            lock.release()
        if checkpoint:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return start, written

    async def _write_rest(self, data: bytes, written: int) -> int:
        """Write data[written:] as the program reads it, within io_timeout; all of data's
        length, or WriteTimeout (or the session's end) is raised."""
        with trio.move_on_after(self.limits.io_timeout) as timer:
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
        self.lifecycle.input_sent()
        if written == len(data):
            return written
        if not timer.cancelled_caught:
            # The session ended under us; report how, once the exit is recorded.
            with trio.move_on_after(self.limits.exit_drain_timeout):
                await self.lifecycle.wait_exit_recorded()
            self._check_running()
        raise WriteTimeout(
            self.id,
            bytes_written=written,
            total_bytes=len(data),
            timeout=self.limits.io_timeout,
        )

    def answer_queries(self, data: bytes) -> None:
        """Answer the terminal queries in `data` (the reader calls it while no driver is
        attached). Best-effort, as a real terminal answers at any moment, even in the middle
        of a paste: a reply is dropped only if the input queue is full."""
        reply = self._responder.feed(data, self.rows, self.cols)
        if reply and self._master >= 0:
            try:
                os.write(self._master, reply)
            except OSError:
                log.debug("session %s: query reply dropped", self.id)

    def resize(self, rows: int, cols: int) -> None:
        self._check_running()
        spawn.set_window_size(self._master, rows, cols)
        self.rows, self.cols = rows, cols
        self.output.note_size(rows, cols, at=trio.current_time())

    async def until_leader_waits(self) -> None:
        """Until the leader is blocked in a system call rather than running, at most
        io_timeout. A shell's line editor waiting for a key is blocked; bash's readline,
        given SIGINT while it runs (drawing its prompt, a moment after the prompt's marks
        arrive), handles it only halfway: it drops the line but draws no new prompt and
        drops the next key typed (docs/shell.md). Usually it is blocked already; no
        event says when it blocks, so a running one is looked at every millisecond."""
        with trio.move_on_after(self.limits.io_timeout):
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
        group = self._foreground_group()
        if group is None:
            return []
        snapshot = self._table.snapshot()
        members = [snapshot.entries[pid] for pid in snapshot.by_pgid.get(group, ())]
        targets = [entry for entry in members if entry.sid == self.pid and not entry.dead]
        for entry in targets:
            proc.signal_process(entry, sig)
        return sorted(entry.pid for entry in targets)
