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
TIMEOUT = 45.0  # a write_stdin may wait 30 s
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

- *following a build*: a build that prints a line a second (6 s quick, 20 s full), run
  with `exec_command` whose yield is half the build, then followed with `write_stdin` and
  nothing to send (a progress token given) until it ends; counted: the calls after the
  first. The baseline is the same calls with `pattern: "."`, which return at each new
  line, as the old 0.5 s quiet rule did with a line a second.

Checks: every `exec_command` reports exit code 0; the followed build ends with 0 and every
line shown once; the server exits within 2 s of its stdin
closing (what MCP clients allow before SIGTERM); nothing it started is left.
"""

FLOOR = "from mcp.server.mcpserver import MCPServer; MCPServer('floor').run()"


def _params(ctx: Context) -> dict[str, Any]:
    return {
        "startup_rounds": ctx.pick(quick=2, full=10),
        "rounds": ctx.pick(quick=20, full=200),
        "round_trip_goal_ms": 15.0,
        "build_s": ctx.pick(quick=6, full=20),
    }


class _Server:
    """A stdio MCP server process and the raw JSON-RPC client talking to it."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.argv, self.env, self.cwd = argv, env, cwd
        self.process: trio.Process | None = None
        self._buffer = b""
        self._ids = 0
        self.progress: list[dict[str, Any]] = []  # notifications/progress params, in order

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
                if message.get("method") == "notifications/progress":
                    self.progress.append(message.get("params") or {})
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
            follow = await _follow_build(server, params["build_s"])
        finally:
            closed = await server.close()
    result.data["startup_s"] = startup
    result.data["round_trip_s"] = trips
    result.data["follow"] = follow
    result.check(
        "following the build saw it end with exit code 0, every line shown once",
        all(run["ok"] for run in follow.values()),
        json.dumps(follow)[:300],
    )
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
    _summarize_follow(result, follow)


async def _follow_build(server: _Server, build_s: int) -> dict[str, dict[str, Any]]:
    """Follow a build printing a line a second for `build_s` s as an agent does: one
    `exec_command` whose yield is half the build (the 10 s default against the issue's
    20 s build), then `write_stdin` with nothing to send until it has ended. Counted: the
    calls after the first. The baseline asks the same calls to return at each new line
    (`pattern: "."`): what the old 0.5 s quiet rule did with a line a second."""
    build = f"for i in $(seq 1 {build_s}); do echo step $i; sleep 1; done; echo built"
    runs = {}
    for variant, extra in (
        ("event waits", {}),
        ("a return per line (the old rule)", {"pattern": "."}),
    ):
        began = time.perf_counter()
        arguments = {"cmd": build, "yield_time_ms": build_s * 500}
        data = await _tool(server, "exec_command", arguments)
        seen = data.get("output", "")
        calls, progress_before = 0, len(server.progress)
        while data.get("status") == "running":
            calls += 1
            poll = {"session_id": data["session_id"], "yield_time_ms": 30_000, **extra}
            data = await _tool(server, "write_stdin", poll, progress=calls)
            if data.get("output"):
                seen += "\n" + data["output"]
        lines = [line for line in seen.splitlines() if line]
        expected = [f"step {i}" for i in range(1, build_s + 1)] + ["built"]
        runs[variant] = {
            "calls_after_first": calls,
            "seconds": time.perf_counter() - began,
            "progress_notifications": len(server.progress) - progress_before,
            "ok": data.get("exit_code") == 0 and lines == expected,
        }
    return runs


async def _tool(
    server: _Server, name: str, arguments: dict[str, Any], *, progress: int | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if progress is not None:
        params["_meta"] = {"progressToken": f"bench-{progress}"}
    answer = await server.call("tools/call", params)
    data: dict[str, Any] = answer.get("result", {}).get("structuredContent") or {}
    return data


def _summarize_follow(result: Result, follow: dict[str, dict[str, Any]]) -> None:
    ours, old = follow["event waits"], follow["a return per line (the old rule)"]
    build_s = result.params["build_s"]
    result.goal(
        f"following a {build_s} s build printing a line a second: at most 2 tool calls after "
        "the first",
        f"{ours['calls_after_first']} call(s) after exec_command ({ours['seconds']:.1f} s, "
        f"{ours['progress_notifications']} progress notifications); a return per line: "
        f"{old['calls_after_first']}",
        ours["calls_after_first"] <= 2,
        key="mcp_follow_build",
        subject=f"{ours['calls_after_first']} calls",
        baseline=f"a return per line {old['calls_after_first']} calls",
        ratio=stats.ratio(ours["calls_after_first"], old["calls_after_first"]),
    )


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
