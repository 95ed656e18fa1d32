"""Scenario: `trio-pty mcp` as an agent meets it: starting up, and one command's round trip.

- Start-up: from starting the process to the answer to `initialize`, against the SDK's own
  smallest stdio server (an `MCPServer` with no tool, `run()`) started the same way.
- Round trip: `tools/call exec_command {"cmd": "true"}` (a fresh shell, the command, its
  exit code, the shell told to exit), against `ping` on the same server (the SDK's request
  loop and our transport, no tool at all).

The client is a few lines of raw JSON-RPC over the pipes, so that what is measured is the
server, not a client library.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import trio

from . import procs, stats
from .harness import Context, Result

NAME = "mcp"
TITLE = "MCP server (trio-pty mcp)"
TIMEOUT = 30.0
PROTOCOL = "2025-11-25"

METHOD = """\
`trio-pty mcp` runs as a subprocess with its stdin and stdout on pipes, a temporary HOME (no
user startup files) and a temporary working directory. The client is raw JSON-RPC, one
message per line, so the figures are the server's:

- *start-up*: the time from starting the process (`python -m trio_pty mcp`) to reading the
  answer to `initialize`, which is written to its stdin right away. The baseline is the
  official SDK's smallest stdio server, `MCPServer("floor").run()` with no tool, started
  the same way (`python -c ...`): the SDK's imports and its own loop, which any Python MCP
  server pays. Variants interleaved, one process per sample.
- *round trip*: on one server, after the handshake, `tools/call` of `exec_command` with
  `{"cmd": "true"}` (spawn a fresh bash with the command marks, wait for its first prompt,
  run `true`, report exit code 0, tell the shell to exit), against `ping` on the same
  server (the SDK's request loop and our stdio transport, no tool). Interleaved.

Checks: every `exec_command` reports exit code 0; the server exits within 2 s of its stdin
closing (what MCP clients allow before SIGTERM); nothing it started is left.
"""

FLOOR = "from mcp.server.mcpserver import MCPServer; MCPServer('floor').run()"


def _params(ctx: Context) -> dict[str, Any]:
    return {
        "startup_rounds": ctx.pick(quick=2, full=10),
        "rounds": ctx.pick(quick=20, full=200),
        "round_trip_goal_ms": 15.0,
    }


class _Server:
    """A stdio MCP server process and the raw JSON-RPC client talking to it."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.argv, self.env, self.cwd = argv, env, cwd
        self.process: trio.Process | None = None
        self._buffer = b""
        self._ids = 0

    async def start(self) -> None:
        self.process = await trio.lowlevel.open_process(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
        )

    async def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._ids += 1
        await self._write(
            {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params or {}}
        )
        return self._ids

    async def notify(self, method: str) -> None:
        await self._write({"jsonrpc": "2.0", "method": method})

    async def _write(self, message: dict[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def answer(self, request_id: int) -> dict[str, Any]:
        """The response to `request_id` (notifications in between are skipped)."""
        assert self.process is not None and self.process.stdout is not None
        with trio.fail_after(TIMEOUT):
            while True:
                while b"\n" not in self._buffer:
                    data = await self.process.stdout.receive_some(65536)
                    if not data:
                        raise RuntimeError(f"{self.argv[-2:]} closed its stdout")
                    self._buffer += data
                line, self._buffer = self._buffer.split(b"\n", 1)
                message: dict[str, Any] = json.loads(line)
                if message.get("id") == request_id:
                    return message

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.answer(await self.send(method, params))

    async def initialize(self) -> dict[str, Any]:
        params = {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "trio-pty-bench", "version": "0"},
        }
        answer = await self.call("initialize", params)
        await self.notify("notifications/initialized")
        return answer

    async def close(self) -> float:
        """Close stdin and wait for the process to exit: the seconds that took (killed past
        the timeout, which the caller's check reports)."""
        assert self.process is not None and self.process.stdin is not None
        began = time.perf_counter()
        await self.process.stdin.aclose()
        with trio.move_on_after(TIMEOUT):
            await self.process.wait()
        elapsed = time.perf_counter() - began
        if self.process.returncode is None:
            self.process.kill()  # our own child, by its pid
            await self.process.wait()
        assert self.process.stdout is not None
        await self.process.stdout.aclose()
        return elapsed


async def _startup(argv: list[str], env: dict[str, str], cwd: str) -> float:
    server = _Server(argv, env, cwd)
    began = time.perf_counter()
    await server.start()
    try:
        answer = await server.initialize()
        elapsed = time.perf_counter() - began
        if "result" not in answer:
            raise RuntimeError(f"initialize failed: {answer}")
    finally:
        await server.close()
    return elapsed


async def _main(ctx: Context, result: Result) -> None:
    params = result.params
    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as workdir:
        home = os.path.join(workdir, "home")
        os.mkdir(home)
        env = {**os.environ, "HOME": home, "SHELL": "/bin/bash", procs.TAG: ctx.tag}
        env.pop("TRIO_PTY_TOKEN", None)
        ours = [sys.executable, "-m", "trio_pty", "mcp"]
        floor = [sys.executable, "-c", FLOOR]

        startup = await stats.interleave(
            {
                "SDK floor (MCPServer, no tool)": lambda: _startup(floor, env, workdir),
                "trio-pty mcp": lambda: _startup(ours, env, workdir),
            },
            params["startup_rounds"],
            progress=ctx.progress,
            label="start-up: ",
        )

        server = _Server(ours, env, workdir)
        await server.start()
        wrong: list[str] = []
        try:
            await server.initialize()

            async def exec_true() -> float:
                began = time.perf_counter()
                answer = await server.call(
                    "tools/call", {"name": "exec_command", "arguments": {"cmd": "true"}}
                )
                elapsed = time.perf_counter() - began
                data = answer.get("result", {}).get("structuredContent") or {}
                if (data.get("status"), data.get("exit_code")) != ("exited", 0):
                    wrong.append(json.dumps(answer)[:300])
                return elapsed

            async def ping() -> float:
                began = time.perf_counter()
                await server.call("ping")
                return time.perf_counter() - began

            for variant in (ping, exec_true):  # warm up, unmeasured
                await variant()
            trips = await stats.interleave(
                {"ping": ping, "exec_command true": exec_true},
                params["rounds"],
                progress=ctx.progress,
                label="round trip: ",
            )
        finally:
            closed = await server.close()
    result.data["startup_s"] = startup
    result.data["round_trip_s"] = trips
    result.check("every exec_command reported exit code 0", not wrong, "; ".join(wrong[:3]))
    result.check(
        "the server exited within 2 s of its stdin closing",
        closed < 2.0,
        f"{closed:.3f} s",
    )
    left = procs.tagged(ctx.tag)
    result.check("nothing the servers started is left", not left, str(left))
    procs.kill_and_wait(left)
    _summarize(result, startup, trips)


def _summarize(
    result: Result, startup: dict[str, list[float]], trips: dict[str, list[float]]
) -> None:
    ms = {name: [value * 1000 for value in values] for name, values in startup.items()}
    table = result.table(
        "start-up to initialize answered", "ms", ms, baseline="SDK floor (MCPServer, no tool)"
    )
    ours, floor = table["trio-pty mcp"]["median"], table["SDK floor (MCPServer, no tool)"]["median"]
    result.goal(
        "start-up to initialize answered (measured, no goal set)",
        f"median {ours:.0f} ms vs the SDK's smallest server {floor:.0f} ms",
        None,
        key="mcp_startup",
        subject=f"{ours:.0f} ms",
        baseline=f"SDK floor {floor:.0f} ms",
        ratio=stats.ratio(ours, floor),
    )
    ms = {name: [value * 1000 for value in values] for name, values in trips.items()}
    table = result.table("round trip", "ms", ms, baseline="ping")
    exec_ms, ping_ms = table["exec_command true"]["median"], table["ping"]["median"]
    goal = result.params["round_trip_goal_ms"]
    result.goal(
        f'exec_command("true") round trip under {goal:g} ms',
        f"median {exec_ms:.2f} ms (ping on the same server {ping_ms:.2f} ms)",
        exec_ms < goal,
        key="mcp_exec_true",
        subject=f"{exec_ms:.2f} ms",
        baseline=f"ping {ping_ms:.2f} ms",
        ratio=stats.ratio(exec_ms, ping_ms),
    )


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    fds_before = procs.fd_set()
    trio.run(_main, ctx, result)
    left = procs.new_fds(fds_before)
    result.check("mcp: every descriptor closed", not left, str(left))
    return result
