"""Error codes and error objects: what a JSON-RPC error response says, in numbers and words.

One table maps each `PtyError.kind` to its stable code; clients switch on those numbers (or
on `data.kind`), so once published a code never changes meaning.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Final

import attrs

from trio_pty.errors import PtyError

__all__ = [
    "APPLICATION_ERROR_CODES",
    "BUSY",
    "CLOSING",
    "DRAINING",
    "INTERNAL_ERROR",
    "INVALID_INPUT",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LIMIT_EXCEEDED",
    "METHOD_NOT_FOUND",
    "NOT_RUNNING",
    "OWNER_DELETED",
    "PARSE_ERROR",
    "PERMISSION_DENIED",
    "PTY_ERROR",
    "REQUEST_CANCELLED",
    "SESSION_NOT_FOUND",
    "SPAWN_FAILED",
    "WRITE_TIMEOUT",
    "ErrorObject",
    "error_for_exception",
    "internal_error",
    "invalid_request",
    "method_not_found",
    "request_cancelled",
]

# Protocol faults, as fixed by the JSON-RPC 2.0 specification.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
#: Borrowed from the Language Server Protocol: the request was cancelled before it finished.
REQUEST_CANCELLED: Final = -32800

# Application errors, one per `PtyError.kind`. New kinds get new numbers; old numbers are
# never reused.
PTY_ERROR: Final = -32000  # the base kind, and any kind this table does not know yet
SESSION_NOT_FOUND: Final = -32001
LIMIT_EXCEEDED: Final = -32002
OWNER_DELETED: Final = -32003
CLOSING: Final = -32004
SPAWN_FAILED: Final = -32005
NOT_RUNNING: Final = -32006
WRITE_TIMEOUT: Final = -32007
INVALID_INPUT: Final = -32008
PERMISSION_DENIED: Final = -32009
BUSY: Final = -32010
DRAINING: Final = -32011

#: `PtyError.kind` -> JSON-RPC error code. Read-only: it is part of the wire contract.
APPLICATION_ERROR_CODES: Final[Mapping[str, int]] = types.MappingProxyType(
    {
        "pty_error": PTY_ERROR,
        "session_not_found": SESSION_NOT_FOUND,
        "limit_exceeded": LIMIT_EXCEEDED,
        "owner_deleted": OWNER_DELETED,
        "closing": CLOSING,
        "spawn_failed": SPAWN_FAILED,
        "not_running": NOT_RUNNING,
        "write_timeout": WRITE_TIMEOUT,
        "invalid_input": INVALID_INPUT,
        "permission_denied": PERMISSION_DENIED,
        "busy": BUSY,
        "draining": DRAINING,
    }
)


@attrs.frozen
class ErrorObject:
    """The `error` member of a response: what went wrong, in numbers and in words."""

    code: int
    message: str
    data: dict[str, Any] | None = None


def error_for_exception(exc: PtyError) -> ErrorObject:
    """Map a library error to its stable code, keeping its structured details for callers.

    `data.kind` is always the exception's own kind, even when the code is the catch-all
    -32000, so a client can still tell a kind this server version did not know about.
    """
    code = APPLICATION_ERROR_CODES.get(exc.kind, PTY_ERROR)
    return ErrorObject(code, exc.message, {**exc.details(), "kind": exc.kind})


def invalid_request(detail: str) -> ErrorObject:
    """-32600: the frame is not a request this server can take."""
    return ErrorObject(INVALID_REQUEST, f"Invalid request: {detail}")


def method_not_found(method: str) -> ErrorObject:
    """-32601, naming the method so a typo is obvious."""
    return ErrorObject(METHOD_NOT_FOUND, f"Method not found: {method}")


def internal_error(message: str = "Internal error") -> ErrorObject:
    """-32603: a bug on our side. Say little; the details belong in the server log."""
    return ErrorObject(INTERNAL_ERROR, message)


def request_cancelled(message: str = "Request cancelled") -> ErrorObject:
    """-32800: the request was abandoned (`$/cancelRequest`)."""
    return ErrorObject(REQUEST_CANCELLED, message)
