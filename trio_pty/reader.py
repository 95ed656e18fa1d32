"""A session's reader task, the hot path: master fd -> stubber -> ring + line index, then
wake whoever waits. Per chunk it only stores the chunk (and lets the stubber and the shell's
mark parser look); per pass it notes the time, tells the output's timing index (a recording's
clock: one comparison, at most one append per 10 ms) and wakes the waiters (`Lifecycle`).

When it pauses between passes during a flood is `FloodPace`, a pure decision over sizes and
times (tests/test_session_reader.py); the loop around it does the waiting.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
from typing import Final, Protocol

import trio

from .lifecycle import Lifecycle
from .output.buffer import OutputBuffer
from .posix import timer
from .shell.history import ShellTracker

_READ_SIZE: Final = 65_536
_READS_PER_WAKEUP: Final = 64  # then yield, so one flooding session cannot starve the rest
_EIO_POLL: Final = 0.05  # how often a master whose slave ends are all closed is retried
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


class Terminal(Protocol):
    """What the reader reads of its session."""

    @property
    def output(self) -> OutputBuffer: ...
    @property
    def shell(self) -> ShellTracker | None: ...
    @property
    def lifecycle(self) -> Lifecycle: ...
    def answer_queries(self, data: bytes) -> None:
        """Let the session answer the terminal queries in `data` (no driver attached)."""


class FloodPace:
    """Whether the reader pauses `delay` before its next pass instead of waiting to be
    woken: once passes have followed each other within _BURST_GAP and read _FLOOD_BYTES
    together. The tty hands newline-dense text out a few hundred bytes at a time, as the
    writer produces it, so a reader that comes back at once pays a wake-up and a read for
    every few hundred bytes; after a pause its reads come back full.

    The first output after a quiet spell is read at once (echo, prompts and shell marks are
    not delayed), a pass that finds nothing ends the flood, and so does input (what follows
    it answers it). A writer that a pause would hold back (_FAST_WRITER) is read without
    pauses. A delay of 0 never pauses."""

    __slots__ = ("_burst", "_delay", "_fast", "_last", "pausing")

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._burst = 0  # bytes read by passes that followed each other closely
        self._last = _LONG_AGO  # when the last pass that read something ended
        self._fast = 0  # pauses in a row that found a writer faster than _FAST_WRITER
        self.pausing = False

    def read_nothing(self) -> None:
        """A pass found nothing to read: any flood is over."""
        self._burst, self.pausing, self._fast = 0, False, 0

    def read(self, got: int, now: float, input_at: float) -> bool:
        """A pass read `got` bytes, ending at `now`; input last went in at `input_at`.
        Whether to pause before the next pass."""
        last = self._last
        if not self.pausing and now - last > _BURST_GAP:
            self._burst = 0
            if now - last > _QUIET_GAP:
                self._fast = 0
        if self.pausing:
            self._fast = self._fast + 1 if got > _FAST_WRITER * (now - last) else 0
        if input_at > last:
            # Input went in since the last pass: this output answers it. Without this, a
            # shell's commands sent back to back (a few hundred bytes each, passes under
            # _BURST_GAP apart) added up to a flood, and from then on each prompt waited for
            # a pause (1 ms, on a 0.25 ms round trip).
            self._burst = 0
        self._burst += got
        self._last = now
        self.pausing = self._delay > 0 and self._burst >= _FLOOD_BYTES and self._fast < _FAST_PAUSES
        return self.pausing


def _close(pause: timer.OneShot) -> None:
    """Close a pause's timer (trio may have it registered: tell it first)."""
    trio.lowlevel.notify_closing(pause.fd)
    pause.close()


async def read_output(session: Terminal, master: int, delay: float) -> None:
    """Read `master` until cancelled, pausing `delay` between passes during a flood
    (`FloodPace`; in a pause each pass ends at the first read the tty did not fill).

    EIO means every slave end is closed: the output so far is complete (the exit watcher's
    drain waits for that). But a process of the session can reopen its terminal
    (`/dev/tty`), and the master stays "readable" (hung up) meanwhile, so from then on the
    master is polled every _EIO_POLL seconds instead of waited on.
    """
    lifecycle = session.lifecycle
    pace = FloodPace(delay)
    pausing = False  # pace.pausing (tests/test_flood_reading.py watches this local)
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
            got = _read_available(session, master, pausing)
            while got < 0:
                lifecycle.output_drained()
                await trio.sleep(_EIO_POLL)
                got = _read_available(session, master, False)
            if got:
                pausing = pace.read(got, trio.current_time(), lifecycle.last_input_at)
            else:
                pace.read_nothing()
                pausing = False
            if pausing and pause is None:
                with contextlib.suppress(OSError):
                    pause = timer.OneShot(delay)
            elif not pausing and pause is not None:
                _close(pause)
                pause = None
    except trio.Cancelled:
        lifecycle.note_cancellation()
        raise
    finally:
        if pause is not None:
            _close(pause)


def _read_available(session: Terminal, master: int, until_short: bool) -> int:
    """Read what is there, in a bounded number of chunks: the bytes read, or -1 on EIO
    with nothing read. `until_short`: stop after a read that the tty did not fill (it
    is drained; one more read would only fail with EAGAIN)."""
    output = session.output
    shell = session.shell
    answer = not session.lifecycle.driven  # a driver answers terminal queries itself
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
        if answer:
            session.answer_queries(data)
        if until_short and len(data) < _TTY_READ:
            break
    if got:
        session.lifecycle.output_arrived(prompted=prompted)
        output.arrived(session.lifecycle.last_output_at)  # the clock read just above
    return got
