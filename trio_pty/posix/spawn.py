"""Open a PTY and start a child on it as a session leader with the PTY as controlling tty.

The start itself is `child.start_leader` (glibc posix_spawn: setsid, default signal
handling, the slave reopened as controlling tty, fchdir to the opened workdir, every other
descriptor closed, then one exec). Why not `preexec_fn`: it forces CPython's fork path
(2.6x slower than vfork, and 19 ms instead of 1.4 ms once the parent holds 512 MB). Why no
longer util-linux `setsid -c` in front of the command: that exec and the Popen machinery
around it were 1.3 ms of a 3 ms spawn.

The child starts in an already opened directory (`fchdir` on its descriptor): the path is
the open handle itself, not a name looked up again after authorization.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import termios
from collections.abc import Mapping, Sequence

from ..errors import SpawnFailed
from .child import Child, start_leader

_IUTF8 = 0o40000  # Linux value; termios only exports it from Python 3.12


def open_pty(rows: int, cols: int) -> tuple[int, int]:
    """Return (master, slave): both close-on-exec, master non-blocking, window size set.

    The slave gets IUTF8 so that the line discipline erases whole UTF-8 characters.
    """
    master, slave = os.openpty()
    try:
        os.set_blocking(master, False)
        set_window_size(master, rows, cols)
        attributes = termios.tcgetattr(slave)
        attributes[0] |= _IUTF8
        termios.tcsetattr(slave, termios.TCSANOW, attributes)
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    return master, slave


def set_window_size(fd: int, rows: int, cols: int) -> None:
    """Set the PTY window size; the kernel sends SIGWINCH to the foreground process group."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def foreground_group(master: int) -> int | None:
    """The tty's foreground process group, or None when the session has no controlling tty."""
    try:
        pgid = os.tcgetpgrp(master)
    except OSError:
        return None
    return pgid if pgid > 1 else None


def spawn_failed(command: str, exc: OSError) -> SpawnFailed:
    """The SpawnFailed for an OS error while starting `command`, naming the reason."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        reason = f"{reason} (file descriptor limit reached)"
    return SpawnFailed(f"Cannot run {command}: {reason}", command=command)


def resolve_command(command: str, *, path: str, cwd: str, absolute_dirs_only: bool = False) -> str:
    """Find the executable the way execvp would, so that a bad command fails here, with the
    OS reason and a message about the command, before anything is started.

    `absolute_dirs_only` skips empty and relative PATH entries: they name directories below
    the workdir, which a client may be able to fill (used when the result is what runs)."""
    if "/" in command:
        candidate = os.path.join(cwd, command)
        _check_executable(candidate, command)
        return candidate
    reasons: list[str] = []
    for directory in path.split(os.pathsep):
        if absolute_dirs_only and not os.path.isabs(directory):
            continue
        candidate = os.path.join(directory or ".", command)
        if not os.path.isabs(candidate):
            candidate = os.path.join(cwd, candidate)
        if not os.path.lexists(candidate):
            continue  # one lstat for each directory without it, and no exception
        try:
            _check_executable(candidate, command)
        except SpawnFailed as failure:
            reasons.append(failure.message)
            continue
        return candidate
    if reasons:
        raise SpawnFailed(reasons[0], command=command)
    # Not naming the directories searched: the server's PATH is no business of a client's.
    raise SpawnFailed(f"Command not found: {command} (not on the session's PATH)", command=command)


def _check_executable(candidate: str, command: str) -> None:
    try:
        info = os.stat(candidate)
    except OSError as exc:
        raise SpawnFailed(f"Cannot run {command}: {exc.strerror}", command=command) from None
    if stat.S_ISDIR(info.st_mode):
        raise SpawnFailed(f"Cannot run {command}: it is a directory", command=command)
    if not os.access(candidate, os.X_OK):
        raise SpawnFailed(f"Cannot run {command}: permission denied", command=command)


def start_child(
    command: str,
    argv: Sequence[str],
    *,
    slave: int,
    env: Mapping[str, str],
    cwd_fd: int,
) -> Child:
    """Start `argv` as a session leader whose controlling tty is `slave`, in the directory
    `cwd_fd`, with exactly `env` (`command` is the user's command, for messages).

    `argv[0]` is looked up in `env`'s PATH as execvp would (relative entries count from the
    workdir), and the program sees it as given. Call `resolve_command` first for the
    message a bad command deserves. A sandbox's argv goes here as it is: the pid we hold
    is the session leader whatever the sandbox runs inside it.
    """
    executable = _executable(argv[0], env.get("PATH", os.defpath), cwd_fd)
    if executable is None:
        raise SpawnFailed(
            f"Command not found: {command} (not on the session's PATH)", command=command
        )
    try:
        return start_leader(executable, argv, env, tty=slave, cwd_fd=cwd_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT and _exists(executable, cwd_fd):
            # The file is there: what exec did not find is the interpreter its #! line names.
            message = f"Cannot run {command}: its interpreter (the #! line) was not found"
            raise SpawnFailed(message, command=command) from None
        raise spawn_failed(command, exc) from None


def _exists(path: str, cwd_fd: int) -> bool:
    try:
        os.stat(path, dir_fd=cwd_fd)
    except OSError:
        return False
    return True


def _executable(name: str, path: str, cwd_fd: int) -> str | None:
    """What execvp would run for `name`: itself when it holds a slash, else the first
    executable non-directory along `path`; relative results count from `cwd_fd`, as the
    child resolves them after its fchdir."""
    if "/" in name:
        return name
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        try:
            info = os.stat(candidate, dir_fd=cwd_fd)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) and os.access(candidate, os.X_OK, dir_fd=cwd_fd):
            return candidate
    return None
