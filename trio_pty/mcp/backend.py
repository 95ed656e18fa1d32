"""Where the tools' requests go: one client (`Requester`) and the owner they act for.

In process the client is a `LocalClient` over a manager this process runs (the MCP client
session is the owner); with `--connect` it is a `TrioPtyClient` to a running `trio-pty
serve` (the owner is `--owner`, or one of our own per run). Either way each tool call is
requests of `trio_pty.wire` records: the tools add no behaviour the manager lacks, and do
not know which client they have.

A refusal is a `ServiceError` (the kind, message and details the server reported), and so
is a lost connection (kind `connection_lost`): `Backend.request` makes them so, once.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio

from trio_pty.client.client import ConnectionLost, RpcError, connect
from trio_pty.client.requester import Requester
from trio_pty.wire import Params

__all__ = ["Backend", "ServiceError", "default_owner", "remote_backend"]

R = TypeVar("R")


class ServiceError(Exception):
    """A refusal a server reported (its error's kind, message and details), or the loss of
    the connection to it (kind `connection_lost`)."""

    def __init__(self, kind: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self._details = dict(details or {})

    def details(self) -> dict[str, Any]:
        return dict(self._details)


@attrs.define(eq=False)
class Backend:
    """The tools' client and owner, and the one thing the tools remember between calls:
    the shell `shell_command` runs in when it is not given one."""

    client: Requester
    owner: str
    shell_id: str | None = None
    shell_lock: trio.Lock = attrs.Factory(trio.Lock)
    side_reader: str = attrs.Factory(lambda: f"mcp-side-{secrets.token_hex(8)}")
    """The read cursor of reads that fill in a reply: the owner's own cursor ("what you
    last saw") is moved only by what a reply shows."""

    async def request(self, params: Params[R]) -> R:
        """One call; the server's refusals and a lost connection as `ServiceError`s."""
        try:
            return await self.client.request(params)
        except RpcError as exc:
            # A refusal of trio-pty has its kind; a malformed request (-32602) is ours.
            raise ServiceError(exc.kind or "invalid_input", exc.message, exc.data) from exc
        except ConnectionLost as exc:
            raise ServiceError("connection_lost", str(exc) or "connection closed") from exc


def default_owner() -> str:
    """One owner per run: this MCP client session's sessions, and nobody else's."""
    return f"mcp-{secrets.token_hex(4)}"


@asynccontextmanager
async def remote_backend(
    url: str, token: str | None, *, owner: str | None
) -> AsyncIterator[Backend]:
    """`--connect URL`: a connection to `trio-pty serve` for the duration of the block (the
    sessions are the server's, and stay). Reads use the connection's own read cursor, which
    is this MCP client's alone."""
    async with connect(url, token) as client:
        yield Backend(client, owner or default_owner())
