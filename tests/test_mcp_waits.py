"""Issue 26 items 2 and 4, through the SDK's own client: waits that end when something
happened (not on half a second of quiet), progress while a call waits, and nothing a reply
mentions out of reach (long lines whole, their true length, the head/tail cut at the
budget, the read cursor past what a finished command showed)."""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path

import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.client.extension import ClientExtension, NotificationBinding
from pydantic import BaseModel

from trio_pty.output.buffer import OutputBuffer
from trio_pty.output.pages import line_bytes

from .mcp_support import STARTUP_TIMEOUT, call, mcp_client, text

#: A build printing a line every 0.6 s, 8 lines: the old empty poll returned 0.5 s after
#: each line, so following it took a call per line.
BUILD = "for i in $(seq 1 8); do echo step $i; sleep 0.6; done; echo built"


async def test_following_a_build_takes_one_poll(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 30):
        async with mcp_client(tmp_path) as client:
            data = await call(client, "exec_command", {"cmd": BUILD, "yield_time_ms": 1000})
            assert data["status"] == "running", data
            session_id = data["session_id"]
            # Nothing to send: the wait ends when the build does, not between two lines.
            data = await call(client, "write_stdin", {"session_id": session_id})
            assert (data["status"], data["exit_code"]) == ("exited", 0), data
            assert data["output"].splitlines()[-1] == "built"
            assert "step 8" in data["output"]


async def test_following_a_build_as_an_agent_has_it(tmp_path: Path) -> None:
    """docs/mcp.md's transcript (written to $TRIO_PTY_MCP_BUILD_TRANSCRIPT when set): a
    12 s build followed in two calls, the progress the client showed in between."""
    (tmp_path / "build.sh").write_text(
        'for i in $(seq 1 12); do echo "[$i/12] compiling module_$i.c"; sleep 1; done\n'
        "echo 'linked ./app'\n"
    )
    parts: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        parts.append(f"  · progress {progress:g}/{total:g} s: {message}")

    async def step(name: str, arguments: dict[str, object]) -> dict[str, object]:
        parts.append(f"→ {name} {json.dumps(arguments)}")
        result = await client.call_tool(name, arguments, progress_callback=on_progress)
        parts.append("← " + text(result).replace("\n", "\n  "))
        assert not result.is_error and result.structured_content is not None
        return dict(result.structured_content)

    with trio.fail_after(STARTUP_TIMEOUT + 40):
        async with mcp_client(tmp_path) as client:
            data = await step("exec_command", {"cmd": "bash build.sh"})
            assert data["status"] == "running"
            poll = {"session_id": data["session_id"], "yield_time_ms": 30000}
            data = await step("write_stdin", poll)
            assert (data["status"], data["exit_code"]) == ("exited", 0)
            assert str(data["output"]).endswith("linked ./app")
    assert sum("· progress" in part for part in parts) >= 1
    path = os.environ.get("TRIO_PTY_MCP_BUILD_TRANSCRIPT")
    if path:
        await trio.Path(path).write_text("\n".join(parts) + "\n")


async def test_an_empty_poll_ends_on_a_pattern_or_waits_at_least_5_s(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 40):
        async with mcp_client(tmp_path) as client:
            command = "echo first; sleep 1; echo second; sleep 30"
            data = await call(client, "exec_command", {"cmd": command, "yield_time_ms": 500})
            session_id = data["session_id"]
            data = await call(
                client, "write_stdin", {"session_id": session_id, "pattern": "^second$"}
            )
            assert data["status"] == "running" and "second" in data["output"].splitlines()
            # Nothing happens: a short yield is raised to the floor (5 s), no quiet rule.
            began = trio.current_time()
            data = await call(client, "write_stdin", {"session_id": session_id, "yield_time_ms": 1})
            assert trio.current_time() - began >= 4.9
            assert data["status"] == "running" and data["output"] == ""
            await call(client, "kill", {"session_id": session_id})


async def test_a_waiting_call_sends_progress_with_the_newest_line(tmp_path: Path) -> None:
    seen: list[tuple[float, float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((trio.current_time(), progress, message))

    with trio.fail_after(STARTUP_TIMEOUT + 30):
        async with mcp_client(tmp_path) as client:
            data = await call(client, "exec_command", {"cmd": BUILD, "yield_time_ms": 500})
            result = await client.call_tool(
                "write_stdin", {"session_id": data["session_id"]}, progress_callback=on_progress
            )
            assert not result.is_error, text(result)
    messages = [message for _, _, message in seen]
    assert len(seen) >= 2, seen
    assert all(message and re.fullmatch(r"step \d|built", message) for message in messages)
    numbers = [int(m[5:]) for m in messages if m and m.startswith("step")]
    assert numbers == sorted(numbers)
    progress = [value for _, value, _ in seen]
    assert progress == sorted(progress)
    gaps = [b - a for (a, _, _), (b, _, _) in itertools.pairwise(seen)]
    assert min(gaps) > 0.8, gaps  # at most about one a second


async def test_long_lines_are_counted_right_and_readable_whole(tmp_path: Path) -> None:
    # 7,481 characters at once; 20,000 in four writes of 5,000.
    script = (
        "import sys, time\n"
        "print('{' + 'j' * 7479 + '}', flush=True)\n"
        "for _ in range(4):\n"
        "    sys.stdout.write('y' * 5000); sys.stdout.flush(); time.sleep(0.05)\n"
        "print()\n"
    )
    (tmp_path / "long.py").write_text(script)
    with trio.fail_after(STARTUP_TIMEOUT + 30):
        async with mcp_client(tmp_path) as client:
            data = await call(client, "exec_command", {"cmd": "python3 long.py"})
            lines = data["output"].splitlines()
            assert "[5481 more characters; read_output" in lines[0]
            assert "[18000 more characters; read_output" in lines[1], lines[1][-200:]
            session_id = data["session_id"]
            for number, whole in ((0, "{" + "j" * 7479 + "}"), (1, "y" * 20000)):
                arguments = {
                    "session_id": session_id,
                    "offset": number,
                    "limit": 1,
                    "max_line_chars": 100_000,
                }
                data = await call(client, "read_output", arguments)
                assert data["output"] == whole
            # A cap below the length: that much, and the right count of the rest.
            arguments = {"session_id": session_id, "offset": 1, "limit": 1, "max_line_chars": 3000}
            data = await call(client, "read_output", arguments)
            assert data["output"].startswith("y" * 3000 + "… [17000 more characters")


async def test_the_head_and_tail_cut_follows_the_budget(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 30):
        async with mcp_client(tmp_path) as client:
            # 2,000 short lines fit the default 20,000 characters: all shown (the manager's
            # head and tail are 250 lines each).
            data = await call(client, "exec_command", {"cmd": "seq 1 2000"})
            assert data["output"].splitlines() == [str(n) for n in range(1, 2001)]
            assert data["lines_omitted"] == 0
            # A small budget still cuts in the middle, within it.
            data = await call(
                client, "exec_command", {"cmd": "seq 1 2000", "max_output_chars": 400}
            )
            kept = [line for line in data["output"].splitlines() if not line.startswith("…")]
            assert sum(len(line) + 1 for line in kept) <= 400 and data["lines_omitted"] > 1500


async def test_a_finished_command_moves_the_read_cursor(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP_TIMEOUT + 30):
        async with mcp_client(tmp_path) as client:
            # A finished command's output counts as seen: since_last shows nothing more.
            data = await call(client, "exec_command", {"cmd": "echo a; echo b"})
            arguments = {"session_id": data["session_id"], "since_last": True}
            assert (await call(client, "read_output", arguments))["output"] == ""


class _Channel(BaseModel):
    content: str
    meta: dict[str, str] = {}


class _ChannelListener(ClientExtension):
    """What Claude Code does with a channel server: each message reaches the model."""

    identifier = "io.github.trio-pty/test-channel"

    def __init__(self) -> None:
        self.messages: list[_Channel] = []
        self.arrived = trio.Event()

    def notifications(self) -> list[NotificationBinding[_Channel]]:
        return [
            NotificationBinding(
                method="notifications/claude/channel",
                params_type=_Channel,
                handler=self._on_message,
            )
        ]

    async def _on_message(self, message: _Channel) -> None:
        self.messages.append(message)
        self.arrived.set()


async def test_a_channel_message_says_when_a_session_ends(tmp_path: Path) -> None:
    listener = _ChannelListener()
    with trio.fail_after(STARTUP_TIMEOUT + 30):
        async with mcp_client(tmp_path, "--channel", extensions=[listener]) as client:
            command = "sleep 1; echo done; exit 4"
            data = await call(client, "exec_command", {"cmd": command, "yield_time_ms": 200})
            assert data["status"] == "running"
            await listener.arrived.wait()  # no call: the server says so by itself
            (message,) = listener.messages
            assert message.meta == {
                "session_id": data["session_id"],
                "status": "exited",
                "exit_code": "4",
            }
            assert "ended: exit code 4" in message.content and "done" in message.content


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\x1b[1m", b"\r", b"xyz" * 40]), max_size=60))
def test_line_bytes_cover_each_line_exactly(pieces: list[bytes]) -> None:
    """Every line's bytes, in order, are the output; each holds one newline, at its end."""
    output = OutputBuffer(1 << 16, max_line_length=50, max_escape_length=64)
    for piece in pieces:
        output.append(piece)
    raw = b"".join(pieces)
    spans = [line_bytes(output, number) for number in range(output.total_lines)]
    assert b"".join(raw[start:stop] for start, stop, _ in spans) == raw
    for start, stop, partial in spans:
        assert not partial and raw.count(b"\n", start, stop) <= 1
        assert b"\n" not in raw[start : stop - 1]
    assert line_bytes(output, output.total_lines)[:2] == (0, 0)
