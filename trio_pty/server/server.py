"""The JSON-RPC endpoint in front of one manager: listeners, admission, connections, stop.

Layers, each usable on its own:

- `handshake.check_handshake`: the pure decision on an upgrade request (Host, Origin, path,
  token); `http.HttpFront`: reads every connection's request head once, serves the monitor
  page, answers refusals, and hands admitted upgrades over.
- `RpcServer.admit`: the decision for one upgrade request (capacity, then the handshake), a
  connection slot taken when it is accepted; `RpcServer.handle_stream(stream)`: serves one
  already-accepted byte stream, whoever accepted it.
- `RpcServer.run()`: binds the listeners and accepts until `stop()`.
- `websocket.Connection`: the tasks of one connection, around the sans-io `RpcConnection`.
- `open_server`: the server for the duration of a block (embedding, tests); `trio-pty serve`
  is `serve.serve`.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Final

import attrs
import h11
import trio
from trio_websocket import ConnectionClosed, wrap_server_stream

from trio_pty.errors import unwrap_group
from trio_pty.logs import event
from trio_pty.manager import Manager
from trio_pty.metrics import Family, render
from trio_pty.policy.environment import EnvAllowList, EnvMode, deny_rules
from trio_pty.posix.sandbox import BubblewrapSandbox, Sandbox
from trio_pty.rpc.handshake import (
    RPC_PATH,
    Rejection,
    acceptable_hosts,
    check_bearer,
    check_handshake,
    format_page_url,
    format_url,
    is_loopback,
    own_origins,
)
from trio_pty.rpc.scope import FULL_ACCESS, TokenScope
from trio_pty.rpc.tokens import ScopedToken
from trio_pty.server.http import (
    REFUSAL_KINDS,
    HttpFront,
    ReplayStream,
    Site,
    Upgrade,
    header_value,
)
from trio_pty.server.liveness import WatchedStream
from trio_pty.server.websocket import CLOSE_GOING_AWAY, Connection
from trio_pty.wire import (
    RECEIVE_BUFFER_BYTES,
    ServerCounts,
    ServerEnvironment,
    ServerInfo,
    ServerSandbox,
    ServerScope,
)

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "RpcServer", "ServerOptions", "open_server"]

log = logging.getLogger("trio_pty.server")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765


@attrs.frozen(kw_only=True)
class ServerOptions:
    """How the endpoint is exposed. `token` is required: there is no unauthenticated mode.
    It may use everything; `scoped_tokens` (the config's `[[tokens]]`) only their scope."""

    token: str = attrs.field(repr=False)
    scoped_tokens: tuple[ScopedToken, ...] = attrs.field(default=(), repr=False)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()
    path: str = RPC_PATH
    # Reported by server.info; `serve` also opens its manager with them.
    env_mode: EnvMode = "inherit"
    env_deny: tuple[str, ...] = ()
    # The monitor page served at `/` (trio_pty.ui.load_page); None: no page (404). While a
    # page is served, its own origin (http:// + a Host value this server accepts) is allowed.
    page: Site | None = attrs.field(default=None, repr=False)
    # A listening socket to serve on instead of binding host and port (socket activation,
    # `--listen-fd`); `host` and `port` then say its own address.
    listen_socket: socket.socket | None = attrs.field(default=None, repr=False, eq=False)

    @token.validator
    def _check_token(self, attribute: attrs.Attribute[str], value: str) -> None:
        if not value:
            raise ValueError("the token must not be empty")

    @scoped_tokens.validator
    def _check_scoped(
        self, attribute: attrs.Attribute[tuple[ScopedToken, ...]], value: tuple[ScopedToken, ...]
    ) -> None:
        tokens = [self.token, *(entry.token for entry in value)]
        if len(set(tokens)) != len(tokens):
            raise ValueError("two tokens are the same: each must be unique")
        # What is kept per token (remembered deletions, named cursors) is kept by name.
        names = [FULL_ACCESS.name, *(entry.scope.name for entry in value)]
        if len(set(names)) != len(names):
            raise ValueError(
                f"two tokens have the same name (or a scoped one is named {FULL_ACCESS.name!r})"
            )

    def token_scopes(self) -> dict[str, TokenScope]:
        """Every token this server accepts, with what it may do."""
        return {self.token: FULL_ACCESS, **{e.token: e.scope for e in self.scoped_tokens}}


@attrs.define(eq=False)
class _Slot:
    """One admitted connection, from its admission to its end."""

    peer: str
    token_scope: TokenScope = FULL_ACCESS
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    connection: Connection | None = None


class RpcServer:
    """The JSON-RPC endpoint in front of one manager."""

    def __init__(self, manager: Manager, options: ServerOptions) -> None:
        self.manager = manager
        self.options = options
        self.limits = manager.limits
        self.port = options.port
        self._slots: set[_Slot] = set()
        self._accept_scope = trio.CancelScope()
        self._handlers_scope: trio.CancelScope | None = None
        self._started_at = time.monotonic()
        self._stopping = False
        self._listening: frozenset[str] = frozenset()  # the listeners' addresses
        self._tokens = options.token_scopes()
        self.finished = trio.Event()
        self.front = HttpFront(
            endpoint=self, limits=self.limits, site=options.page, rpc_path=options.path
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

    @property
    def open_slots(self) -> int:
        """Admitted connections, including those still completing their handshake."""
        return len(self._slots)

    def info(self, scope: TokenScope = FULL_ACCESS) -> ServerInfo:
        """What `server.info` answers; the counts are of what `scope` sees: the sessions of
        its owners, and (unless it sees every owner) only its own token's connections, none
        of the connections not yet admitted."""
        from trio_pty import __version__

        sessions = [info for info in self.manager.list_all() if scope.sees(info.owner)]
        statuses: dict[str, int] = {}
        for session in sessions:
            statuses[session.status] = statuses.get(session.status, 0) + 1
        connections = self.connections
        if not scope.every_owner:
            connections = [c for c in connections if c.scope == scope]
        drain = self.manager.drain_status()
        return ServerInfo(
            version=__version__,
            uptime=round(time.monotonic() - self._started_at, 3),
            limits=self.limits,
            counts=ServerCounts(
                sessions=len(sessions),
                by_status=statuses,
                owners=len({s.owner for s in sessions}),
                connections=len(connections),
                requests_in_flight=sum(c.requests_in_flight for c in connections),
                queued_chars=sum(c.queued_chars for c in connections),
                pending_connections=self.front.pending if scope.every_owner else 0,
            ),
            environment=ServerEnvironment(
                mode=self.options.env_mode,
                deny=deny_rules(self.options.env_deny),
                allow=_env_allow_names(self.manager.env_allow),
            ),
            allowed_origins=sorted(self.options.allowed_origins),
            sandbox=_sandbox_info(self.manager.sandbox),
            scope=ServerScope(
                name=scope.name, owners=list(scope.owners), read_only=scope.read_only
            ),
            node=self.manager.node_id,
            draining=drain.draining,
            drain_remaining_s=drain.drain_remaining_s,
        )

    # -- operators: readiness and metrics

    @property
    def ready(self) -> bool:
        """New sessions are placed here: not draining (`GET /healthz`)."""
        return not self.manager.draining

    def scrape(self, request: h11.Request) -> Rejection | str:
        """`GET /metrics`: only with an `Authorization: Bearer` header (a `?token=` would
        end up in access logs), of a token that sees every owner (the counts are of all)."""
        scope = check_bearer(list(request.headers), self._tokens)
        if isinstance(scope, Rejection):
            return scope
        if not scope.every_owner:
            return Rejection(403, "the metrics need a token for every owner", "token")
        return render(self.metric_families())

    def metric_families(self) -> list[Family]:
        """What `GET /metrics` shows (docs/deploy.md): no owners, ids or commands in labels."""
        from trio_pty import __version__

        manager = self.manager
        sessions = manager.list_all()
        statuses = dict.fromkeys(("running", "killing", "exited", "killed"), 0)
        for info in sessions:
            statuses[info.status] += 1
        spawns = {"started": 0, **manager.stats.spawns}
        output = manager.stats.removed_output_bytes + sum(info.byte_count for info in sessions)
        refusals = {kind: self.front.refusals[kind] for kind in REFUSAL_KINDS}
        node = manager.node_id or ""
        audit = []
        if manager.audit is not None:
            written, dropped = manager.audit.written, manager.audit.dropped
            audit.append(
                Family.of(
                    "trio_pty_audit_entries_total",
                    "counter",
                    "Audit log entries (--audit-log): written, or dropped (a full disk or queue).",
                    {(("outcome", "written"),): written, (("outcome", "dropped"),): dropped},
                )
            )
        return [
            Family.of(
                "trio_pty_build_info",
                "gauge",
                "Always 1; the version and the node id (--node-id) as labels.",
                {(("version", __version__), ("node", node)): 1},
            ),
            Family.of(
                "trio_pty_draining",
                "gauge",
                "1 while draining (no new sessions).",
                1 if manager.draining else 0,
            ),
            Family.of(
                "trio_pty_sessions",
                "gauge",
                "Sessions by status.",
                {(("status", status),): count for status, count in statuses.items()},
            ),
            Family.of(
                "trio_pty_spawns_total",
                "counter",
                "Spawns: started, or the kind of the error that refused them.",
                {(("outcome", outcome),): count for outcome, count in spawns.items()},
            ),
            Family.histogram(
                "trio_pty_teardown_seconds",
                "Seconds from a kill to nothing of the session left.",
                manager.stats.teardown,
            ),
            Family.of(
                "trio_pty_output_bytes_total", "counter", "Bytes read from every PTY.", output
            ),
            Family.of(
                "trio_pty_connections",
                "gauge",
                "Open WebSocket connections.",
                len(self.connections),
            ),
            Family.of(
                "trio_pty_connections_refused_total",
                "counter",
                "Connections and requests refused, by reason.",
                {(("reason", kind),): count for kind, count in refusals.items()},
            ),
            *audit,
        ]

    # -- accepting

    async def run(
        self, *, task_status: trio.TaskStatus[RpcServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Bind, report started, accept until `stop()`, then wait for the connections to
        close (each bounded by io_timeout). Cancel it to drop everything at once."""
        try:
            if self.options.listen_socket is not None:
                held = trio.socket.from_stdlib_socket(self.options.listen_socket)
                listeners = [trio.SocketListener(held)]
            else:
                listeners = await trio.open_tcp_listeners(self.options.port, host=self.options.host)
            if len(listeners) > 1 and self.options.port == 0:
                # Port 0 on a name with several addresses gives each its own port; keep one.
                for extra in listeners[1:]:
                    await extra.aclose()
                listeners = listeners[:1]
            self.port = listeners[0].socket.getsockname()[1]
            self._listening = frozenset(str(each.socket.getsockname()[0]) for each in listeners)
            async with trio.open_nursery() as handlers:
                self._handlers_scope = handlers.cancel_scope
                with self._accept_scope:
                    async with trio.open_nursery() as acceptors:
                        await acceptors.start(
                            partial(
                                trio.serve_listeners,
                                self.handle_stream,
                                listeners,
                                handler_nursery=handlers,
                            )
                        )
                        log.info(
                            "listening on %s",
                            self.url,
                            extra=event("listening", url=self.url, node=self.manager.node_id),
                        )
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

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one accepted stream (the HTTP front first: the page, or an upgrade to the
        JSON-RPC endpoint), however it was accepted. Never raises (except cancellation);
        closes the stream before returning."""
        await self.front.handle_stream(stream)

    # -- admission: the front's `Endpoint`

    def hosts(self, local_host: str | None) -> frozenset[str]:
        """The Host values naming this server for a client connected to `local_host`."""
        return acceptable_hosts(
            bound_host=self.options.host,
            port=self.port,
            allowed=self.options.allowed_hosts,
            local_host=local_host,
        )

    def page_origins(self, local_host: str | None) -> frozenset[str]:
        """The monitor page's own origins, for a client connected to `local_host`."""
        return own_origins(
            listening=self._listening,
            local_host=local_host,
            port=self.port,
            bound_host=self.options.host,
            allowed=self.options.allowed_hosts,
        )

    def admit(
        self, request: h11.Request, *, local_host: str | None, peer: str | None
    ) -> Rejection | Upgrade:
        """Capacity first (503), then the handshake (Host, Origin, path, token), then the
        token's own share of the slots (`max_connections_per_token`, 503). Accepted: the
        connection's slot is taken now, before anything awaits."""
        if self._stopping or len(self._slots) >= self.limits.max_connections:
            log.warning("refusing a connection: %d connections open", len(self._slots))
            return Rejection(503, "too many connections (try later)", "busy")
        hosts = self.hosts(local_host)
        origins = self.options.allowed_origins
        if self.options.page is not None:
            origins = origins | self.page_origins(local_host)
        decided = check_handshake(
            target=request.target.decode("latin-1"),
            host=header_value(request, b"host"),
            headers=list(request.headers),
            tokens=self._tokens,
            hosts=hosts,
            origins=origins,
            path=self.options.path,
        )
        if isinstance(decided, Rejection):
            return decided
        bound = self.limits.max_connections_per_token
        if decided.max_connections is not None:  # the token's own, from [[tokens]]
            bound = decided.max_connections
        held = sum(1 for slot in self._slots if slot.token_scope == decided)
        if held >= bound:
            log.warning("refusing a connection: token %s holds %d connections", decided.name, held)
            return Rejection(503, "too many connections for this token (try later)", "busy")
        slot = _Slot(peer if peer is not None else "a client", decided)
        self._slots.add(slot)
        return partial(self._serve_upgrade, slot)

    async def _serve_upgrade(self, slot: _Slot, stream: trio.abc.Stream) -> None:
        """Complete the WebSocket handshake of an admitted request, then serve the
        connection. Never raises (except cancellation); closes the stream."""
        try:
            try:
                with slot.scope:
                    async with trio.open_nursery() as ws_tasks:
                        try:
                            await self._serve_websocket(slot, stream, ws_tasks)
                        finally:
                            ws_tasks.cancel_scope.cancel()
            finally:
                self._slots.discard(slot)
        # Whatever goes wrong with one connection stays with it; cancellation propagates.
        except* trio.TooSlowError:
            log.debug("handshake timed out")
        except* (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("connection dropped")
        except* Exception as group:
            log.error("connection failed", exc_info=group)
        finally:
            await trio.aclose_forcefully(stream)

    async def _serve_websocket(
        self, slot: _Slot, stream: trio.abc.Stream, ws_tasks: trio.Nursery
    ) -> None:
        stream = WatchedStream(
            stream,
            idle_timeout=self.limits.websocket_idle_timeout,
            message_timeout=self.limits.websocket_message_timeout,
            skip=stream.replayed_bytes if isinstance(stream, ReplayStream) else 0,
            peer=slot.peer,
        )
        with trio.fail_after(self.limits.io_timeout):
            request = await wrap_server_stream(
                ws_tasks,
                stream,
                max_message_size=self.limits.max_message_bytes,
                receive_buffer_size=RECEIVE_BUFFER_BYTES,
            )
        with trio.fail_after(self.limits.io_timeout):
            ws = await request.accept()
        connection = Connection(
            ws,
            peer=slot.peer,
            manager=self.manager,
            server_info=partial(self.info, slot.token_scope),
            scope=slot.token_scope,
        )
        slot.connection = connection
        if self._stopping:
            connection.shutdown()
        log.info(
            "%s connected (token %s)",
            slot.peer,
            slot.token_scope.name,
            extra=event("connect", peer=slot.peer),
        )
        try:
            await connection.run()
        finally:
            with trio.move_on_after(self.limits.io_timeout):
                await ws.aclose(connection.close_code, connection.close_reason)
            log.info(
                "%s disconnected (%d)",
                slot.peer,
                connection.close_code,
                extra=event("disconnect", peer=slot.peer, code=connection.close_code),
            )


def _env_allow_names(allowed: EnvAllowList | None) -> list[str] | None:
    return None if allowed is None else list(allowed.names)


def _sandbox_info(sandbox: Sandbox | None) -> ServerSandbox | None:
    """What server.info says of the sandbox: its kind and settings, never its extra
    arguments' values (an operator may pass secrets to bwrap there)."""
    if sandbox is None:
        return None
    if isinstance(sandbox, BubblewrapSandbox):
        return ServerSandbox(
            kind="bubblewrap",
            kills_all=sandbox.kills_all,
            writable=list(sandbox.writable),
            network=sandbox.network,
            extra_args=len(sandbox.extra_args),
            hidden=list(sandbox.hidden),
        )
    return ServerSandbox(kind=type(sandbox).__name__, kills_all=sandbox.kills_all)


@asynccontextmanager
async def open_server(manager: Manager, options: ServerOptions) -> AsyncIterator[RpcServer]:
    """Serve `manager` for the duration of the block (for embedding and tests). Leaving the
    block closes every connection with 1001, bounded by io_timeout."""
    with unwrap_group():
        async with trio.open_nursery() as nursery:
            server: RpcServer = await nursery.start(partial(RpcServer(manager, options).run))
            try:
                yield server
            finally:
                server.stop()
