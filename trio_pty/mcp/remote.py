"""`trio-pty mcp --connect URL`: the tools' calls sent to a running `trio-pty serve`.

Each call is one wire record (`trio_pty.wire`), sent by the Python client as the owner given
with `--owner`, or one of our own per run: the sessions belong to the server, outlive this
process and show in the monitor. This process holds nothing but the connection. Reads use
the connection's own read cursor (the server keeps one per connection), which is this MCP
client's alone.
"""

from __future__ import annotations

import builtins
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Literal, TypeVar

from trio_pty.client.client import ConnectionLost, RpcError, TrioPtyClient, connect
from trio_pty.model import (
    CommandInfo,
    CommandResult,
    ReadPage,
    Screen,
    SessionInfo,
    Wait,
    WriteResult,
)
from trio_pty.wire import (
    CommandsParams,
    KillParams,
    ListParams,
    Params,
    ReadParams,
    RunParams,
    ScreenParams,
    SpawnParams,
    SpawnShellParams,
    WriteParams,
)

from .backend import Backend, ServiceError

__all__ = ["RemoteBackend", "remote_backend"]

R = TypeVar("R")


class RemoteBackend:
    """A `trio-pty serve` behind one connection, for one owner."""

    def __init__(self, client: TrioPtyClient, owner: str) -> None:
        self._client = client
        self._owner = owner

    @property
    def owner(self) -> str:
        return self._owner

    async def _request(self, params: Params[R]) -> R:
        """One call; the server's refusals and a lost connection as `ServiceError`s."""
        try:
            return await self._client.request(params)
        except RpcError as exc:
            # A refusal of trio-pty has its kind; a malformed request (-32602) is ours.
            raise ServiceError(exc.kind or "invalid_input", exc.message, exc.data) from exc
        except ConnectionLost as exc:
            raise ServiceError("connection_lost", str(exc) or "connection closed") from exc

    async def spawn(
        self,
        command: str,
        args: Sequence[str],
        *,
        description: str,
        workdir: str | None,
        ready: Wait | None,
    ) -> SessionInfo:
        return await self._request(
            SpawnParams(
                command=command,
                args=list(args),
                owner=self._owner,
                description=description,
                workdir=workdir,
                ready=ready,
            )
        )

    async def spawn_shell(
        self, *, description: str, shell: str | None, workdir: str | None
    ) -> SessionInfo:
        return await self._request(
            SpawnShellParams(
                owner=self._owner, description=description, shell=shell, workdir=workdir
            )
        )

    async def run(self, session_id: str, command: str, *, timeout_ms: int) -> CommandResult:
        return await self._request(
            RunParams(id=session_id, command=command, owner=self._owner, timeout_ms=timeout_ms)
        )

    async def commands(self, session_id: str, *, limit: int) -> list[CommandInfo]:
        listed = await self._request(CommandsParams(id=session_id, owner=self._owner, limit=limit))
        return listed.commands

    async def write(self, session_id: str, data: str, *, escapes: bool) -> WriteResult:
        return await self._request(
            WriteParams(id=session_id, data=data, owner=self._owner, escapes=escapes)
        )

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
        return await self._request(
            ReadParams(
                id=session_id,
                owner=self._owner,
                offset=offset,
                limit=limit,
                pattern=pattern,
                tail=tail,
                since=since,
                wait=wait,
            )
        )

    async def screen(self, session_id: str) -> Screen:
        return await self._request(ScreenParams(id=session_id, owner=self._owner))

    async def get(self, session_id: str) -> SessionInfo:
        # The wire has no single-session lookup: the owner's list holds it (or it does not
        # exist for this owner, which the server would say the same way).
        for info in await self.list():
            if info.id == session_id:
                return info
        raise ServiceError(
            "session_not_found", f"PTY session not found: {session_id}", {"id": session_id}
        )

    async def list(self) -> builtins.list[SessionInfo]:
        return (await self._request(ListParams(owner=self._owner))).sessions

    async def kill(self, session_id: str, *, cleanup: bool) -> SessionInfo:
        return await self._request(KillParams(id=session_id, owner=self._owner, cleanup=cleanup))


def default_owner() -> str:
    """One owner per run: this MCP client session's sessions, and nobody else's."""
    return f"mcp-{secrets.token_hex(4)}"


@asynccontextmanager
async def remote_backend(
    url: str, token: str | None, *, owner: str | None
) -> AsyncIterator[Backend]:
    """A connection to `trio-pty serve` for the duration of the block (the sessions stay)."""
    async with connect(url, token) as client:
        yield RemoteBackend(client, owner or default_owner())
