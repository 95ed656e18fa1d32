"""The HTTP front of `trio-pty serve`: one port, two kinds of request.

Every accepted connection starts here. The request head is read once, with h11, bounded in
size (`Limits.max_http_head_bytes`) and in time (see "Slow heads" below), and then:

- a WebSocket upgrade request (`Upgrade: websocket`, whatever its path) is decided here, on
  that parsed request (`Endpoint.admit`: capacity, then Host, Origin, path, token, see
  `handshake.check_handshake`). A refusal is answered here; an admitted connection is handed
  to the JSON-RPC endpoint wrapped in a `ReplayStream` that first gives back the bytes already
  read, so trio-websocket can complete the WebSocket handshake from the original request.
- any other request is plain HTTP, answered here and then closed (one request per connection):
  the monitor page and its static files for `GET` (no token needed: they hold no secret; the
  page asks for the token and uses it on `/rpc`), `/healthz` (no token: 200 `ok`, or 503
  `draining`, with or without the page), `/metrics` (the Prometheus text, only with an
  `Authorization: Bearer` token for every owner), 404 for an unknown path, 405 for any method
  but GET (HEAD included: there is nothing to learn from a head here), 426 for `/rpc` without
  an upgrade, 403 for a Host header that does not name this server (as on `/rpc`), 400 for a
  malformed request (bad request line, no Host, absolute or `*` target), 431 for a head over
  `max_http_head_bytes`, 408 when the head does not arrive in time.

An upgrade request is held to the same request line as any other (a path as target, GET) and
to RFC 6455's HTTP/1.1, before the endpoint sees it.

Slow heads (slowloris): a connection may idle `io_timeout` before its first byte, and then
has `http_head_timeout` for the whole head, however it trickles in. Connections still being
read or answered here are `PendingHeads`, bounded apart from the established connections
(`max_pending_connections` in all, `max_pending_per_peer` per peer address; past either a
slow head is dropped for the new connection, which is refused only when none can be), so a
peer that never completes a head holds no established slot and cannot crowd out the others,
not even from the clients' own address (every local program is the peer 127.0.0.1).

Every response is written by h11, so its framing (`Content-Length`, a HEAD's missing body)
is never counted by hand. Static files only: the site is a fixed map from URL path to bytes
read once at start-up (no file system access per request, no templates, no directory
listing, no path to traverse).
Every response carries `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`,
`X-Frame-Options: DENY`, `Cache-Control: no-store` and a Content-Security-Policy: the page's
own (`page_csp`) on the HTML, `default-src 'none'` on everything else.
"""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import sys
import termios
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from functools import partial
from typing import Final, Protocol

import attrs
import h11
import trio

from trio_pty.limits import Limits
from trio_pty.logs import event
from trio_pty.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from trio_pty.rpc.handshake import Rejection

__all__ = [
    "BUSY",
    "HEALTH_PATH",
    "METRICS_PATH",
    "REFUSAL_KINDS",
    "Endpoint",
    "HttpFront",
    "PendingHeads",
    "ReplayStream",
    "Site",
    "StaticFile",
    "Upgrade",
    "header_value",
    "page_csp",
    "peer_key",
    "rejection_answer",
    "socket_stream",
]

log = logging.getLogger("trio_pty.http")

# How much is read at a time while the head arrives. An upgrade request with its token is well
# under 2 KiB; a browser's GET with cookies for "localhost" may be a few KiB.
_RECEIVE_BYTES: Final = 4096
_DRAIN_BYTES: Final = 65_536
_BUSY_LINGER: Final = 0.5  # seconds a refused connection is given to close first
# ...and a peer over its own bound, which may be the one flooding (each refused connection
# holds a descriptor that long): enough to read a request that came with the connection, so
# that closing does not reset it before the client reads the 503.
_PEER_BUSY_LINGER: Final = 0.1
# A pending connection is not dropped to make room before its first read returned or this
# long after its arrival: in a burst of new connections, a real client's head may have come
# in whole and still wait for its task's first read.
_DROPPABLE_AFTER: Final = 0.5

HEALTH_PATH: Final = "/healthz"
METRICS_PATH: Final = "/metrics"
#: Why a connection or request is refused, as the `refused` log event and the
#: `trio_pty_connections_refused_total` metric name it.
REFUSAL_KINDS: Final = ("host", "origin", "path", "token", "busy")

_REASONS: Final = {
    200: "OK",
    302: "Found",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    426: "Upgrade Required",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}

_COMMON_HEADERS: Final = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
    ("Connection", "close"),
)
_PLAIN_CSP: Final = (
    "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


@attrs.frozen
class StaticFile:
    body: bytes = attrs.field(repr=lambda body: f"<{len(body)} bytes>")
    content_type: str


@attrs.frozen(kw_only=True)
class Site:
    """What the front serves besides `/rpc`: `files` by exact URL path, `redirects` (URL path
    -> absolute URL, used for xterm.js on the CDN when no local copy is there), and the extra
    script/style sources the page's CSP must allow for those redirects."""

    files: Mapping[str, StaticFile]
    redirects: Mapping[str, str] = attrs.Factory(dict)
    script_sources: tuple[str, ...] = ()
    style_sources: tuple[str, ...] = ()
    html_paths: frozenset[str] = frozenset({"/"})


def page_csp(site: Site, host: str) -> str:
    """The page's Content-Security-Policy: scripts and styles only from this server (and the
    pinned CDN files when redirecting there), WebSocket connections only back to `host`, no
    inline code, no plugins, no framing, no base or form targets."""
    scripts = " ".join(("'self'", *site.script_sources))
    styles = " ".join(("'self'", *site.style_sources))
    return (
        f"default-src 'none'; script-src {scripts}; style-src {styles}; "
        f"connect-src 'self' ws://{host} wss://{host}; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def socket_stream(stream: trio.abc.Stream) -> trio.SocketStream | None:
    """The SocketStream under `stream` (following `transport_stream`), or None."""
    seen = 0
    current: object = stream
    while not isinstance(current, trio.SocketStream) and seen < 8:
        current = getattr(current, "transport_stream", None)
        if current is None:
            return None
        seen += 1
    return current if isinstance(current, trio.SocketStream) else None


class ReplayStream(trio.abc.HalfCloseableStream):
    """A stream that first gives back `replay` (the request head already read from
    `transport_stream`), then reads on from it. Sending and closing go straight through.

    Bytes that came in with the head (`held`: a client that sends frames before the 101, as
    RFC 6455 forbids but some do) are held back until the first send, i.e. until the
    WebSocket layer has answered the handshake: wsproto's server side drops whatever arrives
    before it switches protocols, and the requests in it would never be answered.
    """

    def __init__(self, transport_stream: trio.abc.Stream, replay: bytes, held: bytes = b"") -> None:
        self.transport_stream = transport_stream
        self._replay = replay
        self._held = held
        self._answered = trio.Event()
        #: How many bytes of what this stream gives are the replayed head.
        self.replayed_bytes = len(replay)

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._replay:
            await trio.lowlevel.checkpoint()
            size = len(self._replay) if max_bytes is None else max_bytes
            data, self._replay = self._replay[:size], self._replay[size:]
            return data
        if self._held:
            await self._answered.wait()
            size = len(self._held) if max_bytes is None else max_bytes
            data, self._held = self._held[:size], self._held[size:]
            return data
        return await self.transport_stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)
        self._answered.set()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        if not isinstance(self.transport_stream, trio.abc.HalfCloseableStream):
            raise trio.ClosedResourceError("the transport stream cannot be half-closed")
        await self.transport_stream.send_eof()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


@attrs.frozen
class _Answer:
    """A response to write through h11 (which counts the body and frames it)."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "text/plain; charset=utf-8"
    csp: str = _PLAIN_CSP


def _error(status: int, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> _Answer:
    return _Answer(status, f"{status} {reason}\n".encode(), headers)


#: The one answer to a connection over a bound (waiting heads, or open RPC connections).
BUSY: Final = _error(503, "too many connections (try later)")


def rejection_answer(rejection: Rejection) -> _Answer:
    """The answer to an upgrade request refused at the handshake."""
    extra = {401: (("WWW-Authenticate", "Bearer"),), 405: (("Allow", "GET"),)}
    return _error(rejection.status, rejection.reason, extra.get(rejection.status, ()))


def _render(answer: _Answer, connection: h11.Connection, *, head_only: bool = False) -> bytes:
    """The answer's bytes, written by h11 on the connection that read the request (so a HEAD
    gets the head only), or on a fresh one when there was no request."""
    headers = [("Content-Length", str(len(answer.body)))]
    if answer.body:
        headers.append(("Content-Type", answer.content_type))
    headers += [("Content-Security-Policy", answer.csp), *_COMMON_HEADERS, *answer.headers]
    response = h11.Response(
        status_code=answer.status, reason=_REASONS[answer.status].encode(), headers=headers
    )
    data = connection.send(response) or b""
    if answer.body and not head_only:
        data += connection.send(h11.Data(data=answer.body)) or b""
    return data + (connection.send(h11.EndOfMessage()) or b"")


@attrs.frozen
class _Head:
    """What was read of one connection: its h11 state, the request (None when the client
    closed before sending one), the head's bytes and any bytes read after the head."""

    connection: h11.Connection
    request: h11.Request | None = None
    head: bytes = b""
    rest: bytes = b""


Upgrade = Callable[[trio.abc.Stream], Awaitable[None]]


class Endpoint(Protocol):
    """The JSON-RPC side, as the front sees it (`RpcServer`)."""

    def hosts(self, local_host: str | None) -> frozenset[str]:
        """The Host values that name this server for a client connected to `local_host`."""
        ...

    def admit(
        self, request: h11.Request, *, local_host: str | None, peer: str | None
    ) -> Rejection | Upgrade:
        """Decide on an upgrade request: refuse it, or take a connection slot and return
        what serves the connection (given the stream, the request's bytes replayed)."""
        ...

    @property
    def ready(self) -> bool:
        """Whether new sessions are placed here (`/healthz` 200): False while draining."""
        ...

    def scrape(self, request: h11.Request) -> Rejection | str:
        """The metrics (Prometheus text), or why not (401, 403)."""
        ...


def peer_key(address: str) -> str:
    """What pending connections are counted by: the IPv4 address, or the /64 of an IPv6 one
    (a single host is routinely given a whole /64)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@attrs.define
class _Pending:
    peer: str | None
    since: float
    # Whether the client has sent nothing yet (no byte waiting in the kernel either); None
    # when that cannot be known (not a socket).
    silent: Callable[[], bool] | None = None
    heard: bool = False  # its first read returned


class PendingHeads:
    """The connections whose request head is being read or answered, each with the cancel
    scope that drops it. At most `per_peer` from one peer key and `total` in all: past
    either bound a droppable connection (of that peer, for its own bound) is dropped to make
    room for the new one, and the new one is refused only when none is. Droppable are, in
    this order, oldest first within each:

    1. the connections whose first read returned (`heard`) with the head still incomplete;
    2. those not read yet that sent nothing at all (no byte waiting in the kernel: a real
       client sends its head right after connecting, a silent slow peer never does);
    3. those not read yet that arrived `droppable_after` seconds ago or more.

    So under a flood of slow heads a real client, whose head takes milliseconds, is never
    the one dropped, even when it arrives amid a burst of new connections, or when a loaded
    server has not read it for longer than `droppable_after` while slow heads that arrived
    after it have sent bytes (that one was dropped while `heard` meant only droppable).

    The per-peer rule is the same as the total's, not a refusal: on the default loopback
    deployment every client, and any program in any session, is the one peer 127.0.0.1, and
    a refusal there let such a program holding `per_peer` trickling heads lock every client
    out (issue 30, finding 1: 0 of 15 connects in 8 s). The second kind is what keeps a
    burst of silent connections, each younger than `droppable_after`, from doing the same."""

    def __init__(self, *, total: int, per_peer: int, droppable_after: float) -> None:
        self._total = total
        self._per_peer = per_peer
        self._droppable_after = droppable_after
        self._entries: dict[trio.CancelScope, _Pending] = {}  # oldest first
        self._counts: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._entries)

    def enter(
        self, peer: str | None, now: float, silent: Callable[[], bool] | None = None
    ) -> trio.CancelScope | None:
        """The scope of a new connection from `peer` arriving at `now`, or None to refuse
        it. `silent` tells whether it has sent nothing yet, while it is not read."""
        if peer is not None and self._counts[peer] >= self._per_peer:
            if not self._drop_one(now, peer):
                return None
        elif len(self._entries) >= self._total and not self._drop_one(now, None):
            return None
        scope = trio.CancelScope()
        self._entries[scope] = _Pending(peer, now, silent)
        if peer is not None:
            self._counts[peer] += 1
        return scope

    def _drop_one(self, now: float, peer: str | None) -> bool:
        """Drop the first droppable connection (of `peer` only, unless None); False when
        there is none."""
        entries = [
            (scope, entry)
            for scope, entry in self._entries.items()
            if peer is None or entry.peer == peer
        ]
        kinds: list[Callable[[_Pending], bool]] = [
            lambda entry: entry.heard,
            lambda entry: entry.silent is not None and entry.silent(),
            lambda entry: now - entry.since >= self._droppable_after,
        ]
        for droppable in kinds:
            victim = next((scope for scope, entry in entries if droppable(entry)), None)
            if victim is not None:
                self.leave(victim)
                victim.cancel()
                return True
        return False

    def heard(self, scope: trio.CancelScope) -> None:
        """The connection's first read returned."""
        entry = self._entries.get(scope)
        if entry is not None:
            entry.heard = True
            entry.silent = None

    def leave(self, scope: trio.CancelScope) -> None:
        """The connection is answered, handed over or dropped (idempotent)."""
        entry = self._entries.pop(scope, None)
        if entry is not None and entry.peer is not None:
            self._counts[entry.peer] -= 1
            if not self._counts[entry.peer]:
                del self._counts[entry.peer]

    def cancel_all(self) -> None:
        for scope in list(self._entries):
            scope.cancel()


class HttpFront:
    """Reads each connection's request head and answers it, or hands an upgrade request the
    endpoint admits over to it.

    `site` is the page, or None for none (`--no-ui`: every path but `/rpc` is 404).
    `stop()` drops the connections still being read or answered."""

    def __init__(
        self, *, endpoint: Endpoint, limits: Limits, site: Site | None, rpc_path: str
    ) -> None:
        self._endpoint = endpoint
        self._limits = limits
        self.site = site
        self._rpc_path = rpc_path
        self._pending = PendingHeads(
            total=limits.max_pending_connections,
            per_peer=limits.max_pending_per_peer,
            droppable_after=_DROPPABLE_AFTER,
        )
        self._stopping = False
        self.refusals: Counter[str] = Counter()  # by REFUSAL_KINDS

    def _refused(self, peer: tuple[str, int] | None, status: int, kind: str, why: str) -> None:
        """Log a refusal (the `refused` event) and count it by kind."""
        who = _format_peer(peer)
        if kind not in REFUSAL_KINDS:  # a malformed request: not a refusal of a client
            log.warning("refused %s: %d %s", who, status, why)
            return
        self.refusals[kind] += 1
        log.warning(
            "refused %s: %d %s",
            who,
            status,
            why,
            extra=event("refused", peer=who, status=status, reason=kind),
        )

    @property
    def pending(self) -> int:
        """Connections being read or answered here (not yet handed over)."""
        return len(self._pending)

    def stop(self) -> None:
        self._stopping = True
        self._pending.cancel_all()

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one accepted connection. Never raises (except cancellation)."""
        handed_over = False
        try:
            local_host, peer = _endpoints(stream)
            scope = None
            if not self._stopping:
                key = peer_key(peer[0]) if peer is not None else None
                sock = socket_stream(stream)
                silent = partial(_nothing_waiting, sock) if sock is not None else None
                scope = self._pending.enter(key, trio.current_time(), silent)
            if scope is None:
                await self._refuse_busy(stream, peer)
                return
            try:
                with scope:
                    handed_over = await self._serve(stream, scope, local_host, peer)
            finally:
                self._pending.leave(scope)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("http: connection dropped")
        except Exception:
            log.exception("http: request failed")
        finally:
            if not handed_over:
                await trio.aclose_forcefully(stream)

    async def _refuse_busy(self, stream: trio.abc.Stream, peer: tuple[str, int] | None) -> None:
        """503 to a connection that gets no pending slot, then a moment for it to close."""
        if self._stopping:
            log.warning("http: refusing a connection: stopping")
        else:
            self._refused(peer, 503, "busy", "too many pending connections")
        await self._send(stream, _render(BUSY, h11.Connection(h11.SERVER)))
        await self._linger(stream, _BUSY_LINGER if self._stopping else _PEER_BUSY_LINGER)

    async def _serve(
        self,
        stream: trio.abc.Stream,
        scope: trio.CancelScope,
        local_host: str | None,
        peer: tuple[str, int] | None,
    ) -> bool:
        """Read the head; answer it, or hand the connection over (returns True then)."""
        head = await self._read_head(stream, scope)
        if isinstance(head, bytes):
            response = head
        elif head.request is None:
            return False  # closed before a request
        else:
            request = head.request
            if _is_upgrade(request):
                admitted = _malformed_upgrade(request) or self._endpoint.admit(
                    request, local_host=local_host, peer=_format_peer(peer) if peer else None
                )
                if not isinstance(admitted, Rejection):
                    self._pending.leave(scope)  # from here on the endpoint owns it
                    await admitted(ReplayStream(stream, head.head, head.rest))
                    return True
                self._refused(peer, admitted.status, admitted.kind, admitted.reason)
                answer = rejection_answer(admitted)
            else:
                answer = self._answer(request, local_host, peer)
            response = _render(answer, head.connection, head_only=request.method == b"HEAD")
        await self._send(stream, response)
        await self._linger(stream)
        return False

    async def _read_head(self, stream: trio.abc.Stream, scope: trio.CancelScope) -> _Head | bytes:
        """The head of the connection's request, or the error response to send."""
        connection = h11.Connection(
            h11.SERVER, max_incomplete_event_size=self._limits.max_http_head_bytes
        )
        received = bytearray()
        event: object = h11.NEED_DATA
        with trio.move_on_after(self._limits.io_timeout) as timer:
            try:
                while (event := connection.next_event()) is h11.NEED_DATA:
                    data = await stream.receive_some(_RECEIVE_BYTES)
                    self._pending.heard(scope)
                    if data and not received:
                        # The head's own deadline, from its first byte: trickling it a byte
                        # at a time cannot stretch it (slowloris).
                        timer.deadline = trio.current_time() + self._limits.http_head_timeout
                    received += data
                    connection.receive_data(bytes(data))
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint if exc.error_status_hint in _REASONS else 400
                return _render(_error(status, "malformed request"), connection)
        if timer.cancelled_caught:
            return _render(_error(408, "the request head did not arrive in time"), connection)
        if not isinstance(event, h11.Request):
            return _Head(connection)
        head = len(received) - len(connection.trailing_data[0])
        if head > self._limits.max_http_head_bytes:
            # h11 bounds a head still arriving; this bounds one that arrived whole.
            return _render(_error(431, "request head too large"), connection)
        if event.http_version not in (b"1.0", b"1.1"):
            return _render(_error(400, "unsupported HTTP version"), connection)
        return _Head(connection, event, bytes(received[:head]), bytes(received[head:]))

    def _answer(
        self, request: h11.Request, local_host: str | None, peer: tuple[str, int] | None
    ) -> _Answer:
        target = request.target.decode("latin-1")
        if not target.startswith("/"):
            return _error(400, "the target must be a path")
        host = header_value(request, b"host")
        if host is None or host.lower() not in self._endpoint.hosts(local_host):
            self._refused(peer, 403, "host", "Host not allowed")
            return _error(403, "Host not allowed (DNS rebinding defence)")
        if request.method != b"GET":
            return _error(405, "only GET is served here", (("Allow", "GET"),))
        path = target.partition("?")[0].partition("#")[0]
        if path == self._rpc_path:
            return _error(426, "this is the WebSocket endpoint", (("Upgrade", "websocket"),))
        if path == HEALTH_PATH:
            # Readiness for load balancers and orchestrators: nothing else in the answer.
            if self._endpoint.ready:
                return _Answer(200, b"ok\n")
            return _Answer(503, b"draining\n")
        if path == METRICS_PATH:
            scraped = self._endpoint.scrape(request)
            if isinstance(scraped, Rejection):
                self._refused(peer, scraped.status, scraped.kind, f"/metrics: {scraped.reason}")
                return rejection_answer(scraped)
            return _Answer(200, scraped.encode(), content_type=METRICS_CONTENT_TYPE)
        site = self.site
        if site is None:
            return _error(404, "not found (the monitor page is turned off)")
        file = site.files.get(path)
        if file is not None:
            csp = page_csp(site, host.lower()) if path in site.html_paths else _PLAIN_CSP
            return _Answer(200, file.body, content_type=file.content_type, csp=csp)
        location = site.redirects.get(path)
        if location is not None:
            return _Answer(302, headers=(("Location", location),))
        return _error(404, "not found")

    async def _send(self, stream: trio.abc.Stream, data: bytes) -> None:
        with trio.move_on_after(self._limits.io_timeout):
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(data)

    async def _linger(self, stream: trio.abc.Stream, most: float | None = None) -> None:
        """Half-close and wait (bounded) for the client to close, so that bytes it sent and
        we did not read (a request we refuse unread, a second request) cannot make the kernel
        reset the connection before the client has read the response."""
        if not isinstance(stream, trio.abc.HalfCloseableStream):
            return
        timeout = self._limits.io_timeout if most is None else min(most, self._limits.io_timeout)
        with trio.move_on_after(timeout):
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_eof()
                drained = 0
                while drained < _DRAIN_BYTES:
                    data = await stream.receive_some(_RECEIVE_BYTES)
                    if not data:
                        break
                    drained += len(data)


def _endpoints(stream: trio.abc.Stream) -> tuple[str | None, tuple[str, int] | None]:
    """The address the client connected to (an accepted Host value) and the client's
    address and port, when known."""
    sock = socket_stream(stream)
    if sock is None:
        return None, None
    try:
        local, remote = sock.socket.getsockname(), sock.socket.getpeername()
    except OSError:  # the peer may be gone already
        return None, None
    return str(local[0]), (str(remote[0]), int(remote[1]))


def _nothing_waiting(stream: trio.SocketStream) -> bool:
    """Whether no byte has arrived on the socket (FIONREAD: bytes in its receive queue)."""
    try:
        waiting = fcntl.ioctl(stream.socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except OSError:  # closed meanwhile
        return True
    return int.from_bytes(waiting, sys.byteorder) == 0


def _format_peer(peer: tuple[str, int] | None) -> str:
    return f"{peer[0]}:{peer[1]}" if peer is not None else "a client"


def _malformed_upgrade(request: h11.Request) -> Rejection | None:
    """What refuses an upgrade request before the endpoint decides on it: the request line
    rules of every request here (a path as target, not absolute-form; GET), and RFC 6455's
    HTTP/1.1 (an HTTP/1.0 client cannot be switched to another protocol)."""
    if request.http_version != b"1.1":
        return Rejection(400, "a WebSocket upgrade needs HTTP/1.1")
    if not request.target.startswith(b"/"):
        return Rejection(400, "the target must be a path")
    if request.method != b"GET":
        return Rejection(405, "only GET is served here")
    return None


def header_value(request: h11.Request, name: bytes) -> str | None:
    """The value of a header that must appear once (None when absent or repeated)."""
    values = [value for key, value in request.headers if key == name]
    if len(values) != 1:
        return None
    return bytes(values[0]).decode("latin-1")


def _is_upgrade(request: h11.Request) -> bool:
    for key, value in request.headers:
        if key == b"upgrade" and any(
            token.strip().lower() == b"websocket" for token in bytes(value).split(b",")
        ):
            return True
    return False
