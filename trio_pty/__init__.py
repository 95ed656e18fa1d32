"""trio-pty: commands under real pseudo-terminals, in trio task trees, torn down strictly."""

from importlib.metadata import PackageNotFoundError, version

from . import errors
from .errors import (
    InvalidInput,
    LimitExceeded,
    ManagerClosing,
    NotRunning,
    OwnerDeleted,
    PermissionDenied,
    PtyError,
    SessionNotFound,
    SpawnFailed,
    WriteTimeout,
)
from .limits import Limits
from .manager import Manager, open_manager
from .model import (
    ExitEvent,
    Line,
    OutputChunk,
    ReadPage,
    Screen,
    SessionInfo,
    Wait,
    WriteResult,
)

try:
    __version__ = version("trio-pty")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ExitEvent",
    "InvalidInput",
    "LimitExceeded",
    "Limits",
    "Line",
    "Manager",
    "ManagerClosing",
    "NotRunning",
    "OutputChunk",
    "OwnerDeleted",
    "PermissionDenied",
    "PtyError",
    "ReadPage",
    "Screen",
    "SessionInfo",
    "SessionNotFound",
    "SpawnFailed",
    "Wait",
    "WriteResult",
    "WriteTimeout",
    "errors",
    "open_manager",
]
