"""`trio-pty mcp`: the MCP server, from start to a bounded stop.

In-process (the default): this process runs a manager, and the MCP client session is the
owner of every session it starts. `--connect URL`: the tools go to a running `trio-pty
serve` instead, as an owner of their own, and the sessions outlive this process.

Stopping: the client closing stdin, or SIGTERM, SIGINT or SIGHUP. Each is handled by trio
(never by Python's default action, which would end the process mid-teardown): serving stops,
then every session is torn down, bounded by the manager's close_timeout. The signals stay
caught until the process exits, so a client's second SIGTERM cannot cut the teardown short.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs
import trio
from mcp.server.lowlevel import Server
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
)
from mcp_types import Tool as ToolDefinition
from pydantic import ValidationError

import trio_pty
from trio_pty.client.local import LocalClient
from trio_pty.limits import Limits
from trio_pty.manager import open_manager
from trio_pty.policy.authorize import Authorizer
from trio_pty.policy.environment import EnvMode

from . import progress
from .backend import Backend, ServiceError
from .endings import CAPABILITY, Endings
from .render import error_text
from .tools import INSTRUCTIONS, TOOLS, Tool

__all__ = ["InProcess", "build_server", "call_tool", "run", "stop_on_signals"]

log = logging.getLogger("trio_pty.mcp")

#: The owner of every session in-process: this process serves exactly one MCP client.
LOCAL_OWNER = "mcp"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@attrs.frozen(kw_only=True)
class InProcess:
    """How the in-process manager runs (from the command line and the config file)."""

    limits: Limits
    root: str | None = None
    env_mode: EnvMode = "inherit"
    env_deny: tuple[str, ...] = ()
    authorizer: Authorizer | None = None


def _schema(model: type[Any]) -> dict[str, Any]:
    """A model's JSON schema without pydantic's generated titles (noise in a prompt)."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key: strip(value)
                for key, value in node.items()
                if not (key == "title" and isinstance(value, str))
            }
        if isinstance(node, list):
            return [strip(item) for item in node]
        return node

    schema: dict[str, Any] = strip(model.model_json_schema())
    return schema


def _definition(tool: Tool[Any]) -> ToolDefinition:
    return ToolDefinition(
        name=tool.name,
        description=tool.description,
        input_schema=_schema(tool.arguments),
        output_schema=_schema(tool.result),
        annotations=tool.annotations,
    )


def _failure(kind: str, message: str, details: Any = None) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=error_text(kind, message, details))], is_error=True
    )


def _invalid_arguments(exc: ValidationError) -> CallToolResult:
    problems = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{field}: {error['msg']}")
    return _failure("invalid_input", "; ".join(problems))


async def call_tool(backend: Backend, tool: Tool[Any], arguments: dict[str, Any]) -> CallToolResult:
    """Validate, run, report: every failure of trio-pty is a tool error saying its kind,
    what happened and what to do next (the SDK would reduce it to "Error executing tool")."""
    try:
        parsed = tool.arguments.model_validate(arguments)
    except ValidationError as exc:
        return _invalid_arguments(exc)
    try:
        reply = await tool.handler(backend, parsed)
    except ServiceError as exc:
        return _failure(exc.kind, exc.message, exc.details())
    except Exception as exc:
        log.exception("tool %s failed", tool.name)
        return _failure("internal_error", f"{type(exc).__name__}: {exc}")
    return CallToolResult(
        content=[TextContent(type="text", text=reply.text)],
        structured_content=reply.data.model_dump(mode="json"),
    )


#: The backend of one call, from the SDK's request context (over HTTP: the request's token).
BackendFor = Callable[[Any], Backend]


def build_server(
    backend: Backend | BackendFor,
    tools: Sequence[Tool[Any]] = TOOLS,
    *,
    endings: Endings | None = None,
) -> Server[Any]:
    """The SDK's server with our tools, every call going to `backend` (or to the one
    `backend(ctx)` gives for the call's context); with `endings`, each session a reply
    leaves running is watched, to say when it ends."""
    backend_for: BackendFor = (lambda ctx: backend) if isinstance(backend, Backend) else backend
    by_name = {tool.name: tool for tool in tools}
    definitions = [_definition(tool) for tool in tools]

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=definitions)

    async def dispatch(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            known = ", ".join(by_name)
            return _failure("invalid_input", f"no tool named {params.name!r} (tools: {known})")
        token = (ctx.meta or {}).get("progress_token")

        async def report(value: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(value, total, message)

        reset = progress.reporter.set(None if token is None else report)
        try:
            result = await call_tool(backend_for(ctx), tool, params.arguments or {})
        finally:
            progress.reporter.reset(reset)
        data = result.structured_content or {}
        if endings is not None and data.get("status") == "running" and "session_id" in data:
            endings.watch(data["session_id"])
        return result

    return Server(
        "trio-pty",
        version=trio_pty.__version__,
        title="trio-pty terminals",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=dispatch,
    )


@asynccontextmanager
async def local_backend(settings: InProcess) -> AsyncIterator[Backend]:
    """A manager for the duration of the block (leaving it tears every session down)."""
    async with open_manager(
        settings.limits,
        env_mode=settings.env_mode,
        env_deny=settings.env_deny,
        root=settings.root,
        authorizer=settings.authorizer,
    ) as manager:
        try:
            yield Backend(LocalClient(manager), LOCAL_OWNER)
        finally:
            live = sum(1 for info in manager.list_all() if info.status in ("running", "killing"))
            began = trio.current_time()
    log.info("%d running sessions torn down in %.2f s", live, trio.current_time() - began)


async def stop_on_signals(
    signals: AsyncIterator[int],
    stop: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    task_status.started()
    async for signum in signals:
        name = signal.Signals(signum).name
        if stop.cancel_called:
            log.info("%s again: the teardown is already under way (and bounded)", name)
        else:
            log.info("%s: stopping", name)
            stop.cancel()


BackendOpener = Callable[[], AbstractAsyncContextManager[Backend]]


async def run(open_backend: BackendOpener, *, max_line_bytes: int, channel: bool = False) -> int:
    """Serve MCP on stdin/stdout with the backend `open_backend()` opens, until the client
    closes stdin or a stop signal arrives; then close the backend (in process: tear every
    session down; `--connect`: close the connection). With `channel`, say when a session a
    reply left running ends (`endings`). The exit status."""
    from .stdio import serve_stdio

    # Caught from here to the end: a signal during the teardown is logged, not fatal.
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            stop = trio.CancelScope()
            await nursery.start(stop_on_signals, signals, stop)
            async with open_backend() as backend:
                with stop:
                    if not channel:
                        await serve_stdio(build_server(backend), max_line_bytes=max_line_bytes)
                    else:
                        await _serve_with_endings(backend, max_line_bytes)
                if not stop.cancel_called:
                    log.info("stdin closed: stopping")
            nursery.cancel_scope.cancel()
    return 0


async def _serve_with_endings(backend: Backend, max_line_bytes: int) -> None:
    """Serve on stdio, sending `endings.METHOD` when a session a reply left running ends."""
    from .stdio import serve_stdio

    send_channel, receive_channel = trio.open_memory_channel[tuple[str, dict[str, Any]]](64)

    async def send(method: str, params: dict[str, Any]) -> None:
        await send_channel.send((method, params))

    async with trio.open_nursery() as watchers:
        endings = Endings(backend, watchers, send)
        await serve_stdio(
            build_server(backend, endings=endings),
            max_line_bytes=max_line_bytes,
            notifications=receive_channel,
            experimental={CAPABILITY: {}},
        )
        watchers.cancel_scope.cancel()
