"""One accepted WebSocket: the trio tasks that carry out what `RpcConnection` decides.

One reader task feeds frames to the `RpcConnection` and starts each call it asks for in the
connection's nursery, at most `max_requests_in_flight` at once (past that the reader waits,
so TCP pushes back on the client); one sender task drains a bounded queue of outgoing frames.
A client that does not read therefore only stalls its own connection: attachments are
cursors into the session's ring and simply lag, exit notifications give up after
`notification_timeout`, and nothing grows without bound. No JSON-RPC rule lives here.

A third task pings the client after a third of `websocket_idle_timeout` without a message,
one ping at a time: a live client answers by itself, so only a dead or hostile one stays
silent long enough to be closed for it (server/liveness.py holds the stream to that bound).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from trio_pty.attachment import Attachment
from trio_pty.errors import PtyError
from trio_pty.manager import Manager
from trio_pty.model import OutputChunk
from trio_pty.rpc.connection import (
    Action,
    Call,
    Cancel,
    EndStream,
    RpcConnection,
    Send,
    Start,
    StartStream,
    Unwatch,
    Watch,
    error_for,
)
from trio_pty.rpc.handlers import HANDLERS
from trio_pty.rpc.scope import FULL_ACCESS, TokenScope
from trio_pty.wire import AttachParams, ErrorObject, ServerInfo, SessionOutput, internal_error

__all__ = ["CLOSE_GOING_AWAY", "CLOSE_NORMAL", "CLOSE_TOO_BIG", "Connection"]

log = logging.getLogger("trio_pty.server")

CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_TOO_BIG: Final = 1009


@attrs.define(eq=False)
class _Stream:
    """The task streaming one attach call's output."""

    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    go: trio.Event = attrs.Factory(trio.Event)


class Connection:
    """The tasks of one accepted WebSocket: reader, sender, calls, streams, exit watchers."""

    def __init__(
        self,
        ws: WebSocketConnection,
        *,
        peer: str,
        manager: Manager,
        server_info: Callable[[], ServerInfo],
        scope: TokenScope = FULL_ACCESS,
    ) -> None:
        self.peer = peer
        # The key of this connection's read cursors (`pty.read` with since="last"):
        # unguessable, so no other client can move them.
        self.reader = f"connection-{secrets.token_hex(8)}"
        self.manager = manager
        self.close_code = CLOSE_NORMAL
        self.close_reason: str | None = None
        self._ws = ws
        self.server_info = server_info
        self._limits = manager.limits
        self._rpc = RpcConnection(scope=scope)
        bound = self._limits.max_requests_in_flight
        self._out_send, self._out_recv = trio.open_memory_channel[str](bound)
        self._queued_chars = 0  # of the frames in that queue; see _send
        self._queue_room = trio.lowlevel.ParkingLot()
        self._slots = trio.Semaphore(bound)
        self._calls: dict[Call, trio.CancelScope] = {}
        self._streams: dict[Call, _Stream] = {}
        self._watchers: dict[Watch, trio.CancelScope] = {}
        self._scope = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        self._last_heard = trio.current_time()  # a message or a pong; see _keep_alive

    @property
    def scope(self) -> TokenScope:
        """What this connection's token may do."""
        return self._rpc.scope

    @property
    def requests_in_flight(self) -> int:
        return self._limits.max_requests_in_flight - self._slots.value

    @property
    def queued_chars(self) -> int:
        """The size of the frames waiting for the sender (a slow client's backlog)."""
        return self._queued_chars

    # -- life cycle

    def shutdown(self, code: int = CLOSE_GOING_AWAY, reason: str | None = None) -> None:
        """End the connection: cancel its calls, then close the socket with `code`."""
        self.close_code, self.close_reason = code, reason
        self._scope.cancel()

    async def run(self) -> None:
        """Serve until the client goes away or `shutdown()`; the caller closes the socket."""
        with self._scope:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._send_loop)
                nursery.start_soon(self._keep_alive)
                await self._read_loop()
                nursery.cancel_scope.cancel()

    async def _keep_alive(self) -> None:
        """Ping when nothing came from the client for a third of `websocket_idle_timeout`,
        and wait for each pong before the next ping (so pings never pile up, and a send is
        never cancelled half-written). Not while messages come: a client that closes right
        after its last call then never meets a ping during its closing handshake (which
        trio-websocket 0.12 cannot answer: its reader fails)."""
        interval = self._limits.websocket_idle_timeout / 3
        try:
            while True:
                await trio.sleep_until(self._last_heard + interval)
                if trio.current_time() - self._last_heard >= interval:
                    await self._ws.ping()
                    self._last_heard = trio.current_time()
        except ConnectionClosed:
            pass

    async def _read_loop(self) -> None:
        limit = self._limits.max_message_bytes
        while True:
            try:
                frame = await self._ws.get_message()
            except ConnectionClosed:
                return
            self._last_heard = trio.current_time()
            # trio-websocket measures text frames in characters; the bound is in bytes.
            if (
                isinstance(frame, str)
                and len(frame) * 4 > limit
                and not frame.isascii()
                and len(frame.encode("utf-8", "surrogatepass")) > limit
            ):
                self.close_code = CLOSE_TOO_BIG
                self.close_reason = f"message over {limit} bytes"
                return
            await self._carry_out(self._rpc.receive(frame))

    # -- what the RpcConnection decided

    async def _carry_out(self, actions: Sequence[Action]) -> None:
        """Do each action, in order (the order is what keeps responses before output)."""
        for action in actions:
            if isinstance(action, Send):
                await self._send_frame(action)
            elif isinstance(action, Start):
                await self._slots.acquire()  # past the bound the reader waits: TCP pushes back
                scope = self._calls[action.call] = trio.CancelScope()
                self._start_soon(self._run_call, action.call, scope)
            elif isinstance(action, Cancel):
                self._cancel(self._calls.get(action.call))
            elif isinstance(action, Watch):
                scope = self._watchers[action] = trio.CancelScope()
                self._start_soon(self._watch_exit, action, scope)
            elif isinstance(action, Unwatch):
                self._cancel(self._watchers.get(action.watch))
            elif isinstance(action, StartStream):
                stream = self._streams.get(action.call)
                if stream is not None:  # None: cancelled already (the connection is closing)
                    stream.go.set()
            elif isinstance(action, EndStream):
                ended = self._streams.get(action.call)
                self._cancel(ended.scope if ended is not None else None)

    @staticmethod
    def _cancel(scope: trio.CancelScope | None) -> None:
        if scope is not None:  # None: it ended already
            scope.cancel()

    def _start_soon(self, task: Callable[..., Any], *args: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(task, *args)

    async def _send_frame(self, action: Send) -> None:
        if not action.expendable:
            await self._send(action.frame)
            return
        with trio.move_on_after(self._limits.notification_timeout) as timer:
            await self._send(action.frame)
        if timer.cancelled_caught:
            log.warning("%s: a notification was dropped (client not reading)", self.peer)

    async def _run_call(self, call: Call, scope: trio.CancelScope) -> None:
        try:
            outcome: Any = None
            error: ErrorObject | None = None
            with scope:
                try:
                    route = HANDLERS[call.spec.name]
                    outcome = await route.call(_CallContext(self, call), call.params)
                except Exception as exc:
                    error = error_for(exc)
                    if error is None:
                        log.error(
                            "%s: internal error in %s", self.peer, call.spec.name, exc_info=exc
                        )
                        error = internal_error()
            if scope.cancelled_caught:
                actions = self._rpc.cancelled(call)
            elif error is not None:
                actions = self._rpc.failed(call, error)
            else:
                try:
                    actions = self._rpc.succeeded(call, outcome)
                except (TypeError, ValueError):
                    log.exception(
                        "%s: %s returned what JSON cannot carry", self.peer, call.spec.name
                    )
                    actions = self._rpc.failed(call, internal_error())
            await self._carry_out(actions)
        finally:
            del self._calls[call]
            self._slots.release()

    # -- sending

    async def _send_loop(self) -> None:
        try:
            async for text in self._out_recv:
                self._queued_chars -= len(text)
                self._queue_room.unpark_all()
                await self._ws.send_message(text)
        except ConnectionClosed:
            pass
        except Exception:  # e.g. wsproto refusing to send in a closing state
            log.debug("%s: send failed", self.peer, exc_info=True)
        self._scope.cancel()

    async def _send(self, text: str) -> None:
        """Queue a frame for the sender. The queue is bounded in frames and, since attach
        chunks are large, in characters too (`max_send_queue_chars`; output frames are ASCII):
        past it a sender waits, except that a frame always goes into an empty queue."""
        size, budget = len(text), self._limits.max_send_queue_chars
        while self._queued_chars and self._queued_chars + size > budget:
            await self._queue_room.park()
        self._queued_chars += size
        try:
            await self._out_send.send(text)
        except BaseException:
            self._queued_chars -= size
            self._queue_room.unpark_all()
            raise

    # -- exit watchers and attachments

    async def _watch_exit(self, watch: Watch, scope: trio.CancelScope) -> None:
        try:
            with scope:
                try:
                    event = await self.manager.wait_exit(watch.session_id, owner=watch.owner)
                except PtyError:  # gone already (removed, or its owner deleted)
                    actions = self._rpc.watch_failed(watch)
                else:
                    actions = self._rpc.session_exited(watch, event)
                await self._carry_out(actions)
        finally:
            del self._watchers[watch]

    async def attach(self, call: Call, params: AttachParams) -> SessionOutput:
        """Start the attach call's stream; its first chunk (the response)."""
        assert self._nursery is not None
        first: SessionOutput = await self._nursery.start(self._stream, call, params)
        return first

    async def detach(self, session_id: str) -> bool:
        """Stop streaming the session on this connection; False when it was not attached."""
        detached, actions = self._rpc.detach(session_id)
        await self._carry_out(actions)
        return detached

    async def _stream(
        self,
        call: Call,
        params: AttachParams,
        task_status: trio.TaskStatus[SessionOutput] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        stream = self._streams[call] = _Stream()
        session_id = params.id
        try:
            with stream.scope:
                async with self.manager.attach(
                    session_id,
                    owner=params.owner,
                    offset=params.offset,
                    driver=params.driver,
                    active=not self.scope.read_only,  # a reader watches; it does not use
                    redraw=params.redraw,
                ) as attachment:
                    drawn = attachment.drawn
                    if drawn is not None:  # the state drawn; the raw output from its offset
                        task_status.started(
                            SessionOutput(
                                id=session_id,
                                offset=drawn.offset,
                                data=drawn.data,
                                next_offset=drawn.offset,
                                drawn=True,
                                rows=drawn.rows,
                                cols=drawn.cols,
                            )
                        )
                    else:
                        first = await _first_chunk(attachment, params.offset)
                        task_status.started(SessionOutput.of(session_id, first))
                    await stream.go.wait()  # the response is queued: output may follow
                    async for chunk in attachment:
                        await self._carry_out(self._rpc.output(call, chunk))
                await self._carry_out(self._rpc.stream_ended(call))
        finally:
            del self._streams[call]


@attrs.frozen
class _CallContext:
    """The `Context` a handler sees: the connection, on behalf of one call."""

    connection: Connection
    call: Call

    @property
    def manager(self) -> Manager:
        return self.connection.manager

    @property
    def scope(self) -> TokenScope:
        return self.connection.scope

    async def attach(self, params: AttachParams) -> SessionOutput:
        return await self.connection.attach(self.call, params)

    async def detach(self, session_id: str) -> bool:
        return await self.connection.detach(session_id)

    def server_info(self) -> ServerInfo:
        return self.connection.server_info()

    @property
    def reader(self) -> str:
        return self.connection.reader


async def _first_chunk(attachment: Attachment, offset: int | None) -> OutputChunk:
    """Whatever the attachment can deliver without waiting; an empty chunk when nothing.

    The pull happens in an already-cancelled scope: when output is there it comes back at
    once, otherwise the wait is cancelled before anything was consumed (the cursor only moves
    when a chunk is returned), so nothing can be lost either way."""
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            return await attachment.__anext__()
        except StopAsyncIteration:
            pass
    cursor = attachment.cursor
    return OutputChunk(offset=cursor, data=b"", gap=offset is not None and offset != cursor)
