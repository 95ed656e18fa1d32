"""The async client of `trio-pty serve`, used by the CLI, the benchmarks and the tests.

    from trio_pty.wire import AttachParams, ReadParams, SpawnParams, WriteParams

    async with trio_pty.client.client.connect(url, token) as client:
        info = await client.request(SpawnParams(command="bash", args=["-l"], description="sh"))
        await client.request(WriteParams(id=info.id, data="echo hi\\n"))
        page = await client.request(ReadParams(id=info.id))
        async with client.attach(AttachParams(id=info.id)) as attachment:
            async for chunk in attachment:       # OutputChunks, in order, then ends on exit
                ...

`request(params)` sends the method of a params record of `trio_pty.wire` and returns its
result record (typed: `SpawnParams` gives a `SessionInfo`); results are read leniently, so a
newer server's extra fields do no harm. `call(method, params)` is the raw form. A JSON-RPC
error raises `RpcError` (with `code`, `kind`, `data`); a refused or failed connection raises
`ConnectionFailed`; a connection that drops while a call waits raises `ConnectionLost`.
Cancelling a call sends `$/cancelRequest` for it.
"""

from __future__ import annotations

import collections
import itertools
import logging
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, TypeVar, cast

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)

from trio_pty.errors import unwrap_group
from trio_pty.model import ExitEvent, OutputChunk
from trio_pty.wire import (
    EXITED,
    OUTPUT,
    RECEIVE_BUFFER_BYTES,
    AttachParams,
    CancelParams,
    CompactPage,
    DetachParams,
    InvalidResult,
    Notification,
    NotificationSpec,
    Params,
    ReadParams,
    Response,
    SessionOutput,
    encode_notification,
    encode_request,
    parse_server_message,
    spec_of,
    structure_result,
    unstructure_params,
)

__all__ = [
    "ClientAttachment",
    "ConnectionFailed",
    "ConnectionLost",
    "RpcError",
    "TrioPtyClient",
    "connect",
    "redact_url",
    "split_url",
]

log = logging.getLogger("trio_pty.client")

R = TypeVar("R")
N = TypeVar("N")

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
    response: Response | None = None
    error: BaseException | None = None


class ClientAttachment:
    """Live output of one session: iterate for OutputChunks (the response's first chunk,
    then each `pty.output`), in order. Iteration ends when the session has exited (then
    `exit_event` is set) or the connection closed (`ConnectionLost` is raised)."""

    def __init__(
        self,
        session_id: str,
        first: OutputChunk,
        receive: trio.MemoryReceiveChannel[Notification],
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
            if message.method == OUTPUT.name:
                chunk = structure_result(message.params, SessionOutput).chunk()
                self.cursor = chunk.offset + len(chunk.data)
                return chunk
            if message.method == EXITED.name:
                self.exit_event = structure_result(message.params, ExitEvent)
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
        self._attachments: dict[str, trio.MemorySendChannel[Notification]] = {}
        self._notifications: collections.deque[Notification] = collections.deque(
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
                message = parse_server_message(frame)
                if isinstance(message, Response):
                    self._resolve(message)
                elif isinstance(message, Notification):
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

    def _resolve(self, response: Response) -> None:
        id = response.id
        pending = self._pending.get(id) if isinstance(id, int) else None
        if pending is None:
            log.warning("response to an unknown request id %r", id)
            return
        pending.response = response
        pending.event.set()

    async def _route(self, message: Notification) -> None:
        session_id = message.params.get("id")
        channel = (
            self._attachments.get(session_id)
            if isinstance(session_id, str) and message.method in (OUTPUT.name, EXITED.name)
            else None
        )
        if channel is not None:
            # Back-pressure: a slow consumer slows this reader (and the server's stream).
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await channel.send(message)
        if message.method == OUTPUT.name:
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
            except ConnectionClosed as exc:
                self._fail_all(ConnectionLost("connection closed"))
                raise ConnectionLost("connection closed") from exc  # with the close reason
        if scope.cancelled_caught:
            self._fail_all(ConnectionLost("send timed out"))
            await self.aclose()
            raise ConnectionLost("send timed out: the server is not reading")

    async def aclose(self) -> None:
        """Close the connection (bounded by send_timeout)."""
        with trio.move_on_after(self._send_timeout):
            await self._ws.aclose()
        self._fail_all(ConnectionLost("client closed"))

    # -- calls

    async def request(self, params: Params[R]) -> R:
        """Call the method of `params` (a `trio_pty.wire` params record); its result record.
        Raises RpcError, ConnectionLost, or `wire.InvalidResult` for a result that does not
        fit its record (a field missing or mistyped; extra fields are fine)."""
        spec = spec_of(params)
        if isinstance(params, ReadParams) and params.format is None:
            # Pages travel compact unless the caller asks otherwise: callers get the same
            # ReadPage either way, and the compact form is the cheaper round trip.
            params = cast(Params[R], attrs.evolve(params, format="compact"))
        result = await self.call(spec.name, unstructure_params(params))
        if isinstance(params, ReadParams) and params.format == "compact":
            # The page came in its compact form; callers get the same ReadPage either way.
            try:
                page = structure_result(result, CompactPage).page()
            except ValueError as exc:
                raise InvalidResult(f"CompactPage: {exc}") from exc
            return cast(R, page)  # R is ReadPage: ReadParams is Params[ReadPage]
        return structure_result(result, spec.result)

    async def notify(self, params: Params[Any]) -> None:
        """Send the method of `params` as a notification (no response, not even an error)."""
        await self._send(encode_notification(spec_of(params).name, unstructure_params(params)))

    async def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """The raw form: send a request and wait for its JSON result; raises RpcError or
        ConnectionLost."""
        id = next(self._ids)
        pending = _Pending()
        self._pending[id] = pending
        try:
            await self._send(encode_request(id, method, dict(params or {})))
            try:
                await pending.event.wait()
            except trio.Cancelled:
                if self._closed is None and pending.response is None:
                    with trio.CancelScope(shield=True), trio.move_on_after(self._send_timeout):
                        await self.notify(CancelParams(id=id))
                raise
        finally:
            del self._pending[id]
        if pending.response is None:
            raise pending.error or ConnectionLost("connection closed")
        error = pending.response.error
        if error is not None:
            raise RpcError(error.code, error.message, error.data)
        return pending.response.result

    async def next_notification(self, spec: NotificationSpec[N]) -> N:
        """The oldest buffered notification of `spec` (`wire.EXITED`), waiting for one if
        needed. Output of attachments is not buffered here (it goes to the attachment)."""
        while True:
            for index, message in enumerate(self._notifications):
                if message.method == spec.name:
                    del self._notifications[index]
                    return structure_result(message.params, spec.params)
            if self._closed is not None:
                raise ConnectionLost(str(self._closed))
            await self._notified.park()

    @asynccontextmanager
    async def attach(
        self, params: AttachParams, *, buffer: int = 64
    ) -> AsyncIterator[ClientAttachment]:
        """Attach for the duration of the block; leaving it detaches. At most one
        attachment per session per client. `buffer` chunks are held before the client's
        reader waits for you (and the server's stream for this connection then lags)."""
        session_id = params.id
        if session_id in self._attachments:
            raise ValueError(f"already attached to {session_id} on this connection")
        send, receive = trio.open_memory_channel[Notification](buffer)
        self._attachments[session_id] = send
        attachment: ClientAttachment | None = None
        try:
            first = await self.request(params)
            attachment = ClientAttachment(session_id, first.chunk(), receive)
            attachment.cursor = first.next_offset  # a drawn first chunk is not raw output
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
                    await self.request(DetachParams(id=session_id, owner=params.owner))


def _describe(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, HandshakeError) and cause is not None:
        exc = cause
    elif isinstance(cause, BaseExceptionGroup) and isinstance(cause.exceptions[-1], OSError):
        exc = cause.exceptions[-1]  # trio's "all attempts to connect failed": the last one's
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


_WEBSOCKET_SCHEME: Final = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}
_RPC_PATH: Final = "/rpc"


def split_url(url: str) -> tuple[str, str | None]:
    """The WebSocket URL to connect to, and the token the URL carried (or None).

    The monitor's URL, `http://HOST:PORT/?token=T` as the server prints it, becomes
    `ws://HOST:PORT/rpc` (https: wss); the token leaves the URL in every case, so it goes
    in a header and no message made from the URL can show it. A URL that does not parse is
    given back without its query."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return url.split("?", 1)[0], None
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    tokens = [value for name, value in query if name == "token" and value]
    rest = urllib.parse.urlencode([(name, value) for name, value in query if name != "token"])
    scheme = _WEBSOCKET_SCHEME.get(parts.scheme.lower(), parts.scheme)
    path = parts.path
    if parts.scheme.lower() in ("http", "https") and path in ("", "/"):
        path = _RPC_PATH  # the monitor page's address: its RPC endpoint is /rpc
    cleaned = urllib.parse.urlunsplit((scheme, parts.netloc, path, rest, ""))
    return cleaned, (tokens[0] if tokens else None)


def redact_url(url: str) -> str:
    """`url` as a message may show it: without a token (see `split_url`)."""
    return split_url(url)[0]


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
    `Authorization: Bearer` header). The monitor's URL works too (`split_url`): a `?token=`
    in the URL is used when no `token` is given, and never shown in a message."""
    url, url_token = split_url(url)
    token = token or url_token
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ConnectionFailed(f"not a ws://, wss://, http:// or https:// URL: {url!r}")
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
        with unwrap_group():
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
                    ws = await _handshake(
                        nursery,
                        stream,
                        host_header,
                        resource,
                        extra_headers=extra,
                        max_message_size=max_message_size,
                        url=url,
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
    except BaseException as exc:
        failure = _connection_failure(exc, url) if client is None else None
        if failure is not None:
            raise failure from exc
        raise
    finally:
        if stream is not None:
            await trio.aclose_forcefully(stream)


class _EndWatch(trio.abc.Stream):
    """A stream that says when its peer closed or reset it (`ended`)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.ended = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            await self.inner.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.ended.set()
            raise

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            data = await self.inner.receive_some(max_bytes)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.ended.set()
            raise
        if not data:
            self.ended.set()
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _handshake(
    nursery: trio.Nursery,
    stream: trio.abc.Stream,
    host_header: str,
    resource: str,
    *,
    extra_headers: list[tuple[bytes, bytes]],
    max_message_size: int,
    url: str,
) -> WebSocketConnection:
    """The WebSocket handshake, failing at once if the server closes the connection first:
    trio-websocket waits for a response that cannot come (until `connect_timeout`, reported
    as a time-out), as with a port that accepts and closes (not a trio-pty server, or one
    shedding connections)."""
    watched = _EndWatch(stream)
    ws: WebSocketConnection | None = None
    async with trio.open_nursery() as race:

        async def until_closed() -> None:
            await watched.ended.wait()
            race.cancel_scope.cancel()

        race.start_soon(until_closed)
        ws = await wrap_client_stream(
            nursery,
            # Annotated narrower than it needs: only the `local`/`remote` properties (unused
            # here) want the socket; the connection itself uses the Stream methods.
            cast("trio.SocketStream", watched),
            host_header,
            resource,
            extra_headers=extra_headers,
            max_message_size=max_message_size,
            receive_buffer_size=RECEIVE_BUFFER_BYTES,
        )
        race.cancel_scope.cancel()
    if ws is None:
        raise ConnectionFailed(
            f"cannot connect to {url}: the server closed the connection during the handshake"
        )
    return ws


def _connection_failure(exc: BaseException, url: str) -> ConnectionFailed | None:
    """The ConnectionFailed for an error raised while connecting, or None."""
    if isinstance(exc, ConnectionRejected):
        body = (exc.body or b"").decode("utf-8", "replace").strip()
        # The server's bodies start with the status ("401 missing or wrong token").
        body = body.removeprefix(str(exc.status_code)).strip()
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
