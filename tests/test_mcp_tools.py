"""The MCP tools as issue 26 found them wanting, driven over stdio by the SDK's own client:
input reaches a program literally (code typed into a REPL is not changed), keys by name,
escapes only when asked; `exec_command` runs like a script (pagers do not trap it, what it
leaves running is ended and counted, a pager or full-screen program still showing is said
with the key that leaves it); `shell_command` keeps its shell between calls."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp.client import Client

from .mcp_support import STARTUP_TIMEOUT, call, fail, mcp_client, text


async def _line(client: Client, session_id: str, chars: str, **more: Any) -> list[str]:
    """Type into a Python REPL; the lines it printed up to its next prompt."""
    data = await call(client, "write_stdin", {"session_id": session_id, "chars": chars, **more})
    seen: str = data["output"]
    while not seen.endswith(">>> "):  # a pause of 0.5 s on a busy machine: ask again
        data = await call(client, "write_stdin", {"session_id": session_id})
        seen += "\n" + data["output"]
    return seen.splitlines()


async def test_what_a_model_types_is_what_the_program_gets(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 40):
        async with mcp_client(tmp_path) as client:
            data = await call(client, "spawn", {"command": sys.executable, "args": ["-q"]})
            repl = data["session_id"]
            # The strings hold a backslash and a letter: JSON carries them as "\\t", "\\\\".
            assert "8" in await _line(client, repl, 'print(len("tab\\there"))\n')
            assert "C:\\Users" in await _line(client, repl, 'print("C:\\\\Users")\n')
            regex = 'import re; print(re.findall(r"\\d+", "a1b22"))\n'
            assert "['1', '22']" in await _line(client, repl, regex)
            # Keys by name, after chars.
            lines = await _line(client, repl, "print(6 * 7)", keys=["Enter"])
            assert "42" in lines
            assert "KeyboardInterrupt" in await _line(client, repl, "", keys=["C-c"])

            # escapes: true decodes once; the named keys pass through it unchanged.
            echo = "import sys; print(repr(sys.stdin.readline()))"
            for escapes, expected in (
                (True, "'a\\tb\\x1b\\\\\\n'"),
                (False, "'a\\\\tb\\\\e\\\\\\n'"),
            ):
                data = await call(
                    client, "spawn", {"command": sys.executable, "args": ["-c", echo]}
                )
                arguments = {"chars": "a\\tb\\e", "keys": ["\\", "Enter"], "escapes": escapes}
                data = await call(
                    client, "write_stdin", {"session_id": data["session_id"], **arguments}
                )
                assert expected in data["output"].splitlines(), (escapes, data["output"])


async def test_exec_command_runs_like_a_script(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 60):
        async with mcp_client(tmp_path) as client:
            # A pager does not hold the call: git prints its log and ends.
            commit = "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m"
            script = f"git init -q r && cd r && for i in $(seq 1 40); do {commit} c$i; done"
            arguments = {"cmd": f"{script} && git log --oneline", "yield_time_ms": 20000}
            data = await call(client, "exec_command", arguments)
            assert (data["status"], data["exit_code"]) == ("exited", 0)
            logged = [
                line
                for line in data["output"].splitlines()
                if re.match(r"\w+ (\(.*\) )?c\d+$", line)
            ]
            assert len(logged) == 40 and logged[0].endswith(" c40")

            # What it leaves running ends with it, and the reply says so.
            result = await client.call_tool("exec_command", {"cmd": "sleep 60 & echo started"})
            data = result.structured_content
            assert data is not None and (data["exit_code"], data["others_ended"]) == (0, 1)
            assert "1 other process it left running" in text(result)
            assert "spawn" in text(result)

            # A pager still showing at the yield: the reply says which key leaves it.
            result = await client.call_tool(
                "exec_command", {"cmd": "seq 1 200 | less", "yield_time_ms": 2000}
            )
            data = result.structured_content
            assert data is not None and (data["status"], data["showing"]) == ("running", "pager")
            assert '"keys": ["q"]' in text(result)
            session_id = data["session_id"]
            data = await call(client, "write_stdin", {"session_id": session_id, "keys": ["q"]})
            assert (data["status"], data["exit_code"]) == ("exited", 0)


@pytest.mark.skipif(shutil.which("vim") is None, reason="vim is not installed")
async def test_a_full_screen_program_is_said_with_its_way_out(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 30):
        async with mcp_client(tmp_path) as client:
            result = await client.call_tool(
                "exec_command", {"cmd": "vim -u NONE -N", "yield_time_ms": 2000}
            )
            data = result.structured_content
            assert data is not None and data["showing"] == "full_screen"
            assert '["Escape", ":", "q", "!", "Enter"]' in text(result)
            keys = ["Escape", ":", "q", "!", "Enter"]
            session_id = data["session_id"]
            data = await call(client, "write_stdin", {"session_id": session_id, "keys": keys})
            assert (data["status"], data["exit_code"]) == ("exited", 0)


async def test_shell_command_keeps_its_shell(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with trio.fail_after(STARTUP_TIMEOUT + 40):
        async with mcp_client(tmp_path) as client:
            data = await call(client, "shell_command", {"cmd": "cd sub && export X=42"})
            assert (data["exit_code"], data["cwd"]) == (0, str(tmp_path / "sub"))
            shell = data["session_id"]
            data = await call(client, "shell_command", {"cmd": 'echo "$X $PWD"; false'})
            assert (data["session_id"], data["exit_code"]) == (shell, 1)
            assert data["output"] == f"42 {tmp_path / 'sub'}"

            result = await client.call_tool("shell_command", {"cmd": "exit 3"})
            data = result.structured_content
            assert data is not None and (data["status"], data["exit_code"]) == ("exited", 3)
            assert "starts a new shell" in text(result)
            data = await call(client, "shell_command", {"cmd": 'echo "[$X]"; pwd'})
            assert data["session_id"] != shell
            assert data["output"].splitlines() == ["[]", str(tmp_path)]

            # Busy while a command runs past its yield; keys C-c frees it.
            data = await call(client, "shell_command", {"cmd": "sleep 60", "yield_time_ms": 300})
            assert data["status"] == "running"
            error = await fail(client, "shell_command", {"cmd": "true"})
            assert error.startswith("Error [busy]")
            await call(client, "write_stdin", {"session_id": data["session_id"], "keys": ["C-c"]})
            data = await call(client, "shell_command", {"cmd": "echo free"})
            assert data["output"] == "free"
            kinds = {s["kind"] for s in (await call(client, "list_sessions", {}))["sessions"]}
            assert kinds == {"shell"}
