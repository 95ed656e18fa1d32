"""What each method does: one line per method, from its wire record to the manager.

A method whose params are the keywords of the manager method of the same purpose (the wire's
`id` being the manager's `session_id`) is served by `call_manager(Manager.<method>)`: a new
parameter then touches the params record and its use in the manager, nothing here. The
others have a short handler of their own. Values are range-checked by the manager itself
(`policy.validate`), which raises `InvalidInput` (-32008).

What a handler needs from the connection it runs on (attachments, the server's counters,
its read cursor's key, its token's scope) comes through `Context`, so this module holds no
connection state. The scope is checked before any handler runs (`RpcConnection.receive`);
handlers use it again only where a call reaches past the owner it names: `pty.list` with
`all_owners` lists only the owners it sees; a spawn (and `owner.delete`) tells the manager
whom it is for (`Tenant`: what it may evict, its own session bound, where its deletions are
remembered), and so do the calls the audit log records (`run`, `write`, `kill`, `resize`,
`signal`, `drain`: its entries name the token); a named read cursor is kept per token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, Protocol, TypeVar, cast

import attrs

from trio_pty.manager import Manager
from trio_pty.model import CompactPage, ReadPage, SessionInfo
from trio_pty.policy import validate
from trio_pty.rpc.scope import TokenScope
from trio_pty.tenants import Tenant
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
    RECORD,
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
    Recording,
    RecordParams,
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


def call_manager(
    method: Callable[..., Awaitable[R]], *, for_tenant: bool = False
) -> Handler[Params[R], R]:
    """A handler calling `method` on the manager with the params' fields as keywords (the
    wire's `id` is the manager's `session_id`); `for_tenant` adds the token's `tenant`."""

    async def handler(ctx: Context, params: Params[R]) -> R:
        fields = attrs.asdict(cast(attrs.AttrsInstance, params), recurse=False)
        if "id" in fields:
            fields["session_id"] = fields.pop("id")
        if for_tenant:
            fields["tenant"] = tenant_of(ctx.scope)
        return await method(ctx.manager, **fields)

    return handler


def tenant_of(scope: TokenScope) -> Tenant:
    """What the manager needs of a token's scope to admit its spawns and deletions."""
    return Tenant(scope.name, sees=scope.sees, max_sessions=scope.max_sessions)


def named_reader(scope: TokenScope, reader: str) -> str:
    """The cursor key of a named reader: one per token, so that a client cannot move a
    cursor another token's client keeps under the same name (nor a connection's own,
    `connection-...`). A digest keeps the key as short as any other."""
    digest = hashlib.sha256(f"{scope.name}\0{reader}".encode()).hexdigest()
    return f"named-{digest[:32]}"


async def _read(ctx: Context, p: ReadParams) -> ReadPage | CompactPage:
    # A read cursor is per connection unless the client names one (a CLI, which connects
    # anew for each command, names its own to see what came since its previous run).
    read = ctx.manager.read_compact if p.format == "compact" else ctx.manager.read
    reader = ctx.reader
    if p.reader is not None:
        reader = named_reader(ctx.scope, validate.reader(p.reader, ctx.manager.limits))
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
        reader=reader,
    )


async def _commands(ctx: Context, p: CommandsParams) -> CommandList:
    return CommandList(commands=ctx.manager.commands(p.id, owner=p.owner, limit=p.limit))


async def _read_raw(ctx: Context, p: ReadRawParams) -> RawOutput:
    chunk = await ctx.manager.read_raw(
        p.id, owner=p.owner, offset=p.offset, limit=p.limit, line=p.line
    )
    return RawOutput.of(chunk)


async def _record(ctx: Context, p: RecordParams) -> Recording:
    cast = await ctx.manager.recording(p.id, owner=p.owner, format=p.format)
    return Recording(id=p.id, format=p.format, cast=cast)


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
    removed = await ctx.manager.delete_owner(p.owner, tenant=tenant_of(ctx.scope))
    return OwnerDeleteResult(owner=p.owner, removed=removed)


async def _server_info(ctx: Context, p: ServerInfoParams) -> ServerInfo:
    return ctx.server_info()


#: Method name -> route; exactly the methods of `trio_pty.wire.METHODS`.
HANDLERS: Final[dict[str, Route[Any, Any]]] = {
    route.spec.name: route
    for route in (
        Route(SPAWN, call_manager(Manager.spawn, for_tenant=True)),
        Route(SPAWN_SHELL, call_manager(Manager.spawn_shell, for_tenant=True)),
        Route(RUN, call_manager(Manager.run, for_tenant=True)),
        Route(COMMANDS, _commands),
        Route(WRITE, call_manager(Manager.write, for_tenant=True)),
        Route(READ, chooses_form=_read),
        Route(READ_RAW, _read_raw),
        Route(RECORD, _record),
        Route(SCREEN, call_manager(Manager.screen)),
        Route(LIST, _list),
        Route(GET, _get),
        Route(EXEC, call_manager(Manager.exec, for_tenant=True)),
        Route(KILL, call_manager(Manager.kill, for_tenant=True)),
        Route(RESIZE, call_manager(Manager.resize, for_tenant=True)),
        Route(SIGNAL, call_manager(Manager.signal, for_tenant=True)),
        Route(ATTACH, _attach),
        Route(DETACH, _detach),
        Route(OWNER_DELETE, _owner_delete),
        Route(SERVER_INFO, _server_info),
        Route(DRAIN, call_manager(Manager.drain, for_tenant=True)),
    )
}
