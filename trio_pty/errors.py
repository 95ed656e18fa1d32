"""One hierarchy of errors, each with a stable `kind` that the RPC layer maps to a code.

`details()` carries the structured facts a caller needs to act (the live ids when a limit is
hit, the bytes that went in before a write timed out); the message repeats them for people.

Two helpers every layer that reports errors shares: `json_type_name` (how a JSON client names
a value's type, for "expected string, got integer") and `unwrap_group` (the one exception
inside the groups trio's nurseries wrap it in, its own cause and context kept).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar, Final

#: errno values that say the machine is out of descriptors or memory: never the caller's
#: fault, so never reported as bad input (and never taken to mean "that process is gone").
OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


class PtyError(Exception):
    """Base of every error trio-pty raises on purpose."""

    kind: ClassVar[str] = "pty_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self._details = details

    def details(self) -> dict[str, Any]:
        """Structured facts about the failure, JSON-friendly."""
        return dict(self._details)


class SessionNotFound(PtyError):
    """No such session, or one that belongs to another owner (reported identically)."""

    kind = "session_not_found"

    def __init__(self, session_id: str, *, evicted: bool = False) -> None:
        if evicted:  # its owner's: it ended, and was removed to make room for a new one
            super().__init__(
                f"PTY session not found: {session_id} ended and was evicted to make room "
                "for newer sessions",
                id=session_id,
                evicted=True,
            )
        else:
            super().__init__(f"PTY session not found: {session_id}", id=session_id)


class LimitExceeded(PtyError):
    kind = "limit_exceeded"

    def __init__(self, message: str, *, live_ids: list[str]) -> None:
        super().__init__(message, live_ids=live_ids)
        self.live_ids = live_ids


class OwnerDeleted(PtyError):
    kind = "owner_deleted"

    def __init__(self, owner: str) -> None:
        super().__init__(f"Owner has been deleted: {owner}", owner=owner)


class ManagerClosing(PtyError):
    kind = "closing"

    def __init__(self) -> None:
        super().__init__("The PTY manager is shutting down")


class Draining(PtyError):
    """The server is draining (a rolling update): it refuses new sessions, and stops once
    its running sessions have ended or the drain's deadline has passed."""

    kind = "draining"

    def __init__(self, remaining: float) -> None:
        super().__init__(
            f"The server is draining: no new sessions here (it stops within {remaining:.0f} s)",
            drain_remaining_s=remaining,
        )


class SpawnFailed(PtyError):
    kind = "spawn_failed"

    def __init__(self, message: str, *, command: str) -> None:
        super().__init__(message, command=command)


class NotRunning(PtyError):
    kind = "not_running"

    def __init__(
        self,
        session_id: str,
        *,
        status: str,
        exit_code: int | None,
        exit_signal: int | None,
    ) -> None:
        if status == "exited":
            how = (
                f"exited on signal {exit_signal}"
                if exit_signal is not None
                else f"exited with code {exit_code}"
            )
        else:
            how = "was killed" if status == "killed" else "is being killed"
        super().__init__(
            f"PTY session {session_id} is not running: it {how}",
            id=session_id,
            status=status,
            exit_code=exit_code,
            exit_signal=exit_signal,
        )


class WriteTimeout(PtyError):
    kind = "write_timeout"

    def __init__(
        self, session_id: str, *, bytes_written: int, total_bytes: int, timeout: float
    ) -> None:
        super().__init__(
            f"Write to PTY session {session_id} timed out after {timeout:g} s: "
            f"{bytes_written} of {total_bytes} bytes went in (is the program reading its input?)",
            id=session_id,
            bytes_written=bytes_written,
            total_bytes=total_bytes,
        )
        self.bytes_written = bytes_written


class Busy(PtyError):
    """A shell session is still running a command: `run` does not queue behind it."""

    kind = "busy"

    def __init__(self, session_id: str, *, number: int, command: str) -> None:
        shown = command if len(command) <= 80 else command[:79] + "…"
        super().__init__(
            f"PTY session {session_id} is busy: command {number} ({shown!r}) is still "
            "running. Wait for it (read with wait=Wait(prompt=True)), write its input or "
            "Ctrl-C (\\x03 with escapes), then run again.",
            id=session_id,
            number=number,
            command=command,
        )
        self.number = number


class InvalidInput(PtyError):
    kind = "invalid_input"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", field=field)
        self.field = field


class PermissionDenied(PtyError):
    kind = "permission_denied"

    def __init__(
        self, permission: str, resource: str, reason: str = "", *, message: str | None = None
    ) -> None:
        if message is None:
            message = f"Permission denied: {permission} {resource}"
            if reason:
                message = f"{message} ({reason})"
        super().__init__(message, permission=permission, resource=resource)


def json_type_name(value: object) -> str:
    """Name a value's type the way a JSON client thinks of it. Integers and other numbers are
    told apart, since "expected integer, got number" is what a client needs to read."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def single_exception(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (trio wraps what is raised in a
    nursery), or `exc` itself when it is not such a group."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@contextmanager
def unwrap_group() -> Iterator[None]:
    """Let the one exception out of a group raised in the block as itself, so callers can
    catch what they know. Its own `__cause__` and `__context__` are kept (re-raising it here
    would otherwise make the group its context); a group of several stays a group."""
    try:
        yield
    except BaseExceptionGroup as group:
        inner = single_exception(group)
        if inner is group:
            raise
        context = inner.__context__
        try:
            raise inner  # its own cause and context, as raised
        finally:
            inner.__context__ = context
            del inner, group
