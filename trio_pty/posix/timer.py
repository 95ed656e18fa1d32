"""A one-shot timer as a file descriptor (Linux timerfd), for a pause the reader takes many
times a second.

trio.sleep costs about 100 µs of CPU on the 2-core machine (a cancel scope, a deadline, a
Cancelled raised through five frames and caught: ~140 Python calls), ten times a wake-up on a
readable fd. A reader that pauses ~100 times per MB of a flood would spend most of its CPU
there; waiting for a timerfd to become readable costs what any wake-up costs. Python has
`os.timerfd_create` only from 3.13, hence ctypes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Final

_libc = ctypes.CDLL(None, use_errno=True)
_CLOCK_MONOTONIC: Final = 1
_TFD_NONBLOCK: Final = os.O_NONBLOCK
_TFD_CLOEXEC: Final = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


class OneShot:
    """A timerfd that `arm` sets to become readable once, `seconds` from now; `clear`
    consumes the expiry. The owner waits with trio.lowlevel.wait_readable(fd) and closes it
    with `close`."""

    __slots__ = ("_spec", "fd")

    def __init__(self, seconds: float) -> None:
        fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self.fd: int = fd
        whole = int(seconds)
        value = _Timespec(whole, max(int((seconds - whole) * 1e9), 1))  # 0 would disarm
        self._spec = _Itimerspec(_Timespec(0, 0), value)

    def arm(self) -> None:
        if _libc.timerfd_settime(self.fd, 0, ctypes.byref(self._spec), None) < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
