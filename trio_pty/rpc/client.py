"""The async client of `trio-pty serve`, used by the CLI, the benchmarks and the tests.

    async with trio_pty.rpc.client.connect(url, token) as client:
        info = await client.spawn("bash", ["-l"], description="a shell")
        await client.write(info.id, "echo hi\\n")
        page = await client.read(info.id)
        async with client.attach(info.id) as attachment:
            async for chunk in attachment:       # OutputChunks, in order, then ends on exit
                ...

`call(method, params)` is the raw form; the typed helpers structure results into the
library's records. A JSON-RPC error raises `RpcError` (with `code`, `kind`, `data`); a
refused or failed connection raises `ConnectionFailed`; a connection that drops while a
call waits raises `ConnectionLost`. Cancelling a call sends `$/cancelRequest` for it.
"""

from __future__ import annotations

import base64
import collections
import itertools
import logging
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, TypeVar

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)

from trio_pty.model import (
    ExitEvent,
    OutputChunk,
    ReadPage,
    SessionInfo,
    Wait,
    WriteResult,
)
from trio_pty.model import converter as model_converter
from trio_pty.rpc import protocol

__all__ = [
    "ClientAttachment",
    "ConnectionFailed",
    "ConnectionLost",
    "RpcError",
    "TrioPtyClient",
    "connect",
]

log = logging.getLogger("trio_pty.client")

T = TypeVar("T")

DEFAULT_URL: Final = "ws://127.0.0.1:8765/rpc"
_MAX_MESSAGE_BYTES: Final = 1 << 24  # responses carry up to max_raw_read_bytes, base64'd


class RpcError(Exception):
    """The server answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: dict[str, Any] = dict(data or {})

    @property
    def kind(self) -> str | None:
        """The PtyError kind for application errors (`session_not_found`, ...), else None."""
        kind = self.data.get("kind")
        return kind if isinstance(kind, str) else None

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.message!r}, {self.data!r})"


class ConnectionFailed(Exception):
    """The connection could not be opened (refused, unreachable, rejected at the handshake).
    `status` is the HTTP status of a rejection (401 wrong token, 403 origin/host)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ConnectionLost(Exception):
    """The connection closed while a call was waiting (or before it was sent)."""


@attrs.define(eq=False)
class _Pending:
    event: trio.Event = attrs.Factory(trio.Event)
    response: protocol.Response | None = None
    error: BaseException | None = None


def _chunk(params: Mapping[str, Any]) -> OutputChunk:
    return OutputChunk(
        offset=int(params["offset"]),
        data=base64.b64decode(params["data"]),
        gap=bool(params.get("gap", False)),
    )


class ClientAttachment:
    """Live output of one session: iterate for OutputChunks (the response's first chunk,
    then each `pty.output`), in order. Iteration ends when the session has exited (then
    `exit_event` is set) or the connection closed (`ConnectionLost` is raised)."""

    def __init__(
        self,
        session_id: str,
        first: OutputChunk,
        receive: trio.MemoryReceiveChannel[protocol.Notification],
    ) -> None:
        self.id = session_id
        self.first = first
        self.exit_event: ExitEvent | None = None
        self.cursor = first.offset + len(first.data)
        """The offset of the next byte: reattach with `offset=cursor` to resume."""
        self._receive = receive
        self._first_pending = bool(first.data) or first.gap
        self._ended = False

    @property
    def ended(self) -> bool:
        return self._ended

    def __aiter__(self) -> ClientAttachment:
        return self

    async def __anext__(self) -> OutputChunk:
        if self._first_pending:
            self._first_pending = False
            return self.first
        if self._ended:
            raise StopAsyncIteration
        while True:
            try:
                message = await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                self._ended = True
                raise ConnectionLost("connection closed during attach") from None
            if message.method == "pty.output":
                chunk = _chunk(message.params)
                self.cursor = chunk.offset + len(chunk.data)
                return chunk
            if message.method == "pty.exited":
                self.exit_event = model_converter.structure(message.params, ExitEvent)
                self._ended = True
                raise StopAsyncIteration


class TrioPtyClient:
    """One connection to the server. Get it from `connect()`."""

    def __init__(
        self,
        ws: WebSocketConnection,
        *,
        notification_buffer: int = 1000,
        send_timeout: float = 10.0,
    ) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._attachments: dict[str, trio.MemorySendChannel[protocol.Notification]] = {}
        self._notifications: collections.deque[protocol.Notification] = collections.deque(
            maxlen=notification_buffer
        )
        self._notified = trio.lowlevel.ParkingLot()
        self._send_timeout = send_timeout
        self._closed: BaseException | None = None
        self.dropped_notifications = 0

    # -- the connection

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def _reader(self) -> None:
        reason: BaseException = ConnectionLost("connection closed")
        try:
            while True:
                frame = await self._ws.get_message()
                message = protocol.parse_server_message(frame)
                if isinstance(message, protocol.Response):
                    self._resolve(message)
                elif isinstance(message, protocol.Notification):
                    await self._route(message)
                else:
                    reason = ConnectionLost(f"malformed message from server: {message.reason}")
                    log.error("%s", reason)
                    break
        except ConnectionClosed as exc:
            close = exc.reason
            if close is not None:
                detail = f"{close.code} {close.name}"
                if close.reason:
                    detail += f": {close.reason}"
                reason = ConnectionLost(f"connection closed ({detail})")
        finally:
            self._fail_all(reason)
        with trio.move_on_after(self._send_timeout):
            await self._ws.aclose()

    def _resolve(self, response: protocol.Response) -> None:
        id = response.id
        pending = self._pending.get(id) if isinstance(id, int) else None
        if pending is None:
            log.warning("response to an unknown request id %r", id)
            return
        pending.response = response
        pending.event.set()

    async def _route(self, message: protocol.Notification) -> None:
        session_id = message.params.get("id")
        channel = (
            self._attachments.get(session_id)
            if isinstance(session_id, str) and message.method in ("pty.output", "pty.exited")
            else None
        )
        if channel is not None:
            # Back-pressure: a slow consumer slows this reader (and the server's stream).
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await channel.send(message)
        if message.method == "pty.output":
            return  # delivered to its attachment above, or nobody wants it any more
        if len(self._notifications) == self._notifications.maxlen:
            self.dropped_notifications += 1
        self._notifications.append(message)
        self._notified.unpark_all()

    def _fail_all(self, reason: BaseException) -> None:
        if self._closed is None:
            self._closed = reason
        for pending in self._pending.values():
            pending.error = reason
            pending.event.set()
        for channel in self._attachments.values():
            channel.close()
        self._notified.unpark_all()

    async def _send(self, text: str) -> None:
        """Send one frame. Not cancellable half-way (that would corrupt the stream), but
        bounded: a server that stops reading for send_timeout loses the connection."""
        if self._closed is not None:
            raise ConnectionLost(str(self._closed))
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self._send_timeout
            try:
                await self._ws.send_message(text)
            except ConnectionClosed:
                self._fail_all(ConnectionLost("connection closed"))
                raise ConnectionLost("connection closed") from None
        if scope.cancelled_caught:
            self._fail_all(ConnectionLost("send timed out"))
            await self.aclose()
            raise ConnectionLost("send timed out: the server is not reading")

    async def aclose(self) -> None:
        """Close the connection (bounded by send_timeout)."""
        with trio.move_on_after(self._send_timeout):
            await self._ws.aclose()
        self._fail_all(ConnectionLost("client closed"))

    # -- raw calls

    async def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Send a request and wait for its result; raises RpcError or ConnectionLost."""
        id = next(self._ids)
        pending = _Pending()
        self._pending[id] = pending
        try:
            await self._send(protocol.encode_request(id, method, dict(params or {})))
            try:
                await pending.event.wait()
            except trio.Cancelled:
                if self._closed is None and pending.response is None:
                    with trio.CancelScope(shield=True), trio.move_on_after(self._send_timeout):
                        await self._send(
                            protocol.encode_notification("$/cancelRequest", {"id": id})
                        )
                raise
        finally:
            del self._pending[id]
        if pending.response is None:
            raise pending.error or ConnectionLost("connection closed")
        error = pending.response.error
        if error is not None:
            raise RpcError(error.code, error.message, error.data)
        return pending.response.result

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification (no response)."""
        await self._send(protocol.encode_notification(method, dict(params or {})))

    async def next_notification(self, method: str | None = None) -> protocol.Notification:
        """The oldest buffered notification (of `method`), waiting for one if needed.
        Output of attachments is not buffered here (it goes to the attachment)."""
        while True:
            for index, message in enumerate(self._notifications):
                if method is None or message.method == method:
                    del self._notifications[index]
                    return message
            if self._closed is not None:
                raise ConnectionLost(str(self._closed))
            await self._notified.park()

    # -- typed helpers

    async def spawn(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        description: str,
        owner: str = "default",
        workdir: str | None = None,
        title: str | None = None,
        notify_on_exit: bool = False,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        rows: int = 24,
        cols: int = 80,
        ready: Wait | None = None,
    ) -> SessionInfo:
        params: dict[str, Any] = {
            "command": command,
            "args": list(args),
            "description": description,
            "owner": owner,
            "notify_on_exit": notify_on_exit,
            "rows": rows,
            "cols": cols,
        }
        for key, value in (
            ("workdir", workdir),
            ("title", title),
            ("timeout", timeout),
            ("env", dict(env) if env is not None else None),
            ("ready", _wait_json(ready)),
        ):
            if value is not None:
                params[key] = value
        return _structure(await self.call("pty.spawn", params), SessionInfo)

    async def write(
        self,
        session_id: str,
        data: str,
        *,
        owner: str = "default",
        escapes: bool = False,
        wait: Wait | None = None,
    ) -> WriteResult:
        params: dict[str, Any] = {"id": session_id, "data": data, "owner": owner}
        if escapes:
            params["escapes"] = True
        if wait is not None:
            params["wait"] = _wait_json(wait)
        return _structure(await self.call("pty.write", params), WriteResult)

    async def read(
        self,
        session_id: str,
        *,
        owner: str = "default",
        offset: int = 0,
        limit: int | None = None,
        pattern: str | None = None,
        ignore_case: bool = False,
        wait: Wait | None = None,
    ) -> ReadPage:
        params: dict[str, Any] = {"id": session_id, "owner": owner, "offset": offset}
        if limit is not None:
            params["limit"] = limit
        if pattern is not None:
            params["pattern"] = pattern
            params["ignore_case"] = ignore_case
        if wait is not None:
            params["wait"] = _wait_json(wait)
        return _structure(await self.call("pty.read", params), ReadPage)

    async def read_raw(
        self,
        session_id: str,
        *,
        owner: str = "default",
        offset: int = 0,
        limit: int | None = None,
    ) -> OutputChunk:
        params: dict[str, Any] = {"id": session_id, "owner": owner, "offset": offset}
        if limit is not None:
            params["limit"] = limit
        return _chunk(await self.call("pty.read_raw", params))

    async def list(self, *, owner: str = "default") -> list[SessionInfo]:
        result = await self.call("pty.list", {"owner": owner})
        return [_structure(item, SessionInfo) for item in result["sessions"]]

    async def kill(
        self, session_id: str, *, owner: str = "default", cleanup: bool = False
    ) -> SessionInfo:
        params = {"id": session_id, "owner": owner, "cleanup": cleanup}
        return _structure(await self.call("pty.kill", params), SessionInfo)

    async def resize(
        self, session_id: str, *, rows: int, cols: int, owner: str = "default"
    ) -> SessionInfo:
        params = {"id": session_id, "owner": owner, "rows": rows, "cols": cols}
        return _structure(await self.call("pty.resize", params), SessionInfo)

    async def delete_owner(self, owner: str) -> int:
        result = await self.call("owner.delete", {"owner": owner})
        return int(result["removed"])

    async def server_info(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.call("server.info")
        return result

    @asynccontextmanager
    async def attach(
        self,
        session_id: str,
        *,
        owner: str = "default",
        offset: int | None = None,
        driver: bool = False,
        buffer: int = 64,
    ) -> AsyncIterator[ClientAttachment]:
        """Attach for the duration of the block; leaving it detaches. At most one
        attachment per session per client. `buffer` chunks are held before the client's
        reader waits for you (and the server's stream for this connection then lags)."""
        if session_id in self._attachments:
            raise ValueError(f"already attached to {session_id} on this connection")
        send, receive = trio.open_memory_channel[protocol.Notification](buffer)
        self._attachments[session_id] = send
        attachment: ClientAttachment | None = None
        try:
            params: dict[str, Any] = {"id": session_id, "owner": owner, "driver": driver}
            if offset is not None:
                params["offset"] = offset
            result = await self.call("pty.attach", params)
            attachment = ClientAttachment(session_id, _chunk(result), receive)
            yield attachment
        finally:
            if self._attachments.get(session_id) is send:
                del self._attachments[session_id]
            send.close()
            receive.close()
            if attachment is not None and not attachment.ended and self._closed is None:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(self._send_timeout),
                    suppress(RpcError, ConnectionLost),
                ):
                    await self.call("pty.detach", {"id": session_id, "owner": owner})


def _wait_json(wait: Wait | None) -> dict[str, Any] | None:
    if wait is None:
        return None
    return {k: v for k, v in model_converter.unstructure(wait).items() if v is not None}


def _structure(value: Any, cls: type[T]) -> T:
    return model_converter.structure(value, cls)


def _single(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, HandshakeError) and cause is not None:
        exc = cause
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


@asynccontextmanager
async def connect(
    url: str = DEFAULT_URL,
    token: str | None = None,
    *,
    origin: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    connect_timeout: float = 10.0,
    send_timeout: float = 10.0,
    notification_buffer: int = 1000,
    max_message_size: int = _MAX_MESSAGE_BYTES,
) -> AsyncIterator[TrioPtyClient]:
    """Connect to `trio-pty serve` at `url` (the token, when given, goes in an
    `Authorization: Bearer` header; a `?token=` already in the URL also works)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ConnectionFailed(f"not a ws:// or wss:// URL: {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "wss" else 80)
    except ValueError:
        raise ConnectionFailed(f"bad port in URL: {url!r}") from None
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    extra = [(name.encode(), value.encode()) for name, value in headers]
    if token:
        extra.append((b"Authorization", f"Bearer {token}".encode()))
    if origin is not None:
        extra.append((b"Origin", origin.encode()))
    host = parts.hostname
    host_header = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        host_header += f":{port}"
    client: TrioPtyClient | None = None
    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] | None = None
    try:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(connect_timeout):
                stream = await trio.open_tcp_stream(host, port)
                if parts.scheme == "wss":
                    stream = trio.SSLStream(
                        stream,
                        ssl.create_default_context(),
                        server_hostname=host,
                        https_compatible=True,
                    )
                ws = await wrap_client_stream(
                    nursery,
                    stream,
                    host_header,
                    resource,
                    extra_headers=extra,
                    max_message_size=max_message_size,
                    receive_buffer_size=protocol.RECEIVE_BUFFER_BYTES,
                )
            client = TrioPtyClient(
                ws, notification_buffer=notification_buffer, send_timeout=send_timeout
            )
            nursery.start_soon(client._reader)
            try:
                yield client
            finally:
                await client.aclose()
                nursery.cancel_scope.cancel()
    except BaseException as raised:
        exc = _single(raised)
        if client is None:
            failure = _connection_failure(exc, url)
            if failure is not None:
                raise failure from None
        if exc is raised:
            raise
        raise exc from None
    finally:
        if stream is not None:
            await trio.aclose_forcefully(stream)


def _connection_failure(exc: BaseException, url: str) -> ConnectionFailed | None:
    """The ConnectionFailed for an error raised while connecting, or None."""
    if isinstance(exc, ConnectionRejected):
        body = (exc.body or b"").decode("utf-8", "replace").strip()
        return ConnectionFailed(
            f"server refused the connection: HTTP {exc.status_code}"
            + (f" ({body})" if body else ""),
            status=exc.status_code,
        )
    if isinstance(exc, trio.TooSlowError):
        return ConnectionFailed(f"timed out connecting to {url}")
    if isinstance(exc, HandshakeError | OSError | ConnectionClosed):
        return ConnectionFailed(f"cannot connect to {url}: {_describe(exc)}")
    return None
