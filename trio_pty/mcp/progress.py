"""Progress while a tool call waits: the newest output line, at most about once a second.

Why: a call that waits for a build holds the agent for up to 30 s. Clients that gave a
progress token (Claude Code does) show each `notifications/progress` message and reset
their idle timer on it, so the user sees the build move and the call is not given up on.

The server sets `reporter` for the duration of one call when the client asked for progress;
a tool wraps its wait in `following(backend, session_id, ...)`. Following is event-driven:
a read of the session's output that waits (on the manager) for a new non-blank line, under a
read cursor of its own, so the call's own "what you last saw" cursor does not move.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Final

import trio

from trio_pty.model import Wait
from trio_pty.wire import ReadParams

from .backend import Backend, ServiceError

__all__ = ["INTERVAL_S", "Reporter", "following", "reporter"]

#: At most one notification per this many seconds (Claude Code redraws on each).
INTERVAL_S: Final = 1.0
#: A progress message is one line: longer ones are cut to this many characters.
MESSAGE_CHARS: Final = 200
#: A new line with something on it: what is worth showing.
_NEWS: Final = r"\S"

Reporter = Callable[[float, float | None, str | None], Awaitable[None]]
"""Send one progress notification: (progress, total, message); both in seconds here."""

reporter: ContextVar[Reporter | None] = ContextVar("trio_pty_mcp_progress", default=None)


@asynccontextmanager
async def following(
    backend: Backend, session_id: str, *, total_ms: int, max_wait_ms: int = 30_000
) -> AsyncIterator[None]:
    """For the duration of the block, report the session's newest output line (at most
    every INTERVAL_S) when this call's client asked for progress; nothing otherwise."""
    report = reporter.get()
    if report is None:
        yield
        return
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_follow, backend, session_id, report, total_ms, max_wait_ms)
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()


async def _follow(
    backend: Backend, session_id: str, report: Reporter, total_ms: int, max_wait_ms: int
) -> None:
    reader = f"mcp-progress-{secrets.token_hex(8)}"  # a cursor of its own, never the call's
    began = trio.current_time()
    total = total_ms / 1000

    try:
        # From now on: the cursor goes to the end of the output.
        await backend.request(ReadParams(id=session_id, owner=backend.owner, reader=reader, tail=1))
        while True:
            page = await backend.request(
                ReadParams(
                    id=session_id,
                    owner=backend.owner,
                    reader=reader,
                    since="last",
                    limit=2000,
                    wait=Wait(pattern=_NEWS, exit=True, timeout_ms=max_wait_ms),
                )
            )
            if page.reason == "exited":
                return
            news = [line.text for line in page.lines if line.text.strip()]
            if news:
                sent_at = trio.current_time()
                message = news[-1].strip()
                if len(message) > MESSAGE_CHARS:
                    message = message[: MESSAGE_CHARS - 1] + "…"
                await report(round(sent_at - began, 1), total, message)
                await trio.sleep_until(sent_at + INTERVAL_S)  # the rate limit, not a wait
    except ServiceError:
        return  # the session went away: the call itself says so
