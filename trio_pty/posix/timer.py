"""A one-shot timer as a file descriptor (Linux timerfd), for a pause the reader takes many
times a second.

trio.sleep costs about 100 µs of CPU on the 2-core machine (a cancel scope, a deadline, a
Cancelled raised through five frames and caught: ~140 Python calls), ten times a wake-up on a
readable fd. A reader that pauses ~100 times per MB of a flood would spend most of its CPU
there; waiting for a timerfd to become readable costs what any wake-up costs. Python has
`os.timerfd_create` only from 3.13, hence ctypes (`posix/libc.py`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

from . import libc

_CLOCK_MONOTONIC: Final = 1
_TFD_NONBLOCK: Final = os.O_NONBLOCK
_TFD_CLOEXEC: Final = os.O_CLOEXEC


class OneShot:
    """A timerfd that `arm` sets to become readable once, `seconds` from now; `clear`
    consumes the expiry. The owner waits with trio.lowlevel.wait_readable(fd) and closes it
    with `close`."""

    __slots__ = ("_spec", "fd")

    def __init__(self, seconds: float) -> None:
        self.fd: int = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        self._spec = libc.one_shot(seconds)

    def arm(self) -> None:
        libc.timerfd_settime(self.fd, self._spec)

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
