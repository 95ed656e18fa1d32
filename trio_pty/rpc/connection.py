"""The rules of one JSON-RPC connection, as a state object without I/O (h11's way).

`RpcConnection` takes what happened (a frame arrived, a call finished, a chunk of output is
ready, a session ended, the client detached) and answers with what to do, as a list of
actions to carry out in order: send a frame, start or cancel a call, start or stop watching
a session for its exit, let a stream start or end it. The trio driver
(`trio_pty.server.websocket`) does the I/O; every rule lives here, where tests drive it
directly:

- **Ids.** A request whose id is still in flight on this connection is refused with -32600;
  a request with a null id, and a notification, cannot be cancelled. Each request gets
  exactly one response; a notification gets none, not even an error.
- **Cancellation.** `$/cancelRequest {id}` cancels the call in flight with that id (answered
  `{"cancelled": bool}` when sent as a request); the cancelled call answers -32800. Ids are
  this connection's own: no connection can cancel another's calls.
- **Scope.** Every call is first checked against the connection's token
  (`TokenScope.refusal`): a refused call never starts, and is answered with the refusal.
- **Attach order.** A `pty.attach` response goes out before any `pty.output` of its stream;
  no `pty.output` of a stream goes out once it was detached or replaced (a second attach to
  the same session).
- **Exit order.** `pty.exited` goes to a connection that spawned or is attached to the
  session, once, and after every `pty.output` of the attachment streaming that session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

from trio_pty.errors import PtyError, single_exception
from trio_pty.model import ExitEvent, OutputChunk, SessionInfo
from trio_pty.rpc.scope import FULL_ACCESS, TokenScope
from trio_pty.wire import (
    ATTACH,
    CANCEL,
    EXITED,
    METHODS,
    SPAWN,
    SPAWN_SHELL,
    CancelResult,
    ErrorObject,
    Ignored,
    Invalid,
    InvalidParams,
    MethodSpec,
    Request,
    RequestId,
    encode_error_object,
    encode_result,
    error_for_exception,
    method_not_found,
    notification_frame,
    output_frame,
    parse_message,
    request_cancelled,
    structure_request,
    unstructure_result,
)
from trio_pty.wire.codes import invalid_request

__all__ = [
    "Action",
    "Call",
    "Cancel",
    "EndStream",
    "RpcConnection",
    "Send",
    "Start",
    "StartStream",
    "Unwatch",
    "Watch",
    "error_for",
]

_Interest: TypeAlias = Literal["spawned", "attached"]
_ID_IN_FLIGHT: Final = invalid_request("this id is already used by a request in flight")


@attrs.define(eq=False)
class Call:
    """One request or notification to run: the method's params, already structured."""

    id: RequestId
    spec: MethodSpec[Any, Any]
    params: Any
    respond: bool  # False for a notification: no response at all

    @property
    def tracked(self) -> bool:
        """Whether its id is reserved while it runs (and it can be cancelled)."""
        return self.respond and self.id is not None


@attrs.frozen
class Send:
    """Queue `frame` for the client. An `expendable` frame (`pty.exited`) is dropped after
    `notification_timeout` rather than waiting longer on a client that does not read."""

    frame: str
    expendable: bool = False


@attrs.frozen
class Start:
    """Run `call` (its handler), then report `succeeded`, `failed` or `cancelled`."""

    call: Call


@attrs.frozen
class Cancel:
    """Cancel `call`, which then reports `cancelled`."""

    call: Call


@attrs.define(eq=False)
class Watch:
    """Wait for the session to end, then report `session_exited(watch, event)` (or
    `watch_failed(watch)` when it is gone)."""

    session_id: str
    owner: str


@attrs.frozen
class Unwatch:
    """Stop `watch`: nobody on this connection wants the session's exit any more."""

    watch: Watch


@attrs.frozen
class StartStream:
    """The attach `call`'s response is queued: its stream may send output now."""

    call: Call


@attrs.frozen
class EndStream:
    """Stop the attach `call`'s stream (detached, replaced, or its response never went out)."""

    call: Call


Action: TypeAlias = Send | Start | Cancel | Watch | Unwatch | StartStream | EndStream


class RpcConnection:
    """The protocol state of one connection. Not thread-safe; no I/O, no clock. `scope` is
    what the connection's token may do."""

    def __init__(
        self,
        methods: Mapping[str, MethodSpec[Any, Any]] = METHODS,
        *,
        scope: TokenScope = FULL_ACCESS,
    ) -> None:
        self._methods = methods
        self.scope = scope
        self._in_flight: dict[RequestId, Call] = {}
        self._streams: dict[str, Call] = {}  # session id -> the attach call streaming it
        self._interest: dict[str, set[_Interest]] = {}  # who here wants the session's exit
        self._watches: dict[str, Watch] = {}
        self._held_exits: dict[str, ExitEvent] = {}  # waiting for their stream to end

    @property
    def ids_in_flight(self) -> frozenset[RequestId]:
        return frozenset(self._in_flight)

    def streaming(self, session_id: str) -> bool:
        return session_id in self._streams

    # -- frames in

    def receive(self, frame: str | bytes) -> list[Action]:
        """A frame from the client."""
        incoming = parse_message(frame)
        if isinstance(incoming, Invalid):
            return [Send(incoming.response)]
        if isinstance(incoming, Ignored):
            return []
        respond = isinstance(incoming, Request)
        id = incoming.id if isinstance(incoming, Request) else None
        if incoming.method == CANCEL.name:
            return self._cancel(id, incoming.params, respond=respond)
        if respond and id is not None and id in self._in_flight:
            return [Send(encode_error_object(id, _ID_IN_FLIGHT))]
        spec = self._methods.get(incoming.method)
        if spec is None:
            return self._answer(id, method_not_found(incoming.method), respond)
        try:
            params = structure_request(incoming.params, spec.params)
        except InvalidParams as exc:
            return self._answer(id, exc.to_error(), respond)
        refusal = self.scope.refusal(spec, params)
        if refusal is not None:
            return self._answer(id, error_for_exception(refusal), respond)
        call = Call(id, spec, params, respond)
        if call.tracked:
            self._in_flight[id] = call
        return [Start(call)]

    def _answer(self, id: RequestId, error: ErrorObject, respond: bool) -> list[Action]:
        return [Send(encode_error_object(id, error))] if respond else []

    def _cancel(self, id: RequestId, params: dict[str, Any], *, respond: bool) -> list[Action]:
        try:
            target = structure_request(params, CANCEL.params).id
        except InvalidParams as exc:
            return self._answer(id, exc.to_error(), respond)
        call = self._in_flight.get(target)
        actions: list[Action] = [] if call is None else [Cancel(call)]
        if respond:
            result = unstructure_result(CancelResult(cancelled=call is not None))
            actions.append(Send(encode_result(id, result)))
        return actions

    # -- calls out

    def succeeded(self, call: Call, result: Any) -> list[Action]:
        """`call` returned `result` (its method's result record).

        Raises TypeError or ValueError when the result cannot be encoded (a bug in the
        handler); nothing has changed then, so report `failed(call, internal_error())`.
        """
        frame = encode_result(call.id, unstructure_result(result)) if call.respond else None
        self._release(call)
        actions: list[Action] = []
        if call.spec is ATTACH:
            session_id: str = call.params.id
            previous = self._streams.get(session_id)
            if previous is not None:
                actions.append(EndStream(previous))  # its output all came before this
            self._streams[session_id] = call
        if frame is not None:
            actions.append(Send(frame))
        # What follows the response, so that nothing can overtake it.
        if call.spec is ATTACH:
            actions.append(StartStream(call))
            actions += self._want_exit(call.params.id, call.params.owner, "attached")
        elif call.spec in (SPAWN, SPAWN_SHELL) and isinstance(result, SessionInfo):
            actions += self._want_exit(result.id, result.owner, "spawned")
        return actions

    def failed(self, call: Call, error: ErrorObject) -> list[Action]:
        """`call` raised; `error` says what to answer."""
        return self._unsuccessful(call, error)

    def cancelled(self, call: Call) -> list[Action]:
        """`call` was cancelled (by `$/cancelRequest`)."""
        return self._unsuccessful(call, request_cancelled())

    def _unsuccessful(self, call: Call, error: ErrorObject) -> list[Action]:
        self._release(call)
        actions = self._answer(call.id, error, call.respond)
        if call.spec is ATTACH:
            actions.append(EndStream(call))  # started by the handler, never to go live
        return actions

    def _release(self, call: Call) -> None:
        if call.tracked and self._in_flight.get(call.id) is call:
            del self._in_flight[call.id]

    # -- attachments

    def output(self, call: Call, chunk: OutputChunk) -> list[Action]:
        """A chunk of the attach `call`'s stream: its `pty.output`, unless the stream is not
        live (its response is not out yet, or it was detached or replaced)."""
        session_id: str = call.params.id
        if self._streams.get(session_id) is not call:
            return []
        return [Send(output_frame(session_id, chunk))]

    def stream_ended(self, call: Call) -> list[Action]:
        """The attach `call`'s stream delivered everything (the session is over)."""
        session_id: str = call.params.id
        if self._streams.get(session_id) is not call:
            return []
        del self._streams[session_id]
        return self._release_exit(session_id)

    def detach(self, session_id: str) -> tuple[bool, list[Action]]:
        """The client detaches: whether it was attached, and what to do."""
        call = self._streams.pop(session_id, None)
        if call is None:
            return False, []
        actions: list[Action] = [EndStream(call)]
        reasons = self._interest.get(session_id)
        if reasons is not None:
            reasons.discard("attached")
            if not reasons:
                del self._interest[session_id]
                watch = self._watches.pop(session_id, None)
                if watch is not None:
                    actions.append(Unwatch(watch))
        return True, actions + self._release_exit(session_id)

    # -- exits

    def _want_exit(self, session_id: str, owner: str, reason: _Interest) -> list[Action]:
        self._interest.setdefault(session_id, set()).add(reason)
        if session_id in self._watches:
            return []
        watch = self._watches[session_id] = Watch(session_id, owner)
        return [watch]

    def session_exited(self, watch: Watch, event: ExitEvent) -> list[Action]:
        """The watched session ended (its output complete)."""
        session_id = watch.session_id
        if self._watches.get(session_id) is not watch:
            return []
        del self._watches[session_id]  # a later attach watches anew
        if session_id not in self._interest:
            return []
        if session_id in self._streams:
            self._held_exits[session_id] = event  # until the stream has sent everything
            return []
        return self._deliver_exit(session_id, event)

    def watch_failed(self, watch: Watch) -> list[Action]:
        """The watched session is gone (removed, or its owner deleted): no exit to report."""
        session_id = watch.session_id
        if self._watches.get(session_id) is watch:
            del self._watches[session_id]
            self._interest.pop(session_id, None)
            self._held_exits.pop(session_id, None)
        return []

    def _release_exit(self, session_id: str) -> list[Action]:
        event = self._held_exits.pop(session_id, None)
        if event is None or session_id not in self._interest:
            return []
        return self._deliver_exit(session_id, event)

    def _deliver_exit(self, session_id: str, event: ExitEvent) -> list[Action]:
        del self._interest[session_id]
        return [Send(notification_frame(EXITED, event), expendable=True)]


def error_for(exc: BaseException) -> ErrorObject | None:
    """The error to answer for an exception out of a handler; None for one no handler should
    raise (a bug: answer `internal_error()` and log it)."""
    error = single_exception(exc)
    if isinstance(error, InvalidParams):
        return error.to_error()
    if isinstance(error, PtyError):
        return error_for_exception(error)
    return None
