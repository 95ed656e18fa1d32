"""The WebSocket endpoint: handshake checks, per-connection tasks, notifications, shutdown.

Layers, each usable on its own:

- `handshake.check_handshake` (its own module): the pure decision on an upgrade request
  (Host, Origin, path, token); `config.py` holds the `--config` file format.
- `RpcServer.handle_stream(stream)`: serves one already-accepted byte stream (runs the
  WebSocket handshake, then the checks, then the connection). It does not care how the
  stream was accepted, so an HTTP front end can hand streams over.
- `RpcServer.handle_request(request)`: the same, starting from a parsed `WebSocketRequest`.
- `RpcServer.run()`: binds the listeners and accepts until `stop()`. Every accepted connection
  goes through the HTTP front (`trio_pty/rpc/http.py`) first: it serves the monitor page
  (`ServerOptions.page`) and hands upgrade requests to `handle_stream`.
- `serve_until_signalled()`: the `trio-pty serve` main loop (SIGINT/SIGTERM shutdown).

Per connection (`Connection`): one reader task parses frames and starts each request in the
connection's nursery, at most `max_requests_in_flight` at once (past that the reader waits,
so TCP pushes back on the client); one sender task drains a bounded queue of outgoing
frames. A client that does not read therefore only stalls its own connection: attachments
are cursors into the session's ring and simply lag, exit notifications give up after
`notification_timeout`, and nothing grows without bound.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any, Final, TextIO

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    wrap_server_stream,
)

from trio_pty.errors import PtyError
from trio_pty.limits import Limits
from trio_pty.manager import Manager, open_manager
from trio_pty.model import ExitEvent, OutputChunk
from trio_pty.policy.authorize import RulesAuthorizer
from trio_pty.policy.environment import EnvMode, deny_rules
from trio_pty.rpc import protocol
from trio_pty.rpc.config import ConfigError, ServeConfig, load_config, parse_config
from trio_pty.rpc.handshake import (
    RPC_PATH,
    Rejection,
    acceptable_hosts,
    check_handshake,
    format_page_url,
    format_url,
    is_loopback,
    page_origins,
)
from trio_pty.rpc.http import HttpFront, Site, socket_stream
from trio_pty.rpc.methods import (
    CANCEL_METHOD,
    AttachParams,
    CancelParams,
    Reply,
    UnknownMethod,
    chunk_json,
    dispatch,
    exit_event_json,
    output_notification,
    structure,
)
from trio_pty.session import Attachment

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "PAGE_LINE_PREFIX",
    "RPC_PATH",
    "ConfigError",
    "Connection",
    "Rejection",
    "RpcServer",
    "ServeConfig",
    "ServerOptions",
    "check_handshake",
    "format_page_url",
    "format_url",
    "is_loopback",
    "load_config",
    "open_server",
    "page_origins",
    "parse_config",
    "serve_until_signalled",
]

log = logging.getLogger("trio_pty.server")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
# `trio-pty serve` prints the monitor page's URL on stderr after this prefix.
PAGE_LINE_PREFIX: Final = "monitor page: "

CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_TOO_BIG: Final = 1009

_BUSY_RESPONSE: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 34\r\n"
    b"Connection: close\r\n\r\n"
    b"too many connections (try later)\n"
)


# --------------------------------------------------------------------------------------------
# Options


@attrs.frozen(kw_only=True)
class ServerOptions:
    """How the endpoint is exposed. `token` is required: there is no unauthenticated mode."""

    token: str = attrs.field(repr=False)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()
    path: str = RPC_PATH
    # Reported by server.info (the manager holds the real settings).
    env_mode: EnvMode = "inherit"
    env_deny: tuple[str, ...] = ()
    # The monitor page served at `/` (trio_pty.ui.load_page); None: no page (404). While a
    # page is served, its own origin (http:// + a Host value this server accepts) is allowed.
    page: Site | None = attrs.field(default=None, repr=False)

    @token.validator
    def _check_token(self, attribute: attrs.Attribute[str], value: str) -> None:
        if not value:
            raise ValueError("the token must not be empty")


# --------------------------------------------------------------------------------------------
# One connection


@attrs.define(eq=False)
class _Attachment:
    owner: str
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    go: trio.Event = attrs.Factory(trio.Event)
    done: trio.Event = attrs.Factory(trio.Event)


class Connection:
    """The tasks of one accepted WebSocket: reader, sender, requests, attachments, watchers."""

    def __init__(self, server: RpcServer, ws: WebSocketConnection, peer: str) -> None:
        self.server = server
        self.peer = peer
        self.close_code = CLOSE_NORMAL
        self.close_reason: str | None = None
        self._ws = ws
        self._limits = server.manager.limits
        bound = self._limits.max_requests_in_flight
        self._out_send, self._out_recv = trio.open_memory_channel[str](bound)
        self._queued_chars = 0  # of the frames in that queue; see _send
        self._queue_room = trio.lowlevel.ParkingLot()
        self._slots = trio.Semaphore(bound)
        self._in_flight: dict[protocol.RequestId, trio.CancelScope] = {}
        self._attachments: dict[str, _Attachment] = {}
        self._interest: dict[str, set[str]] = {}
        self._watchers: dict[str, trio.CancelScope] = {}
        self._scope = trio.CancelScope()
        self._nursery: trio.Nursery | None = None

    # -- the Context that methods see

    @property
    def manager(self) -> Manager:
        return self.server.manager

    def server_info(self) -> dict[str, Any]:
        return self.server.info()

    @property
    def requests_in_flight(self) -> int:
        return self._limits.max_requests_in_flight - self._slots.value

    @property
    def queued_chars(self) -> int:
        """The size of the frames waiting for the sender (a slow client's backlog)."""
        return self._queued_chars

    # -- life cycle

    def shutdown(self, code: int = CLOSE_GOING_AWAY, reason: str | None = None) -> None:
        """End the connection: cancel its requests, then close the socket with `code`."""
        self.close_code, self.close_reason = code, reason
        self._scope.cancel()

    async def run(self) -> None:
        """Serve until the client goes away or `shutdown()`; the caller closes the socket."""
        with self._scope:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._send_loop)
                await self._read_loop()
                nursery.cancel_scope.cancel()

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

    async def _read_loop(self) -> None:
        limit = self._limits.max_message_bytes
        while True:
            try:
                frame = await self._ws.get_message()
            except ConnectionClosed:
                return
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
            incoming = protocol.parse_message(frame)
            if isinstance(incoming, protocol.Invalid):
                await self._send(incoming.response)
            elif isinstance(incoming, protocol.Ignored):
                log.debug("%s: ignored a frame: %s", self.peer, incoming.reason)
            elif isinstance(incoming, protocol.Request):
                await self._start(incoming.id, incoming.method, incoming.params, respond=True)
            else:
                await self._start(None, incoming.method, incoming.params, respond=False)

    async def _start(
        self, id: protocol.RequestId, method: str, params: dict[str, Any], *, respond: bool
    ) -> None:
        if method == CANCEL_METHOD:
            await self._cancel_request(id, params, respond=respond)
            return
        tracked = respond and id is not None
        if tracked and id in self._in_flight:
            error = protocol.ErrorObject(
                protocol.INVALID_REQUEST,
                "Invalid request: this id is already used by a request in flight",
            )
            await self._send(error.encode(id))
            return
        await self._slots.acquire()
        scope = trio.CancelScope()
        if tracked:
            self._in_flight[id] = scope
        assert self._nursery is not None
        self._nursery.start_soon(self._run_request, id, method, params, scope, respond)

    async def _cancel_request(
        self, id: protocol.RequestId, params: dict[str, Any], *, respond: bool
    ) -> None:
        try:
            target = structure(params, CancelParams).id
        except protocol.InvalidParams as exc:
            if respond:
                await self._send(exc.to_error().encode(id))
            return
        scope = self._in_flight.get(target)
        if scope is not None:
            scope.cancel()
        if respond:
            await self._send(protocol.encode_result(id, {"cancelled": scope is not None}))

    async def _run_request(
        self,
        id: protocol.RequestId,
        method: str,
        params: dict[str, Any],
        scope: trio.CancelScope,
        respond: bool,
    ) -> None:
        reply: Reply | None = None
        sent = False
        try:
            text: str | None = None
            with scope:
                try:
                    reply = await dispatch(self, method, params)
                    text = protocol.encode_result(id, reply.result)
                except Exception as exc:
                    text = self._error_response(id, method, exc)
            if scope.cancelled_caught:
                text = protocol.request_cancelled().encode(id)
            if respond and text is not None:
                await self._send(text)
                sent = True
        finally:
            if self._in_flight.get(id) is scope:
                del self._in_flight[id]
            self._slots.release()
            if reply is not None and reply.on_sent is not None:
                reply.on_sent(sent or not respond)

    def _error_response(self, id: protocol.RequestId, method: str, exc: Exception) -> str:
        """The error response for an exception out of a method."""
        error = _single(exc)
        if isinstance(error, protocol.InvalidParams):
            return error.to_error().encode(id)
        if isinstance(error, UnknownMethod):
            return protocol.method_not_found(error.method).encode(id)
        if isinstance(error, PtyError):
            return protocol.error_for_exception(error).encode(id)
        log.exception("%s: internal error in %s", self.peer, method)
        return protocol.internal_error().encode(id)

    # -- attachments and exit notifications

    def watch_exit(self, session_id: str, owner: str) -> None:
        self._add_interest(session_id, owner, "notify")

    def _add_interest(self, session_id: str, owner: str, reason: str) -> None:
        self._interest.setdefault(session_id, set()).add(reason)
        if session_id not in self._watchers and self._nursery is not None:
            scope = trio.CancelScope()
            self._watchers[session_id] = scope
            self._nursery.start_soon(self._watch_exit, session_id, owner, scope)

    def _drop_interest(self, session_id: str, reason: str) -> None:
        reasons = self._interest.get(session_id)
        if reasons is None:
            return
        reasons.discard(reason)
        if not reasons:
            del self._interest[session_id]
            scope = self._watchers.pop(session_id, None)
            if scope is not None:
                scope.cancel()

    async def _watch_exit(self, session_id: str, owner: str, scope: trio.CancelScope) -> None:
        """Send `pty.exited` once the session ended and an attachment on this connection
        (if any) has delivered all of its output, so the notification comes last."""
        try:
            with scope:
                try:
                    event = await self.manager.wait_exit(session_id, owner=owner)
                except PtyError:  # gone already (removed, or its owner deleted)
                    if self._watchers.get(session_id) is scope:
                        self._interest.pop(session_id, None)
                    return
                while (attachment := self._attachments.get(session_id)) is not None:
                    await attachment.done.wait()
                # From here on a new attach starts a new watcher.
                if self._watchers.get(session_id) is scope:
                    del self._watchers[session_id]
                if not self._interest.pop(session_id, None):
                    return
                params = exit_event_json(event)
                with trio.move_on_after(self._limits.notification_timeout) as timer:
                    await self._send(protocol.encode_notification("pty.exited", params))
                if timer.cancelled_caught:
                    log.warning(
                        "%s: pty.exited for %s dropped (client not reading)", self.peer, session_id
                    )
        finally:
            if self._watchers.get(session_id) is scope:
                del self._watchers[session_id]

    async def attach(self, params: AttachParams) -> Reply:
        assert self._nursery is not None
        state, first = await self._nursery.start(self._run_attachment, params)
        previous = self._attachments.get(params.id)
        if previous is not None:
            previous.scope.cancel()
        self._attachments[params.id] = state
        self._add_interest(params.id, params.owner, "attach")

        def on_sent(sent: bool) -> None:
            if sent:
                state.go.set()
            elif self._attachments.get(params.id) is state:
                self.detach(params.id)
            else:
                state.scope.cancel()

        return Reply(first, on_sent)

    def detach(self, session_id: str) -> bool:
        state = self._attachments.pop(session_id, None)
        if state is None:
            return False
        state.scope.cancel()
        self._drop_interest(session_id, "attach")
        return True

    async def _run_attachment(
        self,
        params: AttachParams,
        task_status: trio.TaskStatus[tuple[_Attachment, dict[str, Any]]] = (
            trio.TASK_STATUS_IGNORED
        ),
    ) -> None:
        state = _Attachment(params.owner)
        session_id = params.id
        try:
            with state.scope:
                async with self.manager.attach(
                    session_id, owner=params.owner, offset=params.offset, driver=params.driver
                ) as attachment:
                    # The response carries what is there now; it must go out before the
                    # first pty.output, so the stream starts once it is queued (`go`).
                    first = await _first_chunk(attachment, params.offset)
                    task_status.started((state, chunk_json(session_id, first)))
                    await state.go.wait()
                    async for chunk in attachment:
                        await self._send(output_notification(session_id, chunk))
        finally:
            if self._attachments.get(session_id) is state:
                del self._attachments[session_id]
            state.done.set()


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


def _single(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (trio wraps errors raised in
    nurseries), or `exc` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


# --------------------------------------------------------------------------------------------
# The server


@attrs.define(eq=False)
class _StreamSlot:
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    connection: Connection | None = None
    # Endpoints of the socket under a wrapped stream (trio-websocket only sees the wrapper).
    local_host: str | None = None
    peer: str | None = None


class RpcServer:
    """The JSON-RPC endpoint in front of one manager."""

    def __init__(self, manager: Manager, options: ServerOptions) -> None:
        self.manager = manager
        self.options = options
        self.limits = manager.limits
        self.port = options.port
        self._slots: set[_StreamSlot] = set()
        self._accept_scope = trio.CancelScope()
        self._handlers_scope: trio.CancelScope | None = None
        self._started_at = time.monotonic()
        self._stopping = False
        self.finished = trio.Event()
        self.front = HttpFront(
            upgrade=self.handle_stream,
            host_ok=self._host_ok,
            limits=self.limits,
            site=options.page,
            rpc_path=options.path,
        )
        if not is_loopback(options.host):
            log.warning(
                "binding %s, which is not a loopback address: anyone who can reach this "
                "port and learns the token can run commands as this user. Prefer "
                "127.0.0.1 with an SSH tunnel, or put TLS and a firewall in front.",
                options.host,
            )

    @property
    def url(self) -> str:
        return format_url(self.options.host, self.port, self.options.path)

    @property
    def page_url(self) -> str | None:
        """The monitor page's URL (without the token), or None when no page is served."""
        if self.options.page is None:
            return None
        return format_page_url(self.options.host, self.port)

    @property
    def connections(self) -> list[Connection]:
        return [slot.connection for slot in self._slots if slot.connection is not None]

    def info(self) -> dict[str, Any]:
        from trio_pty import __version__

        sessions = self.manager.list_all()
        statuses: dict[str, int] = {}
        for session in sessions:
            statuses[session.status] = statuses.get(session.status, 0) + 1
        connections = self.connections
        return {
            "version": __version__,
            "uptime": round(time.monotonic() - self._started_at, 3),
            "limits": attrs.asdict(self.limits),
            "counts": {
                "sessions": len(sessions),
                "by_status": statuses,
                "owners": len({s.owner for s in sessions}),
                "connections": len(connections),
                "requests_in_flight": sum(c.requests_in_flight for c in connections),
                "queued_chars": sum(c.queued_chars for c in connections),
            },
            "environment": {
                "mode": self.options.env_mode,
                "deny": deny_rules(self.options.env_deny),
            },
            "allowed_origins": sorted(self.options.allowed_origins),
        }

    # -- accepting

    async def run(
        self, *, task_status: trio.TaskStatus[RpcServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Bind, report started, accept until `stop()`, then wait for the connections to
        close (each bounded by io_timeout). Cancel it to drop everything at once."""
        try:
            listeners = await trio.open_tcp_listeners(self.options.port, host=self.options.host)
            if len(listeners) > 1 and self.options.port == 0:
                # Port 0 on a name with several addresses gives each its own port; keep one.
                for extra in listeners[1:]:
                    await extra.aclose()
                listeners = listeners[:1]
            self.port = listeners[0].socket.getsockname()[1]
            async with trio.open_nursery() as handlers:
                self._handlers_scope = handlers.cancel_scope
                with self._accept_scope:
                    async with trio.open_nursery() as acceptors:
                        await acceptors.start(
                            partial(
                                trio.serve_listeners,
                                self.front.handle_stream,
                                listeners,
                                handler_nursery=handlers,
                            )
                        )
                        log.info("listening on %s", self.url)
                        task_status.started(self)
                        if self._stopping:
                            self._accept_scope.cancel()
        finally:
            self.finished.set()

    def stop(self, code: int = CLOSE_GOING_AWAY) -> None:
        """Stop accepting, cancel every request and close every connection with `code`
        (the closing handshakes then finish in the background, bounded by io_timeout)."""
        self._stopping = True
        self._accept_scope.cancel()
        self.front.stop()
        for slot in list(self._slots):
            if slot.connection is not None:
                slot.connection.shutdown(code, "server shutting down")
            else:
                slot.scope.cancel()

    def abort(self) -> None:
        """Stop waiting for clients: drop every connection now."""
        self.stop()
        if self._handlers_scope is not None:
            self._handlers_scope.cancel()

    # -- one stream

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one accepted stream: WebSocket handshake, checks, then the connection.
        Never raises (except cancellation); closes the stream before returning."""
        try:
            if self._stopping or len(self._slots) >= self.limits.max_connections:
                await self._refuse_busy(stream)
                return
            slot = _StreamSlot()
            sock = socket_stream(stream)
            if sock is not None and sock is not stream:
                with suppress(OSError):  # the peer may be gone already
                    local, remote = sock.socket.getsockname(), sock.socket.getpeername()
                    slot.local_host, slot.peer = str(local[0]), f"{remote[0]}:{remote[1]}"
            self._slots.add(slot)
            try:
                with slot.scope:
                    async with trio.open_nursery() as ws_tasks:
                        try:
                            with trio.fail_after(self.limits.io_timeout):
                                request = await wrap_server_stream(
                                    ws_tasks,
                                    stream,
                                    max_message_size=self.limits.max_message_bytes,
                                    receive_buffer_size=protocol.RECEIVE_BUFFER_BYTES,
                                )
                            await self.handle_request(request, _slot=slot)
                        finally:
                            ws_tasks.cancel_scope.cancel()
            finally:
                self._slots.discard(slot)
        # Whatever goes wrong with one connection stays with it; cancellation propagates.
        except* trio.TooSlowError:
            log.debug("handshake or accept timed out")
        except* (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("connection dropped")
        except* Exception as group:
            log.error("connection failed", exc_info=_single(group))
        finally:
            await trio.aclose_forcefully(stream)

    async def _refuse_busy(self, stream: trio.abc.Stream) -> None:
        log.warning("refusing a connection: %d connections open", len(self._slots))
        with trio.move_on_after(self.limits.io_timeout):
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(_BUSY_RESPONSE)

    def hosts(self, local_host: str | None) -> frozenset[str]:
        """The Host values naming this server for a client connected to `local_host`."""
        return acceptable_hosts(
            bound_host=self.options.host,
            port=self.port,
            allowed=self.options.allowed_hosts,
            local_host=local_host,
        )

    def _host_ok(self, host: str, local_host: str | None) -> bool:
        return host.lower() in self.hosts(local_host)

    def check(
        self, request: WebSocketRequest, *, local_host: str | None = None
    ) -> Rejection | None:
        local = request.local
        if not isinstance(local, str):
            local_host = str(local.address)
        hosts = self.hosts(local_host)
        origins = self.options.allowed_origins
        if self.options.page is not None:
            origins = origins | page_origins(hosts)
        return check_handshake(
            target=request.path,
            host=request._event.host,  # wsproto keeps Host out of `headers`
            headers=request.headers,
            token=self.options.token,
            hosts=hosts,
            origins=origins,
            path=self.options.path,
        )

    async def handle_request(
        self, request: WebSocketRequest, *, _slot: _StreamSlot | None = None
    ) -> None:
        """Check a parsed upgrade request, then accept it and serve the connection."""
        remote = request.remote
        peer = str(remote.url if not isinstance(remote, str) else remote)
        if isinstance(remote, str) and _slot is not None and _slot.peer is not None:
            peer = _slot.peer
        rejection = self.check(request, local_host=_slot.local_host if _slot else None)
        if rejection is not None:
            log.warning("refused %s: %d %s", peer, rejection.status, rejection.reason)
            headers = [(b"Content-Type", b"text/plain; charset=utf-8")]
            if rejection.status == 401:
                headers.append((b"WWW-Authenticate", b"Bearer"))
            with trio.move_on_after(self.limits.io_timeout):
                await request.reject(
                    rejection.status,
                    extra_headers=headers,
                    body=f"{rejection.status} {rejection.reason}\n".encode(),
                )
            return
        with trio.fail_after(self.limits.io_timeout):
            ws = await request.accept()
        connection = Connection(self, ws, peer)
        if _slot is not None:
            _slot.connection = connection
        if self._stopping:
            connection.shutdown()
        log.info("%s connected", peer)
        try:
            await connection.run()
        finally:
            with trio.move_on_after(self.limits.io_timeout):
                await ws.aclose(connection.close_code, connection.close_reason)
            log.info("%s disconnected (%d)", peer, connection.close_code)


@asynccontextmanager
async def open_server(manager: Manager, options: ServerOptions) -> AsyncIterator[RpcServer]:
    """Serve `manager` for the duration of the block (for embedding and tests). Leaving the
    block closes every connection with 1001, bounded by io_timeout."""
    try:
        async with trio.open_nursery() as nursery:
            server: RpcServer = await nursery.start(partial(RpcServer(manager, options).run))
            try:
                yield server
            finally:
                server.stop()
    except BaseExceptionGroup as group:
        raise _single(group) from None


# --------------------------------------------------------------------------------------------
# trio-pty serve


async def _log_exit(event: ExitEvent) -> None:
    """Sessions spawned with notify_on_exit are also announced in the server's log."""
    how = (
        f"signal {event.exit_signal}"
        if event.exit_signal is not None
        else f"code {event.exit_code}"
    )
    log.info(
        "session %s (owner %s, %r) ended with %s%s; last line: %r",
        event.id,
        event.owner,
        event.description,
        how,
        " after its timeout" if event.timed_out else "",
        event.last_line,
    )


async def serve_until_signalled(
    options: ServerOptions,
    *,
    limits: Limits,
    root: str | None = None,
    env_mode: EnvMode = "inherit",
    env_deny: Sequence[str] = (),
    authorizer: RulesAuthorizer | None = None,
    token_generated: bool = False,
    state_dir: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the server until SIGINT or SIGTERM, then shut down and return the exit status.

    On the first signal: stop accepting, cancel every request and close every connection
    with 1001 (in the background), tear every session down (the manager bounds that by
    close_timeout) and print one summary line. A second signal only stops waiting for the
    clients' closing handshakes; the teardown always runs to the end.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as root_nursery:
            async with open_manager(
                limits,
                on_exit=_log_exit,
                env_mode=env_mode,
                env_deny=env_deny,
                root=root,
                authorizer=authorizer,
                state_dir=state_dir,
            ) as manager:
                server: RpcServer = await root_nursery.start(
                    partial(RpcServer(manager, options).run)
                )
                print(server.url, file=out, flush=True)
                if token_generated:
                    print(
                        format_url(options.host, server.port, options.path, options.token),
                        file=out,
                        flush=True,
                    )
                if options.page is not None:
                    # The monitor page, on stderr: stdout's lines are a contract (the URLs,
                    # then only the shutdown summary). The token rides along only when it
                    # was generated (a token the user chose is typed into the page instead).
                    page_token = options.token if token_generated else None
                    page_url = format_page_url(options.host, server.port, page_token)
                    print(f"{PAGE_LINE_PREFIX}{page_url}", file=err, flush=True)
                signum = await _next_signal(signals)
                began = trio.current_time()
                live = [s for s in manager.list_all() if s.status in ("running", "killing")]
                log.info(
                    "%s: shutting down (%d live sessions)", signal.Signals(signum).name, len(live)
                )
                server.stop(CLOSE_GOING_AWAY)
                root_nursery.start_soon(_later_signals, signals, server)
                # Leaving this block tears every session down (bounded by close_timeout),
                # while the connections finish their closing handshakes.
            torn_down = trio.current_time() - began
            await server.finished.wait()
            root_nursery.cancel_scope.cancel()
    elapsed = trio.current_time() - began
    print(
        f"shutdown: {len(live)} sessions reaped in {torn_down:.2f} s "
        f"(server stopped after {elapsed:.2f} s)",
        file=out,
        flush=True,
    )
    return 0


async def _next_signal(signals: AsyncIterator[int]) -> int:
    async for signum in signals:
        return signum
    raise RuntimeError("signal receiver closed")  # pragma: no cover


async def _later_signals(signals: AsyncIterator[int], server: RpcServer) -> None:
    async for signum in signals:
        log.warning(
            "%s again: no longer waiting for clients; the teardown still completes",
            signal.Signals(signum).name,
        )
        server.abort()
