"""Open a directory beneath another one without a race: no symlink, `..` or magic link may
lead the lookup out of the root, whatever is renamed while it runs.

Resolving a path to a string first (realpath) and opening the string afterwards is a race:
any component can be swapped for a symlink to elsewhere in between (`renameat2` with
RENAME_EXCHANGE makes the swap atomic). A red team ran 313 of 10,001 spawns outside the root
that way. Here the kernel does the whole lookup relative to an open descriptor of the root:

- `openat2(root_fd, path, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` (Linux 5.6+) fails with
  EXDEV when the lookup would leave the root at any step: an absolute symlink, `..` above
  the root, a rename racing a `..` (the kernel retries or refuses);
- without openat2, a walk one component at a time from the root descriptor, each opened with
  O_NOFOLLOW; a symlink's target is read and spliced into the rest of the walk (an absolute
  one leaves the root), and `..` goes back to the descriptor the walk came from, never
  through the directory's current parent.

Neither can stop a directory that was already reached from being moved out of the root
afterwards (that needs write access outside the root); `real_path` says where a descriptor
really is, so callers decide from the descriptor, not from the name they asked for.
"""

from __future__ import annotations

import errno
import os
import platform
import stat
from collections import deque
from typing import Final

from . import libc

__all__ = ["EscapesRoot", "open_beneath", "openat2_supported", "real_path"]

_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_BENEATH: Final = 0x08
_MAX_SYMLINKS: Final = 40  # the kernel's own limit (ELOOP beyond)
_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_STEP_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class EscapesRoot(OSError):
    """The path leads out of the root (EXDEV, as openat2 reports it)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EXDEV, "leads out of the root", path)


def _openat2(dir_fd: int, path: str) -> int:
    resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
    while True:
        try:
            return libc.openat2(dir_fd, os.fsencode(path), flags=_DIRECTORY_FLAGS, resolve=resolve)
        except InterruptedError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EAGAIN, errno.ELOOP):
                # EAGAIN: a rename raced a `..` step and the kernel could not prove the
                # lookup stayed inside. ELOOP: a magic link (/proc/self/cwd) or a real loop;
                # the walk treats a magic link as the absolute link it reads as. Either way
                # the caller opens the path as one that leaves the root (a real loop then
                # fails there).
                raise EscapesRoot(path) from exc
            raise OSError(exc.errno, exc.strerror, path) from exc


def _probe_openat2() -> bool:
    if platform.system() != "Linux":
        return False
    root = os.open("/", _DIRECTORY_FLAGS)
    try:
        os.close(_openat2(root, "."))
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM):  # old kernel, or a seccomp filter
            return False
        raise
    finally:
        os.close(root)
    return True


def openat2_supported() -> bool:
    """Whether this kernel has openat2 (decided once)."""
    global _HAS_OPENAT2
    if _HAS_OPENAT2 is None:
        _HAS_OPENAT2 = _probe_openat2()
    return _HAS_OPENAT2


_HAS_OPENAT2: bool | None = None


def _walk(root_fd: int, path: str) -> int:
    """The fallback: one O_NOFOLLOW step at a time from the root descriptor."""
    if path.startswith("/"):
        raise EscapesRoot(path)
    if "\0" in path:
        raise ValueError("embedded null byte")
    stack = [os.dup(root_fd)]  # the directories walked down through, the root first
    try:
        parts = deque(path.split("/"))
        links = 0
        while parts:
            name = parts.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) == 1:
                    raise EscapesRoot(path)
                os.close(stack.pop())  # back where we came from, not the current parent
                continue
            fd = os.open(name, _STEP_FLAGS, dir_fd=stack[-1])
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                os.close(fd)
                links += 1
                if links > _MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                target = os.readlink(name, dir_fd=stack[-1])
                if target.startswith("/"):
                    raise EscapesRoot(path)
                parts.extendleft(reversed(target.split("/")))
                continue
            if not stat.S_ISDIR(mode):
                os.close(fd)
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            stack.append(fd)
        return os.open(".", _DIRECTORY_FLAGS, dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)


def open_beneath(root_fd: int, path: str) -> int:
    """Open `path` (relative to the directory `root_fd`) as a directory, O_RDONLY and
    close-on-exec, resolving every component beneath that directory. Raises `EscapesRoot`
    when the lookup would leave it, OSError for a missing, non-directory or unreadable path.
    Uses openat2 when the kernel has it, else the walk (tests run both)."""
    return _openat2(root_fd, path) if openat2_supported() else _walk(root_fd, path)


def real_path(fd: int) -> str:
    """Where the directory behind `fd` is now (the kernel's name for it), or ENOENT when it
    was removed."""
    path = os.readlink(f"/proc/self/fd/{fd}")
    if not path.startswith("/") or path.endswith(" (deleted)"):
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return path
