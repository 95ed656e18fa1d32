"""What every face asks of a client: `request(params) -> result`.

Both `TrioPtyClient` (over the wire) and `LocalClient` (in process) have this shape, and a
refusal raises `RpcError` from either; a face written against `Requester` (the MCP server)
does not know which it has.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from trio_pty.wire import Params

__all__ = ["Requester"]

R = TypeVar("R")


class Requester(Protocol):
    async def request(self, params: Params[R]) -> R:
        """Call the method of `params` (a `trio_pty.wire` params record); its result."""
        ...
