"""A client that runs the wire's handlers against a manager of this process.

    async with open_manager() as manager:
        client = LocalClient(manager)
        info = await client.request(SpawnParams(command="bash", description="sh"))

`request(params)` is `TrioPtyClient.request` without the socket: the call is checked
against the client's token scope (its owner's: full access by default), runs the handler
a server would run (`trio_pty.rpc.handlers.HANDLERS`), and a refusal raises the `RpcError`
the server would have answered (same code, message and data). So a face written against
`Requester` (the MCP server) behaves the same in process and over the wire.

What only a connection has is refused: `pty.attach` and `pty.detach` stream over a socket
(in process, `Manager.attach` is the stream), and `server.info` describes a server. Reads
without a named `reader` use this client's own read cursor, as a connection's do.
"""

from __future__ import annotations

import secrets
from typing import Final, TypeVar, cast

import attrs

from trio_pty.client.client import RpcError
from trio_pty.manager import Manager
from trio_pty.rpc.connection import error_for
from trio_pty.rpc.handlers import HANDLERS
from trio_pty.rpc.scope import FULL_ACCESS, TokenScope
from trio_pty.wire import (
    AttachParams,
    CompactPage,
    ErrorObject,
    Params,
    ServerInfo,
    SessionOutput,
    method_not_found,
    spec_of,
)
from trio_pty.wire.codes import METHOD_NOT_FOUND

__all__ = ["LocalClient"]

R = TypeVar("R")

_CONNECTION_ONLY: Final = "is a connection's: an in-process client has none"


class _ConnectionOnly(Exception):
    """A method that needs a connection (attach, detach, server.info)."""


def _rpc_error(error: ErrorObject) -> RpcError:
    return RpcError(error.code, error.message, error.data)


class LocalClient:
    """Requests to `manager`, in this process, with the rights of `scope`."""

    def __init__(self, manager: Manager, *, scope: TokenScope = FULL_ACCESS) -> None:
        self._context = _Context(manager, scope, f"local-{secrets.token_hex(8)}")

    async def request(self, params: Params[R]) -> R:
        """Call the method of `params`; its result record. Raises `RpcError` for what a
        server would refuse; anything else a handler raises (a bug) propagates as it is."""
        spec = spec_of(params)
        route = HANDLERS.get(spec.name)
        if route is None:
            raise _rpc_error(method_not_found(spec.name))
        refusal = self._context.scope.refusal(spec, params)
        if refusal is not None:
            raise _rpc_error(_error(refusal))
        try:
            result = await route.call(self._context, params)
        except _ConnectionOnly:
            raise RpcError(METHOD_NOT_FOUND, f"{spec.name} {_CONNECTION_ONLY}") from None
        except Exception as exc:
            error = error_for(exc)
            if error is None:
                raise
            raise _rpc_error(error) from exc
        if isinstance(result, CompactPage):
            result = result.page()  # as the wire client gives it: a ReadPage either way
        return cast(R, result)


def _error(exc: BaseException) -> ErrorObject:
    error = error_for(exc)
    assert error is not None, exc  # a refusal is a PtyError
    return error


@attrs.frozen
class _Context:
    """The `Context` the handlers see: the manager, the scope, this client's cursor."""

    manager: Manager
    scope: TokenScope
    reader: str

    async def attach(self, params: AttachParams) -> SessionOutput:
        raise _ConnectionOnly

    async def detach(self, session_id: str) -> bool:
        raise _ConnectionOnly

    def server_info(self) -> ServerInfo:
        raise _ConnectionOnly
