"""trio-pty: commands under real pseudo-terminals, in trio task trees, torn down strictly.

The root is light: every name below is imported on first use (PEP 562), so that importing
a pure layer (`trio_pty.wire`, `trio_pty.output`, `trio_pty.policy`, `trio_pty.rpc`) or the
client does not load trio's server side, the manager or the terminal emulator, and the
crash keeper can import its module with nothing but the standard library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from . import errors
    from .attachment import Attachment
    from .audit import Audit
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
        CompactPage,
        DrainStatus,
        ExecResult,
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
    from .policy.authorize import Authorizer
    from .policy.environment import EnvAllowList
    from .posix.hardening import harden_process, is_dumpable
    from .posix.sandbox import BubblewrapSandbox, Sandbox
    from .tenants import Tenant

    __version__: str

# Each exported name -> the module that defines it (relative to this package).
_EXPORTS: Final[dict[str, str]] = {
    "errors": ".errors",
    **dict.fromkeys(
        (
            "Busy",
            "Draining",
            "InvalidInput",
            "LimitExceeded",
            "ManagerClosing",
            "NotRunning",
            "OwnerDeleted",
            "PermissionDenied",
            "PtyError",
            "SessionNotFound",
            "SpawnFailed",
            "WriteTimeout",
        ),
        ".errors",
    ),
    "Limits": ".limits",
    "Manager": ".manager",
    "Tenant": ".tenants",
    "open_manager": ".manager",
    **dict.fromkeys(
        (
            "CommandInfo",
            "CommandResult",
            "CompactPage",
            "DrainStatus",
            "ExecResult",
            "ExitEvent",
            "Line",
            "OutputChunk",
            "ReadPage",
            "Screen",
            "SessionInfo",
            "SignalResult",
            "Wait",
            "WriteResult",
        ),
        ".model",
    ),
    "Authorizer": ".policy.authorize",
    "EnvAllowList": ".policy.environment",
    "harden_process": ".posix.hardening",
    "is_dumpable": ".posix.hardening",
    "BubblewrapSandbox": ".posix.sandbox",
    "Sandbox": ".posix.sandbox",
    "Attachment": ".attachment",
    "Audit": ".audit",
}

__all__ = [
    "Attachment",
    "Audit",
    "Authorizer",
    "BubblewrapSandbox",
    "Busy",
    "CommandInfo",
    "CommandResult",
    "CompactPage",
    "DrainStatus",
    "Draining",
    "EnvAllowList",
    "ExecResult",
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
    "Tenant",
    "Wait",
    "WriteResult",
    "WriteTimeout",
    "errors",
    "harden_process",
    "is_dumpable",
    "open_manager",
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trio-pty")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all

    def __getattr__(name: str) -> Any:
        """Import what `name` lives in on first use, and keep it here (the next lookup is
        a plain attribute)."""
        if name == "__version__":
            value: Any = _version()
        elif name in _EXPORTS:
            module = importlib.import_module(_EXPORTS[name], __name__)
            value = module if name == "errors" else getattr(module, name)
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
