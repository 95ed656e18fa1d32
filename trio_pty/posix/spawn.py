"""Open a PTY and start a child on it as a session leader with the PTY as controlling tty.

Why not `preexec_fn`: it forces CPython's fork path (2.6x slower than vfork, and 19 ms instead
of 1.4 ms once the parent holds 512 MB). Instead the child is started through util-linux
`setsid -c`, a tiny exec'd step that calls setsid() and TIOCSCTTY on its stdin (+0.5 ms).
`setsid` forks when its caller already leads a process group, so we must NOT also pass
`start_new_session=True`: the pid we hold would exit at once and the real child would run
unobserved. The child inherits our process group, so `setsid` does not fork, and the pid we
hold is the session leader (a test checks this).

The child starts in an already opened directory (`cwd=/proc/self/fd/N`): CPython's child
calls chdir() before it closes inherited descriptors, so the path is the open handle itself,
not a name looked up again after authorization.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import signal
import stat
import struct
import subprocess
import termios
from collections.abc import Mapping, Sequence

import trio

from ..errors import SpawnFailed

log = logging.getLogger(__name__)

_SETSID = shutil.which("setsid")
_ENV = shutil.which("env")
# Python ignores these itself; subprocess's restore_signals resets them in the child.
_RESTORED = frozenset({signal.SIGPIPE, signal.SIGXFSZ})
_UNCATCHABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})
_reset_helper: list[str] | None = None  # decided on first need; [] when unavailable
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
    OS reason, instead of as a message from the setsid helper inside the PTY.

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
        try:
            _check_executable(candidate, command)
        except SpawnFailed as failure:
            if os.path.lexists(candidate):
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


async def start_child(
    command: str,
    argv: Sequence[str],
    *,
    slave: int,
    env: Mapping[str, str],
    cwd_fd: int,
) -> trio.Process:
    """Start `argv` as a session leader whose controlling tty is `slave` (`command` is the
    user's command, for messages).

    Call `resolve_command` first: the helper looks `argv[0]` up again in the child's PATH
    (so the program sees argv[0] as given), and reports a failure only inside the PTY. A
    sandbox's argv goes here as it is: the setsid step comes first, so the pid we hold is
    the session leader whatever the sandbox runs inside it.
    """
    if _SETSID is None:
        raise SpawnFailed("util-linux `setsid` is required but not on PATH", command=command)
    argv = [*_signal_reset(), _SETSID, "-c", "--", *argv]
    try:
        return await trio.lowlevel.open_process(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=dict(env),
            cwd=f"/proc/self/fd/{cwd_fd}",
            close_fds=True,
            restore_signals=True,
        )
    except OSError as exc:
        raise spawn_failed(command, exc) from None
    except subprocess.SubprocessError as exc:
        raise SpawnFailed(f"Cannot run {command}: {exc}", command=command) from None


def inherited_ignores() -> list[int]:
    """Signals this process ignores that a child would inherit: an ignored disposition
    survives exec. A server started by `nohup`, or as a background job of a script, ignores
    SIGHUP or SIGINT and SIGQUIT, and its shells would then ignore Ctrl-C (a shell cannot
    even trap a signal ignored on entry)."""
    return [
        sig
        for sig in signal.valid_signals()
        if sig not in _RESTORED
        and sig not in _UNCATCHABLE
        and signal.getsignal(sig) is signal.SIG_IGN
    ]


def _signal_reset() -> list[str]:
    """The exec prefix that gives the child default signal dispositions and an empty signal
    mask (both survive exec), when this thread would pass on anything else; usually nothing,
    and one exec less."""
    global _reset_helper
    passed_on = [*inherited_ignores(), *signal.pthread_sigmask(signal.SIG_BLOCK, ())]
    if not passed_on:
        return []
    if _reset_helper is None:
        _reset_helper = _find_reset_helper()
        if not _reset_helper:
            names = ", ".join(sorted({_signal_name(sig) for sig in passed_on}))
            log.warning(
                "PTY children inherit this process's ignored or blocked %s: GNU `env "
                "--default-signal` (coreutils >= 8.31) is needed to reset them",
                names,
            )
    return _reset_helper


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:  # a real-time signal
        return f"signal {sig}"


def _find_reset_helper() -> list[str]:
    if _ENV is None:
        return []
    try:
        probe = subprocess.run(
            [_ENV, "--default-signal", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [_ENV, "--default-signal", "--"] if probe.returncode == 0 else []
