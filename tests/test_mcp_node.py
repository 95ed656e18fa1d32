"""`trio-pty mcp` driven by the TypeScript SDK's client (`@modelcontextprotocol/sdk`, pinned
in tests/node/package-lock.json): a second, independent implementation of the protocol
speaks to ours, and checks every structured result against its tool's output schema.

Skipped when Node or the package is missing (`npm ci --prefix tests/node` installs it),
unless TRIO_PTY_REQUIRE_NODE=1 (CI, set by .ci/run), which makes that a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .mcp_support import CLIENT_BUDGET, server_command, server_environment

REQUIRED = os.environ.get("TRIO_PTY_REQUIRE_NODE") == "1"
NODE_DIR = Path(__file__).parent / "node"
SDK = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"


def _node() -> str:
    node = shutil.which("node")
    why = None
    if node is None:
        why = "node is not installed"
    elif not SDK.exists():
        why = "@modelcontextprotocol/sdk is not installed (npm ci --prefix tests/node)"
    if why is not None:
        if REQUIRED:
            pytest.fail(f"TRIO_PTY_REQUIRE_NODE=1 but {why}")
        pytest.skip(why)
    assert node is not None
    return node


def test_the_typescript_sdk_client_uses_every_tool(tmp_path: Path) -> None:
    node = _node()
    command = server_command()
    server = {
        "command": command[0],
        "args": command[1:],
        "env": server_environment(tmp_path, {"PATH": os.environ["PATH"]}),
        "cwd": str(tmp_path),
        "python": sys.executable,
    }
    done = subprocess.run(
        [node, str(NODE_DIR / "client.mjs"), json.dumps(server)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)

    assert report["server"]["name"] == "trio-pty"
    tools = {tool["name"]: tool for tool in report["tools"]}
    assert set(tools) == {
        "exec_command",
        "write_stdin",
        "read_output",
        "screen",
        "list_sessions",
        "kill",
        "spawn",
        "shell_command",
    }
    assert all(tool["hasOutputSchema"] for tool in tools.values())
    assert tools["exec_command"]["required"] == ["cmd"]

    exit3 = report["exit3"]
    assert not exit3["isError"]
    assert (exit3["data"]["exit_code"], exit3["data"]["status"]) == (3, "exited")
    assert exit3["data"]["output"].splitlines()[0] == "hi"
    assert exit3["text"].startswith("Exit code: 3\n")

    assert (report["long"]["data"]["status"], report["long"]["data"]["output"]) == (
        "running",
        "started",
    )
    interrupted = report["interrupted"]["data"]
    # The script's shell ends by the SIGINT its command got (keys ["C-c"]).
    assert (interrupted["status"], interrupted["exit_code"], interrupted["exit_signal"]) == (
        "exited",
        None,
        2,
    )
    assert report["spawned"]["data"]["ready"] is True
    assert "Serving HTTP on" in report["spawned"]["data"]["output"]
    assert any("Serving HTTP on" in line for line in report["screen"]["data"]["lines"])
    assert report["killed"]["data"]["status"] == "killed"
    statuses = [session["status"] for session in report["listed"]["data"]["sessions"]]
    assert statuses == ["exited", "exited", "killed"]
    assert report["missing"]["isError"] is True
    assert report["missing"]["data"] is None
    assert report["missing"]["text"].startswith("Error [session_not_found]")
    # It left on its own when its stdin closed: no SIGTERM was needed.
    assert report["closeMs"] < CLIENT_BUDGET * 1000, report["closeMs"]
