"""Shared helpers of the MCP tests (no tests here): `trio-pty mcp` as a real subprocess,
driven by the official SDK's own client over stdio."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TextIO

from mcp.client import Client
from mcp.client.extension import ClientExtension
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent

from tests import leaks

#: Clients give a server this long to exit after they close its stdin, then SIGTERM it
#: (the SDK's PROCESS_TERMINATION_TIMEOUT; Claude Code and Codex do the same).
CLIENT_BUDGET = 2.0
STARTUP_TIMEOUT = 30.0  # the SDK's imports take 1-3 s on a busy 2-core machine


def server_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "trio_pty", "mcp", *args]


def server_environment(tmp_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A HOME of its own (no user startup files), and what the child needs to run."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "SHELL": "/bin/bash", "TERM": "xterm-256color", **(extra or {})}


@contextmanager
def server_log(tmp_path: Path) -> Iterator[TextIO]:
    """The server's stderr, in a file printed when a test fails (pytest shows stdout)."""
    path = tmp_path / "mcp-server.err"
    with open(path, "w") as handle:
        try:
            yield handle
        except BaseException:
            print(f"--- trio-pty mcp stderr ---\n{path.read_text(errors='replace')}")
            raise


@asynccontextmanager
async def mcp_client(
    tmp_path: Path,
    *args: str,
    mode: str = "auto",
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    extensions: Sequence[ClientExtension] | None = None,
) -> AsyncIterator[Client]:
    """A `trio-pty mcp` subprocess and the SDK's `Client` on its stdio. Leaving the block is
    what a real client does: close stdin, wait 2 s, SIGTERM, wait 2 s, SIGKILL."""
    parameters = StdioServerParameters(
        command=server_command()[0],
        args=server_command(*args)[1:],
        env=server_environment(tmp_path, env),
        cwd=str(cwd or tmp_path),
    )
    with server_log(tmp_path) as errlog:
        transport = stdio_client(parameters, errlog=errlog)
        async with Client(transport, mode=mode, extensions=extensions) as client:
            yield client


def text(result: CallToolResult) -> str:
    parts = [block.text for block in result.content if isinstance(block, TextContent)]
    assert len(parts) == 1, result
    return parts[0]


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must succeed; its structuredContent (which the client checked
    against the tool's output schema)."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text(result)
    data = result.structured_content
    assert isinstance(data, dict), result
    # The text a model reads says the same as the data a program reads.
    if data.get("output"):
        assert data["output"] in text(result)
    return data


async def fail(client: Client, name: str, arguments: dict[str, Any]) -> str:
    """Call a tool that must fail; the error's text."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, text(result)
    return text(result)


def server_pid() -> int:
    """The one `trio-pty mcp` process this test started (a child of this process)."""
    found = [
        view.pid
        for view in leaks.descendants([os.getpid()]).values()
        if "trio_pty mcp" in view.cmdline and view.state not in ("Z", "X")
    ]
    assert len(found) == 1, found
    return found[0]


def living(pids: Sequence[int]) -> list[int]:
    """The pids that still run (zombies do not)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1)
