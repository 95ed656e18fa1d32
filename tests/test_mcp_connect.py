"""`trio-pty mcp --connect URL` against a real `trio-pty serve`: the tools' sessions are the
server's, under the MCP server's owner; they show in `pty.list` and outlive the MCP
process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from trio_pty.client.client import connect
from trio_pty.wire import ListParams, OwnerDeleteParams

from .mcp_support import (
    CLIENT_BUDGET,
    STARTUP_TIMEOUT,
    call,
    fail,
    living,
    mcp_client,
    server_command,
    server_environment,
    server_pid,
)
from .rpc_support import (
    ServerProcess,
    live,
    owner_for,
    server,
    server_processes,
    start_server,
)

__all__ = ["live", "server"]  # the fixtures


async def test_sessions_are_the_servers_and_outlive_the_mcp_process(
    live: ServerProcess, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    owner = owner_for(request)
    assert live.token is not None
    env = {"TRIO_PTY_TOKEN": live.token}
    with trio.fail_after(STARTUP_TIMEOUT + 30):
        async with mcp_client(tmp_path, "--connect", live.url, "--owner", owner, env=env) as client:
            data = await call(client, "exec_command", {"cmd": "echo hi; exit 3"})
            assert (data["status"], data["exit_code"]) == ("exited", 3)
            assert data["output"].splitlines()[0] == "hi"
            # A long line, counted and read whole through the wire (pty.read_raw's line).
            data = await call(client, "exec_command", {"cmd": "printf '%07481d\\n' 0"})
            assert "[5481 more characters; read_output" in data["output"]
            arguments = {"session_id": data["session_id"], "offset": 0, "max_line_chars": 8000}
            assert (await call(client, "read_output", arguments))["output"] == "0" * 7481

            data = await call(
                client, "spawn", {"command": "sh", "args": ["-c", "echo up; sleep 60"]}
            )
            program = data["session_id"]
            assert (data["status"], data["output"]) == ("running", "up")
            data = await call(
                client, "exec_command", {"cmd": "echo started; sleep 60", "yield_time_ms": 5000}
            )
            command = data["session_id"]
            assert (data["status"], data["output"]) == ("running", "started")
            data = await call(client, "write_stdin", {"session_id": command, "yield_time_ms": 200})
            assert (data["status"], data["output"]) == ("running", "")
            screen = await call(client, "screen", {"session_id": program})
            assert screen["lines"][0] == "up"

            error = await fail(client, "read_output", {"session_id": "pty_00000000"})
            assert error.startswith("Error [session_not_found]: ")
            mcp = server_pid()
            began = trio.current_time()
        assert trio.current_time() - began < CLIENT_BUDGET  # it left as soon as stdin closed
    assert not living([mcp])

    async with connect(live.url, live.token) as rpc:
        sessions = {s.id: s for s in (await rpc.request(ListParams(owner=owner))).sessions}
        assert sessions[program].status == "running"
        assert sessions[command].status == "running"
        assert (sessions[command].command, sessions[command].args[0]) == ("bash", "-lc")
        assert server_processes(live)  # still running, in the server
        await rpc.request(OwnerDeleteParams(owner=owner))


async def test_each_run_is_an_owner_of_its_own(live: ServerProcess, tmp_path: Path) -> None:
    assert live.token is not None
    env = {"TRIO_PTY_TOKEN": live.token}
    with trio.fail_after(2 * STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path, "--connect", live.url, env=env) as client:
            data = await call(client, "spawn", {"command": "sleep", "args": ["60"]})
            first = data["session_id"]
        async with mcp_client(tmp_path, "--connect", live.url, env=env) as client:
            assert (await call(client, "list_sessions", {}))["sessions"] == []
            error = await fail(client, "kill", {"session_id": first})
            assert error.startswith("Error [session_not_found]")
    async with connect(live.url, live.token) as rpc:
        every = (await rpc.request(ListParams(all_owners=True))).sessions
        (mine,) = [s for s in every if s.id == first]
        assert mine.owner.startswith("mcp-") and len(mine.owner) == len("mcp-") + 8
        await rpc.request(OwnerDeleteParams(owner=mine.owner))


async def test_a_lost_server_is_a_tool_error_saying_so(tmp_path: Path) -> None:
    own = start_server(tmp_path)
    try:
        assert own.token is not None
        env = {"TRIO_PTY_TOKEN": own.token}
        with trio.fail_after(STARTUP_TIMEOUT + 30):
            async with mcp_client(tmp_path, "--connect", own.url, env=env) as client:
                assert (await call(client, "list_sessions", {}))["sessions"] == []
                await trio.to_thread.run_sync(own.stop)
                error = await fail(client, "list_sessions", {})
                assert error.startswith("Error [connection_lost]: ")
                assert "trio-pty serve" in error  # what to do
    finally:
        own.stop()


def test_a_wrong_token_is_said_and_exits_3(live: ServerProcess, tmp_path: Path) -> None:
    done = subprocess.run(
        server_command("--connect", live.url),
        env=server_environment(tmp_path, {"TRIO_PTY_TOKEN": "wrong", "PATH": "/usr/bin:/bin"}),
        stdin=subprocess.PIPE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "401" in done.stderr and "TRIO_PTY_TOKEN" in done.stderr
