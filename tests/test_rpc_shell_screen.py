"""The wire faces of shell sessions, screens, tails and read cursors, end to end against a
real `trio-pty serve` subprocess: `pty.spawn_shell`, `pty.run`, `pty.commands`, `pty.screen`,
`pty.read`'s `tail`/`since`/`command`/`reader`, `Wait.prompt`, the SessionInfo fields
`shell`, `at_prompt` and `terminal_title`, and `pty.signal`. Also: every JSON request example in
docs/protocol.md is a request the server accepts as written."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_pty.client.client import RpcError, TrioPtyClient, connect
from trio_pty.model import Wait
from trio_pty.wire import (
    CANCEL,
    EXITED,
    METHODS,
    CommandsParams,
    KillParams,
    ListParams,
    Params,
    ReadParams,
    RunParams,
    ScreenParams,
    SignalParams,
    SpawnParams,
    SpawnShellParams,
    WriteParams,
    structure_request,
)

from .rpc_support import (
    ServerProcess,
    error_of,
    live,
    open_ws,
    owner_for,
    requests_held,
    rpc,
    server,
)

__all__ = ["live", "server"]  # fixtures used by name

DOCS = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"


async def rpc_error(client: TrioPtyClient, params: Params[Any]) -> RpcError:
    with pytest.raises(RpcError) as caught:
        await client.request(params)
    return caught.value


def texts(lines: list[Any]) -> list[str]:
    return [line.text for line in lines]


async def test_shell_sessions_over_rpc(live: ServerProcess, request: Any) -> None:
    owner = owner_for(request)
    with trio.fail_after(30):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnShellParams(owner=owner, description="work", shell="bash", rc=False)
            )
            assert (info.shell, info.at_prompt, info.status) == ("bash", True, "running")

            result = await client.request(
                RunParams(id=info.id, owner=owner, command="echo one; echo two; (exit 3)")
            )
            assert (result.number, result.reason, result.exit_code) == (1, "exited", 3)
            assert texts(result.lines) == ["one", "two"]
            assert result.cwd == info.workdir and not result.has_more

            # A multi-line command, and a typed one (a write, as through attach).
            looped = await client.request(
                RunParams(id=info.id, owner=owner, command="for i in 1 2; do\n echo i$i\ndone")
            )
            assert (looped.exit_code, texts(looped.lines)) == (0, ["i1", "i2"])
            typed = await client.request(
                WriteParams(
                    id=info.id,
                    owner=owner,
                    data="sleep 0.2; echo DONE\r",
                    wait=Wait(prompt=True, timeout_ms=5000),
                )
            )
            assert typed.output is not None and typed.output.reason == "prompt"
            assert "DONE" in texts(typed.output.lines)

            page = await client.request(ReadParams(id=info.id, owner=owner, command=1))
            assert texts(page.lines) == ["one", "two"] and not page.has_more
            history = (await client.request(CommandsParams(id=info.id, owner=owner))).commands
            assert [(c.number, c.source, c.state, c.exit_code) for c in history] == [
                (1, "run", "exited", 3),
                (2, "run", "exited", 0),
                (3, "typed", "exited", 0),
            ]
            assert history[2].command == "sleep 0.2; echo DONE"
            only_last = await client.request(CommandsParams(id=info.id, owner=owner, limit=1))
            assert [c.number for c in only_last.commands] == [3]

            # A read that waits for the prompt returns at once when it is up.
            ready = await client.request(
                ReadParams(id=info.id, owner=owner, tail=1, wait=Wait(prompt=True))
            )
            assert ready.reason == "prompt"

            # A command still running: the run times out, another is refused as busy.
            slow = await client.request(
                RunParams(id=info.id, owner=owner, command="sleep 30", timeout_ms=100)
            )
            assert (slow.reason, slow.exit_code, slow.number) == ("timeout", None, 4)
            [listed] = (await client.request(ListParams(owner=owner))).sessions
            assert (listed.shell, listed.at_prompt) == ("bash", False)
            busy = await rpc_error(client, RunParams(id=info.id, owner=owner, command="true"))
            assert (busy.code, busy.kind) == (-32010, "busy")
            assert (busy.data["number"], busy.data["command"]) == (4, "sleep 30")
            await client.request(
                WriteParams(
                    id=info.id,
                    owner=owner,
                    data="\\x03",
                    escapes=True,
                    wait=Wait(prompt=True, timeout_ms=5000),
                )
            )
            history = (await client.request(CommandsParams(id=info.id, owner=owner))).commands
            assert (history[-1].number, history[-1].exit_code) == (4, 130)

            # Refusals name their field.
            refused: tuple[tuple[Params[Any], str], ...] = (
                (SpawnShellParams(owner=owner, description="d", shell="sh"), "shell"),
                (ReadParams(id=info.id, owner=owner, command=99), "command"),
                (ScreenParams(id=info.id, owner=owner, wait=Wait(prompt=True)), "wait.prompt"),
                (
                    SpawnParams(
                        command="cat", owner=owner, description="d", ready=Wait(prompt=True)
                    ),
                    "wait.prompt",  # a spawn is no shell session: only spawn_shell's prompt counts
                ),
            )
            for params, field in refused:
                error = await rpc_error(client, params)
                assert (error.kind, error.data["field"]) == ("invalid_input", field), params
            cat = await client.request(SpawnParams(command="cat", owner=owner, description="c"))
            refused = (
                (RunParams(id=cat.id, owner=owner, command="true"), "id"),
                (CommandsParams(id=cat.id, owner=owner), "id"),
                (
                    WriteParams(id=cat.id, owner=owner, data="x", wait=Wait(prompt=True)),
                    "wait.prompt",
                ),
            )
            for params, field in refused:
                error = await rpc_error(client, params)
                assert (error.kind, error.data["field"]) == ("invalid_input", field), params
            await client.request(KillParams(id=cat.id, owner=owner, cleanup=True))

            # The shell ending: the run says so, and the spawning connection hears of it.
            ended = await client.request(RunParams(id=info.id, owner=owner, command="exit 5"))
            assert (ended.reason, ended.exit_code) == ("session_ended", 5)
            events = [await client.next_notification(EXITED) for _ in range(2)]
            assert {(e.id, e.exit_code) for e in events} == {(cat.id, None), (info.id, 5)}
            await client.request(KillParams(id=info.id, owner=owner, cleanup=True))


LINES_THEN_INPUT = "for i in $(seq 1 30); do echo line$i; done; read x; echo after:$x; sleep 30"


async def test_tails_and_read_cursors_per_connection(live: ServerProcess, request: Any) -> None:
    """`tail` gives the last lines; `since="last"` what came after this connection's
    previous read (each connection has its own cursor), or after the previous read of a
    named `reader` (which outlives connections)."""
    owner = owner_for(request)
    with trio.fail_after(30):
        async with connect(live.url, live.token) as a, connect(live.url, live.token) as b:
            info = await a.request(
                SpawnParams(
                    command="sh",
                    args=["-c", LINES_THEN_INPUT],
                    owner=owner,
                    description="lines",
                    ready=Wait(pattern="^line30$", timeout_ms=5000),
                )
            )
            tail = await a.request(ReadParams(id=info.id, owner=owner, tail=3))
            assert texts(tail.lines) == ["line28", "line29", "line30"]
            assert [line.number for line in tail.lines] == [27, 28, 29]

            def since(client: TrioPtyClient, **fields: Any) -> Any:
                return client.request(ReadParams(id=info.id, owner=owner, since="last", **fields))

            # The tail read moved a's cursor to its end; b has not read yet.
            assert texts((await since(a)).lines) == []
            first_b = await since(b)
            assert texts(first_b.lines) == [f"line{i}" for i in range(1, 31)]
            assert texts((await since(b)).lines) == []

            await a.request(WriteParams(id=info.id, owner=owner, data="hi\n"))
            news = await since(a, wait=Wait(pattern="^after:", timeout_ms=5000))
            assert texts(news.lines) == ["hi", "after:hi"] and news.reason == "matched"
            assert texts((await since(b)).lines) == ["hi", "after:hi"]
            assert texts((await since(a)).lines) == []

            # A named reader is the same cursor from any connection.
            async with connect(live.url, live.token) as c:
                assert len((await since(c, reader="script")).lines) == 32
            async with connect(live.url, live.token) as d:
                assert texts((await since(d, reader="script")).lines) == []
                assert len((await since(d)).lines) == 32  # d's own cursor is new

            for fields, field in (
                ({"tail": 3, "offset": 2}, "tail"),
                ({"tail": 3, "pattern": "x"}, "tail"),
                ({"tail": 3, "since": "last"}, "since"),
                ({"tail": 0}, "tail"),
                ({"command": 1}, "id"),
            ):
                error = await rpc_error(a, ReadParams(id=info.id, owner=owner, **fields))
                assert (error.kind, error.data["field"]) == ("invalid_input", field), fields
            await a.request(KillParams(id=info.id, owner=owner, cleanup=True))

        # `since` takes only "last" (-32602 naming it), over a raw connection.
        headers = [(b"Authorization", f"Bearer {live.token}".encode())]
        async with open_ws(live.url, headers) as ws:
            reply = await rpc(ws, 1, "pty.read", {"id": info.id, "since": "first"})
            assert error_of(reply) == (-32602, None)
            assert reply["error"]["data"]["errors"][0]["path"] == "since"


SCREEN_PROGRAM = (
    r"printf '\033]2;my title\007\033[?1049h\033[2J\033[Hhello screen'; read x; "
    r"printf '\033[3;5Hlater %s' $x; sleep 30"
)


async def test_screen_over_rpc(live: ServerProcess, request: Any) -> None:
    owner = owner_for(request)
    with trio.fail_after(30):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(
                    command="sh",
                    args=["-c", SCREEN_PROGRAM],
                    owner=owner,
                    description="full screen",
                    rows=10,
                    cols=40,
                    ready=Wait(idle_ms=200, timeout_ms=5000),  # (its lines are on its screen)
                )
            )
            screen = await client.request(ScreenParams(id=info.id, owner=owner))
            assert (screen.rows, screen.cols, len(screen.lines)) == (10, 40, 10)
            assert screen.lines[0] == "hello screen" and screen.lines[1:] == [""] * 9
            assert (screen.cursor, screen.alternate, screen.title) == ((0, 12), True, "my title")
            assert screen.cursor_visible and screen.reason is None
            [listed] = (await client.request(ListParams(owner=owner))).sessions
            assert (listed.terminal_title, listed.title, listed.shell) == ("my title", None, None)

            async with trio.open_nursery() as nursery:
                waited: list[Any] = []

                async def wait_for_screen() -> None:
                    wait = Wait(pattern="^    later", timeout_ms=5000)
                    waited.append(
                        await client.request(ScreenParams(id=info.id, owner=owner, wait=wait))
                    )

                nursery.start_soon(wait_for_screen)
                await requests_held(client, 1)  # the screen wait is in place
                await client.request(WriteParams(id=info.id, owner=owner, data="go\n"))
            [later] = waited
            assert later.reason == "matched" and later.lines[2] == "    later go"
            assert later.offset > screen.offset
            timed_out = await client.request(
                ScreenParams(id=info.id, owner=owner, wait=Wait(pattern="never", timeout_ms=50))
            )
            assert timed_out.reason == "timeout" and timed_out.lines == later.lines
            await client.request(KillParams(id=info.id, owner=owner, cleanup=True))


async def test_signal_over_rpc(live: ServerProcess, request: Any) -> None:
    owner = owner_for(request)
    script = "trap 'echo got-hup' HUP; echo ready; while :; do sleep 0.05; done"
    with trio.fail_after(30):
        async with connect(live.url, live.token) as client:
            info = await client.request(
                SpawnParams(
                    command="sh",
                    args=["-c", script],
                    owner=owner,
                    description="trap",
                    ready=Wait(pattern="^ready$", timeout_ms=5000),
                )
            )
            sent = await client.request(SignalParams(id=info.id, owner=owner, signal="hup"))
            assert sent.id == info.id and sent.signal == "SIGHUP" and info.pid in sent.pids
            page = await client.request(
                ReadParams(id=info.id, owner=owner, wait=Wait(pattern="^got-hup$"))
            )
            assert page.reason == "matched"
            error = await rpc_error(client, SignalParams(id=info.id, owner=owner, signal="9"))
            assert (error.kind, error.data["field"]) == ("invalid_input", "signal")
            await client.request(SignalParams(id=info.id, owner=owner, signal="KILL"))
            await client.request(ReadParams(id=info.id, owner=owner, wait=Wait(exit=True)))
            ended = await rpc_error(client, SignalParams(id=info.id, owner=owner, signal="INT"))
            assert ended.kind == "not_running"
            await client.request(KillParams(id=info.id, owner=owner, cleanup=True))


_JSON_BLOCK = re.compile(r"```json\n(.*?)```", re.S)


def documented_requests() -> list[dict[str, Any]]:
    found = []
    for block in _JSON_BLOCK.findall(DOCS.read_text()):
        message = json.loads(block)
        if "method" in message and (
            message["method"] in METHODS or message["method"] == CANCEL.name
        ):
            found.append(message)
    return found


def test_every_documented_request_is_valid() -> None:
    """docs/protocol.md's request examples are what the server accepts, field for field,
    and every method has one."""
    requests = documented_requests()
    for message in requests:
        spec = CANCEL if message["method"] == CANCEL.name else METHODS[message["method"]]
        structure_request(message.get("params", {}), spec.params)
    assert {message["method"] for message in requests} == {*METHODS, CANCEL.name}
