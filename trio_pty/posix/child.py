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

The functions come from the C library (`posix/libc.py`): the standard library's
`os.posix_spawn` has neither `fchdir` nor `closefrom` file actions. They need glibc 2.34
(`posix_spawn_file_actions_addclosefrom_np`): `open_manager` refuses to start without them
(`libc.require_spawn_support`), and `start_leader` raises OSError(ENOSYS).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping, Sequence

import trio

from . import libc

_ATTRIBUTES: libc.SpawnAttributes | None = None
"""The same for every child (read-only to posix_spawn): made at the first start."""


def start_leader(
    executable: str, argv: Sequence[str], env: Mapping[str, str], *, tty: int, cwd_fd: int
) -> Child:
    """Run `executable` (a path; relative ones count from the workdir) with `argv` and
    exactly `env`, as the leader of a new session whose controlling tty is the slave `tty`,
    in the directory `cwd_fd`. Raises OSError with the reason the exec failed."""
    global _ATTRIBUTES
    with libc.FileActions() as actions:
        actions.open(0, f"/proc/self/fd/{tty}".encode(), os.O_RDWR)
        actions.dup2(0, 1)
        actions.dup2(0, 2)
        actions.fchdir(cwd_fd)
        actions.closefrom(3)
        if _ATTRIBUTES is None:
            _ATTRIBUTES = libc.SpawnAttributes()
        pid = libc.posix_spawn(
            os.fsencode(executable),
            [os.fsencode(arg) for arg in argv],
            [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()],
            actions,
            _ATTRIBUTES,
        )
    try:
        return Child(pid)
    except OSError:  # no descriptor for the pidfd: our unreaped child, so the pid is safe
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise


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
