"""trio-pty: commands under real pseudo-terminals, in trio task trees, torn down strictly."""

from importlib.metadata import PackageNotFoundError, version

from . import errors
from .errors import (
    Busy,
    Draining,
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
    CommandInfo,
    CommandResult,
    ExitEvent,
    Line,
    OutputChunk,
    ReadPage,
    Screen,
    SessionInfo,
    SignalResult,
    Wait,
    WriteResult,
)
from .posix.hardening import harden_process, is_dumpable
from .posix.sandbox import BubblewrapSandbox, Sandbox

try:
    __version__ = version("trio-pty")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "BubblewrapSandbox",
    "Busy",
    "CommandInfo",
    "CommandResult",
    "Draining",
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
    "Sandbox",
    "Screen",
    "SessionInfo",
    "SessionNotFound",
    "SignalResult",
    "SpawnFailed",
    "Wait",
    "WriteResult",
    "WriteTimeout",
    "errors",
    "harden_process",
    "is_dumpable",
    "open_manager",
]
