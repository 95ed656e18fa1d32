"""Every C library function the package calls through ctypes, bound once and typed.

Each binding declares its argument and result types (a function without `argtypes` takes
whatever Python passes as C `int`, so a pointer or a `long` is cut short without a word), and
each wrapper checks the result: errno (read through `use_errno`, never a stale global) or the
returned error number becomes `OSError(errno, strerror)`. Other modules call these wrappers
and never import ctypes.

Why ctypes at all: the standard library's `os.posix_spawn` has neither the fchdir nor the
closefrom file action (glibc 2.34), Python has `os.timerfd_create` only from 3.13, and has
no `prctl` or `openat2`. Functions that a C library may lack (the posix_spawn extensions)
are looked up without failing the import: `require_spawn_support` says which one is missing,
and `open_manager` calls it first.

Standard library only: the keeper (`posix/keeper.py`) runs this module without the package.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

_libc = ctypes.CDLL(None, use_errno=True)

_int, _uint, _long, _ulong = ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_ulong
_pointer, _string = ctypes.c_void_p, ctypes.c_char_p


def _bind(name: str, restype: Any, *argtypes: Any) -> Any:
    """A function of its own (`_libc[name]` is a new object each time, so declaring its
    types here changes no other binding of the same symbol); None when the C library does
    not have it."""
    try:
        function = _libc[name]
    except AttributeError:
        return None
    function.restype = restype
    function.argtypes = argtypes
    return function


def _raise_errno(what: str) -> NoReturn:
    code = ctypes.get_errno()
    raise OSError(code, f"{what}: {os.strerror(code)}")


def _check_result(result: int, what: str) -> None:
    """For the functions that return an error number instead of setting errno."""
    if result != 0:
        raise OSError(result, f"{what}: {os.strerror(result)}")


# ------------------------------------------------------------------------ prctl

# int prctl(int option, ...): variadic, called here with four unsigned longs (what the kernel
# reads; a pointer travels as its address).
_prctl = _bind("prctl", _int, _int, _ulong, _ulong, _ulong, _ulong)


def prctl(option: int, argument: int = 0) -> int:
    """prctl(option, argument, 0, 0, 0); its result, OSError on failure."""
    result: int = _prctl(option, argument, 0, 0, 0)
    if result < 0:
        _raise_errno(f"prctl({option})")
    return result


def prctl_read_int(option: int) -> int:
    """prctl(option, &value): for the options that answer through an int pointer."""
    value = ctypes.c_int(0)
    if _prctl(option, ctypes.addressof(value), 0, 0, 0) < 0:
        _raise_errno(f"prctl({option})")
    return value.value


# ------------------------------------------------------------------------ timerfd


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class Itimerspec(ctypes.Structure):
    """struct itimerspec: built once by `one_shot`, passed to `timerfd_settime` each time."""

    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


_timerfd_create = _bind("timerfd_create", _int, _int, _int)
_timerfd_settime = _bind(
    "timerfd_settime", _int, _int, _int, ctypes.POINTER(Itimerspec), ctypes.POINTER(Itimerspec)
)


def timerfd_create(clock: int, flags: int) -> int:
    fd: int = _timerfd_create(clock, flags)
    if fd < 0:
        _raise_errno("timerfd_create")
    return fd


def one_shot(seconds: float) -> Itimerspec:
    """Expire once, `seconds` from when it is set (at least 1 ns: zero would disarm)."""
    whole = int(seconds)
    value = _Timespec(whole, max(int((seconds - whole) * 1e9), 1))
    return Itimerspec(_Timespec(0, 0), value)


def timerfd_settime(fd: int, spec: Itimerspec) -> None:
    """Arm `fd` with `spec`, relative to now."""
    if _timerfd_settime(fd, 0, spec, None) < 0:
        _raise_errno("timerfd_settime")


# ------------------------------------------------------------------------ openat2


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


# openat2 has no glibc wrapper: syscall(2), variadic, with openat2's own argument types. It
# has the same number on every architecture that has it (the unified table, 5.6).
_SYS_OPENAT2: Final = 437
_syscall_openat2 = _bind(
    "syscall", _long, _long, _int, _string, ctypes.POINTER(_OpenHow), ctypes.c_size_t
)


def openat2(dir_fd: int, path: bytes, *, flags: int, resolve: int) -> int:
    """openat2(dir_fd, path, {flags, 0, resolve}); the new descriptor, OSError (errno as
    the kernel set it, EINTR included: the caller decides) on failure."""
    if b"\0" in path:
        raise ValueError("embedded null byte")
    how = _OpenHow(flags, 0, resolve)
    fd: int = _syscall_openat2(_SYS_OPENAT2, dir_fd, path, how, ctypes.sizeof(how))
    if fd < 0:
        _raise_errno("openat2")
    return fd


# ------------------------------------------------------------------------ posix_spawn

# <spawn.h> (glibc, Linux): the attribute flags.
SPAWN_SETSIGDEF: Final = 0x04
SPAWN_SETSIGMASK: Final = 0x08
SPAWN_SETSID: Final = 0x80
# Larger than glibc's posix_spawn_file_actions_t (80 bytes) and posix_spawnattr_t (336) on
# every architecture: the C functions initialize them in place. glibc's sigset_t is 1024 bits.
_STRUCT_BYTES: Final = 1024
_SIGSET_BYTES: Final = 128

SPAWN_EXTENSIONS: Final = (
    "posix_spawn_file_actions_addfchdir_np",
    "posix_spawn_file_actions_addclosefrom_np",
)
"""What `start_leader` needs beyond POSIX: glibc 2.34 added both."""

_spawn = _bind("posix_spawn", _int, _pointer, _string, _pointer, _pointer, _pointer, _pointer)
_attr_init = _bind("posix_spawnattr_init", _int, _pointer)
_attr_setsigdefault = _bind("posix_spawnattr_setsigdefault", _int, _pointer, _pointer)
_attr_setsigmask = _bind("posix_spawnattr_setsigmask", _int, _pointer, _pointer)
_attr_setflags = _bind("posix_spawnattr_setflags", _int, _pointer, ctypes.c_short)
_actions_init = _bind("posix_spawn_file_actions_init", _int, _pointer)
_actions_destroy = _bind("posix_spawn_file_actions_destroy", _int, _pointer)
_actions_addopen = _bind(
    "posix_spawn_file_actions_addopen", _int, _pointer, _int, _string, _int, _uint
)
_actions_adddup2 = _bind("posix_spawn_file_actions_adddup2", _int, _pointer, _int, _int)
_actions_addfchdir = _bind("posix_spawn_file_actions_addfchdir_np", _int, _pointer, _int)
_actions_addclosefrom = _bind("posix_spawn_file_actions_addclosefrom_np", _int, _pointer, _int)


class MissingLibcFunction(RuntimeError):
    """The C library lacks a function trio-pty needs: every spawn would fail."""


def require_spawn_support(has: Callable[[str], bool] | None = None) -> None:
    """Raise MissingLibcFunction naming the first posix_spawn function this C library
    lacks (`has` looks a name up; by default, in the C library the process runs on)."""
    has = has or _has
    for name in ("posix_spawn", *SPAWN_EXTENSIONS):
        if not has(name):
            raise MissingLibcFunction(
                f"the C library has no {name}: trio-pty starts sessions with posix_spawn "
                "and its fchdir and closefrom file actions, which need glibc 2.34+"
            )


def _has(name: str) -> bool:
    try:
        _libc[name]
    except AttributeError:
        return False
    return True


def _supported() -> bool:
    return None not in (_spawn, _actions_addfchdir, _actions_addclosefrom)


class SpawnAttributes:
    """A posix_spawnattr_t that starts the child in a new session (setsid) with every signal
    at its default action and an empty signal mask. Read-only to posix_spawn: make it once."""

    def __init__(self) -> None:
        self.struct = ctypes.create_string_buffer(_STRUCT_BYTES)
        # Every bit set, not sigfillset(): that leaves out glibc's two internal signals (32
        # and 33), which the child would then set to *ignored*, and an ignored signal
        # survives exec.
        every = ctypes.create_string_buffer(b"\xff" * _SIGSET_BYTES, _SIGSET_BYTES)
        none = ctypes.create_string_buffer(_SIGSET_BYTES)
        _check_result(_attr_init(self.struct), "posix_spawnattr_init")
        _check_result(_attr_setsigdefault(self.struct, every), "posix_spawnattr_setsigdefault")
        _check_result(_attr_setsigmask(self.struct, none), "posix_spawnattr_setsigmask")
        flags = SPAWN_SETSID | SPAWN_SETSIGDEF | SPAWN_SETSIGMASK
        _check_result(_attr_setflags(self.struct, flags), "posix_spawnattr_setflags")


class FileActions:
    """A posix_spawn_file_actions_t, destroyed when the `with` block ends."""

    def __init__(self) -> None:
        if not _supported():
            raise OSError(errno.ENOSYS, "posix_spawn with fchdir and closefrom (glibc 2.34+)")
        self.struct = ctypes.create_string_buffer(_STRUCT_BYTES)
        _check_result(_actions_init(self.struct), "posix_spawn_file_actions_init")

    def __enter__(self) -> FileActions:
        return self

    def __exit__(self, *_: object) -> None:
        _actions_destroy(self.struct)

    def open(self, fd: int, path: bytes, flags: int, mode: int = 0) -> None:
        result = _actions_addopen(self.struct, fd, path, flags, mode)
        _check_result(result, "posix_spawn_file_actions_addopen")

    def dup2(self, fd: int, new_fd: int) -> None:
        _check_result(_actions_adddup2(self.struct, fd, new_fd), "posix_spawn_file_actions_adddup2")

    def fchdir(self, fd: int) -> None:
        result = _actions_addfchdir(self.struct, fd)
        _check_result(result, "posix_spawn_file_actions_addfchdir_np")

    def closefrom(self, low_fd: int) -> None:
        result = _actions_addclosefrom(self.struct, low_fd)
        _check_result(result, "posix_spawn_file_actions_addclosefrom_np")


def posix_spawn(
    path: bytes,
    argv: Sequence[bytes],
    envp: Sequence[bytes],
    actions: FileActions,
    attributes: SpawnAttributes,
) -> int:
    """Start `path` with exactly `argv` and `envp`; its pid. OSError with the reason the
    exec failed (glibc reports it: the child runs on CLONE_VFORK)."""
    if b"\0" in path:
        raise ValueError(f"embedded NUL in {path[:40]!r}")
    arguments, environment = _strings(argv), _strings(envp)
    pid = ctypes.c_int()
    result = _spawn(
        ctypes.byref(pid), path, actions.struct, attributes.struct, arguments, environment
    )
    if result != 0:
        raise OSError(result, os.strerror(result))
    return pid.value


def _strings(items: Sequence[bytes]) -> ctypes.Array[ctypes.c_char_p]:
    """A NULL-terminated array of C strings. A NUL inside one would silently cut it short
    (the manager refuses NUL in every text it is given; this keeps the promise here too)."""
    for item in items:
        if b"\0" in item:
            raise ValueError(f"embedded NUL in {item[:40]!r}")
    return (ctypes.c_char_p * (len(items) + 1))(*items, None)
