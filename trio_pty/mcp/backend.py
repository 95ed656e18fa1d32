"""What the tools call: the manager's calls for one owner, in process or over the wire.

`Backend` is the part of the library contract the MCP tools use, with the owner bound.
`LocalBackend` calls a manager this process runs (the MCP client session is the owner);
`RemoteBackend` (in `remote.py`) sends the same calls to a running `trio-pty serve`, one wire
record each. Neither adds behaviour: a tool that needs something new gets it from the
manager first.

When trio-pty refuses a call, a backend raises a `PtyError` in process and a `ServiceError`
(the same kind, message and details) over the wire: `REFUSALS` names both.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from trio_pty.errors import PtyError
from trio_pty.manager import Manager
from trio_pty.model import (
    CommandInfo,
    CommandResult,
    ReadPage,
    Screen,
    SessionInfo,
    Wait,
    WriteResult,
)

__all__ = ["REFUSALS", "Backend", "LocalBackend", "ServiceError"]


class ServiceError(Exception):
    """A refusal a server reported (its error's kind, message and details), or the loss of
    the connection to it (kind `connection_lost`): what a `PtyError` says in process."""

    def __init__(self, kind: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self._details = dict(details or {})

    def details(self) -> dict[str, Any]:
        return dict(self._details)


#: What a backend raises when trio-pty refuses a call.
REFUSALS: tuple[type[PtyError], type[ServiceError]] = (PtyError, ServiceError)


class Backend(Protocol):
    """The calls the tools make, all for one owner (see `Manager` for what each does)."""

    @property
    def owner(self) -> str: ...

    async def spawn(
        self,
        command: str,
        args: Sequence[str],
        *,
        description: str,
        workdir: str | None,
        ready: Wait | None,
    ) -> SessionInfo: ...

    async def spawn_shell(
        self, *, description: str, shell: str | None, workdir: str | None
    ) -> SessionInfo: ...

    async def run(self, session_id: str, command: str, *, timeout_ms: int) -> CommandResult: ...

    async def commands(self, session_id: str, *, limit: int) -> list[CommandInfo]: ...

    async def write(self, session_id: str, data: str, *, escapes: bool) -> WriteResult: ...

    async def read(
        self,
        session_id: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        pattern: str | None = None,
        tail: int | None = None,
        since: Literal["last"] | None = None,
        wait: Wait | None = None,
    ) -> ReadPage: ...

    async def screen(self, session_id: str) -> Screen: ...

    async def get(self, session_id: str) -> SessionInfo: ...

    async def list(self) -> builtins.list[SessionInfo]: ...

    async def kill(self, session_id: str, *, cleanup: bool) -> SessionInfo: ...


class LocalBackend:
    """A manager of this process, for one owner."""

    def __init__(self, manager: Manager, owner: str) -> None:
        self._manager = manager
        self._owner = owner

    @property
    def owner(self) -> str:
        return self._owner

    async def spawn(
        self,
        command: str,
        args: Sequence[str],
        *,
        description: str,
        workdir: str | None,
        ready: Wait | None,
    ) -> SessionInfo:
        return await self._manager.spawn(
            command,
            args,
            owner=self._owner,
            description=description,
            workdir=workdir,
            ready=ready,
        )

    async def spawn_shell(
        self, *, description: str, shell: str | None, workdir: str | None
    ) -> SessionInfo:
        return await self._manager.spawn_shell(
            owner=self._owner, description=description, shell=shell, workdir=workdir
        )

    async def run(self, session_id: str, command: str, *, timeout_ms: int) -> CommandResult:
        return await self._manager.run(
            session_id, command, owner=self._owner, timeout_ms=timeout_ms
        )

    async def commands(self, session_id: str, *, limit: int) -> list[CommandInfo]:
        return self._manager.commands(session_id, owner=self._owner, limit=limit)

    async def write(self, session_id: str, data: str, *, escapes: bool) -> WriteResult:
        return await self._manager.write(session_id, data, owner=self._owner, escapes=escapes)

    async def read(
        self,
        session_id: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        pattern: str | None = None,
        tail: int | None = None,
        since: Literal["last"] | None = None,
        wait: Wait | None = None,
    ) -> ReadPage:
        return await self._manager.read(
            session_id,
            owner=self._owner,
            offset=offset,
            limit=limit,
            pattern=pattern,
            tail=tail,
            since=since,
            wait=wait,
        )

    async def screen(self, session_id: str) -> Screen:
        return await self._manager.screen(session_id, owner=self._owner)

    async def get(self, session_id: str) -> SessionInfo:
        return self._manager.get(session_id, owner=self._owner)

    async def list(self) -> builtins.list[SessionInfo]:
        return self._manager.list(self._owner)

    async def kill(self, session_id: str, *, cleanup: bool) -> SessionInfo:
        return await self._manager.kill(session_id, owner=self._owner, cleanup=cleanup)
