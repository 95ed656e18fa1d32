"""Keep this process's memory, environment and descriptors out of its children's reach.

Every session's leader is a child of the process that runs the manager, so a command in a
session can read `/proc/$PPID/environ` (the environment this process was started with: every
secret the environment filter keeps from the child, the server's token), `/proc/$PPID/mem`
and follow `/proc/$PPID/fd/N` (its sockets and files) whenever the kernel lets it ptrace-read
its parent. For a child of the same uid that check passes, unless the parent is not
*dumpable*: then the kernel requires CAP_SYS_PTRACE (in the parent's user namespace) as well,
and the /proc files of the parent belong to root.

What that covers, measured on Linux 6.18 (tests/test_security_hardening.py):

- parent and children run as the same non-root uid: environ, mem, maps, cwd and every fd
  entry are refused (EACCES) once the parent is non-dumpable; all of them are readable before;
- the children run as root with CAP_SYS_PTRACE (the default for root): nothing is refused;
  root bypasses this check by design. Run the server as an unprivileged user, or give the
  sessions a sandbox with its own PID namespace, where the parent is not visible at all;
- root without CAP_SYS_PTRACE: mem, cwd and fd links are refused, environ and maps are not.

Exec resets the flag (the new program is dumpable again, unless setuid), and so does any
change of this process's uids, gids or capabilities (the kernel then applies the
`fs.suid_dumpable` sysctl): call `harden_process` again after dropping privileges, and check
with `is_dumpable`. Side effects for the process itself: no core dumps, and debuggers and
profilers of the same uid (gdb, py-spy) can no longer attach without CAP_SYS_PTRACE.
"""

from __future__ import annotations

from typing import Final

from . import libc

_PR_GET_DUMPABLE: Final = 3
_PR_SET_DUMPABLE: Final = 4


def is_dumpable() -> bool:
    """Whether this process is dumpable (its children of the same uid can read its /proc)."""
    return libc.prctl(_PR_GET_DUMPABLE) != 0


def harden_process() -> None:
    """Make this process non-dumpable, so that children it starts from now on cannot read its
    /proc/PID/environ, mem or fd (see the module docstring for what this does and does not
    cover). Call it once, early, before the first child starts: a descriptor a child opened
    on our /proc files before the call stays usable. Idempotent; raises OSError if the flag
    cannot be set or does not hold."""
    libc.prctl(_PR_SET_DUMPABLE, 0)
    if is_dumpable():
        raise OSError("prctl(PR_SET_DUMPABLE, 0) did not take effect")
