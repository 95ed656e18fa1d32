"""The method table: params structured with cattrs -> manager calls -> JSON results.

Each method has an attrs class for its params (structured strictly by
`protocol.make_converter`, so a wrong type or an unknown field is -32602 naming its path)
and a handler that calls the manager and returns JSON-ready data. Values are range-checked
by the manager itself (`policy.validate`), which raises `InvalidInput` (-32008).

What a method needs from the connection it runs on (attachments, exit watchers, the server's
counters) comes through the `Context` protocol, so this module holds no connection state.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, TypeVar

import attrs
import cattrs

from trio_pty.manager import Manager
from trio_pty.model import ExitEvent, OutputChunk, SessionInfo, Wait
from trio_pty.model import converter as model_converter
from trio_pty.rpc.protocol import (
    InvalidParams,
    ParamProblem,
    dumps,
    make_converter,
    structure_params,
)

__all__ = [
    "CANCEL_METHOD",
    "METHODS",
    "AttachParams",
    "CancelParams",
    "Context",
    "DetachParams",
    "KillParams",
    "ListParams",
    "Method",
    "OwnerDeleteParams",
    "ReadParams",
    "ReadRawParams",
    "Reply",
    "ResizeParams",
    "ServerInfoParams",
    "SpawnParams",
    "UnknownMethod",
    "WriteParams",
    "chunk_json",
    "dispatch",
    "exit_event_json",
    "output_notification",
    "session_json",
]

DEFAULT_OWNER: Final = "default"
CANCEL_METHOD: Final = "$/cancelRequest"

P = TypeVar("P")

# --------------------------------------------------------------------------------------------
# Params


@attrs.frozen(kw_only=True)
class SpawnParams:
    command: str
    args: list[str] = attrs.Factory(list)
    owner: str = DEFAULT_OWNER
    description: str
    workdir: str | None = None
    title: str | None = None
    notify_on_exit: bool = False
    timeout: float | None = None
    env: dict[str, str] | None = None
    rows: int = 24
    cols: int = 80
    ready: Wait | None = None


@attrs.frozen(kw_only=True)
class WriteParams:
    id: str
    data: str
    owner: str = DEFAULT_OWNER
    escapes: bool = False
    wait: Wait | None = None


@attrs.frozen(kw_only=True)
class ReadParams:
    id: str
    owner: str = DEFAULT_OWNER
    offset: int = 0
    limit: int | None = None
    pattern: str | None = None
    ignore_case: bool = False
    wait: Wait | None = None


@attrs.frozen(kw_only=True)
class ReadRawParams:
    id: str
    owner: str = DEFAULT_OWNER
    offset: int = 0
    limit: int | None = None


@attrs.frozen(kw_only=True)
class ListParams:
    owner: str | None = None  # None: "default" (or every owner with all_owners)
    all_owners: bool = False


@attrs.frozen(kw_only=True)
class KillParams:
    id: str
    owner: str = DEFAULT_OWNER
    cleanup: bool = False


@attrs.frozen(kw_only=True)
class ResizeParams:
    id: str
    owner: str = DEFAULT_OWNER
    rows: int
    cols: int


@attrs.frozen(kw_only=True)
class AttachParams:
    id: str
    owner: str = DEFAULT_OWNER
    offset: int | None = None
    driver: bool = False


@attrs.frozen(kw_only=True)
class DetachParams:
    id: str
    owner: str = DEFAULT_OWNER


@attrs.frozen(kw_only=True)
class OwnerDeleteParams:
    owner: str


@attrs.frozen(kw_only=True)
class ServerInfoParams:
    pass


@attrs.frozen(kw_only=True)
class CancelParams:
    id: str | int


# --------------------------------------------------------------------------------------------
# Results


@attrs.frozen
class Reply:
    """A method's JSON result. `on_sent(True)` runs once the response is queued for sending
    (before anything queued after it), `on_sent(False)` when it never will be (the request
    was cancelled or the connection is closing)."""

    result: Any
    on_sent: Callable[[bool], None] | None = None


def session_json(info: SessionInfo) -> dict[str, Any]:
    result: dict[str, Any] = model_converter.unstructure(info)
    return result


def exit_event_json(event: ExitEvent) -> dict[str, Any]:
    result: dict[str, Any] = model_converter.unstructure(event)
    return result


def chunk_json(session_id: str, chunk: OutputChunk) -> dict[str, Any]:
    """`{id, offset, data (base64), gap, next_offset}`."""
    return {
        "id": session_id,
        "offset": chunk.offset,
        "data": base64.b64encode(chunk.data).decode("ascii"),
        "gap": chunk.gap,
        "next_offset": chunk.offset + len(chunk.data),
    }


def output_notification(session_id: str, chunk: OutputChunk) -> str:
    """The `pty.output` frame for a chunk: exactly what `encode_notification("pty.output",
    chunk_json(...))` writes, built without running the JSON encoder over the base64 text.

    That text is most of the frame and can hold nothing JSON must escape, and scanning it
    cost the attach stream more than encoding it did (docs/benchmarks.md).
    """
    data = base64.b64encode(chunk.data).decode("ascii")
    gap = "true" if chunk.gap else "false"
    return (
        f'{{"jsonrpc":"2.0","method":"pty.output","params":{{"id":{dumps(session_id)},'
        f'"offset":{chunk.offset},"data":"{data}","gap":{gap},'
        f'"next_offset":{chunk.offset + len(chunk.data)}}}}}'
    )


# --------------------------------------------------------------------------------------------
# The connection, as methods see it


class Context(Protocol):
    """What a method may ask of the connection it runs on."""

    @property
    def manager(self) -> Manager: ...

    def watch_exit(self, session_id: str, owner: str) -> None:
        """Send `pty.exited` on this connection when the session ends."""
        ...

    async def attach(self, params: AttachParams) -> Reply:
        """Start streaming a session's output on this connection."""
        ...

    def detach(self, session_id: str) -> bool:
        """Stop streaming; False when this connection was not attached."""
        ...

    def server_info(self) -> dict[str, Any]: ...


class UnknownMethod(Exception):
    """Answered with -32601."""

    def __init__(self, method: str) -> None:
        super().__init__(method)
        self.method = method


# --------------------------------------------------------------------------------------------
# Handlers


async def _spawn(ctx: Context, p: SpawnParams) -> Reply:
    info = await ctx.manager.spawn(
        p.command,
        p.args,
        owner=p.owner,
        description=p.description,
        workdir=p.workdir,
        title=p.title,
        notify_on_exit=p.notify_on_exit,
        timeout=p.timeout,
        env=p.env,
        rows=p.rows,
        cols=p.cols,
        ready=p.ready,
    )

    def watch(sent: bool) -> None:
        # Started once the response is queued, so pty.exited can never overtake it.
        ctx.watch_exit(info.id, p.owner)

    return Reply(session_json(info), watch)


async def _write(ctx: Context, p: WriteParams) -> Reply:
    result = await ctx.manager.write(p.id, p.data, owner=p.owner, escapes=p.escapes, wait=p.wait)
    return Reply(model_converter.unstructure(result))


async def _read(ctx: Context, p: ReadParams) -> Reply:
    page = await ctx.manager.read(
        p.id,
        owner=p.owner,
        offset=p.offset,
        limit=p.limit,
        pattern=p.pattern,
        ignore_case=p.ignore_case,
        wait=p.wait,
    )
    return Reply(model_converter.unstructure(page))


async def _read_raw(ctx: Context, p: ReadRawParams) -> Reply:
    chunk = await ctx.manager.read_raw(p.id, owner=p.owner, offset=p.offset, limit=p.limit)
    result = chunk_json(p.id, chunk)
    del result["id"]
    return Reply(result)


async def _list(ctx: Context, p: ListParams) -> Reply:
    if p.all_owners:
        # Every owner's sessions (the monitor page's view). Owners are namespaces, not a
        # security boundary: the token already lets its holder name any owner.
        if p.owner is not None:
            problem = ParamProblem("all_owners", "cannot be combined with owner")
            raise InvalidParams(f"{problem.path}: {problem.problem}", [problem])
        sessions = ctx.manager.list_all()
    else:
        sessions = ctx.manager.list(DEFAULT_OWNER if p.owner is None else p.owner)
    return Reply({"sessions": [session_json(info) for info in sessions]})


async def _kill(ctx: Context, p: KillParams) -> Reply:
    info = await ctx.manager.kill(p.id, owner=p.owner, cleanup=p.cleanup)
    return Reply(session_json(info))


async def _resize(ctx: Context, p: ResizeParams) -> Reply:
    info = await ctx.manager.resize(p.id, owner=p.owner, rows=p.rows, cols=p.cols)
    return Reply(session_json(info))


async def _attach(ctx: Context, p: AttachParams) -> Reply:
    return await ctx.attach(p)


async def _detach(ctx: Context, p: DetachParams) -> Reply:
    ctx.manager.get(p.id, owner=p.owner)  # another owner's session does not exist
    return Reply({"id": p.id, "detached": ctx.detach(p.id)})


async def _owner_delete(ctx: Context, p: OwnerDeleteParams) -> Reply:
    removed = await ctx.manager.delete_owner(p.owner)
    return Reply({"owner": p.owner, "removed": removed})


async def _server_info(ctx: Context, p: ServerInfoParams) -> Reply:
    return Reply(ctx.server_info())


@attrs.frozen
class Method:
    params: type[Any]
    handler: Callable[[Context, Any], Awaitable[Reply]]


METHODS: Final[Mapping[str, Method]] = {
    "pty.spawn": Method(SpawnParams, _spawn),
    "pty.write": Method(WriteParams, _write),
    "pty.read": Method(ReadParams, _read),
    "pty.read_raw": Method(ReadRawParams, _read_raw),
    "pty.list": Method(ListParams, _list),
    "pty.kill": Method(KillParams, _kill),
    "pty.resize": Method(ResizeParams, _resize),
    "pty.attach": Method(AttachParams, _attach),
    "pty.detach": Method(DetachParams, _detach),
    "owner.delete": Method(OwnerDeleteParams, _owner_delete),
    "server.info": Method(ServerInfoParams, _server_info),
}

_converter: Final[cattrs.Converter] = make_converter()


def structure(params: dict[str, Any], cls: type[P]) -> P:
    """Params -> `cls`, or InvalidParams naming the offending fields."""
    return structure_params(_converter, params, cls)


async def dispatch(ctx: Context, method: str, params: dict[str, Any]) -> Reply:
    """Run one call. Raises UnknownMethod, protocol.InvalidParams or a PtyError."""
    entry = METHODS.get(method)
    if entry is None:
        raise UnknownMethod(method)
    return await entry.handler(ctx, structure(params, entry.params))
