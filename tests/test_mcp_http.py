"""MCP over streamable HTTP (`trio_pty.mcp.http`): a real server on loopback port 0, in
this process (so that the manager's sessions can be watched), driven by the official SDK's
own streamable-HTTP client in both protocol eras; the refusals with plain HTTP requests."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx2
import pytest
import trio
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from trio_pty.limits import Limits
from trio_pty.manager import Manager, open_manager
from trio_pty.mcp.http import MCP_PATH, owner_for, serve_http
from trio_pty.rpc.handshake import Rejection
from trio_pty.rpc.scope import FULL_ACCESS, TokenScope

from .mcp_support import STARTUP_TIMEOUT, call, fail, server_command, server_environment

SERVER_TOKEN = "server-token-0123456789"
READER_TOKEN = "reader-token-0123456789"
ALICE_TOKEN = "alice-token-0123456789"
TOKENS = {
    SERVER_TOKEN: FULL_ACCESS,
    READER_TOKEN: TokenScope(name="reader", read_only=True),
    ALICE_TOKEN: TokenScope(name="alice", owners=("alice",)),
}
# The SDK's client leaves httpx2's SSE generators to the collector after a handshake-era
# response stream (its defect, on the client side): trio warns about each.
pytestmark = pytest.mark.filterwarnings("ignore:Async generator 'http(x|core)2[.]:ResourceWarning")
MODES = ["auto", "legacy"]
MODERN = "2026-07-28"  # 2026-07-28 (discovered), and the initialize handshake


@attrs.frozen
class Running:
    manager: Manager
    url: str


@asynccontextmanager
async def http_server(tmp_path: Path, limits: Limits | None = None) -> AsyncIterator[Running]:
    environ = {**os.environ, **server_environment(tmp_path)}
    limits = limits or Limits(terminate_grace=0.5, close_timeout=3.0)
    async with open_manager(limits, environ=environ) as manager, trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_http(
                manager,
                host="127.0.0.1",
                port=0,
                tokens=TOKENS,
                limits=limits,
                task_status=task_status,
            )
        )
        yield Running(manager, f"http://127.0.0.1:{port}{MCP_PATH}")
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def http_client(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30, read=60)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def post(url: str, headers: dict[str, str]) -> httpx2.Response:
    """One plain tools/list POST (what any client sends first in the 2026-07-28 era)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/list",
        **headers,
    }
    async with httpx2.AsyncClient() as http:
        return await http.post(url, json=body, headers=headers)


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_call_works_in_both_eras(tmp_path: Path, mode: str) -> None:
    with trio.fail_after(30):
        async with http_server(tmp_path) as server:
            async with http_client(server.url, SERVER_TOKEN, mode) as client:
                data = await call(client, "exec_command", {"cmd": "echo hi; exit 3"})
                assert (data["status"], data["exit_code"]) == ("exited", 3)
                assert data["output"].splitlines()[0] == "hi"
            (info,) = server.manager.list_all()
            assert info.owner == "mcp"  # a token of every owner, and no ?owner=


async def test_a_missing_or_wrong_token_is_401_a_foreign_origin_or_host_403(
    tmp_path: Path,
) -> None:
    with trio.fail_after(30):
        async with http_server(tmp_path) as server:
            assert (await post(server.url, {})).status_code == 401
            wrong = {"Authorization": "Bearer not-the-token"}
            assert (await post(server.url, wrong)).status_code == 401
            right = {"Authorization": f"Bearer {SERVER_TOKEN}"}
            answer = await post(server.url, right)
            assert answer.status_code == 200, answer.text
            foreign = {**right, "Origin": "http://evil.example"}
            assert (await post(server.url, foreign)).status_code == 403
            rebound = {**right, "Host": "evil.example"}
            assert (await post(server.url, rebound)).status_code == 403
            elsewhere = server.url.replace(MCP_PATH, "/other")
            assert (await post(elsewhere, right)).status_code == 404
            # An owner the token may not use.
            assert (
                await post(f"{server.url}?owner=bob", {"Authorization": f"Bearer {ALICE_TOKEN}"})
            ).status_code == 403


async def test_a_body_over_the_message_limit_is_refused(tmp_path: Path) -> None:
    limits = Limits(max_message_bytes=4096, terminate_grace=0.5, close_timeout=3.0)
    with trio.fail_after(30):
        async with http_server(tmp_path, limits) as server:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "x": "y" * 8192}
            headers = {
                "Authorization": f"Bearer {SERVER_TOKEN}",
                "Accept": "application/json, text/event-stream",
            }
            async with httpx2.AsyncClient() as http:
                response = await http.post(server.url, json=body, headers=headers)
            assert response.status_code == 413


@pytest.mark.parametrize("mode", MODES)
async def test_a_read_only_token_reads_but_cannot_run_or_write(tmp_path: Path, mode: str) -> None:
    with trio.fail_after(30):
        async with http_server(tmp_path) as server:
            async with http_client(server.url, SERVER_TOKEN, mode) as client:
                data = await call(
                    client, "spawn", {"command": "sh", "args": ["-c", "echo up; read x"]}
                )
                session_id = data["session_id"]
            async with http_client(server.url, READER_TOKEN, mode) as reader:
                listed = await call(reader, "list_sessions", {})
                assert [s["session_id"] for s in listed["sessions"]] == [session_id]
                read = await call(reader, "read_output", {"session_id": session_id})
                assert read["output"] == "up"
                refused = await fail(reader, "exec_command", {"cmd": "echo no"})
                assert "read-only" in refused
                refused = await fail(
                    reader, "write_stdin", {"session_id": session_id, "chars": "x\n"}
                )
                assert "read-only" in refused
            assert [info.status for info in server.manager.list_all()] == ["running"]


async def test_an_owner_scoped_token_sees_only_its_owners_sessions(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with http_server(tmp_path) as server:
            async with http_client(server.url, SERVER_TOKEN) as client:
                theirs = (await call(client, "exec_command", {"cmd": "echo mine"}))["session_id"]
            async with http_client(server.url, ALICE_TOKEN) as alice:
                assert (await call(alice, "list_sessions", {}))["sessions"] == []
                refused = await fail(alice, "read_output", {"session_id": theirs})
                assert "session_not_found" in refused or "not found" in refused.lower()
                own = (await call(alice, "exec_command", {"cmd": "echo alice"}))["session_id"]
                listed = await call(alice, "list_sessions", {})
                assert [s["session_id"] for s in listed["sessions"]] == [own]
            assert server.manager.get(own, owner="alice").owner == "alice"


@pytest.mark.parametrize("mode", MODES)
async def test_closing_the_response_stream_interrupts_the_command(
    tmp_path: Path, mode: str
) -> None:
    with trio.fail_after(30):
        async with http_server(tmp_path) as server:
            async with http_client(server.url, SERVER_TOKEN, mode) as client:
                started = trio.Event()
                async with trio.open_nursery() as nursery:

                    async def long_call() -> None:
                        arguments = {"cmd": "sleep 60", "yield_time_ms": 20_000}
                        with trio.CancelScope() as scope:
                            calls.append(scope)
                            started.set()
                            await client.call_tool("exec_command", arguments)

                    calls: list[trio.CancelScope] = []
                    nursery.start_soon(long_call)
                    await started.wait()
                    while not server.manager.list_all():  # noqa: ASYNC110 - no event says it
                        await trio.sleep(0.01)
                    (info,) = server.manager.list_all()
                    calls[0].cancel()  # the client closes the response stream
                exited = await server.manager.wait_exit(info.id, owner="mcp")
            assert exited.exit_signal == signal.SIGINT  # Ctrl-C, as a cancelled exec_command gets


def test_owner_for_picks_the_tokens_own_owner_or_the_asked_one() -> None:
    limits = Limits()
    alice = TokenScope(name="alice", owners=("alice",))
    team = TokenScope(name="team", owners=("team-*",))
    assert owner_for(FULL_ACCESS, None, limits) == "mcp"
    assert owner_for(FULL_ACCESS, "bob", limits) == "bob"
    assert owner_for(alice, None, limits) == "alice"
    assert owner_for(alice, "alice", limits) == "alice"
    assert isinstance(refused := owner_for(alice, "bob", limits), Rejection)
    assert refused.status == 403
    assert isinstance(refused := owner_for(team, None, limits), Rejection)
    assert refused.status == 400
    assert owner_for(team, "team-a", limits) == "team-a"
    assert isinstance(owner_for(FULL_ACCESS, "", limits), Rejection)


async def test_the_command_line_serves_until_sigterm_then_tears_down(tmp_path: Path) -> None:
    """`trio-pty mcp --http --port 0`: the URL on stderr, the token from TRIO_PTY_TOKEN, and
    SIGTERM ends it (exit 0) with its sessions."""
    environ = {**os.environ, **server_environment(tmp_path), "TRIO_PTY_TOKEN": SERVER_TOKEN}
    command = server_command("--http", "--port", "0")
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        process = await trio.lowlevel.open_process(
            command, env=environ, cwd=tmp_path, stderr=subprocess.PIPE
        )
        assert process.stderr is not None
        said = b""
        while b"/mcp\n" not in said:
            chunk = await process.stderr.receive_some()
            assert chunk, said
            said += chunk
        url = said.decode().partition("serving MCP on ")[2].split()[0]
        async with http_client(url, SERVER_TOKEN) as client:
            data = await call(client, "exec_command", {"cmd": "echo hi"})
            assert data["output"] == "hi"
            data = await call(client, "spawn", {"command": "sleep", "args": ["60"]})
            assert data["status"] == "running"
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0
        await process.stderr.aclose()


async def test_a_handshake_era_session_answers_only_the_token_that_opened_it(
    tmp_path: Path,
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    with trio.fail_after(30):
        async with http_server(tmp_path) as server, httpx2.AsyncClient() as http:
            opened = await http.post(
                server.url,
                json=initialize,
                headers={**accept, "Authorization": f"Bearer {SERVER_TOKEN}"},
            )
            assert opened.status_code == 200, opened.text
            session = opened.headers["mcp-session-id"]
            following = {**accept, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
            other = await http.post(
                server.url,
                json=listing,
                headers={**following, "Authorization": f"Bearer {ALICE_TOKEN}"},
            )
            assert other.status_code == 404  # as if there were no such session
            same = await http.post(
                server.url,
                json=listing,
                headers={**following, "Authorization": f"Bearer {SERVER_TOKEN}"},
            )
            assert same.status_code == 200 and "exec_command" in same.text


async def test_a_trickling_head_is_cut_and_a_trickling_body_is_408(tmp_path: Path) -> None:
    limits = Limits(io_timeout=1.0, terminate_grace=0.5, close_timeout=3.0)
    with trio.fail_after(30):
        async with http_server(tmp_path, limits) as server:
            port = int(server.url.split(":")[2].split("/")[0])
            head = (
                f"POST {MCP_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {SERVER_TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n"
            ).encode()

            # A head that never ends, a byte at a time: the connection is closed.
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            began = trio.current_time()
            async with stream, trio.open_nursery() as nursery:

                async def trickle() -> None:
                    for byte in head:
                        try:
                            await stream.send_all(bytes([byte]))
                        except trio.BrokenResourceError:
                            return
                        await trio.sleep(0.05)

                nursery.start_soon(trickle)
                while await stream.receive_some():  # until the server closes it
                    pass
                nursery.cancel_scope.cancel()
            assert trio.current_time() - began < limits.io_timeout + 1.0

            # A whole head, then a body that stops short: 408.
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(head + b"\r\n" + b"{" * 10)
                answer = b""
                while chunk := await stream.receive_some():
                    answer += chunk
                    if b"\r\n\r\n" in answer:
                        break
            assert answer.startswith(b"HTTP/1.1 408"), answer


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--http", "--owner", "bob"], "the owner comes from the token"),
        (["--http", "--connect", "ws://127.0.0.1:1/rpc"], "not with --connect"),
        (["--http", "--token-file", "/no/such/token"], "/no/such/token: cannot open"),
    ],
)
def test_http_usage_errors_exit_2_and_say_what_is_wrong(arguments: list[str], said: str) -> None:
    done = subprocess.run(
        server_command(*arguments), capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, said in done.stderr) == (2, True), done.stderr


async def test_the_read_cursor_is_the_owners_not_a_connections(tmp_path: Path) -> None:
    """Two clients one after the other, with the same token: the second's `since_last`
    starts where the first's reads ended (nothing is kept per client)."""
    program = "echo one; read x; echo two; read y"
    with trio.fail_after(30):
        async with http_server(tmp_path) as server:
            async with http_client(server.url, SERVER_TOKEN) as first:
                data = await call(first, "spawn", {"command": "sh", "args": ["-c", program]})
                session_id = data["session_id"]
                assert data["output"] == "one"
            async with http_client(server.url, SERVER_TOKEN) as second:
                data = await call(second, "write_stdin", {"session_id": session_id, "chars": "x\n"})
                assert data["output"].splitlines() == ["x", "two"]  # not "one" again
