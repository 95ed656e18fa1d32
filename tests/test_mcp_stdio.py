"""`trio-pty mcp` in process, driven over stdio by the official SDK's own client: the tools
and their schemas, each tool on real programs, errors, and the way out (stdin closed,
SIGTERM) with sessions that ignore SIGTERM and SIGHUP."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp.client import Client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from tests import leaks
from tests.helpers import poll_until

from .mcp_support import (
    CLIENT_BUDGET,
    STARTUP_TIMEOUT,
    call,
    fail,
    living,
    mcp_client,
    server_command,
    server_pid,
    text,
)

TOOLS = {
    "exec_command",
    "shell_command",
    "write_stdin",
    "read_output",
    "screen",
    "list_sessions",
    "kill",
    "spawn",
}
# Ignores the signals a teardown sends first: only SIGKILL, after the grace, ends it.
STUBBORN = "trap '' TERM HUP INT; echo stubborn; while :; do sleep 0.2; done"


async def test_the_tools_and_their_schemas(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT):
        async with mcp_client(tmp_path) as client:
            assert client.server_info is not None
            assert client.server_info.name == "trio-pty"
            assert "exec_command" in (client.instructions or "")
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description is not None and "Example:" in tool.description, tool.name
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert "title" not in schema
    exec_schema = tools["exec_command"].input_schema
    assert exec_schema["required"] == ["cmd"]
    assert set(exec_schema["properties"]) == {
        "cmd",
        "workdir",
        "shell",
        "yield_time_ms",
        "max_output_chars",
    }
    exec_result = tools["exec_command"].output_schema["properties"]  # type: ignore[index]
    assert {"session_id", "status", "exit_code", "output", "lines_omitted"} <= set(exec_result)
    assert {"others_ended", "showing"} <= set(exec_result)
    assert set(tools["write_stdin"].input_schema["properties"]) == {
        "session_id",
        "chars",
        "keys",
        "escapes",
        "pattern",
        "yield_time_ms",
        "max_output_chars",
    }
    assert "literal" in (tools["write_stdin"].description or "").lower()
    assert tools["read_output"].annotations is not None
    assert tools["read_output"].annotations.read_only_hint is True
    assert tools["kill"].annotations is not None
    assert tools["kill"].annotations.destructive_hint is True


async def test_exec_command_gives_the_exit_code_and_the_output(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            result = await client.call_tool("exec_command", {"cmd": "echo hi; exit 3"})
            data = result.structured_content
            assert data is not None and not result.is_error
            assert (data["status"], data["exit_code"]) == ("exited", 3)
            assert data["output"].splitlines()[0] == "hi"
            assert text(result).startswith("Exit code: 3\n")

            data = await call(client, "exec_command", {"cmd": "cd sub && printf 'a\\nb\\n'"})
            assert (data["exit_code"], data["output"], data["lines_omitted"]) == (0, "a\nb", 0)

            # Each call is a script of its own in workdir: nothing carries over.
            data = await call(client, "exec_command", {"cmd": "pwd", "workdir": "sub"})
            assert data["output"] == str(tmp_path / "sub")
            data = await call(client, "exec_command", {"cmd": "pwd"})
            assert data["output"] == str(tmp_path)

            data = await call(client, "exec_command", {"cmd": "echo $0", "shell": "zsh"})
            assert data["output"] == "zsh"

            # A script: not interactive, no prompt; the exit code is the command's own.
            data = await call(client, "exec_command", {"cmd": 'echo "[$-]"; kill -TERM $$'})
            assert "i" not in data["output"]
            assert (data["status"], data["exit_code"], data["exit_signal"]) == ("exited", None, 15)

            sessions = (await call(client, "list_sessions", {}))["sessions"]
            assert [s["status"] for s in sessions] == ["exited"] * 6
            assert (sessions[0]["kind"], sessions[0]["command"]) == ("command", "echo hi; exit 3")


async def test_a_long_command_yields_a_session_and_ctrl_c_ends_it(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            data = await call(
                client,
                "exec_command",
                {"cmd": "echo started; sleep 60; echo never", "yield_time_ms": 2000},
            )
            assert (data["status"], data["exit_code"], data["output"]) == (
                "running",
                None,
                "started",
            )
            session_id = data["session_id"]
            assert re.fullmatch(r"pty_[0-9a-f]{8}", session_id)

            # A poll shows only what came since: nothing, until the wait runs out.
            data = await call(
                client, "write_stdin", {"session_id": session_id, "yield_time_ms": 300}
            )
            assert (data["status"], data["output"]) == ("running", "")

            data = await call(client, "write_stdin", {"session_id": session_id, "keys": ["C-c"]})
            # The shell running the script ends by the SIGINT its command got, as bash does.
            assert (data["status"], data["exit_code"], data["exit_signal"]) == ("exited", None, 2)
            assert "never" not in data["output"]

            listed = (await call(client, "list_sessions", {}))["sessions"]
            assert [(s["session_id"], s["status"], s["exit_signal"]) for s in listed] == [
                (session_id, "exited", 2)
            ]
            # Input to a command that has ended is not typed into its shell.
            result = await client.call_tool(
                "write_stdin", {"session_id": session_id, "chars": "echo oops\n"}
            )
            assert "Input not sent" in text(result) or result.is_error


async def test_a_cancelled_call_interrupts_its_command(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            with trio.move_on_after(1.0) as waiting:
                arguments = {"cmd": "sleep 60", "yield_time_ms": 20_000}
                await client.call_tool("exec_command", arguments)
            assert waiting.cancelled_caught

            # The client said it gave up (notifications/cancelled): the command got Ctrl-C.
            async def interrupted() -> list[dict[str, Any]]:
                return list((await call(client, "list_sessions", {}))["sessions"])

            with trio.fail_after(5):
                sessions = await interrupted()
                while sessions[0]["status"] == "running":  # only polling tells
                    await trio.sleep(0.05)
                    sessions = await interrupted()
            assert [(s["status"], s["exit_signal"]) for s in sessions] == [("exited", 2)]


async def test_write_stdin_answers_a_program_waiting_for_input(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            data = await call(
                client,
                "exec_command",
                {"cmd": 'read -p "Name? " name; echo "Hello, $name"', "yield_time_ms": 500},
            )
            assert data["status"] == "running" and "Name?" in data["output"]
            data = await call(
                client, "write_stdin", {"session_id": data["session_id"], "chars": "Ada\n"}
            )
            assert (data["status"], data["exit_code"]) == ("exited", 0)
            assert "Hello, Ada" in data["output"]


async def test_spawn_a_server_with_a_ready_pattern_then_kill_it(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            data = await call(
                client,
                "spawn",
                {
                    "command": sys.executable,
                    "args": ["-m", "http.server", "0", "--bind", "127.0.0.1"],
                    "ready_pattern": r"Serving HTTP on \S+ port \d+",
                    "yield_time_ms": 15000,
                },
            )
            assert (data["status"], data["ready"], data["exit_code"]) == ("running", True, None)
            port = re.search(r"port (\d+)", data["output"])
            assert port is not None and int(port.group(1)) > 0
            session_id = data["session_id"]

            data = await call(client, "kill", {"session_id": session_id})
            assert data["status"] == "killed"

            # A program that is not there fails to start, with its kind.
            error = await fail(client, "spawn", {"command": "no-such-program-here"})
            assert error.startswith("Error [spawn_failed]")


@pytest.mark.skipif(shutil.which("vim") is None, reason="vim is not installed")
async def test_screen_shows_a_full_screen_program(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            data = await call(
                client, "spawn", {"command": "vim", "args": ["-u", "NONE", "-N", "notes.txt"]}
            )
            session_id = data["session_id"]
            await call(
                client, "write_stdin", {"session_id": session_id, "chars": "ihello from vim"}
            )
            result = await client.call_tool("screen", {"session_id": session_id})
            screen = result.structured_content
            assert screen is not None and not result.is_error
            assert screen["alternate"] is True
            assert (screen["rows"], screen["cols"]) == (24, 80)
            assert len(screen["lines"]) == 24
            assert screen["lines"][0] == "hello from vim"
            assert screen["lines"][1].startswith("~")
            assert (screen["cursor_row"], screen["cursor_col"]) == (0, 14)  # in insert mode
            assert "a full-screen program is showing" in text(result)
            assert "hello from vim" in text(result)

            keys = {"keys": ["Escape", ":", "q", "!", "Enter"]}
            await call(client, "write_stdin", {"session_id": session_id, **keys})
            data = await call(client, "read_output", {"session_id": session_id})
            assert (data["status"], data["exit_code"]) == ("exited", 0)


async def test_read_output_pages_searches_and_follows(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            data = await call(
                client, "exec_command", {"cmd": "seq 1 3000", "max_output_chars": 2000}
            )
            session_id = data["session_id"]
            shown = data["output"].splitlines()
            # The head and the tail, around one line saying what is left out and how to
            # read it; nothing else is missing.
            markers = [line for line in shown if "not shown" in line]
            assert len(markers) == 1
            numbers = [int(line) for line in shown if line not in markers]
            cut = shown.index(markers[0])
            assert numbers == [*range(1, cut + 1), *range(3001 - len(numbers) + cut, 3001)]
            assert data["lines_omitted"] == 3000 - len(numbers)
            assert len(data["output"]) <= 2000 + len(markers[0]) + 1
            # Line N holds N + 1: the command's output is all the session printed.
            assert f"lines {cut}-{2999 - len(numbers) + cut}" in markers[0]
            hint = re.search(r"read_output (\{.*?\})", markers[0])
            assert hint is not None
            assert json.loads(hint.group(1)) == {
                "session_id": session_id,
                "offset": cut,
                "limit": 500,
            }

            page = await call(client, "read_output", json.loads(hint.group(1)))
            lines = page["output"].splitlines()
            assert lines[:500] == [str(n) for n in range(cut + 1, cut + 501)]
            assert f'offset": {cut + 500}' in text(
                await client.call_tool("read_output", json.loads(hint.group(1)))
            )
            page = await call(
                client, "read_output", {"session_id": session_id, "since_last": True, "limit": 2}
            )
            assert page["output"].splitlines() == [str(cut + 501), str(cut + 502)]

            page = await call(client, "read_output", {"session_id": session_id, "tail": 5})
            assert "3000" in page["output"].splitlines()
            page = await call(
                client,
                "read_output",
                {"session_id": session_id, "pattern": "^29[0-9]9$", "offset": 0},
            )
            assert page["output"].splitlines() == [str(n) for n in range(2909, 3000, 10)]


async def test_errors_say_their_kind_what_happened_and_what_to_do(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            error = await fail(client, "read_output", {"session_id": "pty_00000000"})
            assert error.startswith("Error [session_not_found]: ")
            assert "pty_00000000" in error and "What to do: " in error

            error = await fail(client, "exec_command", {"workdir": "x"})
            assert error.startswith("Error [invalid_input]: cmd: Field required")

            error = await fail(client, "exec_command", {"cmd": "true", "colour": "red"})
            assert error.startswith("Error [invalid_input]: colour:")

            error = await fail(client, "exec_command", {"cmd": "true", "workdir": "nowhere"})
            assert re.match(r"Error \[(invalid_input|spawn_failed)\]: ", error), error

            error = await fail(client, "exec_command", {"cmd": "true", "yield_time_ms": 10**6})
            assert error.startswith("Error [invalid_input]: yield_ms")

            error = await fail(client, "write_stdin", {"session_id": "pty_1", "keys": ["C-1"]})
            assert error.startswith("Error [invalid_input]: keys: no Ctrl key for '1'")

            error = await fail(client, "read_output", {"session_id": "pty_1", "pattern": "("})
            assert error.startswith("Error [session_not_found]")

            error = await fail(client, "no_such_tool", {})
            assert error.startswith("Error [invalid_input]: no tool named 'no_such_tool'")

            data = await call(client, "exec_command", {"cmd": "echo x"})
            error = await fail(
                client, "read_output", {"session_id": data["session_id"], "pattern": "("}
            )
            assert error.startswith("Error [invalid_input]: pattern")


async def test_the_legacy_handshake_works_too(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 10):
        async with mcp_client(tmp_path, mode="legacy") as client:
            assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            data = await call(client, "exec_command", {"cmd": "true"})
            assert (data["status"], data["exit_code"]) == ("exited", 0)


# ------------------------------------------------------------------ the way out


async def _start_stubborn_sessions(client: Client) -> list[int]:
    """A spawned program and an exec_command command, both ignoring SIGTERM, SIGHUP and
    SIGINT; the pids of everything the server runs for them."""
    data = await call(client, "spawn", {"command": "sh", "args": ["-c", STUBBORN]})
    assert data["status"] == "running" and "stubborn" in data["output"]
    data = await call(client, "exec_command", {"cmd": STUBBORN, "yield_time_ms": 300})
    assert data["status"] == "running"
    server = server_pid()
    found = leaks.descendants([server])
    pids = living(list(found))
    # The sh loop and the bash running the other loop; their sleeps come and go.
    loops = [pid for pid in pids if Path(found[pid].cmdline.split()[0]).name in ("sh", "bash")]
    assert len(loops) >= 2, found
    return pids


async def test_closing_stdin_tears_everything_down_within_the_clients_budget(
    tmp_path: Path,
) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            pids = await _start_stubborn_sessions(client)
            server = server_pid()
            began = trio.current_time()
        # Leaving closed its stdin, then waited for it to exit (then would have SIGTERMed).
        elapsed = trio.current_time() - began
    assert elapsed < CLIENT_BUDGET, f"{elapsed:.2f} s: the client had to SIGTERM it"
    assert not living([server, *pids])


async def test_sigterm_tears_everything_down_even_when_sent_twice(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            pids = await _start_stubborn_sessions(client)
            server = server_pid()
            began = trio.current_time()
            os.kill(server, signal.SIGTERM)
            await trio.sleep(0.2)
            os.kill(server, signal.SIGTERM)  # a second one must not cut the teardown short
            await poll_until(lambda: not living([server]))
            elapsed = trio.current_time() - began
            assert not living(pids)
    # The grace (1 s) and the SIGKILL round, well within what clients allow.
    assert elapsed < CLIENT_BUDGET, f"{elapsed:.2f} s"


async def test_sigkill_leaves_nothing_either(tmp_path: Path) -> None:
    """The client's last resort: SIGKILL. The manager's keeper then ends the sessions."""
    with trio.fail_after(STARTUP_TIMEOUT + 20):
        async with mcp_client(tmp_path) as client:
            pids = await _start_stubborn_sessions(client)
            server = server_pid()
            os.kill(server, signal.SIGKILL)
            began = trio.current_time()
            # The grace (1 s) and the keeper's SIGKILL round.
            await poll_until(lambda: not living(pids), timeout=3.0)
            elapsed = trio.current_time() - began
    assert elapsed < CLIENT_BUDGET, f"{elapsed:.2f} s"


def test_without_the_sdk_it_says_how_to_install_it() -> None:
    code = "import sys; sys.modules['mcp'] = None; from trio_pty.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "mcp"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "pip install 'trio-pty[mcp]'" in done.stderr


# ------------------------------------------------------------------ a whole session

CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = (
    "import unittest\n\nimport calc\n\n\n"
    "class Add(unittest.TestCase):\n"
    "    def test_add(self):\n"
    "        self.assertEqual(calc.add(2, 3), 5)\n"
)


class _Transcript:
    """The calls of a session and what the model read back, as docs/mcp.md shows them
    (written to $TRIO_PTY_MCP_TRANSCRIPT when that is set)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.parts: list[str] = []

    async def call(self, name: str, arguments: dict[str, object]) -> tuple[str, dict[str, Any]]:
        """The text of the reply, and its structured content ({} for an error)."""
        result = await self.client.call_tool(name, arguments)
        reply = text(result)
        shown = ("(error) " if result.is_error else "") + reply.replace("\n", "\n  ")
        self.parts.append(f"→ {name} {json.dumps(arguments)}\n← {shown}")
        return reply, result.structured_content or {}

    def save(self) -> None:
        path = os.environ.get("TRIO_PTY_MCP_TRANSCRIPT")
        if path:
            Path(path).write_text("\n\n".join(self.parts) + "\n")


async def test_a_session_as_an_agent_has_it(tmp_path: Path) -> None:
    project = tmp_path / "calc"
    project.mkdir()
    (project / "calc.py").write_text(CALC)
    (project / "test_calc.py").write_text(TEST_CALC)
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # python3 is ours
    with trio.fail_after(STARTUP_TIMEOUT + 60):
        async with mcp_client(tmp_path, env={"PATH": path}, cwd=project) as client:
            session = _Transcript(client)
            reply, data = await session.call("exec_command", {"cmd": "python3 -m unittest -q"})
            assert data["exit_code"] == 1 and "AssertionError: -1 != 5" in reply
            reply, data = await session.call(
                "exec_command",
                {"cmd": "sed -i 's/a - b/a + b/' calc.py && python3 -m unittest -q"},
            )
            assert data["exit_code"] == 0 and "OK" in reply

            reply, data = await session.call(
                "spawn",
                {
                    "command": "python3",
                    "args": ["-m", "http.server", "0", "--bind", "127.0.0.1"],
                    "ready_pattern": "Serving HTTP on",
                },
            )
            server = data["session_id"]
            port = re.search(r"port (\d+)", reply)
            assert data["ready"] is True and port is not None
            fetch = (
                'python3 -c "import urllib.request as u; '
                f"print(u.urlopen('http://127.0.0.1:{port.group(1)}/calc.py').status)\""
            )
            reply, data = await session.call("exec_command", {"cmd": fetch})
            assert data["output"] == "200"
            reply, data = await session.call(
                "write_stdin", {"session_id": server, "yield_time_ms": 2000}
            )
            assert '"GET /calc.py HTTP/1.1" 200' in data["output"]

            reply, data = await session.call("spawn", {"command": "python3", "args": ["-q"]})
            repl = data["session_id"]
            assert data["output"] == ">>> "
            reply, data = await session.call(
                "write_stdin", {"session_id": repl, "chars": "import calc; calc.add(2, 3)\n"}
            )
            seen = data["output"]
            while not seen.endswith("\n>>> "):  # a pause of 0.5 s on a busy machine: poll
                reply, data = await session.call("write_stdin", {"session_id": repl})
                seen += "\n" + data["output"]
            assert "5" in seen.splitlines()

            reply, data = await session.call(
                "exec_command",
                {"cmd": "echo building...; sleep 2; echo built", "yield_time_ms": 1000},
            )
            build = data["session_id"]
            assert (data["status"], data["output"]) == ("running", "building...")
            reply, data = await session.call("write_stdin", {"session_id": build, "chars": ""})
            assert (data["status"], data["exit_code"]) == ("exited", 0)
            assert data["output"].splitlines()[0] == "built"

            reply, data = await session.call("shell_command", {"cmd": "export GREETING=hello"})
            assert data["exit_code"] == 0
            reply, data = await session.call(
                "shell_command", {"cmd": 'echo "$GREETING from $(basename "$PWD")"'}
            )
            assert data["output"] == "hello from calc"

            reply, data = await session.call("kill", {"session_id": server})
            assert data["status"] == "killed"
            reply, data = await session.call("write_stdin", {"session_id": repl, "chars": "\u0004"})
            assert (data["status"], data["exit_code"]) == ("exited", 0)
            reply, data = await session.call("list_sessions", {})
            assert [(s["kind"], s["status"]) for s in data["sessions"]] == [
                ("command", "exited"),
                ("command", "exited"),
                ("program", "killed"),
                ("command", "exited"),
                ("program", "exited"),
                ("command", "exited"),
                ("shell", "running"),
            ]
            reply, data = await session.call("screen", {"session_id": "pty_0000000"})
            assert reply.startswith("Error [session_not_found]") and not data
    session.save()


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--root", "/no/such/directory"], "the root is not a directory: /no/such/directory"),
        (["--config", "/no/such/file.toml"], "/no/such/file.toml: cannot read"),
        (["--terminate-grace", "-1"], "--terminate-grace must be 0 or more"),
    ],
)
def test_usage_errors_exit_2_and_say_what_is_wrong(arguments: list[str], said: str) -> None:
    done = subprocess.run(
        [*server_command(*arguments)], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, said in done.stderr) == (2, True), done.stderr
