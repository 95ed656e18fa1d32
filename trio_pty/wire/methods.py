"""Every method and notification of the protocol: its name, its params record, its result.

This is the one declaration of the JSON-RPC API. The server structures each request into the
method's params record (strictly: `convert.structure_request`) and sends its result record
back; the Python client sends the same records and gets the result typed:

    info: SessionInfo = await client.request(SpawnParams(command="bash", description="sh"))

A params record subclasses `Params[R]`, R being its result type (for type checkers), and one
`MethodSpec` line ties the method name, the params record and the result record together
(checked at import: the spec's result must be the record's R). Field names are the JSON
member names; a field with a default is optional on the wire. Results that the library
itself returns are the records of `trio_pty.model`; the few that only the wire has are here.

Adding a method: a params record and its `MethodSpec` here (and in `METHODS`), one handler
line in `trio_pty/rpc/handlers.py`, a section in docs/protocol.md.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, Final, Generic, Literal, TypeVar

import attrs

from trio_pty.limits import Limits
from trio_pty.model import (
    CommandInfo,
    CommandResult,
    CompactPage,
    DrainStatus,
    ExecResult,
    ExitEvent,
    OutputChunk,
    ReadPage,
    Screen,
    SessionInfo,
    SignalResult,
    Wait,
    WriteResult,
)
from trio_pty.wire.codec import dumps, encode_notification
from trio_pty.wire.convert import b64encode, unstructure_result

__all__ = [
    "ATTACH",
    "CANCEL",
    "COMMANDS",
    "DEFAULT_OWNER",
    "DETACH",
    "DRAIN",
    "EXEC",
    "EXITED",
    "GET",
    "KILL",
    "LIST",
    "METHODS",
    "OUTPUT",
    "OWNER_DELETE",
    "READ",
    "READ_RAW",
    "RECORD",
    "RESIZE",
    "RUN",
    "SCREEN",
    "SERVER_INFO",
    "SIGNAL",
    "SPAWN",
    "SPAWN_SHELL",
    "WRITE",
    "AttachParams",
    "CancelParams",
    "CancelResult",
    "CommandList",
    "CommandsParams",
    "CompactPage",
    "DetachParams",
    "DetachResult",
    "DrainParams",
    "ExecParams",
    "GetParams",
    "KillParams",
    "ListParams",
    "MethodSpec",
    "NotificationSpec",
    "OwnerDeleteParams",
    "OwnerDeleteResult",
    "Params",
    "RawOutput",
    "ReadParams",
    "ReadRawParams",
    "RecordParams",
    "Recording",
    "ResizeParams",
    "RunParams",
    "ScreenParams",
    "ServerCounts",
    "ServerEnvironment",
    "ServerInfo",
    "ServerInfoParams",
    "SessionList",
    "SessionOutput",
    "SignalParams",
    "SpawnParams",
    "SpawnShellParams",
    "WriteParams",
    "notification_frame",
    "output_frame",
    "spec_of",
]

DEFAULT_OWNER: Final = "default"

R = TypeVar("R")
P = TypeVar("P", bound="Params[Any]")
N = TypeVar("N")


class Params(Generic[R]):
    """Base of every method's params record; `R` is the method's result record."""

    __slots__ = ()


@attrs.frozen
class MethodSpec(Generic[P, R]):
    """One method: its name on the wire, its params record and its result record."""

    name: str
    params: type[P]
    result: type[R]

    def __attrs_post_init__(self) -> None:
        declared = [
            typing.get_args(base)
            for base in getattr(self.params, "__orig_bases__", ())
            if typing.get_origin(base) is Params
        ]
        if declared != [(self.result,)]:
            raise TypeError(
                f"{self.name}: {self.params.__name__} must subclass "
                f"Params[{self.result.__name__}], not {declared}"
            )


@attrs.frozen
class NotificationSpec(Generic[N]):
    """One server notification: its name on the wire and its params record."""

    name: str
    params: type[N]


# --------------------------------------------------------------------------------------------
# Results only the wire has (the library returns plain values there)


@attrs.frozen(kw_only=True)
class RawOutput:
    """`pty.read_raw`'s result: raw bytes from absolute byte `offset` (base64 on the wire),
    and where the next read starts."""

    offset: int
    data: bytes
    gap: bool = False
    next_offset: int

    @classmethod
    def of(cls, chunk: OutputChunk) -> RawOutput:
        return cls(
            offset=chunk.offset,
            data=chunk.data,
            gap=chunk.gap,
            next_offset=chunk.offset + len(chunk.data),
        )


@attrs.frozen(kw_only=True)
class SessionOutput:
    """A chunk of one session's output: `pty.attach`'s result and `pty.output`'s params.

    A `drawn` chunk (the response to an attach with `redraw`) is not raw output: `data`
    draws the session's state as of `offset` (== `next_offset`) for a terminal of `rows` x
    `cols`, and the raw output that follows starts exactly there."""

    id: str
    offset: int
    data: bytes
    gap: bool = False
    next_offset: int
    drawn: bool = False
    rows: int | None = None  # a drawn chunk's: the size it is drawn for
    cols: int | None = None

    @classmethod
    def of(cls, session_id: str, chunk: OutputChunk) -> SessionOutput:
        return cls(
            id=session_id,
            offset=chunk.offset,
            data=chunk.data,
            gap=chunk.gap,
            next_offset=chunk.offset + len(chunk.data),
        )

    def chunk(self) -> OutputChunk:
        return OutputChunk(offset=self.offset, data=self.data, gap=self.gap)


@attrs.frozen(kw_only=True)
class Recording:
    """`pty.record`'s result: the session as an asciicast file (`format` 3 or 2), one JSON
    text a line; what the session retains (at most its output ring, JSON-escaped)."""

    id: str
    format: int
    cast: str


@attrs.frozen(kw_only=True)
class SessionList:
    sessions: list[SessionInfo]


@attrs.frozen(kw_only=True)
class CommandList:
    commands: list[CommandInfo]  # oldest first


@attrs.frozen(kw_only=True)
class DetachResult:
    id: str
    detached: bool  # False: this connection was not attached


@attrs.frozen(kw_only=True)
class OwnerDeleteResult:
    owner: str
    removed: int  # sessions killed and forgotten


@attrs.frozen(kw_only=True)
class CancelResult:
    cancelled: bool  # False: no request with that id was in flight


@attrs.frozen(kw_only=True)
class ServerCounts:
    sessions: int
    by_status: dict[str, int]
    owners: int
    connections: int
    requests_in_flight: int
    queued_chars: int  # of frames waiting to be sent: a slow client's backlog
    # Connections whose request head is still being read (slow or silent peers show here).
    pending_connections: int = 0


@attrs.frozen(kw_only=True)
class ServerEnvironment:
    mode: str
    deny: dict[str, list[str]]
    # What a client's `env` may set under command rules (names and globs); None: unchecked.
    allow: list[str] | None = None


@attrs.frozen(kw_only=True)
class ServerSandbox:
    """The sandbox every command runs in (the operator's: no client can turn it off)."""

    kind: str  # "bubblewrap", or the class name of an embedding application's sandbox
    kills_all: bool  # the wrapper's death ends everything inside
    writable: list[str] = attrs.Factory(list)
    network: bool | None = None
    # How many extra bwrap arguments, not their values (an operator may pass --setenv there).
    extra_args: int = 0
    hidden: list[str] = attrs.Factory(list)  # files unreadable inside (the token files)


@attrs.frozen(kw_only=True)
class ServerScope:
    """What the token of the connection asking may do."""

    name: str
    owners: list[str]
    read_only: bool


@attrs.frozen(kw_only=True)
class ServerInfo:
    version: str
    uptime: float
    limits: Limits
    counts: ServerCounts
    environment: ServerEnvironment
    allowed_origins: list[str]
    sandbox: ServerSandbox | None = None
    scope: ServerScope | None = None
    node: str | None = None  # --node-id: session ids are pty_<node>_<hex>
    draining: bool = False
    drain_remaining_s: float | None = None  # until the drain's deadline (None: not draining)


# --------------------------------------------------------------------------------------------
# Params


@attrs.frozen(kw_only=True)
class SpawnParams(Params[SessionInfo]):
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
    idle_timeout: float | None = None
    name: str | None = None


@attrs.frozen(kw_only=True)
class WriteParams(Params[WriteResult]):
    id: str
    data: str
    owner: str = DEFAULT_OWNER
    escapes: bool = False
    wait: Wait | None = None


@attrs.frozen(kw_only=True)
class SpawnShellParams(Params[SessionInfo]):
    owner: str = DEFAULT_OWNER
    description: str
    shell: str | None = None
    workdir: str | None = None
    env: dict[str, str] | None = None
    rows: int = 24
    cols: int = 80
    timeout: float | None = None
    login: bool = False
    rc: bool = True
    title: str | None = None
    notify_on_exit: bool = False
    idle_timeout: float | None = None
    name: str | None = None


@attrs.frozen(kw_only=True)
class RunParams(Params[CommandResult]):
    id: str
    command: str
    owner: str = DEFAULT_OWNER
    timeout_ms: int | None = None


@attrs.frozen(kw_only=True)
class CommandsParams(Params[CommandList]):
    id: str
    owner: str = DEFAULT_OWNER
    limit: int = 50


@attrs.frozen(kw_only=True)
class ReadParams(Params[ReadPage]):
    id: str
    owner: str = DEFAULT_OWNER
    offset: int = 0
    limit: int | None = None
    pattern: str | None = None
    ignore_case: bool = False
    wait: Wait | None = None
    command: int | None = None
    tail: int | None = None
    since: Literal["last"] | None = None
    reader: str | None = None  # None: this connection's own cursor (see the handler)
    # "compact": the result is a CompactPage; None (the default): the object form, except
    # that the Python client asks for the compact one (docs/protocol.md).
    format: Literal["object", "compact"] | None = None


@attrs.frozen(kw_only=True)
class ScreenParams(Params[Screen]):
    id: str
    owner: str = DEFAULT_OWNER
    wait: Wait | None = None


@attrs.frozen(kw_only=True)
class ReadRawParams(Params[RawOutput]):
    id: str
    owner: str = DEFAULT_OWNER
    offset: int = 0
    limit: int | None = None
    line: int | None = None  # the bytes of this line (from offset within it), newline included


@attrs.frozen(kw_only=True)
class RecordParams(Params[Recording]):
    id: str
    owner: str = DEFAULT_OWNER
    format: int = 3  # asciicast v3, or 2


@attrs.frozen(kw_only=True)
class GetParams(Params[SessionInfo]):
    id: str
    owner: str = DEFAULT_OWNER


@attrs.frozen(kw_only=True)
class ExecParams(Params[ExecResult]):
    command: str  # a command line, run as `bash -lc COMMAND` (or `shell`)
    owner: str = DEFAULT_OWNER
    description: str | None = None  # None: the command line
    shell: str | None = None  # None: bash
    workdir: str | None = None
    env: dict[str, str] | None = None
    rows: int = 24
    cols: int = 80
    timeout: float | None = None
    yield_ms: int | None = None  # None: the server's default_wait_ms


@attrs.frozen(kw_only=True)
class ListParams(Params[SessionList]):
    owner: str | None = None  # None: "default" (or every owner with all_owners)
    all_owners: bool = False


@attrs.frozen(kw_only=True)
class KillParams(Params[SessionInfo]):
    id: str
    owner: str = DEFAULT_OWNER
    cleanup: bool = False


@attrs.frozen(kw_only=True)
class ResizeParams(Params[SessionInfo]):
    id: str
    owner: str = DEFAULT_OWNER
    rows: int
    cols: int


@attrs.frozen(kw_only=True)
class SignalParams(Params[SignalResult]):
    id: str
    signal: str  # a name: "INT", "SIGTERM", "hup"
    owner: str = DEFAULT_OWNER


@attrs.frozen(kw_only=True)
class AttachParams(Params[SessionOutput]):
    id: str
    owner: str = DEFAULT_OWNER
    offset: int | None = None
    driver: bool = False
    # Start with the session's state drawn from its screen model (a `drawn` first chunk:
    # history lines, then the screen, its modes and title), then the raw output after it,
    # rather than the retained raw bytes (which replay old terminal queries). Not with
    # `offset`, which resumes raw output exactly.
    redraw: bool = False


@attrs.frozen(kw_only=True)
class DetachParams(Params[DetachResult]):
    id: str
    owner: str = DEFAULT_OWNER


@attrs.frozen(kw_only=True)
class OwnerDeleteParams(Params[OwnerDeleteResult]):
    owner: str


@attrs.frozen(kw_only=True)
class ServerInfoParams(Params[ServerInfo]):
    pass


@attrs.frozen(kw_only=True)
class DrainParams(Params[DrainStatus]):
    deadline_s: float | None = None  # None: Limits.drain_timeout


@attrs.frozen(kw_only=True)
class CancelParams(Params[CancelResult]):
    id: str | int


# --------------------------------------------------------------------------------------------
# The table

SPAWN: Final = MethodSpec("pty.spawn", SpawnParams, SessionInfo)
SPAWN_SHELL: Final = MethodSpec("pty.spawn_shell", SpawnShellParams, SessionInfo)
RUN: Final = MethodSpec("pty.run", RunParams, CommandResult)
COMMANDS: Final = MethodSpec("pty.commands", CommandsParams, CommandList)
WRITE: Final = MethodSpec("pty.write", WriteParams, WriteResult)
READ: Final = MethodSpec("pty.read", ReadParams, ReadPage)
READ_RAW: Final = MethodSpec("pty.read_raw", ReadRawParams, RawOutput)
RECORD: Final = MethodSpec("pty.record", RecordParams, Recording)
SCREEN: Final = MethodSpec("pty.screen", ScreenParams, Screen)
GET: Final = MethodSpec("pty.get", GetParams, SessionInfo)
EXEC: Final = MethodSpec("pty.exec", ExecParams, ExecResult)
LIST: Final = MethodSpec("pty.list", ListParams, SessionList)
KILL: Final = MethodSpec("pty.kill", KillParams, SessionInfo)
RESIZE: Final = MethodSpec("pty.resize", ResizeParams, SessionInfo)
SIGNAL: Final = MethodSpec("pty.signal", SignalParams, SignalResult)
ATTACH: Final = MethodSpec("pty.attach", AttachParams, SessionOutput)
DETACH: Final = MethodSpec("pty.detach", DetachParams, DetachResult)
OWNER_DELETE: Final = MethodSpec("owner.delete", OwnerDeleteParams, OwnerDeleteResult)
SERVER_INFO: Final = MethodSpec("server.info", ServerInfoParams, ServerInfo)
DRAIN: Final = MethodSpec("server.drain", DrainParams, DrainStatus)

#: Cancels a request in flight on the same connection; the connection itself answers it
#: (`trio_pty.rpc.connection`), so it has no handler and is not in `METHODS`.
CANCEL: Final = MethodSpec("$/cancelRequest", CancelParams, CancelResult)

#: The methods a handler runs, by name.
METHODS: Final[Mapping[str, MethodSpec[Any, Any]]] = {
    spec.name: spec
    for spec in (
        SPAWN,
        SPAWN_SHELL,
        RUN,
        COMMANDS,
        WRITE,
        READ,
        READ_RAW,
        RECORD,
        SCREEN,
        LIST,
        GET,
        EXEC,
        KILL,
        RESIZE,
        SIGNAL,
        ATTACH,
        DETACH,
        OWNER_DELETE,
        SERVER_INFO,
        DRAIN,
    )
}

_BY_PARAMS: Final[Mapping[type[Any], MethodSpec[Any, Any]]] = {
    spec.params: spec for spec in (*METHODS.values(), CANCEL)
}

OUTPUT: Final = NotificationSpec("pty.output", SessionOutput)
EXITED: Final = NotificationSpec("pty.exited", ExitEvent)


def spec_of(params: Params[R]) -> MethodSpec[Any, R]:
    """The method a params record calls."""
    return _BY_PARAMS[type(params)]


def notification_frame(spec: NotificationSpec[N], params: N) -> str:
    """The complete notification frame."""
    return encode_notification(spec.name, unstructure_result(params))


def output_frame(session_id: str, chunk: OutputChunk) -> str:
    """The `pty.output` frame for a chunk: exactly what `notification_frame(OUTPUT,
    SessionOutput.of(session_id, chunk))` writes, built without running the JSON encoder
    over the base64 text.

    That text is most of the frame and can hold nothing JSON must escape, and scanning it
    cost the attach stream more than encoding it did (docs/benchmarks.md).
    """
    data = b64encode(chunk.data)
    gap = "true" if chunk.gap else "false"
    return (
        f'{{"jsonrpc":"2.0","method":"pty.output","params":{{"id":{dumps(session_id)},'
        f'"offset":{chunk.offset},"data":"{data}","gap":{gap},'
        f'"next_offset":{chunk.offset + len(chunk.data)},"drawn":false,"rows":null,"cols":null}}}}'
    )
