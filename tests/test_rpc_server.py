"""The server in-process (quick): pure handshake and config checks, then a server on port 0
in the test's own trio loop for what the subprocess tests do not reach."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import h11
import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed, wrap_client_stream

import trio_pty
from trio_pty import Limits
from trio_pty.client.client import ConnectionLost, RpcError, connect
from trio_pty.rpc import handlers
from trio_pty.rpc.config import ConfigError, SandboxConfig, load_config, parse_config
from trio_pty.rpc.handshake import Rejection, acceptable_hosts, check_handshake, format_url
from trio_pty.server.serve import ServeSettings, serve
from trio_pty.server.server import RpcServer, ServerOptions, open_server
from trio_pty.wire import (
    EXITED,
    LIST,
    SERVER_INFO,
    KillParams,
    ListParams,
    ServerInfo,
    ServerInfoParams,
    SessionList,
    SpawnParams,
)

from .rpc_support import error_of, open_ws, raw_connect, raw_status, response_to, rpc, serving

TOKEN = "s3cret-token"
LIMITS = Limits(
    terminate_grace=0.2,
    io_timeout=1.0,
    notification_timeout=0.5,
    max_requests_in_flight=2,
    max_connections=3,
)

# --------------------------------------------------------------------------------------------
# The handshake decision (pure)

HOSTS = acceptable_hosts(bound_host="127.0.0.1", port=8765, allowed=["dev.box"])
ORIGINS = frozenset({"http://localhost:3000"})
BEARER = (b"authorization", f"Bearer {TOKEN}".encode())


def decide(target: str = "/rpc", host: str | None = "127.0.0.1:8765", *headers: Any) -> int:
    decided = check_handshake(
        target=target,
        host=host,
        headers=list(headers),
        tokens={TOKEN: "ok"},
        hosts=HOSTS,
        origins=ORIGINS,
    )
    return decided.status if isinstance(decided, Rejection) else 101


def test_token_is_required_and_compared_exactly() -> None:
    assert decide("/rpc") == 401
    assert decide(f"/rpc?token={TOKEN}") == 101
    assert decide("/rpc", "127.0.0.1:8765", BEARER) == 101
    assert decide("/rpc", "127.0.0.1:8765", (b"authorization", f"bearer {TOKEN}".encode())) == 101
    assert decide(f"/rpc?token={TOKEN}x") == 401
    assert decide(f"/rpc?token={TOKEN[:-1]}") == 401
    assert decide("/rpc?token=") == 401
    assert decide(f"/rpc?token={TOKEN}&token=other") == 401
    assert decide("/rpc", "127.0.0.1:8765", (b"authorization", TOKEN.encode())) == 401
    assert decide("/rpc?token=%FF") == 401
    assert decide(f"/other?token={TOKEN}") == 404


def test_origin_must_be_in_the_allow_list_exactly() -> None:
    def with_origin(origin: bytes) -> int:
        return decide("/rpc", "127.0.0.1:8765", BEARER, (b"origin", origin))

    assert with_origin(b"http://localhost:3000") == 101
    for foreign in (
        b"http://localhost:3000/",
        b"HTTP://localhost:3000",
        b"http://localhost",
        b"http://localhost:30000",
        b"null",
        b"",
    ):
        assert with_origin(foreign) == 403, foreign
    two = decide(
        "/rpc",
        "127.0.0.1:8765",
        BEARER,
        (b"origin", b"http://localhost:3000"),
        (b"origin", b"http://localhost:3000"),
    )
    assert two == 403


def test_host_must_name_this_server() -> None:
    for host in (
        "127.0.0.1:8765",
        "localhost:8765",
        "LocalHost:8765",
        "[::1]:8765",
        "dev.box",
        "dev.box:8765",
    ):
        assert decide("/rpc", host, BEARER) == 101, host
    refused: tuple[str | None, ...] = (
        "evil.example:8765",
        "127.0.0.1:8766",
        "localhost",
        "127.0.0.1",
        None,
        "localhost.evil.example:8765",
        "dev.box:9999",
    )
    for refused_host in refused:
        assert decide("/rpc", refused_host, BEARER) == 403, refused_host
    # Port 80 may be left out, as browsers do.
    assert "localhost" in acceptable_hosts(bound_host="127.0.0.1", port=80, allowed=())
    # The address the client connected to (an IP literal cannot be rebound).
    assert "10.1.2.3:8765" in acceptable_hosts(
        bound_host="0.0.0.0", port=8765, allowed=(), local_host="10.1.2.3"
    )


def test_urls() -> None:
    assert format_url("127.0.0.1", 8765) == "ws://127.0.0.1:8765/rpc"
    assert format_url("::1", 1, token="a b") == "ws://[::1]:1/rpc?token=a+b"


# --------------------------------------------------------------------------------------------
# The config file


def test_config_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(
        f"""
root = "{tmp_path}"
env_mode = "fixed"
env_deny = ["MY_*"]
allow_origins = ["http://localhost:3000"]
[limits]
terminate_grace = 1
max_sessions = 4
[permissions]
write = "allow"
[permissions.shell]
"*" = "deny"
"npm run dev" = "allow"
"""
    )
    config = load_config(str(path))
    assert config.limits.terminate_grace == 1.0 and config.limits.max_sessions == 4
    assert (config.root, config.env_mode, config.env_deny) == (str(tmp_path), "fixed", ("MY_*",))
    assert config.allow_origins == ("http://localhost:3000",)
    assert config.authorizer is not None
    assert config.authorizer.rules["shell"] == (("*", "deny"), ("npm run dev", "allow"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"colour": 1, "shade": 2}, "unknown key(s): colour, shade"),
        ({"limits": {"max_sesions": 3}}, "[limits] unknown key(s): max_sesions"),
        (
            {"limits": {"terminate_grace": "soon"}},
            "[limits] terminate_grace must be a number, got 'soon'",
        ),
        ({"limits": {"max_sessions": 0}}, "max_sessions must be positive"),
        ({"limits": {"max_sessions": 2.5}}, "[limits] max_sessions must be an integer, got 2.5"),
        ({"limits": 3}, "[limits] must be a table"),
        ({"env_mode": "all"}, 'env_mode must be "inherit" or "fixed"'),
        ({"env_deny": "X"}, "env_deny must be an array of strings"),
        ({"port": 70000}, "port must be an integer 0..65535"),
        ({"root": "/nonexistent/dir"}, "root is not a directory"),
        ({"permissions": {"shel": "allow"}}, "[permissions] unknown permission 'shel'"),
        ({"permissions": {"shell": "maybe"}}, "[permissions] shell: action must be one of"),
        ({"env_allow": "PATH"}, "env_allow must be an array of strings"),
        ({"env_allow": [""]}, "env_allow entries must be non-empty strings"),
        ({"sandbox": True}, "[sandbox] must be a table"),
        ({"sandbox": {}}, '[sandbox] kind must be "bubblewrap", got None'),
        ({"sandbox": {"kind": "docker"}}, "kind must be \"bubblewrap\", got 'docker'"),
        ({"sandbox": {"kind": "bubblewrap", "network": "on"}}, "network must be true or false"),
        ({"sandbox": {"kind": "bubblewrap", "writable": "/x"}}, "writable must be an array"),
        ({"sandbox": {"kind": "bubblewrap", "enabled": False}}, "unknown key(s): enabled"),
        ({"tokens": {"name": "x"}}, "tokens must be an array of tables"),
    ],
)
def test_config_errors_name_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="x.toml")
    assert message in str(raised.value)
    assert str(raised.value).startswith("x.toml: ")


def test_config_env_allow_and_sandbox(tmp_path: Path) -> None:
    config = parse_config(
        {
            "env_allow": ["NODE_ENV", "APP_*"],
            "sandbox": {
                "kind": "bubblewrap",
                "writable": [str(tmp_path)],
                "network": True,
                "extra_args": ["--setenv", "A", "1"],
            },
        }
    )
    assert config.env_allow == ("NODE_ENV", "APP_*")
    assert config.sandbox == SandboxConfig(
        kind="bubblewrap",
        writable=(str(tmp_path),),
        network=True,
        extra_args=("--setenv", "A", "1"),
    )
    assert parse_config({}).env_allow is None and parse_config({}).sandbox is None
    assert parse_config({"env_allow": []}).env_allow == ()  # present and empty: allow none
    # A sandbox that cannot work here fails at start (the missing path, or bwrap missing).
    with pytest.raises(ConfigError, match=r"^\[sandbox\] "):
        SandboxConfig(kind="bubblewrap", writable=(str(tmp_path / "missing"),)).build()


def test_unreadable_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("limits = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(bad))


# --------------------------------------------------------------------------------------------
# In-process server


def auth() -> list[tuple[bytes, bytes]]:
    return [(b"Authorization", f"Bearer {TOKEN}".encode())]


async def test_a_stalled_clients_send_queue_is_bounded_in_characters() -> None:
    """A client that attaches to a flood and stops reading holds at most
    max_send_queue_chars of queued frames, not max_requests_in_flight full chunks."""
    budget = 200_000
    limits = attrs.evolve(
        LIMITS, max_send_queue_chars=budget, attach_chunk_bytes=65_536, max_requests_in_flight=32
    )
    frame = 4 * 65_536 // 3 + 200  # a full chunk, base64 in its notification
    with trio.fail_after(20):
        async with serving(limits, TOKEN) as server:
            info = await server.manager.spawn("yes", [], owner="o", description="flood")
            stalled = await raw_connect(server.port, target=f"/rpc?token={TOKEN}")
            async with stalled.stream:
                request = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "pty.attach",
                    "params": {"id": info.id, "owner": "o"},
                }
                await stalled.send(0x1, json.dumps(request).encode())
                [connection] = server.connections
                highest = 0
                # Once the socket buffers are full, the queue fills up to its bound.
                while highest < budget - frame:
                    await trio.sleep(0.01)
                    highest = max(highest, connection.queued_chars)

                # And stays there while the flood goes on: four budgets' worth of output
                # more (nothing leaves the queue, so its size now is its highest).
                def output() -> int:
                    return server.manager.get(info.id, owner="o").byte_count

                more = output() + 4 * budget
                while output() < more:  # noqa: ASYNC110 - the session's count
                    await trio.sleep(0.01)
                highest = max(highest, connection.queued_chars)
                assert highest <= budget
                assert server.info().counts.queued_chars == connection.queued_chars
            await server.manager.kill(info.id, owner="o")


async def test_requests_past_the_in_flight_bound_wait_and_are_all_answered() -> None:
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN) as server, open_ws(server.url, auth()) as ws:
            spawned = await rpc(
                ws, 1, "pty.spawn", {"command": "sleep", "args": ["30"], "description": "idle"}
            )
            session_id = spawned["result"]["id"]
            slow = {"id": session_id, "wait": {"pattern": "never", "timeout_ms": 600}}
            started = trio.current_time()
            for id in (2, 3):
                await ws.send_message(
                    json.dumps({"jsonrpc": "2.0", "id": id, "method": "pty.read", "params": slow})
                )
            await ws.send_message('{"jsonrpc": "2.0", "id": 4, "method": "server.info"}')
            replies = [json.loads(await ws.get_message()) for _ in range(3)]
            info_at = trio.current_time() - started
            assert {r["id"] for r in replies} == {2, 3, 4}
            assert all("result" in r for r in replies)
            assert info_at >= 0.5  # server.info had to wait for a free slot
            await rpc(ws, 5, "pty.kill", {"id": session_id, "cleanup": True})


async def test_internal_errors_are_reported_without_details(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(ctx: handlers.Context, params: ServerInfoParams) -> ServerInfo:
        raise RuntimeError("secret detail")

    monkeypatch.setitem(handlers.HANDLERS, SERVER_INFO.name, handlers.Route(SERVER_INFO, broken))
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN) as server, open_ws(server.url, auth()) as ws:
            reply = await rpc(ws, 1, "server.info")
            assert error_of(reply) == (-32603, None)
            assert "secret" not in json.dumps(reply)
            assert "result" in await rpc(ws, 2, "pty.list")


async def test_notifications_run_but_are_never_answered() -> None:
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN) as server, open_ws(server.url, auth()) as ws:
            reply = await rpc(ws, 1, "pty.spawn", {"command": "cat", "description": "echo"})
            session_id = reply["result"]["id"]
            await ws.send_message(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "pty.write",
                        "params": {"id": session_id, "data": "hi\n"},
                    }
                )
            )
            await ws.send_message('{"jsonrpc": "2.0", "method": "no.such"}')
            await ws.send_message('{"jsonrpc": "2.0", "method": "$/cancelRequest"}')
            page = await rpc(
                ws, 2, "pty.read", {"id": session_id, "wait": {"pattern": "hi", "timeout_ms": 5000}}
            )
            assert page["result"]["reason"] == "matched"
            cancel = await rpc(ws, 3, "$/cancelRequest", {"id": 99})
            assert cancel["result"] == {"cancelled": False}
            await rpc(ws, 4, "pty.kill", {"id": session_id, "cleanup": True})


async def test_attach_before_any_output_then_detach() -> None:
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN) as server, open_ws(server.url, auth()) as ws:
            reply = await rpc(ws, 1, "pty.spawn", {"command": "cat", "description": "echo"})
            session_id = reply["result"]["id"]
            first = await rpc(ws, 2, "pty.attach", {"id": session_id, "driver": True})
            assert first["result"] == {
                "id": session_id,
                "offset": 0,
                "data": "",
                "gap": False,
                "next_offset": 0,
                "drawn": False,
                "rows": None,
                "cols": None,
            }
            await rpc(ws, 3, "pty.write", {"id": session_id, "data": "ping\n"})
            data = b""
            while b"ping\r\n" not in data:
                message = json.loads(await ws.get_message())
                if message.get("method") == "pty.output":
                    assert message["params"]["offset"] == len(data)
                    data += base64.b64decode(message["params"]["data"])
            detached = await rpc(ws, 4, "pty.detach", {"id": session_id})
            assert detached["result"] == {"id": session_id, "detached": True}
            again = await rpc(ws, 5, "pty.detach", {"id": session_id})
            assert again["result"]["detached"] is False
            gone = await rpc(ws, 6, "pty.detach", {"id": session_id, "owner": "other"})
            assert error_of(gone) == (-32001, "session_not_found")
            # Attaching from the future is a gap: the whole retained output comes instead.
            future = await rpc(ws, 7, "pty.attach", {"id": session_id, "offset": 10**9})
            assert future["result"]["gap"] is True and future["result"]["offset"] == 0
            await rpc(ws, 8, "pty.kill", {"id": session_id, "cleanup": True})


async def test_server_info_counts(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with (
            serving(LIMITS, TOKEN, env_deny=("MY_*",)) as server,
            connect(server.url, TOKEN) as client,
        ):
            spawn = SpawnParams(command="sleep", args=["30"], owner="a", description="x")
            info = await client.request(spawn)
            reply = await client.request(ServerInfoParams())
            assert reply.version == trio_pty.__version__
            assert reply.counts.sessions == 1
            assert reply.counts.by_status == {"running": 1}
            assert reply.counts.connections == 1
            assert reply.limits.max_requests_in_flight == 2
            assert reply.environment.deny["patterns"] == ["MY_*"]
            assert reply.uptime >= 0
            with pytest.raises(RpcError) as unknown:
                await client.call("server.info", {"verbose": True})
            assert unknown.value.code == -32602 and "verbose" in unknown.value.message
            await client.request(KillParams(id=info.id, owner="a", cleanup=True))


async def test_connections_over_the_bound_get_503() -> None:
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN) as server:
            bearer = [("Authorization", f"Bearer {TOKEN}")]
            async with (
                open_ws(server.url, auth()),
                open_ws(server.url, auth()),
                open_ws(server.url, auth()),
            ):
                assert await raw_status(server.port, headers=bearer) == 503
            # Slots free up again once connections close.
            with trio.fail_after(2):
                while server.open_slots > 0:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            async with connect(server.url, TOKEN) as client:
                assert (await client.request(ListParams())).sessions == []


async def test_a_stream_accepted_elsewhere_can_be_handed_over() -> None:
    """handle_stream does not care how the stream was accepted (an HTTP front end can pass
    streams on)."""
    with trio.fail_after(10):
        async with trio_pty.open_manager(LIMITS) as manager:
            server = RpcServer(manager, ServerOptions(token=TOKEN, port=0))
            client_side, server_side = trio.testing.memory_stream_pair()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.handle_stream, server_side)
                ws = await wrap_client_stream(
                    nursery,
                    client_side,  # type: ignore[arg-type]  # any stream works; typed too narrowly
                    "localhost:0",
                    f"/rpc?token={TOKEN}",
                )
                reply = await rpc(ws, 1, "pty.list")
                assert reply["result"] == {"sessions": []}
                await ws.aclose()


async def test_manager_closing_is_reported() -> None:
    """A server that outlives its manager (an embedding app closed the manager first)."""
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with trio_pty.open_manager(LIMITS) as manager:
                options = ServerOptions(token=TOKEN, port=0)
                server: RpcServer = await nursery.start(RpcServer(manager, options).run)
            async with open_ws(server.url, auth()) as ws:
                reply = await rpc(ws, 1, "pty.spawn", {"command": "true", "description": "x"})
                assert error_of(reply) == (-32004, "closing")
            server.stop()


async def test_stop_closes_connections_with_1001() -> None:
    with trio.fail_after(10):
        async with (
            trio_pty.open_manager(LIMITS) as manager,
            open_server(manager, ServerOptions(token=TOKEN, port=0)) as server,
            open_ws(server.url, auth()) as ws,
        ):
            await ws.send_message('{"jsonrpc": "2.0", "id": 1, "method": "pty.list"}')
            await response_to(ws, 1)
            server.stop()
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason is not None and closed.value.reason.code == 1001


async def test_a_newer_servers_extra_result_fields_are_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forward compatibility: a result carrying a field this client does not know."""

    @attrs.frozen(kw_only=True)
    class NewerSessionList(SessionList):
        next_page: str = "later"

    async def newer(ctx: handlers.Context, params: ListParams) -> SessionList:
        return NewerSessionList(sessions=[])

    monkeypatch.setitem(handlers.HANDLERS, LIST.name, handlers.Route(LIST, newer))
    with trio.fail_after(10):
        async with serving(LIMITS, TOKEN) as server, connect(server.url, TOKEN) as client:
            raw = await client.call(LIST.name, {})
            assert raw == {"sessions": [], "next_page": "later"}
            assert await client.request(ListParams()) == SessionList(sessions=[])


async def _h11_exchange(port: int, request: h11.Request) -> list[object]:
    """Send `request` with an h11 client and read its whole response the same way."""
    client = h11.Connection(h11.CLIENT)
    events: list[object] = []
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(client.send(request) or b"")
        await stream.send_all(client.send(h11.EndOfMessage()) or b"")
        while not events or not isinstance(events[-1], h11.EndOfMessage):
            event = client.next_event()
            if event is h11.NEED_DATA:
                client.receive_data(bytes(await stream.receive_some(65536)))
            else:
                events.append(event)
    return events


async def test_the_busy_answer_is_well_formed_http() -> None:
    """A real HTTP client reads the 503 to its end (it once declared 34 bytes for 33)."""
    with trio.fail_after(10):
        async with (
            serving(LIMITS, TOKEN) as server,
            open_ws(server.url, auth()),
            open_ws(server.url, auth()),
            open_ws(server.url, auth()),
        ):
            upgrade = h11.Request(
                method="GET",
                target="/rpc",
                headers=[
                    ("Host", f"127.0.0.1:{server.port}"),
                    ("Upgrade", "websocket"),
                    ("Connection", "Upgrade"),
                    ("Authorization", f"Bearer {TOKEN}"),
                ],
            )
            response, data, end = await _h11_exchange(server.port, upgrade)
            assert isinstance(response, h11.Response) and response.status_code == 503
            assert isinstance(data, h11.Data) and isinstance(end, h11.EndOfMessage)
            assert data.data == b"503 too many connections (try later)\n"
            assert dict(response.headers)[b"connection"] == b"close"


async def test_serve_stops_when_its_shutdown_trigger_fires() -> None:
    """`serve` with its own trigger instead of signals: URL out, shutdown, summary, 0."""
    fire = trio.Event()

    async def trigger(
        request_shutdown: Callable[[str], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        await fire.wait()
        request_shutdown("test over")

    out = io.StringIO()
    settings = ServeSettings(server=ServerOptions(token=TOKEN, port=0), limits=LIMITS)
    statuses: list[int] = []

    async def run() -> None:
        statuses.append(await serve(settings, shutdown_trigger=trigger, out=out))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            while not out.getvalue().endswith("\n"):  # noqa: ASYNC110
                await trio.sleep(0.01)
            url = out.getvalue().strip()
            async with connect(url, TOKEN) as client:
                spawn = SpawnParams(command="sleep", args=["30"], description="left running")
                await client.request(spawn)
                fire.set()
                with pytest.raises(ConnectionLost):  # closed (1001) before the teardown
                    await client.next_notification(EXITED)
    assert statuses == [0]
    assert out.getvalue().splitlines()[1].startswith("shutdown: 1 session reaped in ")
