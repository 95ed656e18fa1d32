"""The client and the `trio-pty` CLI against a real server subprocess: commands, exit codes,
and `attach` driven through a real PTY (keystrokes in, output out, resize, detach key,
terminal restored)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from functools import partial
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import trio_pty
from trio_pty import Limits
from trio_pty.client.client import ConnectionFailed, RpcError, connect
from trio_pty.console.keys import keystrokes_to_text
from trio_pty.console.tables import format_table
from trio_pty.model import SessionInfo, Wait
from trio_pty.policy.escapes import decode_escapes
from trio_pty.wire import (
    KillParams,
    ListParams,
    OwnerDeleteParams,
    ReadParams,
    ServerInfoParams,
    SpawnParams,
)

from .helpers import wait_for_status, wait_for_text
from .rpc_support import ServerProcess, live, owner_for, server

__all__ = ["live", "server"]  # fixtures used by name


def cli_env(server: ServerProcess, owner: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TRIO_PTY_URL=server.url, TRIO_PTY_TOKEN=server.token or "", TRIO_PTY_OWNER=owner)
    env.update(extra)
    return env


async def cli(
    server: ServerProcess, owner: str, *args: str, **env: str
) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "trio_pty", *args],
        env=cli_env(server, owner, **env),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )


async def test_cli_commands_and_exit_codes(live: ServerProcess, request: Any) -> None:
    owner = owner_for(request)
    with trio.fail_after(30):
        spawned = await cli(
            live,
            owner,
            "spawn",
            "--description",
            "greeter",
            "--",
            "sh",
            "-c",
            'read x; echo "got:$x"',
        )
        assert spawned.returncode == 0, spawned.stderr
        session_id = spawned.stdout.decode().strip()
        assert session_id.startswith("pty_")

        listed = await cli(live, owner, "list")
        header, row = listed.stdout.decode().splitlines()
        assert header.split()[:3] == ["ID", "NAME", "STATUS"]
        assert row.startswith(session_id) and "running" in row and "greeter" in row

        results: dict[str, subprocess.CompletedProcess[bytes]] = {}

        async def run(name: str, *args: str, env: dict[str, str] | None = None) -> None:
            results[name] = await cli(live, owner, *args, **(env or {}))

        async with connect(live.url, live.token) as watcher, trio.open_nursery() as nursery:

            async def connections() -> int:
                return (await watcher.request(ServerInfoParams())).counts.connections

            before = await connections()
            nursery.start_soon(run, "follow", "read", session_id, "--follow")
            # The follow is connected before anything is written, so it follows a running
            # session (a follow started after the exit would print the same lines).
            with trio.fail_after(10):
                while await connections() == before:  # noqa: ASYNC110 - the server's view
                    await trio.sleep(0.01)
            nursery.start_soon(run, "write", "write", session_id, r"hello\n", "--escapes")
            nursery.start_soon(run, "usage", "spawn", "--owner", "x")
            nursery.start_soon(partial(run, "bad-token", "list", env={"TRIO_PTY_TOKEN": "x"}))
            nursery.start_soon(run, "unknown", "read", "pty_00000000")
            no_server = {"TRIO_PTY_URL": "ws://127.0.0.1:1/rpc"}
            nursery.start_soon(partial(run, "no-server", "list", env=no_server))

        assert results["write"].returncode == 0, results["write"].stderr
        follow = results["follow"]
        assert follow.returncode == 0, follow.stderr
        assert follow.stdout.decode().splitlines() == ["hello", "got:hello"]
        assert results["usage"].returncode == 2
        assert b"spawn needs a command" in results["usage"].stderr
        assert results["bad-token"].returncode == 3
        assert b"HTTP 401 (missing or wrong token); set --token" in results["bad-token"].stderr
        assert results["no-server"].returncode == 3
        assert results["unknown"].returncode == 1
        assert results["unknown"].stderr.decode().strip() == (
            "trio-pty: error: PTY session not found: pty_00000000 [session_not_found]"
        )

        grep = await cli(live, owner, "read", session_id, "--pattern", "GOT", "-i")
        assert grep.stdout.decode().splitlines() == ["got:hello"]
        killed = await cli(live, owner, "kill", session_id, "--cleanup")
        assert killed.returncode == 0
        assert killed.stdout.decode().startswith(f"{session_id} exited (exit 0)")
        empty = await cli(live, owner, "list")
        assert empty.returncode == 0 and empty.stdout == b""


async def test_cli_attach_through_a_real_terminal(live: ServerProcess, request: Any) -> None:
    """`trio-pty attach` runs in a PTY of an in-process manager, attached to a session of
    the server: what is typed reaches the session, its output comes back, a resize follows,
    Ctrl-] detaches, and the terminal is back in cooked mode afterwards."""
    owner = owner_for(request)
    with trio.fail_after(30):
        async with connect(live.url, live.token) as client:
            target = await client.request(
                SpawnParams(
                    command="sh",
                    args=["-c", 'while read -r line; do echo "echo:$line"; done'],
                    owner=owner,
                    description="target",
                )
            )
            script = f"{sys.executable} -m trio_pty attach {target.id}; echo rc=$?; stty -a"
            async with trio_pty.open_manager(Limits(terminate_grace=0.3)) as manager:
                outer = await manager.spawn(
                    "sh",
                    ["-c", script],
                    description="attach",
                    env={
                        "TRIO_PTY_URL": live.url,
                        "TRIO_PTY_TOKEN": live.token or "",
                        "TRIO_PTY_OWNER": owner,
                    },
                )
                await wait_for_text(manager, outer.id, "detach with C-]")
                await manager.write(outer.id, "abc\r")
                await wait_for_text(manager, outer.id, "echo:abc")

                await manager.resize(outer.id, rows=31, cols=101)
                with trio.fail_after(5):
                    while True:
                        [info] = (await client.request(ListParams(owner=owner))).sessions
                        if (info.rows, info.cols) == (31, 101):
                            break
                        await trio.sleep(0.02)

                # A backslash arrives as typed (what attach forwards is never escape-decoded).
                await manager.write(outer.id, "x\\y\r")
                await wait_for_text(manager, outer.id, "echo:x\\y")

                await manager.write(outer.id, "\x1d")  # C-]: a detach once nothing follows
                text = await wait_for_text(manager, outer.id, "rc=0")
                await wait_for_status(manager, outer.id, "exited")
                text = "\n".join(line.text for line in (await manager.read(outer.id)).lines)
                assert f"[detached from {target.id}]" in text
                flags = set(text.split("rc=0", 1)[1].replace(";", " ").split())
                assert {"icanon", "echo", "isig", "opost"} <= flags, text
                assert not {"-icanon", "-echo", "-isig", "-opost"} & flags, text
            # The session lives on after a detach.
            [info] = (await client.request(ListParams(owner=owner))).sessions
            assert info.status == "running"
            await client.request(KillParams(id=target.id, owner=owner, cleanup=True))


async def test_cancelled_call_cancels_the_request_on_the_server(
    live: ServerProcess, request: Any
) -> None:
    owner = owner_for(request)
    with trio.fail_after(10):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(command="sleep", args=["30"], owner=owner, description="idle")
            )
            with trio.move_on_after(0.2):
                await client.request(
                    ReadParams(
                        id=info.id, owner=owner, wait=Wait(pattern="never", timeout_ms=20000)
                    )
                )
            with trio.fail_after(2):
                while True:
                    counts = (await client.request(ServerInfoParams())).counts
                    if counts.requests_in_flight == 1:  # this server.info
                        break
                    await trio.sleep(0.02)
            await client.request(OwnerDeleteParams(owner=owner))
            with pytest.raises(RpcError) as deleted:
                await client.request(SpawnParams(command="true", owner=owner, description="x"))
            assert deleted.value.kind == "owner_deleted"


async def test_client_reports_connection_failures() -> None:
    with trio.fail_after(10):
        with pytest.raises(ConnectionFailed, match="cannot connect"):
            async with connect("ws://127.0.0.1:1/rpc", "x"):
                pass
        with pytest.raises(ConnectionFailed, match="not a ws"):
            async with connect("ftp://127.0.0.1/rpc", "x"):
                pass


@pytest.mark.parametrize("how", ["close", "reset"])
async def test_connect_fails_at_once_when_the_server_closes_before_the_handshake(
    how: str,
) -> None:
    """A port that accepts and closes (not a trio-pty server): before, `connect` waited for a
    handshake response until connect_timeout (10 s) and then said it timed out."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    async def accept_and_close() -> None:
        while True:
            accepted, _ = await listener.accept()
            if how == "reset":  # an RST instead of a FIN
                accepted.setsockopt(
                    trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            accepted.close()

    with listener, trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(accept_and_close)
            for _ in range(3):
                with pytest.raises(ConnectionFailed, match="cannot connect") as failed:
                    async with connect(f"ws://127.0.0.1:{port}/rpc", "x", connect_timeout=10):
                        pass
                assert "timed out" not in str(failed.value)
            nursery.cancel_scope.cancel()
    # The port closed: refused, said so.
    with trio.fail_after(5), pytest.raises(ConnectionFailed, match="Connection refused"):
        async with connect(f"ws://127.0.0.1:{port}/rpc", "x"):
            pass


@given(st.binary(max_size=200))
def test_keystrokes_arrive_byte_for_byte(data: bytes) -> None:
    assert decode_escapes(keystrokes_to_text(data)) == data


def test_list_table() -> None:
    info = SessionInfo(
        id="pty_0000abcd",
        owner="o",
        command="python3",
        args=["-m", "http.server"],
        workdir="/",
        title=None,
        description="dev server",
        status="exited",
        pid=42,
        exit_code=None,
        exit_signal=9,
        timed_out=True,
        created_at=time.time() - 125,
        line_count=7,
        byte_count=99,
        rows=24,
        cols=80,
        notify_on_exit=False,
        timeout=5.0,
    )
    header, row = format_table([info]).splitlines()
    assert header.split() == [
        "ID",
        "NAME",
        "STATUS",
        "PID",
        "EXIT",
        "LINES",
        "AGE",
        "COMMAND",
        "DESCRIPTION",
    ]
    assert row.split() == [
        "pty_0000abcd",
        "-",
        "exited",
        "(timeout)",
        "42",
        "sig9",
        "7",
        "2m",
        "python3",
        "-m",
        "http.server",
        "dev",
        "server",
    ]
