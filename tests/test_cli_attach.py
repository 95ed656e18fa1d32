"""`trio-pty attach` in a real terminal: tmux runs it in a pane (keys go in with
`send-keys`, the pane is read with `capture-pane` and tmux's own view of the pane's modes),
attached to sessions of a real `trio-pty serve`. Detaching from vim leaves the pane's
terminal as it was; the detach keys can be changed and, pressed twice, reach the program;
a read-only attach sends nothing and keeps the session's size."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_pty.client.client import TrioPtyClient, connect
from trio_pty.model import Wait
from trio_pty.wire import (
    CommandsParams,
    KillParams,
    ListParams,
    OwnerDeleteParams,
    ReadParams,
    ReadRawParams,
    RunParams,
    ScreenParams,
    SpawnParams,
    SpawnShellParams,
    WriteParams,
)

from .helpers import alive, poll_until
from .rpc_support import TEST_CONFIG, ServerProcess, live, owner_for, start_server

__all__ = ["live"]  # fixtures used by name

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None or shutil.which("vim") is None, reason="needs tmux and vim"
)

FLAGS = (
    "alternate_on",
    "cursor_flag",
    "keypad_flag",
    "keypad_cursor_flag",
    "mouse_any_flag",
    "mouse_all_flag",
    "mouse_button_flag",
    "mouse_standard_flag",
    "mouse_sgr_flag",
    "insert_flag",
    "origin_flag",
    "wrap_flag",
)
RESTORED = {
    "alternate_on": "0",
    "cursor_flag": "1",
    "keypad_flag": "0",
    "keypad_cursor_flag": "0",
    "mouse_any_flag": "0",
    "mouse_all_flag": "0",
    "mouse_button_flag": "0",
    "mouse_standard_flag": "0",
    "mouse_sgr_flag": "0",
    "insert_flag": "0",
    "origin_flag": "0",
    "wrap_flag": "1",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(tmp_path_factory.mktemp("server"), config=TEST_CONFIG)
    try:
        yield process
    finally:
        process.stop()


class Tmux:
    """A private tmux server (its own socket) with one 100x30 pane running `sh`."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pid = 0
        self.prompt = ""  # sh's: "$" or, for root, "#"

    async def run(self, *args: str, env: dict[str, str] | None = None) -> str:
        result = await trio.run_process(
            ["tmux", "-S", str(self.socket), "-f", "/dev/null", *args],
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        return result.stdout.decode()

    async def keys(self, *keys: str) -> None:
        await self.run("send-keys", "-t", "t", *keys)

    async def type(self, text: str) -> None:
        await self.run("send-keys", "-t", "t", "-l", text)

    async def screen(self, *, history: bool = False) -> str:
        """The pane's text; with `history`, its scrollback above it (attach draws the
        session's screen from the top of the pane, pushing what was there up)."""
        return await self.run("capture-pane", "-p", "-t", "t", *(("-S", "-") if history else ()))

    async def flags(self) -> dict[str, str]:
        values = await self.run("display", "-p", "-t", "t", " ".join(f"#{{{f}}}" for f in FLAGS))
        return dict(zip(FLAGS, values.split(), strict=True))

    async def wait_for(
        self, condition: Callable[[str], bool], what: str, *, history: bool = False
    ) -> str:
        with trio.move_on_after(10):
            while not condition(screen := await self.screen(history=history)):  # noqa: ASYNC110
                await trio.sleep(0.05)
            return screen
        raise AssertionError(f"the pane never showed {what}:\n{await self.screen()}")


@asynccontextmanager
async def tmux_pane(tmp_path: Path, env: dict[str, str]) -> AsyncIterator[Tmux]:
    tmux = Tmux(tmp_path / "tmux.sock")
    await tmux.run(
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "30",
        "-c",
        str(tmp_path),
        "sh",
        env=env,
    )
    tmux.pid = int(await tmux.run("display", "-p", "#{pid}"))
    try:
        screen = await tmux.wait_for(lambda screen: screen[:1] in ("$", "#"), "the prompt")
        tmux.prompt = screen[:1]
        yield tmux
    finally:
        with trio.CancelScope(shield=True), trio.fail_after(10):
            await tmux.run("kill-server")
            await poll_until(lambda: not alive(tmux.pid))


@asynccontextmanager
async def owner_client(live: ServerProcess, owner: str) -> AsyncIterator[TrioPtyClient]:
    """A client whose owner's sessions are all gone afterwards, whatever happened."""
    async with connect(live.url, live.token) as client:
        try:
            yield client
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(10):
                await client.request(OwnerDeleteParams(owner=owner))


def pane_env(live: ServerProcess, owner: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIO_PTY_", "TMUX"))}
    env.update(
        TRIO_PTY_URL=live.url,
        TRIO_PTY_TOKEN=live.token or "",
        TRIO_PTY_OWNER=owner,
        ENV="",
    )
    return env


def attach_command(session_id: str, *options: str) -> str:
    quoted = " ".join(f"'{option}'" for option in options)
    return f"{sys.executable} -m trio_pty attach {session_id} {quoted}; echo rc=$?"


async def raw_output(client: TrioPtyClient, session_id: str, owner: str) -> bytes:
    chunk = await client.request(ReadRawParams(id=session_id, owner=owner))
    return chunk.data


async def test_detaching_from_vim_leaves_the_terminal_as_it_was(
    live: ServerProcess, request: Any, tmp_path: Path
) -> None:
    owner = owner_for(request)
    (tmp_path / "notes.txt").write_text("first line\n")
    with trio.fail_after(60):
        async with owner_client(live, owner) as client:
            vim = await client.request(
                SpawnParams(
                    command="vim",
                    args=["-u", "NONE", "notes.txt"],
                    owner=owner,
                    description="vim",
                    workdir=str(tmp_path),
                    ready=Wait(idle_ms=300, timeout_ms=5000),
                )
            )
            async with tmux_pane(tmp_path, pane_env(live, owner)) as tmux:
                before = await tmux.flags()
                assert before == RESTORED, before  # a plain shell: nothing is on
                await tmux.type(attach_command(vim.id))
                await tmux.keys("Enter")
                await tmux.wait_for(lambda s: "first line" in s, "vim's text")
                # Vim turns its modes on, mouse reporting too: the pane's terminal has them.
                await tmux.type(":set mouse=a")
                await tmux.keys("Enter")
                await tmux.type("ihello from tmux ")
                await tmux.keys("Escape")
                await tmux.wait_for(lambda s: "hello from tmux first line" in s, "the typing")
                on = await tmux.flags()
                for flag in ("alternate_on", "keypad_flag", "keypad_cursor_flag", "mouse_any_flag"):
                    assert on[flag] == "1", on
                sent = await raw_output(client, vim.id, owner)
                for sequence in (b"\x1b[?1049h", b"\x1b[?1h", b"\x1b=", b"\x1b[?2004h"):
                    assert sequence in sent, sequence  # what vim sent, so what is undone

                await tmux.keys("C-]")
                screen = await tmux.wait_for(lambda s: "rc=0" in s, "the end of attach")
                assert await tmux.flags() == RESTORED
                lines = screen.splitlines()
                detached = next(i for i, line in enumerate(lines) if "[detached from" in line)
                assert lines[detached] == f"[detached from {vim.id}]"  # a line of its own
                # Back on the main screen: the session's (vim ran from its start: empty), the
                # banner above it, in the scrollback.
                assert f"[attached to {vim.id}; detach with C-]]" not in screen
                scrollback = await tmux.screen(history=True)
                assert f"[attached to {vim.id}; detach with C-]]" in scrollback

                # Bracketed paste is off: a paste reaches a program as typed text.
                await tmux.type("cat -v")
                await tmux.keys("Enter")
                await tmux.run("set-buffer", "pasted")
                await tmux.run("paste-buffer", "-p", "-t", "t")
                await tmux.keys("Enter", "C-d")
                screen = await tmux.wait_for(lambda s: s.count("pasted") >= 2, "the paste")
                assert "200~" not in screen, screen
                # The terminal is cooked again (echo, line editing, signals).
                await tmux.type("stty -a | tr ' ;' '\\n\\n' | grep -xc -e icanon -e echo -e isig")
                await tmux.keys("Enter")
                await tmux.wait_for(
                    lambda s: s.rstrip().endswith(f"3\n{tmux.prompt}"), "stty's answer"
                )

            # Detaching left vim running, with what was typed.
            [info] = (await client.request(ListParams(owner=owner))).sessions
            assert info.status == "running"
            await client.request(KillParams(id=vim.id, owner=owner, cleanup=True))


async def test_detach_keys_can_be_changed_and_pressed_twice_go_through(
    live: ServerProcess, request: Any, tmp_path: Path
) -> None:
    owner = owner_for(request)
    with trio.fail_after(60):
        async with owner_client(live, owner) as client:
            cat = await client.request(
                SpawnParams(command="cat", args=["-v"], owner=owner, description="cat -v")
            )

            async def session_text() -> str:
                page = await client.request(ReadParams(id=cat.id, owner=owner))
                return "\n".join(line.text for line in page.lines)

            async with tmux_pane(tmp_path, pane_env(live, owner)) as tmux:
                await tmux.type(attach_command(cat.id, "--detach-key", "C-b d"))
                await tmux.keys("Enter")
                await tmux.wait_for(lambda s: "detach with C-b d" in s, "the banner", history=True)
                await tmux.type("one")
                await tmux.keys("C-b", "C-b", "C-]", "Enter")  # C-b twice: one C-b goes
                await tmux.wait_for(lambda s: "one^B^]" in s, "the keys")
                await tmux.keys("C-b", "d")
                await tmux.wait_for(lambda s: "rc=0" in s, "the detach")
                assert "one^B^]" in await session_text()

                await tmux.type(attach_command(cat.id))  # the default: C-]
                await tmux.keys("Enter")
                await tmux.wait_for(
                    lambda s: s.count("detach with C-]") == 1, "the banner", history=True
                )
                await tmux.type("two")
                await tmux.keys("C-]", "C-]", "Enter")
                await tmux.wait_for(lambda s: "two^]" in s, "the key sent through")
                await tmux.keys("C-]")  # alone: a detach once nothing follows
                await tmux.wait_for(
                    lambda s: s.count("rc=0") == 2, "the second detach", history=True
                )
                assert "two^]" in await session_text()
            await client.request(KillParams(id=cat.id, owner=owner, cleanup=True))


async def test_read_only_attach_sends_nothing_and_keeps_the_size(
    live: ServerProcess, request: Any, tmp_path: Path
) -> None:
    owner = owner_for(request)
    script = "echo watched; printf 'prompt> '; while read -r line; do echo got:$line; done"
    with trio.fail_after(60):
        async with owner_client(live, owner) as client:
            target = await client.request(
                SpawnParams(
                    command="sh",
                    args=["-c", script],
                    owner=owner,
                    description="watched",
                    ready=Wait(pattern="^watched$"),
                )
            )
            async with tmux_pane(tmp_path, pane_env(live, owner)) as tmux:
                await tmux.type(attach_command(target.id, "--read-only"))
                await tmux.keys("Enter")
                await tmux.wait_for(
                    lambda s: f"[watching {target.id}" in s, "the banner", history=True
                )
                await tmux.wait_for(lambda s: "prompt>" in s, "the session's output")
                await tmux.type("typed while watching")
                await tmux.keys("Enter", "C-]")
                screen = await tmux.wait_for(lambda s: "rc=0" in s, "the detach")
                # The output ended mid-line: the message starts a line of its own.
                lines = screen.splitlines()
                at = lines.index(f"[detached from {target.id}]")
                assert [line.rstrip() for line in lines[at - 2 : at]] == ["watched", "prompt>"], (
                    lines
                )
            # Every key before the detach key was handled before the detach: none went in.
            page = await client.request(ReadParams(id=target.id, owner=owner))
            assert [line.text.rstrip() for line in page.lines] == ["watched", "prompt>"]
            [info] = (await client.request(ListParams(owner=owner))).sessions
            assert (info.rows, info.cols) == (24, 80)  # not the pane's 30x100
            await client.request(KillParams(id=target.id, owner=owner, cleanup=True))


async def test_reattaching_draws_the_screen_and_types_nothing(
    live: ServerProcess, request: Any, tmp_path: Path
) -> None:
    owner = owner_for(request)
    with trio.fail_after(90):
        async with owner_client(live, owner) as client:
            shell = await client.request(
                SpawnShellParams(owner=owner, description="shell", shell="bash", rows=30, cols=100)
            )
            # Vim, then a command that asks the terminal where its cursor is and what it is
            # (answered, while nobody is attached, by the server) and reads the answers.
            await client.request(WriteParams(id=shell.id, owner=owner, data="vim -u NONE\r"))
            await client.request(
                ScreenParams(id=shell.id, owner=owner, wait=Wait(pattern="^~", timeout_ms=5000))
            )
            await client.request(WriteParams(id=shell.id, owner=owner, data=":q\r"))
            await client.request(
                ReadParams(id=shell.id, owner=owner, wait=Wait(prompt=True, timeout_ms=5000))
            )
            await client.request(
                RunParams(
                    id=shell.id, owner=owner, command="printf '\\033[6n\\033[>c'; read -rs -d c"
                )
            )
            await client.request(RunParams(id=shell.id, owner=owner, command="echo ready"))
            assert b"\x1b[6n" in await raw_output(client, shell.id, owner)
            commands = (await client.request(CommandsParams(id=shell.id, owner=owner))).commands
            before = await client.request(ScreenParams(id=shell.id, owner=owner))

            async with tmux_pane(tmp_path, pane_env(live, owner)) as tmux:
                expected = [line.rstrip() for line in before.lines]

                def shows_the_session(pane: str) -> bool:
                    # The pane is 30 rows: the session's screen (resized to it) fills it.
                    rows = [line.rstrip() for line in pane.splitlines()]
                    return rows == expected[: len(rows)] and len(rows) >= len(expected) - 1

                for _ in range(3):
                    await tmux.type(attach_command(shell.id))
                    await tmux.keys("Enter")
                    await tmux.wait_for(shows_the_session, "the session's screen, drawn")
                    await tmux.keys("C-]")
                    await tmux.wait_for(lambda s: s.count("rc=0") == 1, "the detach")
                    await tmux.type("printf '\\033[H\\033[2J'")
                    await tmux.keys("Enter")
                    await tmux.wait_for(lambda s: "rc=0" not in s, "a clear pane")

            after = (await client.request(CommandsParams(id=shell.id, owner=owner))).commands
            assert [c.command for c in after] == [c.command for c in commands]
            screen = await client.request(ScreenParams(id=shell.id, owner=owner))
            assert screen.lines == before.lines  # nothing typed at the prompt
            assert b"R" not in (await raw_output(client, shell.id, owner)).rsplit(b"ready", 1)[1]
            await client.request(KillParams(id=shell.id, owner=owner, cleanup=True))
