"""Scenario: `trio-pty mcp --http`: one `exec_command("true")` round trip over streamable
HTTP, against the SDK's own minimal tool on the same server stack.

Both servers run in this process on loopback port 0: the SDK's streamable-HTTP app under
hypercorn's trio worker. Ours is `serve_http` (the token check, the owner, the body read,
`exec_command` on a manager of this process); the floor is the SDK's low-level `Server` with
one tool that answers "ok", under the same session manager and hypercorn, no check at all.
The client is the SDK's own `Client` (2026-07-28 era) with one HTTP connection pool each.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx2
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import CallToolResult, ListToolsResult, TextContent, Tool

from trio_pty.client.local import LocalClient
from trio_pty.limits import Limits
from trio_pty.manager import Manager, open_manager
from trio_pty.mcp.http import MCP_PATH, serve_http
from trio_pty.rpc.scope import FULL_ACCESS
from trio_pty.wire import ExecParams

from . import procs, stats
from .harness import Context, Result

NAME = "mcp_http"
TITLE = "MCP over streamable HTTP (trio-pty mcp --http)"
TIMEOUT = 60.0
TOKEN = "bench-token-0123456789"

METHOD = """\
In one process, on loopback port 0, two servers on the same stack (the SDK's streamable-HTTP
app under hypercorn's trio worker): `trio-pty mcp --http`'s `serve_http` (Bearer token
check, owner, body read, then `exec_command` on a manager of this process, with a
temporary HOME) and the SDK's low-level `Server` with one tool that answers "ok" (no
check, no process). One SDK `Client` each (2026-07-28 era, no handshake); after one warm-up
call each, `tools/call` round trips are interleaved with the same command run in process
without MCP or HTTP (`LocalClient.request(ExecParams("true"))`, the cost of the command
itself: bash under a PTY, its exit, its teardown). The goal is the issue's ratio of the
medians, exec_command over HTTP against the SDK's cheapest tool call over HTTP; the
in-process line says how much of the difference is the command rather than the transport.
"""


def _params(ctx: Context) -> dict[str, Any]:
    return {
        "rounds": ctx.pick(quick=20, full=200),
        "ratio_goal": 1.5,
        "cancel_rounds": ctx.pick(quick=5, full=30),
        "cancel_goal_ms": 5.0,
    }


def _floor_server() -> Server[Any]:
    """The SDK's smallest useful HTTP server: one tool, answered at once."""

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="noop", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: Any) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="ok")])

    return Server("floor", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve_floor(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    sessions = StreamableHTTPSessionManager(_floor_server(), stateless=True)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    async with sessions.run(), trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, sessions.handle_request, config))  # type: ignore[arg-type]
        task_status.started(int(binds[0].rpartition(":")[2]))


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def _timed(
    client: Client, name: str, arguments: dict[str, Any], wrong: list[str]
) -> Callable[[], Awaitable[float]]:
    async def once() -> float:
        began = time.perf_counter()
        result = await client.call_tool(name, arguments)
        elapsed = time.perf_counter() - began
        data = result.structured_content or {}
        if result.is_error or (name == "exec_command" and data.get("exit_code") != 0):
            wrong.append(str(result)[:300])
        return elapsed

    return once


async def _main(ctx: Context, result: Result) -> None:
    limits = Limits(terminate_grace=0.5, close_timeout=3.0)
    wrong: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mcp-http-bench-") as home:
        environ = {**os.environ, "HOME": home, "SHELL": "/bin/bash", procs.TAG: ctx.tag}
        async with open_manager(limits, environ=environ) as manager, trio.open_nursery() as n:
            ours = await n.start(
                partial(
                    serve_http,
                    manager,
                    host="127.0.0.1",
                    port=0,
                    tokens={TOKEN: FULL_ACCESS},
                    limits=limits,
                )
            )
            floor = await n.start(_serve_floor)
            async with (
                _client(f"http://127.0.0.1:{ours}{MCP_PATH}") as our_client,
                _client(f"http://127.0.0.1:{floor}/") as floor_client,
            ):
                local = LocalClient(manager)

                async def direct() -> float:
                    began = time.perf_counter()
                    done = await local.request(ExecParams(command="true", owner="bench"))
                    elapsed = time.perf_counter() - began
                    if done.exit_code != 0:
                        wrong.append(f"Manager.exec: {done.status} {done.exit_code}")
                    return elapsed

                variants = {
                    "SDK floor (one tool, no check)": _timed(floor_client, "noop", {}, wrong),
                    "Manager.exec true (no MCP, no HTTP)": direct,
                    "exec_command true": _timed(our_client, "exec_command", {"cmd": "true"}, wrong),
                }
                for variant in variants.values():  # warm up, unmeasured
                    await variant()
                trips = await stats.interleave(
                    variants, result.params["rounds"], progress=ctx.progress, label="round trip: "
                )
                cancels = [
                    await _cancel_latency(our_client, manager, wrong)
                    for _ in range(result.params["cancel_rounds"])
                ]
            n.cancel_scope.cancel()
    result.data["round_trip_s"] = trips
    result.data["cancel_s"] = cancels
    result.check(
        "every call answered, exec_command with exit code 0", not wrong, "; ".join(wrong[:3])
    )
    left = procs.tagged(ctx.tag)
    result.check("nothing the server started is left", not left, str(left))
    procs.kill_and_wait(left)
    ms = {name: [value * 1000 for value in values] for name, values in trips.items()}
    table = result.table(
        "tools/call round trip over HTTP", "ms", ms, baseline="SDK floor (one tool, no check)"
    )
    ours_ms = table["exec_command true"]["median"]
    direct_ms = table["Manager.exec true (no MCP, no HTTP)"]["median"]
    floor_ms = table["SDK floor (one tool, no check)"]["median"]
    ratio = stats.ratio(ours_ms, floor_ms)
    cancel_ms = {"cancel to the command's end": [value * 1000 for value in cancels]}
    cancel_table = result.table("cancellation over HTTP", "ms", cancel_ms)
    cancel_median = cancel_table["cancel to the command's end"]["median"]
    cancel_goal = result.params["cancel_goal_ms"]
    result.goal(
        f"a cancelled exec_command's command ends within {cancel_goal:g} ms",
        f"median {cancel_median:.2f} ms from closing the response stream to the command reaped",
        cancel_median <= cancel_goal,
        key="mcp_http_cancel",
        subject=f"{cancel_median:.2f} ms",
    )
    goal = result.params["ratio_goal"]
    result.goal(
        f'exec_command("true") over HTTP at most {goal:g}x the SDK\'s minimal HTTP tool',
        f"median {ours_ms:.2f} ms vs {floor_ms:.2f} ms (the command itself, in process: "
        f"{direct_ms:.2f} ms)",
        ratio <= goal,
        key="mcp_http_exec_true",
        subject=f"{ours_ms:.2f} ms",
        baseline=f"SDK floor {floor_ms:.2f} ms",
        ratio=ratio,
    )


async def _cancel_latency(client: Client, manager: Manager, wrong: list[str]) -> float:
    """From the client giving up on `exec_command("sleep 60")` (closing its response stream)
    to the command's end (SIGINT delivered, bash gone, reaped)."""
    known = {info.id for info in manager.list_all()}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            client.call_tool, "exec_command", {"cmd": "sleep 60", "yield_time_ms": 30_000}
        )
        while not (new := [i for i in manager.list_all() if i.id not in known and i.pid]):  # noqa: ASYNC110 - no event says it
            await trio.sleep(0.002)
        await trio.sleep(0.05)  # the command under way, past bash's start-up
        began = time.perf_counter()
        nursery.cancel_scope.cancel()
    exited = await manager.wait_exit(new[0].id, owner=new[0].owner)
    elapsed = time.perf_counter() - began
    if exited.exit_signal != 2:
        wrong.append(f"cancelled exec_command ended with {exited}")
    return elapsed


def run(ctx: Context) -> Result:
    result = Result(NAME, TITLE, params=_params(ctx))
    fds_before = procs.fd_set()
    trio.run(_main, ctx, result)
    left = procs.new_fds(fds_before)
    result.check("mcp_http: every descriptor closed", not left, str(left))
    return result
