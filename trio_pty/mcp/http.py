"""`trio-pty mcp --http`: MCP over streamable HTTP, on a port of its own.

The SDK's streamable-HTTP app (`StreamableHTTPSessionManager`, stateless: no protocol
session, nothing kept per client) under hypercorn's trio worker, so the request path is
trio from the socket to the manager: no uvicorn, no asyncio. Both protocol eras are the
SDK's: 2026-07-28 requests (version and capabilities in each request's `_meta`) and the
handshake era (`initialize`, then requests that carry no session id).

Before the SDK sees a request, `Gate` decides on it as `trio-pty serve` decides on a
WebSocket upgrade (`rpc.handshake`): Host (403), Origin (403), path (404), token (401,
`Authorization: Bearer`, compared in constant time with the server token and every
`[[tokens]]` one). The token's `TokenScope` and the owner it acts for (`?owner=NAME`, or
the token's only owner, or `mcp` for a token of every owner) are the request's `Grant`: the
tool call runs on a `LocalClient` with that scope, so read-only and owner-scoped tokens
refuse exactly what they refuse over the WebSocket.

No per-client state: each (token, owner) has one `Backend` (its read cursor, its
`shell_command` shell), whichever connection the request came on.

Closing the response stream cancels the call (the SDK cancels the handler when the client
disconnects); a cancelled `exec_command` interrupts its command as Ctrl-C would.

Slow clients: a request head is bounded in size (`max_http_head_bytes`, 431 past it) and
must be complete within `io_timeout` of the connection's start or of its previous response
(hypercorn's keep-alive timer, which partial heads do not reset); the body must be complete
within `io_timeout` of the head (408) and at most `max_message_bytes` (413), read here
before the SDK parses anything; at most `max_connections` calls run at once (503 past that).
"""

from __future__ import annotations

import collections
import logging
import sys
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any, Final

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trio_pty.client.local import LocalClient
from trio_pty.errors import InvalidInput
from trio_pty.limits import Limits
from trio_pty.manager import Manager, open_manager
from trio_pty.policy import validate
from trio_pty.rpc.handshake import Rejection, acceptable_hosts, check_handshake, own_origins
from trio_pty.rpc.scope import TokenScope

from .backend import Backend
from .server import LOCAL_OWNER, STOP_SIGNALS, InProcess, build_server, stop_on_signals

__all__ = ["DEFAULT_PORT", "MCP_PATH", "Gate", "Grant", "HttpOptions", "run", "serve_http"]

log = logging.getLogger("trio_pty.mcp")

MCP_PATH: Final = "/mcp"
#: The ASGI scope key under which `Gate` hands the request's `Grant` to the tools.
GRANT_KEY: Final = "trio_pty.grant"
#: A handshake-era session no request has used for this long is forgotten (2026-07-28
#: requests have no session).
LEGACY_SESSION_IDLE: Final = 600.0
#: Backends kept (each a read cursor and a shell): the least recently used goes first.
MAX_BACKENDS: Final = 256


@attrs.frozen
class Grant:
    """What one request may do: the token's scope, and the owner it acts for."""

    scope: TokenScope
    owner: str


def owner_for(scope: TokenScope, asked: str | None, limits: Limits) -> Rejection | str:
    """The owner a request acts for: the one it asked for (`?owner=`), if its token may use
    it; else the token's only owner; else, for a token of every owner, `mcp`. Pure."""
    if asked is not None:
        try:
            asked = validate.owner(asked, limits)
        except InvalidInput as exc:
            return Rejection(400, str(exc), "owner")
        if not scope.sees(asked):
            return Rejection(403, f"not an owner of token {scope.name!r}", "owner")
        return asked
    exact = [owner for owner in scope.owners if not any(char in owner for char in "*?[")]
    if len(scope.owners) == 1 and exact:
        return exact[0]
    if scope.every_owner:
        return LOCAL_OWNER
    return Rejection(400, "this token has several owners: name one with ?owner=NAME", "owner")


class Gate:
    """ASGI middleware in front of the SDK's app: the checks `serve` makes on an upgrade,
    the owner, and the bound on calls running at once. Answers lifespan events itself."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: Mapping[str, TokenScope],
        hosts: Callable[[str | None], Collection[str]],
        origins: Callable[[str | None], Collection[str]],
        limits: Limits,
    ) -> None:
        self._app = app
        self._tokens = dict(tokens)
        self._hosts = hosts
        self._origins = origins
        self._limits = limits
        self._running = trio.CapacityLimiter(limits.max_connections)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # a WebSocket: not ours
            await send({"type": "websocket.close", "code": 1008})
            return
        decision = self._decide(scope)
        if isinstance(decision, Rejection):
            log.info("refused (%s): %s", decision.kind, decision.reason)
            await _refuse(send, decision)
            return
        try:
            self._running.acquire_nowait()
        except trio.WouldBlock:
            await _refuse(send, Rejection(503, "too many calls at once (try later)", "busy"))
            return
        try:
            body = await self._body(receive)
            if isinstance(body, Rejection):
                await _refuse(send, body)
                return
            scope = {**scope, GRANT_KEY: decision, "user": _principal(decision)}
            await self._app(scope, _replay(body, receive), send)
        finally:
            self._running.release()

    async def _body(self, receive: Receive) -> Rejection | bytes:
        """The whole request body, bounded in size and in time (a body that trickles in
        would otherwise hold a call slot for as long as its sender likes)."""
        limit = self._limits.max_message_bytes
        parts: list[bytes] = []
        size = 0
        with trio.move_on_after(self._limits.io_timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return Rejection(400, "the client left", "")
                part = message.get("body", b"")
                size += len(part)
                if size > limit:
                    return Rejection(413, f"request body over {limit} bytes", "size")
                parts.append(part)
                if not message.get("more_body", False):
                    return b"".join(parts)
        return Rejection(408, "the request body did not arrive in time", "slow")

    def _decide(self, scope: Scope) -> Rejection | Grant:
        headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        hosts = [value.decode("latin-1") for name, value in headers if name.lower() == b"host"]
        local = scope.get("server")
        local_host = local[0] if local else None
        query = scope.get("query_string", b"").decode("latin-1")
        target = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        decision = check_handshake(
            target=target + (f"?{query}" if query else ""),
            host=hosts[0] if len(hosts) == 1 else None,
            headers=headers,
            tokens=self._tokens,
            hosts=self._hosts(local_host),
            origins=self._origins(local_host),
            path=MCP_PATH,
        )
        if isinstance(decision, Rejection):
            return decision
        asked = urllib.parse.parse_qs(query).get("owner")
        if asked is not None and len(asked) > 1:
            return Rejection(400, "more than one owner", "owner")
        owner = owner_for(decision, asked[0] if asked else None, self._limits)
        if isinstance(owner, Rejection):
            return owner
        return Grant(decision, owner)


def _principal(grant: Grant) -> AuthenticatedUser:
    """The grant as the SDK names a caller: a handshake-era session opened with one token
    and owner answers only requests with the same token and owner."""
    client = f"{grant.scope!r}/{grant.owner}"
    return AuthenticatedUser(AccessToken(token="", client_id=client, scopes=[]))


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app: the body read already, then the client's own messages (the
    disconnect that cancels the call)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop per server here: `serve_http` holds the SDK's manager."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _refuse(send: Send, rejection: Rejection) -> None:
    body = (rejection.reason + "\n").encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if rejection.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": rejection.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Backends:
    """One `Backend` per (token, owner), made on first use: its read cursor and its shell
    live on between requests, whatever connection they come on."""

    def __init__(self, manager: Manager) -> None:
        self._manager = manager
        self._backends: collections.OrderedDict[tuple[TokenScope, str], Backend] = (
            collections.OrderedDict()
        )

    def for_request(self, context: Any) -> Backend:
        """The backend of the request a tool call came in (the SDK's request context)."""
        grant = context.request.scope[GRANT_KEY]
        assert isinstance(grant, Grant)
        key = (grant.scope, grant.owner)  # the rights themselves, not a name two may share
        backend = self._backends.pop(key, None)
        if backend is None:
            backend = Backend(LocalClient(self._manager, scope=grant.scope), grant.owner)
        self._backends[key] = backend
        while len(self._backends) > MAX_BACKENDS:
            self._backends.popitem(last=False)
        return backend


def hypercorn_config(limits: Limits) -> Config:
    """Hypercorn held to `serve`'s bounds on slow and large heads, and quiet."""
    config = Config()
    config.bind = []  # `serve_http` hands it its own socket
    config.h11_max_incomplete_size = limits.max_http_head_bytes
    config.h2_max_header_list_size = limits.max_http_head_bytes
    # From a connection's start, or its last response, to a whole request head; no
    # `read_timeout`: hypercorn applies it to every read, so a long call would be cut.
    config.keep_alive_timeout = limits.io_timeout
    config.graceful_timeout = limits.io_timeout
    config.include_server_header = False
    config.accesslog = None  # a log line could hold a `?token=`
    config.errorlog = logging.getLogger("trio_pty.mcp.hypercorn")
    return config


async def serve_http(
    manager: Manager,
    *,
    host: str,
    port: int,
    tokens: Mapping[str, TokenScope],
    limits: Limits,
    allow_hosts: Collection[str] = (),
    allow_origins: Collection[str] = (),
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP at `http://HOST:PORT/mcp` on `manager` until cancelled; `task_status`
    gets the port (the one chosen, with port 0)."""
    sessions = StreamableHTTPSessionManager(
        build_server(Backends(manager).for_request),
        # The handshake era's sessions: without one, the `notifications/cancelled` a
        # legacy client sends (it keeps the response stream open) would reach nothing.
        stateless=False,
        session_idle_timeout=LEGACY_SESSION_IDLE,
        max_sessions=limits.max_connections,
        max_request_body_size=limits.max_message_bytes,
    )
    listening: list[str] = []
    bound = port

    def hosts(local_host: str | None) -> frozenset[str]:
        return acceptable_hosts(
            bound_host=host, port=bound, allowed=allow_hosts, local_host=local_host
        )

    def origins(local_host: str | None) -> frozenset[str]:
        own = own_origins(
            listening=listening, local_host=local_host, port=bound, bound_host=host, allowed=()
        )
        return own | frozenset(allow_origins)

    gate = Gate(sessions.handle_request, tokens=tokens, hosts=hosts, origins=origins, limits=limits)
    config = hypercorn_config(limits)
    config.bind = [f"{_host_literal(host)}:{port}"]
    async with sessions.run(), trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(serve, gate, config))  # type: ignore[arg-type]
        for url in binds:  # http://ADDRESS:PORT
            address, _, number = urllib.parse.urlsplit(url).netloc.rpartition(":")
            listening.append(address.strip("[]"))
            bound = int(number)
        task_status.started(bound)


def _host_literal(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


#: Beside `serve`'s 8765: the two can run side by side with their defaults.
DEFAULT_PORT: Final = 8766


@attrs.frozen(kw_only=True)
class HttpOptions:
    """Where and to whom `trio-pty mcp --http` answers."""

    host: str
    port: int
    tokens: Mapping[str, TokenScope]
    allow_hosts: tuple[str, ...] = ()
    allow_origins: tuple[str, ...] = ()
    #: Printed with the URL when this process made the token up (nobody else knows it).
    show_token: str | None = None


async def run(settings: InProcess, options: HttpOptions) -> int:
    """Serve MCP over HTTP with a manager of this process until SIGTERM, SIGINT or SIGHUP;
    then stop serving (calls in flight are cancelled) and tear every session down."""
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            stop = trio.CancelScope()
            await nursery.start(stop_on_signals, signals, stop)
            async with open_manager(
                settings.limits,
                env_mode=settings.env_mode,
                env_deny=settings.env_deny,
                root=settings.root,
                authorizer=settings.authorizer,
            ) as manager:
                with stop:
                    async with trio.open_nursery() as serving:
                        port = await serving.start(
                            partial(
                                serve_http,
                                manager,
                                host=options.host,
                                port=options.port,
                                tokens=options.tokens,
                                limits=settings.limits,
                                allow_hosts=options.allow_hosts,
                                allow_origins=options.allow_origins,
                            )
                        )
                        url = f"http://{_host_literal(options.host)}:{port}{MCP_PATH}"
                        print(f"trio-pty mcp: serving MCP on {url}", file=sys.stderr, flush=True)
                        if options.show_token is not None:
                            said = f"token (Authorization: Bearer): {options.show_token}"
                            print(f"trio-pty mcp: {said}", file=sys.stderr, flush=True)
            nursery.cancel_scope.cancel()
    return 0
