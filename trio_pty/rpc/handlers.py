"""What each method does: one line per method, from its wire record to the manager.

A method whose params are the keywords of the manager method of the same purpose (the wire's
`id` being the manager's `session_id`) is served by `call_manager(Manager.<method>)`: a new
parameter then touches the params record and its use in the manager, nothing here. The
others have a short handler of their own. Values are range-checked by the manager itself
(`policy.validate`), which raises `InvalidInput` (-32008).

What a handler needs from the connection it runs on (attachments, the server's counters,
its read cursor's key, its token's scope) comes through `Context`, so this module holds no
connection state. The scope is checked before any handler runs (`RpcConnection.receive`);
`pty.list` with `all_owners` is the one place that uses it again, to list only the owners it
sees.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, Protocol, TypeVar, cast

import attrs

from trio_pty.manager import Manager
from trio_pty.model import CompactPage, ReadPage, SessionInfo
from trio_pty.rpc.scope import TokenScope
from trio_pty.wire import (
    ATTACH,
    COMMANDS,
    DEFAULT_OWNER,
    DETACH,
    DRAIN,
    EXEC,
    GET,
    KILL,
    LIST,
    OWNER_DELETE,
    READ,
    READ_RAW,
    RESIZE,
    RUN,
    SCREEN,
    SERVER_INFO,
    SIGNAL,
    SPAWN,
    SPAWN_SHELL,
    WRITE,
    AttachParams,
    CommandList,
    CommandsParams,
    DetachParams,
    DetachResult,
    GetParams,
    InvalidParams,
    ListParams,
    MethodSpec,
    OwnerDeleteParams,
    OwnerDeleteResult,
    ParamProblem,
    Params,
    RawOutput,
    ReadParams,
    ReadRawParams,
    ServerInfo,
    ServerInfoParams,
    SessionList,
    SessionOutput,
)

__all__ = ["HANDLERS", "Context", "Route", "call_manager"]

P = TypeVar("P", bound=Params[Any])
R = TypeVar("R")


class Context(Protocol):
    """What a handler may ask of the connection it runs on."""

    @property
    def manager(self) -> Manager: ...

    @property
    def scope(self) -> TokenScope:
        """What the connection's token may do (already checked for this call)."""
        ...

    async def attach(self, params: AttachParams) -> SessionOutput:
        """Start streaming a session's output on this connection; the first chunk."""
        ...

    async def detach(self, session_id: str) -> bool:
        """Stop streaming; False when this connection was not attached."""
        ...

    def server_info(self) -> ServerInfo: ...

    @property
    def reader(self) -> str:
        """This connection's read cursor key (`pty.read` with `since="last"` and no
        `reader`): unguessable; its cursors age out once the connection is gone."""
        ...


Handler = Callable[[Context, P], Awaitable[R]]


@attrs.frozen
class Route(Generic[P, R]):
    """A method and its handler (type-checked against each other)."""

    spec: MethodSpec[P, R]
    handler: Handler[P, R] | None = None
    chooses_form: Handler[P, object] | None = None
    """Instead of `handler`, for a method whose params choose the record its result travels
    in (`pty.read`'s `format`): a handler returning that record. The manager builds it
    directly (a compact page never makes a `Line` object), so no step converts one form
    into the other."""

    def __attrs_post_init__(self) -> None:
        if (self.handler is None) == (self.chooses_form is None):
            raise TypeError(f"{self.spec.name}: give exactly one of handler and chooses_form")

    @property
    def call(self) -> Handler[P, object]:
        """The handler to call, whichever was given."""
        call = self.handler or self.chooses_form
        assert call is not None
        return call


def call_manager(method: Callable[..., Awaitable[R]]) -> Handler[Params[R], R]:
    """A handler calling `method` on the manager with the params' fields as keywords (the
    wire's `id` is the manager's `session_id`)."""

    async def handler(ctx: Context, params: Params[R]) -> R:
        fields = attrs.asdict(cast(attrs.AttrsInstance, params), recurse=False)
        if "id" in fields:
            fields["session_id"] = fields.pop("id")
        return await method(ctx.manager, **fields)

    return handler


async def _read(ctx: Context, p: ReadParams) -> ReadPage | CompactPage:
    # A read cursor is per connection unless the client names one (a CLI, which connects
    # anew for each command, names its own to see what came since its previous run).
    read = ctx.manager.read_compact if p.format == "compact" else ctx.manager.read
    return await read(
        p.id,
        owner=p.owner,
        offset=p.offset,
        limit=p.limit,
        pattern=p.pattern,
        ignore_case=p.ignore_case,
        wait=p.wait,
        command=p.command,
        tail=p.tail,
        since=p.since,
        reader=ctx.reader if p.reader is None else p.reader,
    )


async def _commands(ctx: Context, p: CommandsParams) -> CommandList:
    return CommandList(commands=ctx.manager.commands(p.id, owner=p.owner, limit=p.limit))


async def _read_raw(ctx: Context, p: ReadRawParams) -> RawOutput:
    chunk = await ctx.manager.read_raw(
        p.id, owner=p.owner, offset=p.offset, limit=p.limit, line=p.line
    )
    return RawOutput.of(chunk)


async def _list(ctx: Context, p: ListParams) -> SessionList:
    if p.all_owners:
        # Every owner's sessions this token may see (the monitor page's view).
        if p.owner is not None:
            problem = ParamProblem("all_owners", "cannot be combined with owner")
            raise InvalidParams(str(problem), [problem])
        visible = [info for info in ctx.manager.list_all() if ctx.scope.sees(info.owner)]
        return SessionList(sessions=visible)
    return SessionList(sessions=ctx.manager.list(DEFAULT_OWNER if p.owner is None else p.owner))


async def _get(ctx: Context, p: GetParams) -> SessionInfo:
    return ctx.manager.get(p.id, owner=p.owner)


async def _attach(ctx: Context, p: AttachParams) -> SessionOutput:
    return await ctx.attach(p)


async def _detach(ctx: Context, p: DetachParams) -> DetachResult:
    ctx.manager.get(p.id, owner=p.owner)  # another owner's session does not exist
    return DetachResult(id=p.id, detached=await ctx.detach(p.id))


async def _owner_delete(ctx: Context, p: OwnerDeleteParams) -> OwnerDeleteResult:
    return OwnerDeleteResult(owner=p.owner, removed=await ctx.manager.delete_owner(p.owner))


async def _server_info(ctx: Context, p: ServerInfoParams) -> ServerInfo:
    return ctx.server_info()


#: Method name -> route; exactly the methods of `trio_pty.wire.METHODS`.
HANDLERS: Final[dict[str, Route[Any, Any]]] = {
    route.spec.name: route
    for route in (
        Route(SPAWN, call_manager(Manager.spawn)),
        Route(SPAWN_SHELL, call_manager(Manager.spawn_shell)),
        Route(RUN, call_manager(Manager.run)),
        Route(COMMANDS, _commands),
        Route(WRITE, call_manager(Manager.write)),
        Route(READ, chooses_form=_read),
        Route(READ_RAW, _read_raw),
        Route(SCREEN, call_manager(Manager.screen)),
        Route(LIST, _list),
        Route(GET, _get),
        Route(EXEC, call_manager(Manager.exec)),
        Route(KILL, call_manager(Manager.kill)),
        Route(RESIZE, call_manager(Manager.resize)),
        Route(SIGNAL, call_manager(Manager.signal)),
        Route(ATTACH, _attach),
        Route(DETACH, _detach),
        Route(OWNER_DELETE, _owner_delete),
        Route(SERVER_INFO, _server_info),
        Route(DRAIN, call_manager(Manager.drain)),
    )
}
