"""End to end against a real `trio-pty serve` subprocess on port 0: driven by the project's
client and by raw frames. Every test has its own owner and leaves no process behind."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from trio_websocket import ConnectionClosed

from trio_pty.client.client import ConnectionFailed, RpcError, connect
from trio_pty.model import Wait
from trio_pty.wire import (
    EXITED,
    AttachParams,
    KillParams,
    ListParams,
    OwnerDeleteParams,
    ReadParams,
    ReadRawParams,
    ServerInfoParams,
    SpawnParams,
    WriteParams,
)

from .rpc_support import (
    ServerProcess,
    alive_any,
    error_of,
    live,
    open_ws,
    owner_for,
    raw_connect,
    raw_status,
    response_to,
    rpc,
    server_processes,
    start_server,
)

__all__ = ["live"]  # fixtures used by name

ALLOWED_ORIGIN = "http://127.0.0.1:5173"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    process = start_server(
        tmp_path_factory.mktemp("server"),
        "--allow-origin",
        ALLOWED_ORIGIN,
        "--allow-host",
        "pty.test",
    )
    try:
        yield process
    finally:
        process.stop()


def auth(server: ServerProcess) -> list[tuple[bytes, bytes]]:
    assert server.token is not None
    return [(b"Authorization", f"Bearer {server.token}".encode())]


# --------------------------------------------------------------------------------------------


async def test_prints_urls_and_round_trips(live: ServerProcess, request: Any) -> None:
    assert re.fullmatch(r"ws://127\.0\.0\.1:\d+/rpc", live.url)
    assert live.token_url == f"{live.url}?token={live.token}"
    assert live.token is not None and len(live.token) >= 43
    owner = owner_for(request)
    with trio.fail_after(15):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(
                    command="sh",
                    args=["-c", 'read line; echo "got:$line"'],
                    owner=owner,
                    description="echo",
                )
            )
            assert info.status == "running" and info.owner == owner
            written = await client.request(WriteParams(id=info.id, data="hello\n", owner=owner))
            assert written.bytes_written == 6
            page = await client.request(
                ReadParams(id=info.id, owner=owner, wait=Wait(pattern="got:hello", timeout_ms=5000))
            )
            assert page.reason == "matched"
            assert [line.text for line in page.lines][-1] == "got:hello"
            assert [s.id for s in (await client.request(ListParams(owner=owner))).sessions] == [
                info.id
            ]
            killed = await client.request(KillParams(id=info.id, owner=owner, cleanup=True))
            assert killed.status in ("exited", "killed")
            assert (await client.request(ListParams(owner=owner))).sessions == []
            info_reply = await client.request(ServerInfoParams())
            assert info_reply.limits.terminate_grace == 0.3
            assert "name_substrings" in info_reply.environment.deny


async def test_compact_pages_are_the_object_pages(live: ServerProcess, request: Any) -> None:
    """`format: "compact"` over a real server: the raw result is strings with implied numbers
    (explicit ones where a search skipped lines), and the client turns it into the very page
    the object form gives. The client asks for it unless told otherwise; a raw request
    without `format` still gets the object form."""
    owner = owner_for(request)
    with trio.fail_after(15):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(command="seq", args=["1", "40"], owner=owner, description="seq")
            )
            ended = Wait(exit=True, timeout_ms=5000)
            await client.request(ReadParams(id=info.id, owner=owner, wait=ended))
            sent: list[Any] = []
            call = client.call

            async def spy(method: str, params: Any = None) -> Any:
                sent.append(params)
                return await call(method, params)

            for extra in ({"offset": 3, "limit": 10}, {"pattern": "^[13]$|0"}, {"tail": 5}):
                default = ReadParams(id=info.id, owner=owner, **extra)
                as_object = attrs.evolve(default, format="object")
                compact = attrs.evolve(default, format="compact")
                page = await client.request(as_object)
                assert page.lines
                assert await client.request(compact) == page
                client.call = spy  # type: ignore[method-assign]
                try:
                    assert await client.request(default) == page
                finally:
                    client.call = call  # type: ignore[method-assign]
                assert sent.pop()["format"] == "compact"
                plain = await client.call("pty.read", {"id": info.id, "owner": owner, **extra})
                assert [line["text"] for line in plain["lines"]] == [x.text for x in page.lines]
                raw = await client.call(
                    "pty.read", {"id": info.id, "owner": owner, "format": "compact", **extra}
                )
                assert raw["lines"] == [line.text for line in page.lines]
                assert raw["start"] == page.lines[0].number
                numbers = [line.number for line in page.lines]
                implied = list(range(numbers[0], numbers[0] + len(numbers)))
                assert raw["numbers"] == (None if numbers == implied else numbers)
            await client.request(KillParams(id=info.id, owner=owner, cleanup=True))


async def test_every_error_code_leaves_the_connection_usable(
    live: ServerProcess, request: Any
) -> None:
    owner = owner_for(request)
    other = owner + "-gone"
    seen: dict[int, str | None] = {}
    with trio.fail_after(25):
        async with open_ws(live.url, auth(live)) as ws:
            next_id = iter(range(1000, 2000))

            async def still_usable() -> None:
                id = next(next_id)
                reply = await rpc(ws, id, "server.info")
                assert "version" in reply["result"], reply

            async def expect(frame: str, code: int, id: Any = None) -> dict[str, Any]:
                await ws.send_message(frame)
                reply = await response_to(ws, id)
                got, kind = error_of(reply)
                assert got == code, reply
                seen[code] = kind
                await still_usable()
                return reply

            async def call_error(method: str, params: dict[str, Any], code: int) -> Any:
                id = next(next_id)
                frame = json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                return await expect(frame, code, id)

            async def spawn(command: str, *args: str, who: str = owner) -> str:
                reply = await rpc(
                    ws,
                    next(next_id),
                    "pty.spawn",
                    {"command": command, "args": list(args), "owner": who, "description": "e"},
                )
                return str(reply["result"]["id"])

            await expect("{not json", -32700)
            await expect('[{"jsonrpc": "2.0", "id": 1, "method": "server.info"}]', -32600)
            await expect('{"jsonrpc": "1.0", "id": 2, "method": "server.info"}', -32600, 2)
            await call_error("pty.nope", {}, -32601)
            reply = await call_error(
                "pty.spawn", {"command": 5, "description": "x", "colour": "red"}, -32602
            )
            message = reply["error"]["message"]
            assert "command: expected string, got integer" in message
            assert "unknown field: colour" in message
            reply = await call_error("pty.read", {"id": "pty_00000000", "owner": owner}, -32001)
            assert reply["error"]["data"]["id"] == "pty_00000000"

            sleepers = [await spawn("sleep", "30") for _ in range(3)]
            reply = await call_error(
                "pty.spawn",
                {"command": "sleep", "args": ["30"], "owner": owner, "description": "4th"},
                -32002,
            )
            assert sorted(reply["error"]["data"]["live_ids"]) == sorted(sleepers)
            for session_id in sleepers[1:]:
                params = {"id": session_id, "owner": owner, "cleanup": True}
                await rpc(ws, next(next_id), "pty.kill", params)

            await rpc(ws, next(next_id), "owner.delete", {"owner": other})
            await call_error(
                "pty.spawn", {"command": "true", "owner": other, "description": "x"}, -32003
            )
            await call_error(
                "pty.spawn",
                {"command": "/nonexistent/tool", "owner": owner, "description": "x"},
                -32005,
            )
            done = await spawn("true")
            await rpc(
                ws,
                next(next_id),
                "pty.read",
                {"id": done, "owner": owner, "wait": {"exit": True, "timeout_ms": 5000}},
            )
            reply = await call_error("pty.write", {"id": done, "owner": owner, "data": "x"}, -32006)
            assert reply["error"]["data"]["status"] == "exited"
            assert reply["error"]["data"]["exit_code"] == 0
            await rpc(ws, next(next_id), "pty.kill", {"id": done, "owner": owner, "cleanup": True})
            # `sleep` never reads its terminal: once the tty's input buffers are full of
            # complete lines, a write times out after io_timeout saying how much went in.
            for _ in range(8):
                params = {"id": sleepers[0], "owner": owner, "data": ("y" * 999 + "\n") * 64}
                reply = await rpc(ws, next(next_id), "pty.write", params)
                if "error" in reply:
                    break
            assert error_of(reply) == (-32007, "write_timeout"), reply
            assert 0 <= reply["error"]["data"]["bytes_written"] < 64000
            seen[-32007] = "write_timeout"
            await still_usable()
            await call_error(
                "pty.resize", {"id": sleepers[0], "owner": owner, "rows": 0, "cols": 80}, -32008
            )
            await call_error(
                "pty.spawn", {"command": "false", "owner": owner, "description": "x"}, -32009
            )

            # $/cancelRequest cancels a long wait: -32800 for that request.
            await ws.send_message(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": "long",
                        "method": "pty.read",
                        "params": {
                            "id": sleepers[0],
                            "owner": owner,
                            "wait": {"pattern": "never", "timeout_ms": 20000},
                        },
                    }
                )
            )
            # A second request with the id of one in flight is refused.
            await expect(
                '{"jsonrpc": "2.0", "id": "long", "method": "server.info"}', -32600, "long"
            )
            started = trio.current_time()
            await ws.send_message(
                '{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "long"}}'
            )
            reply = await response_to(ws, "long")
            assert error_of(reply) == (-32800, None)
            assert trio.current_time() - started < 2
            seen[-32800] = None
            await still_usable()
            await rpc(ws, next(next_id), "owner.delete", {"owner": owner})

    assert seen == {
        -32700: None,
        -32600: None,
        -32601: None,
        -32602: None,
        -32001: "session_not_found",
        -32002: "limit_exceeded",
        -32003: "owner_deleted",
        -32005: "spawn_failed",
        -32006: "not_running",
        -32007: "write_timeout",
        -32008: "invalid_input",
        -32009: "permission_denied",
        -32800: None,
    }


async def test_handshake_token_origin_and_host(live: ServerProcess) -> None:
    port, token = live.port, live.token
    assert token is not None
    bearer = ("Authorization", f"Bearer {token}")
    with trio.fail_after(10):
        assert await raw_status(port) == 401
        assert await raw_status(port, target="/rpc?token=wrong") == 401
        assert await raw_status(port, headers=[("Authorization", "Bearer wrong")]) == 401
        assert await raw_status(port, headers=[("Authorization", f"Basic {token}")]) == 401
        # Both ways of presenting it must agree.
        assert await raw_status(port, target="/rpc?token=wrong", headers=[bearer]) == 401
        assert await raw_status(port, target=f"/rpc?token={token}") == 101
        assert await raw_status(port, headers=[bearer]) == 101
        assert await raw_status(port, target="/other", headers=[bearer]) == 404

        evil = ("Origin", "https://evil.example")
        assert await raw_status(port, headers=[bearer, evil]) == 403
        assert await raw_status(port, headers=[evil]) == 403  # no token either: still 403
        near = ("Origin", ALLOWED_ORIGIN + "/")
        assert await raw_status(port, headers=[bearer, near]) == 403
        assert await raw_status(port, headers=[bearer, ("Origin", "null")]) == 403
        assert await raw_status(port, headers=[bearer, ("Origin", ALLOWED_ORIGIN)]) == 101

        assert await raw_status(port, host=f"evil.example:{port}", headers=[bearer]) == 403
        assert await raw_status(port, host=f"127.0.0.1:{port + 1}", headers=[bearer]) == 403
        assert await raw_status(port, host=f"localhost:{port}", headers=[bearer]) == 101
        assert await raw_status(port, host=f"LOCALHOST:{port}", headers=[bearer]) == 101
        assert await raw_status(port, host=f"pty.test:{port}", headers=[bearer]) == 101

        # The project's client reports the status.
        with pytest.raises(ConnectionFailed) as refused:
            async with connect(live.url, "wrong"):
                pass
        assert refused.value.status == 401
        with pytest.raises(ConnectionFailed) as foreign:
            async with connect(live.url, token, origin="https://evil.example"):
                pass
        assert foreign.value.status == 403
        async with connect(live.url, token, origin=ALLOWED_ORIGIN) as client:
            assert (await client.request(ServerInfoParams())).version


async def test_oversized_and_invalid_utf8_frames(live: ServerProcess) -> None:
    assert live.token is not None
    with trio.fail_after(20):
        # Over 1 MiB of characters: closed by the WebSocket layer with 1009.
        async with open_ws(live.url, auth(live)) as ws:
            await ws.send_message("x" * ((1 << 20) + 1))
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason is not None and closed.value.reason.code == 1009
        # Under 1 MiB of characters but over 1 MiB of UTF-8 bytes: also 1009.
        async with open_ws(live.url, auth(live)) as ws:
            await ws.send_message("€" * 400_000)
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason is not None and closed.value.reason.code == 1009
        # Just under the bound is an ordinary (here: unparsable) message.
        async with open_ws(live.url, auth(live)) as ws:
            await ws.send_message("x" * ((1 << 20) - 16))
            assert error_of(await response_to(ws, None)) == (-32700, None)
            assert "result" in await rpc(ws, 1, "server.info")

        raw = await raw_connect(live.port, target=f"/rpc?token={live.token}")
        async with raw.stream:
            assert raw.status == 101
            # A binary frame is decoded as UTF-8 JSON and answered with a text frame...
            await raw.send(0x2, b'{"jsonrpc": "2.0", "id": 7, "method": "server.info"}')
            opcode, payload = await raw.read_frame()
            assert opcode == 0x1 and json.loads(payload)["id"] == 7
            # ...a binary frame that is not UTF-8 is a parse error, the connection stays...
            await raw.send(0x2, b"\xff\xfe")
            opcode, payload = await raw.read_frame()
            assert json.loads(payload)["error"]["code"] == -32700
            # ...but a text frame that is not UTF-8 breaks the WebSocket protocol: the
            # connection is failed (1007; trio-websocket drops the TCP connection without
            # sending the close frame).
            await raw.send(0x1, b'{"a": "\xff"}')
            assert await raw.close_code() in (1007, None)

        # Other clients never noticed.
        async with connect(live.url, live.token) as client:
            assert (await client.request(ServerInfoParams())).version


async def test_twenty_clients_one_never_reads(live: ServerProcess, request: Any) -> None:
    owner = owner_for(request)
    flood_owner = owner + "-flood"
    flood_bytes = 16_000_000
    script = f"head -c {flood_bytes} /dev/zero | tr '\\0' x; echo; echo flood-done; sleep 30"
    timings: list[float] = []
    stalled = await raw_connect(live.port, target=f"/rpc?token={live.token}")
    with trio.fail_after(40):
        async with stalled.stream:
            # The stalled client: attaches to a flooding session, then never reads again.
            assert stalled.status == 101
            spawn = {
                "command": "sh",
                "args": ["-c", script],
                "owner": flood_owner,
                "description": "flood",
            }
            request_1 = {"jsonrpc": "2.0", "id": 1, "method": "pty.spawn", "params": spawn}
            await stalled.send(0x1, json.dumps(request_1).encode())
            _, payload = await stalled.read_frame()
            flood_id = json.loads(payload)["result"]["id"]
            attach = {"id": flood_id, "owner": flood_owner}
            request_2 = {"jsonrpc": "2.0", "id": 2, "method": "pty.attach", "params": attach}
            await stalled.send(0x1, json.dumps(request_2).encode())

            async def worker(index: int) -> None:
                started = trio.current_time()
                who = f"{owner}-{index}"
                async with connect(live.url, live.token) as client:
                    info = await client.request(
                        SpawnParams(
                            command="sh",
                            args=["-c", 'read x; echo "got:$x"'],
                            owner=who,
                            description="worker",
                        )
                    )
                    await client.request(WriteParams(id=info.id, data=f"hello{index}\n", owner=who))
                    wait = Wait(pattern=f"got:hello{index}", timeout_ms=10000)
                    page = await client.request(ReadParams(id=info.id, owner=who, wait=wait))
                    assert page.reason == "matched", page
                    await client.request(KillParams(id=info.id, owner=who, cleanup=True))
                timings.append(trio.current_time() - started)

            async with trio.open_nursery() as nursery:
                for index in range(19):
                    nursery.start_soon(worker, index)
            assert len(timings) == 19

            # The flooding PTY was never held back by its stalled reader.
            async with connect(live.url, live.token) as client:
                wait = Wait(pattern="flood-done", timeout_ms=15000)
                page = await client.request(ReadParams(id=flood_id, owner=flood_owner, wait=wait))
                assert page.reason == "matched"
                [info] = (await client.request(ListParams(owner=flood_owner))).sessions
                assert info.byte_count > flood_bytes
                await client.request(OwnerDeleteParams(owner=flood_owner))
    assert max(timings) < 20


async def test_attach_resumes_from_an_offset_after_reconnect(
    live: ServerProcess, request: Any
) -> None:
    owner = owner_for(request)
    script = 'i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); sleep 0.002; done'
    with trio.fail_after(30):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(command="sh", args=["-c", script], owner=owner, description="count")
            )
            first_part = b""
            async with client.attach(AttachParams(id=info.id, owner=owner, offset=0)) as attachment:
                async for chunk in attachment:
                    assert chunk.offset == len(first_part) and not chunk.gap
                    first_part += chunk.data
                    if len(first_part) > 500:
                        break
                cursor = attachment.cursor
        assert cursor == len(first_part)

        async with connect(live.url, live.token) as client:
            # Output goes on while nobody is attached.
            listed = ListParams(owner=owner)
            while (await client.request(listed)).sessions[0].byte_count <= cursor:  # noqa: ASYNC110
                await trio.sleep(0.01)
            second_part = b""
            async with client.attach(
                AttachParams(id=info.id, owner=owner, offset=cursor)
            ) as attachment:
                assert attachment.first.offset == cursor and not attachment.first.gap
                async for chunk in attachment:
                    assert chunk.offset == cursor + len(second_part) and not chunk.gap
                    second_part += chunk.data
                assert attachment.exit_event is not None
                assert attachment.exit_event.exit_code == 0
            everything = await client.request(ReadRawParams(id=info.id, owner=owner, offset=0))
            await client.request(KillParams(id=info.id, owner=owner, cleanup=True))

    assert first_part + second_part == everything.data
    lines = (first_part + second_part).decode().split("\r\n")
    assert lines[:-1] == [f"line {i}" for i in range(300)]


async def test_exit_notification_goes_to_spawner_and_attached_once(
    live: ServerProcess, request: Any
) -> None:
    owner = owner_for(request)
    with trio.fail_after(15):
        async with (
            connect(live.url, live.token) as spawner,
            connect(live.url, live.token) as watcher,
            connect(live.url, live.token) as bystander,
        ):
            info = await spawner.request(
                SpawnParams(
                    command="sh",
                    args=["-c", "read x; exit 3"],
                    owner=owner,
                    description="ends",
                    notify_on_exit=True,
                )
            )
            async with watcher.attach(AttachParams(id=info.id, owner=owner)) as attachment:
                await bystander.request(WriteParams(id=info.id, data="go\n", owner=owner))
                async for _ in attachment:
                    pass
                assert attachment.exit_event is not None
                assert attachment.exit_event.exit_code == 3
            event = await spawner.next_notification(EXITED)
            assert event.id == info.id and event.exit_code == 3
            # Nothing more arrives: a notification for this exit would have been queued
            # before the answer to a request sent now (one send queue per connection).
            for client in (spawner, watcher, bystander):
                await client.request(ServerInfoParams())

            def exits(client: Any) -> int:
                return sum(m.method == "pty.exited" for m in client._notifications)

            # The watcher's one notification ended its attachment (and is also buffered).
            assert (exits(spawner), exits(watcher), exits(bystander)) == (0, 1, 0)
            await spawner.request(KillParams(id=info.id, owner=owner, cleanup=True))


async def test_owners_are_isolated(live: ServerProcess, request: Any) -> None:
    owner = owner_for(request)
    with trio.fail_after(10):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(command="sleep", args=["30"], owner=owner, description="mine")
            )
            assert (await client.request(ListParams(owner=owner + "-b"))).sessions == []
            with pytest.raises(RpcError) as foreign:
                await client.request(ReadParams(id=info.id, owner=owner + "-b"))
            with pytest.raises(RpcError) as missing:
                await client.request(ReadParams(id="pty_ffffffff", owner=owner + "-b"))
            assert foreign.value.kind == missing.value.kind == "session_not_found"
            assert foreign.value.message == missing.value.message.replace("pty_ffffffff", info.id)
            assert (await client.request(OwnerDeleteParams(owner=owner))).removed == 1


# --------------------------------------------------------------------------------------------
# Shutdown


async def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    with trio.move_on_after(timeout):
        while proc.poll() is None:  # noqa: ASYNC110 (polling another process)
            await trio.sleep(0.01)
    return proc.poll()


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGTERM, signal.SIGINT]])
async def test_sigterm_tears_down_sessions_that_ignore_sigterm(
    tmp_path: Path, signals: list[signal.Signals]
) -> None:
    grace = 0.3
    server = start_server(tmp_path)
    try:
        with trio.fail_after(20):
            async with connect(server.url, server.token) as client:
                for _ in range(3):
                    await client.request(
                        SpawnParams(
                            command="sh",
                            args=["-c", "trap '' HUP TERM; sleep 1000 & sleep 1000"],
                            description="stubborn",
                        )
                    )
                with trio.fail_after(5):
                    while len(server_processes(server)) < 9:  # noqa: ASYNC110
                        await trio.sleep(0.01)
                pids = list(server_processes(server))
                async with open_ws(server.url, auth(server)) as ws:
                    first, *again = signals
                    server.proc.send_signal(first)
                    with pytest.raises(ConnectionClosed) as closed:
                        await ws.get_message()
                    assert closed.value.reason is not None
                    assert closed.value.reason.code == 1001
                    # A second signal, once the clients were told, while the sessions are
                    # still being torn down (they ignore SIGTERM, so for `grace` at least):
                    # it stops waiting for clients, and still ends every session. (Sent
                    # before the close frame went out, it drops the connection: 1006.)
                    for signum in again:
                        server.proc.send_signal(signum)
                    # A guard against a hang only: the time that is the point is the
                    # server's own, below.
                    code = await _wait_exit(server.proc, 15)
        assert code == 0, server.stderr()
        assert alive_any(pids) == []
        summary = server.stdout_rest(1).strip().splitlines()
        assert len(summary) == 1 and summary[0].startswith("shutdown: 3 sessions reaped in")
        # Sessions that ignore SIGTERM are killed after the grace, not at close_timeout
        # (5 s in TEST_CONFIG): the teardown's time as the server measured it.
        torn_down = float(summary[0].split(" reaped in ")[1].split()[0])
        assert torn_down < grace + 2
    finally:
        server.stop()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1])
async def test_signals_that_keep_coming_during_the_shutdown_change_nothing(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """A supervisor that repeats its signal (or an impatient Ctrl-C) until the server is gone:
    a signal that arrives after serve is done, while the process exits, must not find its
    default action back (KeyboardInterrupt, death by SIGTERM or SIGUSR1) and turn a clean
    exit into 130 or a signal death (it did, in most runs, before such signals were held)."""
    server = start_server(tmp_path)
    try:
        with trio.fail_after(20):
            server.proc.send_signal(signal.SIGTERM)
            while server.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    server.proc.send_signal(signum)
                await trio.sleep(0.001)
        assert server.proc.returncode == 0, server.stderr()
        assert server.stdout_rest(1).startswith("shutdown: 0 sessions reaped in")
    finally:
        server.stop()


def test_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('colour = "red"\n[limits]\nterminate_grace = "soon"\n')
    done = subprocess.run(
        [sys.executable, "-m", "trio_pty", "serve", "--port", "0", "--config", str(config)],
        capture_output=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert b"unknown key(s): colour" in done.stderr
    assert done.stdout == b""
