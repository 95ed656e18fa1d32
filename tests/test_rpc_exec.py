"""One-shot commands (`Manager.exec`, `pty.exec`, `trio-pty exec`) and one session by id
(`pty.get`), in process through `LocalClient` (the handlers a server runs, without the
socket) and against a real `trio-pty serve`: exit codes of the command's own, pagers that do
not page, what a command leaves running ended with it and counted, the session id of a
command past its yield time, a cancelled call interrupting its command, scopes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_pty
from trio_pty import Limits
from trio_pty.client.client import RpcError, connect
from trio_pty.client.local import LocalClient
from trio_pty.client.requester import Requester
from trio_pty.oneshot import showing
from trio_pty.rpc.scope import TokenScope
from trio_pty.wire import (
    AttachParams,
    ExecParams,
    GetParams,
    KillParams,
    ListParams,
    OwnerDeleteParams,
    Params,
    ServerInfoParams,
    SpawnParams,
)

from .helpers import poll_until
from .rpc_support import ServerProcess, live, owner_for, server
from .test_rpc_client_cli import cli

__all__ = ["live", "server"]  # fixtures used by name

FAST = Limits(terminate_grace=0.3, close_timeout=5.0)


def _environ(tmp_path: Path) -> dict[str, str]:
    """A HOME of its own: the profile a login shell reads is the system's only."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "PATH": os.environ["PATH"], "TERM": "xterm-256color"}


async def _exec(client: Requester, command: str, **fields: Any) -> trio_pty.model.ExecResult:
    return await client.request(ExecParams(command=command, **fields))


# ------------------------------------------------------------------ in process


async def test_exec_runs_a_script_and_says_what_it_left_behind(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST, environ=_environ(tmp_path)) as manager:
            client = LocalClient(manager)
            done = await _exec(client, "echo hi; exit 3")
            assert (done.status, done.exit_code, done.exit_signal) == ("exited", 3, None)
            assert [line.text for line in done.lines] == ["hi"]
            assert done.others_ended == 0 and done.showing is None

            # A script: no prompt, not interactive; pagers do not page (a tty, yet `cat`).
            done = await _exec(client, 'echo "[$-] $PAGER $GIT_PAGER $MANPAGER $LESS"; tty')
            flags, *rest = done.lines[0].text.split(" ")
            assert "i" not in flags and rest == ["cat", "cat", "cat", "FRX"]
            assert done.lines[1].text.startswith("/dev/pts/")
            done = await _exec(client, "echo $PAGER", env={"PAGER": "more"})
            assert [line.text for line in done.lines] == ["more"]  # the caller's env wins

            # The exit code is the process's own, a signal included.
            done = await _exec(client, "kill -TERM $$")
            assert (done.exit_code, done.exit_signal) == (None, 15)

            # What the command left running ends with it, and is counted.
            done = await _exec(client, "sleep 60 & sleep 60 & echo started")
            assert (done.exit_code, [line.text for line in done.lines]) == (0, ["started"])
            assert done.others_ended == 2
            info = await client.request(GetParams(id=done.id))
            assert (info.status, info.command, info.args) == (
                "exited",
                "bash",
                ["-lc", "sleep 60 & sleep 60 & echo started"],
            )


async def test_exec_past_its_yield_gives_the_id_and_a_cancel_interrupts(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST, environ=_environ(tmp_path)) as manager:
            client = LocalClient(manager)
            running = await _exec(client, "echo started; sleep 60", yield_ms=2000)
            assert (running.status, running.exit_code, running.others_ended) == (
                "running",
                None,
                None,
            )
            assert [line.text for line in running.lines] == ["started"]
            await client.request(KillParams(id=running.id))

            with trio.move_on_after(0.5) as waiting:
                await _exec(client, "sleep 60", yield_ms=20_000, description="interrupted")
            assert waiting.cancelled_caught
            (info,) = [s for s in manager.list() if s.description == "interrupted"]
            await poll_until(lambda: manager.get(info.id).status != "running")
            assert manager.get(info.id).exit_signal == 2  # SIGINT, as Ctrl-C


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
async def test_exec_says_when_a_pager_or_a_full_screen_program_waits(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST, environ=_environ(tmp_path)) as manager:
            client = LocalClient(manager)
            paged = await _exec(client, "seq 1 200 | less", yield_ms=2000)
            assert (paged.status, paged.showing) == ("running", "pager")
            screen = await manager.screen(paged.id)
            assert showing(screen, pager_running=False) is None  # -X: no alternate screen
            await manager.write(paged.id, "q")
            await manager.wait_exit(paged.id)
            assert manager.get(paged.id).exit_code == 0

            full = await _exec(client, "vim -u NONE -N", yield_ms=2000)
            assert (full.status, full.showing) == ("running", "full_screen")
            await client.request(KillParams(id=full.id))


async def test_the_local_client_answers_as_a_server_would(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with trio_pty.open_manager(FAST, environ=_environ(tmp_path)) as manager:
            client = LocalClient(manager)
            info = await client.request(
                SpawnParams(command="sleep", args=["60"], description="x", owner="a")
            )
            assert (await client.request(GetParams(id=info.id, owner="a"))).pid == info.pid
            # Another owner's session does not exist for this owner: the same refusal.
            for owner in ("b", "a"):
                with pytest.raises(RpcError) as refused:
                    await client.request(
                        GetParams(id=info.id if owner == "b" else "pty_00000000", owner=owner)
                    )
                assert (refused.value.code, refused.value.kind) == (-32001, "session_not_found")
            with pytest.raises(RpcError) as refused:
                await _exec(client, "true", yield_ms=10**9)
            assert (refused.value.kind, refused.value.data["field"]) == (
                "invalid_input",
                "yield_ms",
            )
            # What only a connection has.
            connection_only: list[Params[Any]] = [AttachParams(id=info.id, owner="a")]
            connection_only.append(ServerInfoParams())
            for params in connection_only:
                with pytest.raises(RpcError) as refused:
                    await client.request(params)
                assert refused.value.code == -32601

            # Scopes: a read-only token may look a session up, not run anything.
            watcher = LocalClient(manager, scope=TokenScope(name="ro", read_only=True))
            assert (await watcher.request(GetParams(id=info.id, owner="a"))).id == info.id
            with pytest.raises(RpcError) as refused:
                await _exec(watcher, "true", owner="a")
            assert (refused.value.kind, refused.value.data["resource"]) == (
                "permission_denied",
                "pty.exec",
            )
            other = LocalClient(manager, scope=TokenScope(name="b", owners=("b",)))
            with pytest.raises(RpcError) as refused:
                await other.request(GetParams(id=info.id, owner="a"))
            assert refused.value.kind == "session_not_found"
            await client.request(KillParams(id=info.id, owner="a"))


# ------------------------------------------------------------------ over the wire


async def test_exec_and_get_over_the_wire(live: ServerProcess, request: Any) -> None:
    owner = owner_for(request)
    with trio.fail_after(40):
        async with connect(live.url, live.token) as client:
            done = await _exec(client, "echo hi; sleep 60 & exit 3", owner=owner)
            assert (done.exit_code, [line.text for line in done.lines]) == (3, ["hi"])
            assert done.others_ended == 1
            info = await client.request(GetParams(id=done.id, owner=owner))
            assert (info.id, info.status, info.exit_code) == (done.id, "exited", 3)
            with pytest.raises(RpcError) as refused:
                await client.request(GetParams(id=done.id, owner=owner + "-other"))
            assert refused.value.kind == "session_not_found"

            # A request cancelled while it waits interrupts its command.
            with trio.move_on_after(0.5):
                await _exec(client, "sleep 60", owner=owner, yield_ms=20_000, description="gone")

            async def interrupted() -> bool:
                listed = (await client.request(ListParams(owner=owner))).sessions
                (mine,) = [s for s in listed if s.description == "gone"]
                return mine.status != "running" and mine.exit_signal == 2

            while not await interrupted():  # noqa: ASYNC110 - only asking the server tells
                await trio.sleep(0.05)

            result = await cli(live, owner, "exec", "--", "echo out; sleep 60 & exit 4")
            assert result.returncode == 4, result.stderr
            assert result.stdout.decode().splitlines() == ["out"]
            assert "1 other process it left running ended with it" in result.stderr.decode()
            result = await cli(live, owner, "exec", "--wait-ms", "300", "--", "sleep 60")
            assert result.returncode == 124 and b"--follow" in result.stderr
            await client.request(OwnerDeleteParams(owner=owner))
