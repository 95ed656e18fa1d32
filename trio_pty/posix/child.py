"""Start a session leader with its PTY as controlling tty in one exec, and wait for it.

Why not `subprocess` (trio's `open_process`): it cannot make the child take a controlling
tty, so the child had to exec util-linux `setsid -c` first (+0.9 ms to the first byte of
`sh -c 'echo ready'`), after the Popen machinery in a worker thread (+0.4 ms); together
2.3x the bare `open_process` floor. glibc's `posix_spawn` does all of it in the child, in
this order, before the one exec:

1. `setsid()` (POSIX_SPAWN_SETSID): a new session and process group, no controlling tty;
2. every signal back to its default action and an empty signal mask (SETSIGDEF, SETSIGMASK):
   ignored signals and the mask survive exec, and a shell in the PTY of a server started by
   `nohup` would otherwise ignore Ctrl-C (it cannot even trap a signal ignored on entry);
3. open the slave again through `/proc/self/fd/N` as fd 0, without O_NOCTTY: a session
   leader without a controlling tty that opens a tty with no session takes it as its
   controlling tty (Linux); then fds 1 and 2 are copies of it;
4. `fchdir` to the opened workdir (no path is looked up again after authorization);
5. close every descriptor from 3 up (what `close_fds=True` did): nothing of ours leaks,
   whatever a library in this process opened without O_CLOEXEC.

glibc runs the child on `clone(CLONE_VM | CLONE_VFORK)`: no page tables are copied, so the
cost stays flat however much memory the process holds, and the parent resumes once the child
has exec'd (an exec failure comes back as the call's error). The call blocks the event loop
for that moment, ~0.1-0.3 ms, less than handing Popen to a worker thread cost.

The functions come from the C library through ctypes: the standard library's
`os.posix_spawn` has neither `fchdir` nor `closefrom` file actions. They need glibc 2.34
(`posix_spawn_file_actions_addclosefrom_np`); without them `start_leader` raises
OSError(ENOSYS), which the spawn reports as SpawnFailed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
from collections.abc import Mapping, Sequence
from typing import Final

import trio

# <spawn.h> (glibc, Linux): the attribute flags.
_SETSIGDEF: Final = 0x04
_SETSIGMASK: Final = 0x08
_SETSID: Final = 0x80
# Larger than glibc's posix_spawn_file_actions_t (80 bytes) and posix_spawnattr_t (336) on
# every architecture: the C functions initialize them in place. glibc's sigset_t is 1024 bits.
_STRUCT_BYTES: Final = 1024
_SIGSET_BYTES: Final = 128


def _bind() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        functions = (
            libc.posix_spawn,
            libc.posix_spawn_file_actions_addclosefrom_np,
            libc.posix_spawn_file_actions_addfchdir_np,
        )
    except (OSError, AttributeError):
        return None
    pointer, string, number = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    libc.posix_spawn.argtypes = [pointer, string, pointer, pointer, pointer, pointer]
    libc.posix_spawn_file_actions_addopen.argtypes = [pointer, number, string, number, number]
    libc.posix_spawn_file_actions_adddup2.argtypes = [pointer, number, number]
    libc.posix_spawn_file_actions_addfchdir_np.argtypes = [pointer, number]
    libc.posix_spawn_file_actions_addclosefrom_np.argtypes = [pointer, number]
    libc.posix_spawnattr_setflags.argtypes = [pointer, ctypes.c_short]
    for function in functions:
        function.restype = number
    return libc


_libc = _bind()


def _attributes(libc: ctypes.CDLL) -> ctypes.Array[ctypes.c_char]:
    """The same for every child (read-only to posix_spawn): made once."""
    attributes = ctypes.create_string_buffer(_STRUCT_BYTES)
    # Every bit set, not sigfillset(): that leaves out glibc's two internal signals (32 and
    # 33), which the child would then set to *ignored*, and an ignored signal survives exec.
    every = ctypes.create_string_buffer(b"\xff" * _SIGSET_BYTES, _SIGSET_BYTES)
    none = ctypes.create_string_buffer(_SIGSET_BYTES)
    _check(libc.posix_spawnattr_init(attributes))
    _check(libc.posix_spawnattr_setsigdefault(attributes, every))
    _check(libc.posix_spawnattr_setsigmask(attributes, none))
    _check(libc.posix_spawnattr_setflags(attributes, _SETSID | _SETSIGDEF | _SETSIGMASK))
    return attributes


def _check(result: int) -> None:
    if result != 0:
        raise OSError(result, os.strerror(result))


_ATTRIBUTES = _attributes(_libc) if _libc is not None else None


def start_leader(
    executable: str, argv: Sequence[str], env: Mapping[str, str], *, tty: int, cwd_fd: int
) -> Child:
    """Run `executable` (a path; relative ones count from the workdir) with `argv` and
    exactly `env`, as the leader of a new session whose controlling tty is the slave `tty`,
    in the directory `cwd_fd`. Raises OSError with the reason the exec failed."""
    if _libc is None or _ATTRIBUTES is None:
        raise OSError(errno.ENOSYS, "posix_spawn with fchdir and closefrom (glibc >= 2.34)")
    actions = ctypes.create_string_buffer(_STRUCT_BYTES)
    _check(_libc.posix_spawn_file_actions_init(actions))
    try:
        slave = f"/proc/self/fd/{tty}".encode()
        _check(_libc.posix_spawn_file_actions_addopen(actions, 0, slave, os.O_RDWR, 0))
        _check(_libc.posix_spawn_file_actions_adddup2(actions, 0, 1))
        _check(_libc.posix_spawn_file_actions_adddup2(actions, 0, 2))
        _check(_libc.posix_spawn_file_actions_addfchdir_np(actions, cwd_fd))
        _check(_libc.posix_spawn_file_actions_addclosefrom_np(actions, 3))
        args = _strings([os.fsencode(arg) for arg in argv])
        environ = _strings([os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()])
        pid = ctypes.c_int()
        _check(
            _libc.posix_spawn(
                ctypes.byref(pid), os.fsencode(executable), actions, _ATTRIBUTES, args, environ
            )
        )
    finally:
        _libc.posix_spawn_file_actions_destroy(actions)
    try:
        return Child(pid.value)
    except OSError:  # no descriptor for the pidfd: our unreaped child, so the pid is safe
        os.kill(pid.value, signal.SIGKILL)
        os.waitpid(pid.value, 0)
        raise


def _strings(items: list[bytes]) -> ctypes.Array[ctypes.c_char_p]:
    """A NULL-terminated array of C strings. A NUL inside one would silently cut it short
    (the manager refuses NUL in every text it is given; this keeps the promise here too)."""
    for item in items:
        if b"\0" in item:
            raise ValueError(f"embedded NUL in {item[:40]!r}")
    return (ctypes.c_char_p * (len(items) + 1))(*items, None)


class Child:
    """A child we started and must reap: what the session needs of `trio.Process` (pid,
    returncode, wait, send_signal), on a pidfd. The pidfd is opened while the child is
    unreaped, so it names that process and no other; it is closed once the child is reaped.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._returncode: int | None = None
        self._pidfd: int | None = os.pidfd_open(pid)
        self._wait_lock = trio.Lock()

    @property
    def returncode(self) -> int | None:
        """None while it runs; reaps it (without blocking) once it has exited, like
        `Popen.returncode`: negative for a signal."""
        if self._returncode is None:
            self._reap(os.WNOHANG)
        return self._returncode

    async def wait(self) -> int:
        """Wait until it has exited, reap it, return its returncode (any number of tasks)."""
        async with self._wait_lock:
            if self.returncode is None:
                assert self._pidfd is not None
                # Closed: reaped meanwhile, through `returncode`.
                with contextlib.suppress(trio.ClosedResourceError):
                    await trio.lowlevel.wait_readable(self._pidfd)
                if self._returncode is None:
                    self._reap(0)
            else:
                await trio.lowlevel.checkpoint()
        assert self._returncode is not None
        return self._returncode

    def send_signal(self, sig: int) -> None:
        """Signal it through the pidfd (never a recycled pid); nothing once it is reaped."""
        if self._pidfd is None:
            return
        with contextlib.suppress(ProcessLookupError):  # a zombie: nobody to reach
            signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _reap(self, options: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:
            # Reaped by someone else (an embedding program's waitpid(-1)): the status is
            # lost; 0, as Popen says then.
            pid, status = self.pid, 0
        if pid == 0:
            return
        self._returncode = os.waitstatus_to_exitcode(status)
        pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            trio.lowlevel.notify_closing(pidfd)
            os.close(pidfd)
