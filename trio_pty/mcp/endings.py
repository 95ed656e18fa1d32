"""Telling the agent when a session it was left running ends, so that it need not poll.

Why a channel notification: an agent is woken only by something its client puts in front of
the model. MCP's own server notifications do not do that (a logging message goes to the
client's log, and is request-scoped from revision 2026-07-28 on; a resource update means
something only to a client that subscribed to a resource and reads it again). Claude Code's
channels do: a server that declares the experimental `claude/channel` capability, started
as a channel (`claude --channels server:NAME`, or during the preview
`--dangerously-load-development-channels server:NAME`), may send
`notifications/claude/channel` with `content` and string `meta`, which Claude Code shows the
model as it arrives. `trio-pty mcp --channel` turns this on; other clients ignore it.

Watching is one task per session a reply left running, waiting on the manager for the
session's end (a read whose wait ends on exit, renewed every `max_wait_ms`): no polling.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import trio

from trio_pty.model import Wait
from trio_pty.wire import GetParams, ReadParams

from .backend import Backend, ServiceError
from .render import describe_end, state_of

__all__ = ["CAPABILITY", "METHOD", "Endings"]

CAPABILITY: Final = "claude/channel"
METHOD: Final = "notifications/claude/channel"

Send = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Send one notification: (method, params)."""


@attrs.define(eq=False)
class Endings:
    """Watches the sessions replies left running and says when each ends."""

    backend: Backend
    nursery: trio.Nursery
    send: Send
    max_wait_ms: int = 30_000
    _watched: set[str] = attrs.field(factory=set, init=False)

    def watch(self, session_id: str) -> None:
        """Say when `session_id` ends (once, however often it is asked)."""
        if session_id not in self._watched:
            self._watched.add(session_id)
            self.nursery.start_soon(self._watch, session_id)

    async def _watch(self, session_id: str) -> None:
        backend = self.backend
        until_end = Wait(exit=True, timeout_ms=self.max_wait_ms)
        try:
            if (await backend.request(GetParams(id=session_id, owner=backend.owner))).shell:
                return  # a shell lives on after its command: its end is not the news
            while True:
                page = await backend.request(
                    ReadParams(
                        id=session_id,
                        owner=backend.owner,
                        tail=1,
                        reader=backend.side_reader,
                        wait=until_end,
                    )
                )
                if page.reason == "exited":
                    break
            info = await backend.request(GetParams(id=session_id, owner=backend.owner))
        except ServiceError:
            return  # gone (removed, or the connection lost): nothing to say
        last = next((line.text for line in reversed(page.lines) if line.text.strip()), "")
        how = describe_end(state_of(info))
        content = f"Session {session_id} ({info.description}) ended: {how}."
        if last:
            content += f" Its last line: {last[:200]}"
        meta = {"session_id": session_id, "status": state_of(info).status}
        if info.exit_code is not None:
            meta["exit_code"] = str(info.exit_code)
        await self.send(METHOD, {"content": content, "meta": meta})
